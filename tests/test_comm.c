/* Tests of trainer/comm.c: the collectives on the CPU backend with rank-dependent inputs whose
 * results the test computes in closed form, and the launcher detection.
 *
 * Run plainly (world of one: identity semantics, no MPI) or under mpirun (tests/test_comm_mpi.sh).
 * Every rank runs every check; rank 0 prints one "ok/not ok" line per check, counting failures
 * on any rank (a failing rank also prints a "# rank R: ..." line saying what it saw).
 * PHASELAB_COMM_MAX_COUNT is set to 1000 (unless given) so that the larger buffers below take
 * the chunked paths (> max_count elements per MPI call) and the small ones the direct path.
 *
 * Failure modes (for tests/test_comm_mpi.sh):
 *   --die-rank R    rank R is SIGKILLed while the others wait in comm_allreduce_sum
 *   --exit-rank R   rank R exits with status 3 (no MPI_Finalize) while the others wait
 *   --hang-rank R   rank R sleeps forever instead of entering the collective (the watchdog
 *                   of the waiting ranks must abort the job) */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "common/clock.h"
#include "common/errors.h"
#include "tests/check.h"
#include "trainer/comm.h"

#include <mpi.h>

static Comm C;

/* Reports a check decided per rank: rank 0 prints the line, counting the ranks that failed. */
static void report(const char *name, int ok, const char *fmt, ...) {
    char why[512] = "";
    if (!ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        if (C.rank != 0) printf("# rank %d: %s: %s\n", C.rank, name, why);
        fflush(stdout);
    }
    double failed = ok ? 0.0 : 1.0;
    comm_allreduce_sum_host(&C, &failed, 1);
    if (C.rank == 0) {
        if (failed == 0.0) check(1, name, "");
        else if (ok) check(0, name, "failed on %g other rank(s)", failed);
        else check(0, name, "%s (and %g rank(s) in all)", why, failed);
    } else if (failed != 0.0) {
        check_failures++;
    }
}

/* Expected world size: the launcher's, or 1 for a plain run. */
static int expected_world(void) {
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    return s ? atoi(s) : 1;
}

static void test_setup(void) {
    int W = expected_world();
    report("comm: world size matches the launcher", C.world == W, "world %d, expected %d", C.world, W);
    report("comm: rank within the world", C.rank >= 0 && C.rank < C.world, "rank %d of %d", C.rank, C.world);
    report("comm: local rank within the node", C.local_rank >= 0 && C.local_rank < C.local_world &&
           C.local_world <= C.world, "local %d of %d (world %d)", C.local_rank, C.local_world, C.world);
    /* mpirun here starts every rank on this one node */
    report("comm: local world is the world on one node", C.local_world == C.world,
           "local world %d, world %d", C.local_world, C.world);
    int inited = 0;
    MPI_Initialized(&inited);
    const char *forced = getenv("PHASELAB_MPI");
    if (W == 1 && !(forced && strcmp(forced, "1") == 0))
        report("comm: a plain run does not initialise MPI", !inited && !C.using_mpi,
               "MPI_Initialized %d, using_mpi %d", inited, C.using_mpi);
    else
        report("comm: an mpirun launch initialises MPI", inited && C.using_mpi,
               "MPI_Initialized %d, using_mpi %d", inited, C.using_mpi);
}

static void test_host_collectives(void) {
    int W = C.world, R = C.rank;
    int mx[3] = { R * 3, -R - 5, (R == W - 1) ? 42 : R };
    comm_allreduce_max_int(&C, mx, 3);
    report("comm_allreduce_max_int", mx[0] == (W - 1) * 3 && mx[1] == -5 && mx[2] == (W > 1 ? 42 : 42),
           "got {%d,%d,%d}, expected {%d,-5,42}", mx[0], mx[1], mx[2], (W - 1) * 3);

    double x[5];
    for (int i = 0; i < 5; i++) x[i] = (R + 1) * (i + 0.5);
    comm_allreduce_sum_host(&C, x, 5);
    int bad = -1;
    for (int i = 0; i < 5; i++)
        if (x[i] != (i + 0.5) * W * (W + 1) / 2.0) { bad = i; break; }
    report("comm_allreduce_sum_host", bad < 0, "x[%d] = %g, expected %g", bad, bad < 0 ? 0 : x[bad],
           (bad + 0.5) * W * (W + 1) / 2.0);

    /* the step's control record: the two sums summed, the two flags maxed, in ONE call */
    long calls0 = C.n_step_control;
    StepControl sc = {.loss_sum = (R + 1) * 0.25, .coverage_sum = R * 2.0 + 1.0, .failed = R == W - 1 && W > 1,
                      .stop_signal = R == 0 ? 10 : (R == 1 ? 15 : 0)};
    comm_step_control(&C, &sc);
    double want_loss = 0.25 * W * (W + 1) / 2.0, want_cov = (double)W * W;
    int want_fail = W > 1, want_sig = W > 1 ? 15 : 10;
    report("comm_step_control: sums and maxima in one call",
           sc.loss_sum == want_loss && sc.coverage_sum == want_cov && sc.failed == want_fail &&
               sc.stop_signal == want_sig && C.n_step_control == calls0 + 1,
           "got {%g, %g, %d, %d} in %ld call(s), expected {%g, %g, %d, %d} in 1", sc.loss_sum, sc.coverage_sum,
           sc.failed, sc.stop_signal, C.n_step_control - calls0, want_loss, want_cov, want_fail, want_sig);

    /* 2500 bytes: more than max_count (1000) in the test run, so in three pieces */
    size_t nb = 2500;
    unsigned char *b = malloc(nb);
    for (size_t i = 0; i < nb; i++) b[i] = R == 0 ? (unsigned char)(i * 7 + 3) : 0xEE;
    comm_bcast_host(&C, b, nb);
    bad = -1;
    for (size_t i = 0; i < nb; i++)
        if (b[i] != (unsigned char)(i * 7 + 3)) { bad = (int)i; break; }
    report("comm_bcast_host (2500 bytes)", bad < 0, "byte %d = %d", bad, bad < 0 ? 0 : b[bad]);
    free(b);

    /* barrier: the last rank arrives 0.3 s late; everyone must wait for it */
    if (R == W - 1 && W > 1) usleep(300000);
    double t0 = clock_seconds();
    comm_barrier(&C);
    double dt = clock_seconds() - t0;
    if (W > 1 && R != W - 1)
        report("comm_barrier waits for the last rank", dt > 0.25, "returned after %.3f s", dt);
    else
        report("comm_barrier waits for the last rank", 1, "");
}

/* Rank q's input for block r, element j: small integers, so every sum is exact in fp32. */
static float rs_input(int q, int r, size_t j) { return (float)(q * 1000 + r * 10 + (int)(j % 7)); }
static float rs_expected(int W, int r, size_t j) {
    return (float)(1000.0 * W * (W - 1) / 2 + W * (r * 10 + (int)(j % 7)));
}

static void test_reduce_scatter(size_t shard, int in_place) {
    int W = C.world, R = C.rank;
    float *send = malloc((size_t)W * shard * sizeof(float));
    for (int r = 0; r < W; r++)
        for (size_t j = 0; j < shard; j++) send[(size_t)r * shard + j] = rs_input(R, r, j);
    float *recv = in_place ? send + (size_t)R * shard : malloc(shard * sizeof(float));
    if (!in_place)
        for (size_t j = 0; j < shard; j++) recv[j] = -1.0f;
    comm_reduce_scatter_sum(&C, send, recv, shard);
    long bad = -1;
    for (size_t j = 0; j < shard; j++)
        if (recv[j] != rs_expected(W, R, j)) { bad = (long)j; break; }
    char name[128];
    snprintf(name, sizeof name, "comm_reduce_scatter_sum (shard %zu%s)", shard, in_place ? ", in place" : "");
    report(name, bad < 0, "recv[%ld] = %g, expected %g", bad, bad < 0 ? 0.0 : recv[bad],
           bad < 0 ? 0.0 : rs_expected(W, R, (size_t)bad));
    if (!in_place) {
        /* the input must be untouched */
        long bad_in = -1;
        for (int r = 0; r < W && bad_in < 0; r++)
            for (size_t j = 0; j < shard; j++)
                if (send[(size_t)r * shard + j] != rs_input(R, r, j)) { bad_in = (long)(r * shard + j); break; }
        snprintf(name, sizeof name, "comm_reduce_scatter_sum leaves send unchanged (shard %zu)", shard);
        report(name, bad_in < 0, "send[%ld] changed", bad_in);
        free(recv);
    }
    free(send);
}

static void test_allgather(size_t shard) {
    int W = C.world, R = C.rank;
    float *buf = malloc((size_t)W * shard * sizeof(float));
    for (size_t i = 0; i < (size_t)W * shard; i++) buf[i] = -7.0f;
    for (size_t j = 0; j < shard; j++) buf[(size_t)R * shard + j] = (float)(R * 100 + (int)(j % 13));
    comm_allgather(&C, buf, shard);
    long bad = -1;
    for (int r = 0; r < W && bad < 0; r++)
        for (size_t j = 0; j < shard; j++)
            if (buf[(size_t)r * shard + j] != (float)(r * 100 + (int)(j % 13))) { bad = (long)(r * shard + j); break; }
    char name[96];
    snprintf(name, sizeof name, "comm_allgather (shard %zu)", shard);
    report(name, bad < 0, "buf[%ld] = %g", bad, bad < 0 ? 0.0 : buf[bad]);
    free(buf);
}

static void test_allreduce(size_t n) {
    int W = C.world, R = C.rank;
    float *buf = malloc(n * sizeof(float));
    for (size_t j = 0; j < n; j++) buf[j] = (float)(R + (int)(j % 5));
    comm_allreduce_sum(&C, buf, n);
    long bad = -1;
    for (size_t j = 0; j < n; j++)
        if (buf[j] != (float)(W * (W - 1) / 2 + W * (int)(j % 5))) { bad = (long)j; break; }
    char name[96];
    snprintf(name, sizeof name, "comm_allreduce_sum (n %zu)", n);
    report(name, bad < 0, "buf[%ld] = %g", bad, bad < 0 ? 0.0 : buf[bad]);
    free(buf);
}

/* The failure modes: everyone meets at a barrier, then `victim` misbehaves while the others
 * wait in an all-reduce. Never returns normally on the waiting ranks unless the job survives
 * (which is the failure the shell test detects). */
static int failure_mode(const char *mode, int victim) {
    comm_barrier(&C);
    if (C.rank == 0) {
        printf("# %s %d: world %d, timeout %g s\n", mode, victim, C.world, C.timeout_s);
        fflush(stdout);
    }
    if (C.rank == victim) {
        usleep(500000);   /* let the others enter the collective */
        if (strcmp(mode, "--die-rank") == 0) raise(SIGKILL);
        if (strcmp(mode, "--exit-rank") == 0) exit(3);
        for (;;) pause();  /* --hang-rank */
    }
    float x[16] = { 0 };
    comm_allreduce_sum(&C, x, 16);
    printf("not ok - %s %d: rank %d returned from the collective\n", mode, victim, C.rank);
    comm_finalize(&C);
    return 1;
}

/* One GPU per rank: the rule over identities, then (with several ranks) comm_attach_backend on a
 * device-like backend (the CPU backend's ops, device 0, a UUID) where every rank names the same
 * GPU (refused, naming two ranks) or each its own (passes that check; this build's fake device
 * has no collectives, so it is then refused for that). */
static void test_shared_device(void) {
    unsigned char ids[4][16];
    memset(ids, 0, sizeof ids);
    int a = 0, b = 0;
    report("shared device: all-zero identities never match", comm_first_shared_device(&ids[0][0], 16, 4, &a, &b) == 0 &&
           a == -1 && b == -1, "got %d %d", a, b);
    for (int r = 0; r < 4; r++) ids[r][0] = (unsigned char)(r + 1);
    report("shared device: distinct identities pass", comm_first_shared_device(&ids[0][0], 16, 4, &a, &b) == 0, "got %d %d", a, b);
    ids[3][0] = ids[1][0];
    report("shared device: ranks 1 and 3 share one", comm_first_shared_device(&ids[0][0], 16, 4, &a, &b) == 1 && a == 1 && b == 3,
           "got %d %d", a, b);
    if (C.world < 2) return;
    static Backend fake;
    fake = *backend_cpu(1);
    fake.name = "fake-device";
    fake.device = 0;
    fake.collectives = NULL;
    memcpy(fake.device_uuid, "same-gpu-0000000", 16);
    char err[ERR_LEN] = "";
    int rc = comm_attach_backend(&C, &fake, err);
    report("shared device: ranks naming one GPU are refused", rc != 0 && strstr(err, "same GPU") && strstr(err, "ranks 0 and 1"),
           "rc %d: %s", rc, err);
    fake.device_uuid[15] = (unsigned char)('A' + C.rank);
    err[0] = '\0';
    rc = comm_attach_backend(&C, &fake, err);
    report("shared device: one GPU each passes the check", rc != 0 && !strstr(err, "same GPU") && strstr(err, "no NCCL"),
           "rc %d: %s", rc, err);
}

int main(int argc, char **argv) {
    setenv("PHASELAB_COMM_MAX_COUNT", "1000", 0);
    double t0 = clock_seconds();
    char err[ERR_LEN] = "";
    if (comm_init(&C, &argc, &argv, err) != 0) {
        printf("not ok - comm_init: %s\n", err);
        return 1;
    }
    double t_init = clock_seconds() - t0;
    if (argc == 3 && (strcmp(argv[1], "--die-rank") == 0 || strcmp(argv[1], "--hang-rank") == 0 ||
                      strcmp(argv[1], "--exit-rank") == 0))
        return failure_mode(argv[1], atoi(argv[2]));
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--die-rank R | --exit-rank R | --hang-rank R]\n", argv[0]);
        return 2;
    }
    if (comm_attach_backend(&C, backend_cpu(1), err) != 0) {
        printf("not ok - comm_attach_backend: %s\n", err);
        return 1;
    }
    if (C.world == 1 && !C.using_mpi) {
        report("comm_init: a plain run is fast", t_init < 0.1, "took %.3f s", t_init);
        report("comm_init: default timeout 300 s", getenv("PHASELAB_COMM_TIMEOUT") || C.timeout_s == 300.0,
               "timeout_s %g", C.timeout_s);
    }
    test_setup();
    test_shared_device();
    test_host_collectives();
    /* W*shard <= 1000: direct MPI calls; larger: chunked (with a remainder piece) */
    test_reduce_scatter(100, 0);
    test_reduce_scatter(100, 1);
    test_reduce_scatter(1237, 0);
    test_reduce_scatter(1237, 1);
    test_allgather(100);
    test_allgather(1237);
    test_allreduce(300);
    test_allreduce(3001);
    comm_finalize(&C);
    report("comm_finalize clears the communicator", C.impl == NULL && !C.using_mpi, "impl %p", C.impl);
    return check_exit_code();
}
