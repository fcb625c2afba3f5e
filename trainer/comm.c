/* Communication between data-parallel ranks (trainer/comm.h): launcher detection, MPI bootstrap,
 * the collective watchdog, and the collectives (MPI on the CPU backend, NCCL on CUDA).
 *
 * Launch detection (first match wins; docs/distributed.md):
 *   PHASELAB_MPI=0 never MPI; PHASELAB_MPI=1 always MPI_Init (even for one rank);
 *   OMPI_COMM_WORLD_SIZE (Open MPI mpirun); PMI_SIZE (PMI launchers);
 *   PMIX_RANK with PMIX_SIZE or SLURM_STEP_NUM_TASKS (PMIx); SLURM_PROCID with
 *   SLURM_STEP_NUM_TASKS (a task of an srun job step). SLURM_NTASKS alone is NOT a launch (an
 *   sbatch script sets it too). MPI starts only when the launcher says more than one rank; when
 *   the launcher's count differs from MPI's world size (srun without PMI: N singletons),
 *   comm_init fails instead of running N copies that each believe they are rank 0.
 *   A plain run is a world of one and makes no MPI call at all.
 *
 * MPI: MPI_Init_thread asks for MPI_THREAD_MULTIPLE (only so that the watchdog thread may call
 * MPI_Abort; every other MPI call is on the main thread); the collectives run on a private duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN, and any error prints one line naming the rank and the
 * collective, then aborts the job. local_rank / local_world come from an
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) communicator.
 *
 * Watchdog: a thread wakes once a second; each collective records its name and start time and
 * reads c->timeout_s when it starts. One that runs longer than the timeout (> 0) prints
 *   phaselab: rank R: collective OP did not complete within N s (a rank died or hangs); aborting
 * and then ends the job by the first of these that applies:
 *   - a device collective (NCCL): the watchdog sets the abort flag the backend's wait polls
 *     (Backend.collectives init); the main thread aborts the communicator (ncclCommAbort), returns
 *     from the collective and calls MPI_Abort itself. The watchdog waits DEVICE_ABORT_GRACE_S for
 *     that, then goes on below;
 *   - MPI granted MPI_THREAD_MULTIPLE: the watchdog calls MPI_Abort;
 *   - otherwise (a lower thread level, where MPI_Abort from this thread is not allowed): _exit(1)
 *     of this rank; the launcher (mpirun; srun with --kill-on-bad-exit) ends the others, or their
 *     own watchdogs do when their collectives time out.
 * alarm(30) ends the process should MPI_Abort itself hang. comm_finalize meets the other ranks in
 * a watched barrier ("finalize") before MPI_Finalize, so a rank that hangs on its way out ends the job too.
 * Default timeout 300 s; PHASELAB_COMM_TIMEOUT overrides (0 disables).
 *
 * Step control (comm_step_control): one MPI_Allreduce of 4 doubles with a user op (sums and maxima).
 * CPU collectives (host memory): MPI_Allreduce, MPI_Bcast, MPI_Reduce_scatter_block and an
 * in-place MPI_Allgather, at most max_count elements per MPI call (2^31 - 1;
 * PHASELAB_COMM_MAX_COUNT lowers it so tests exercise the chunked paths):
 *   all-reduce / broadcast: consecutive pieces of max_count elements;
 *   reduce-scatter of send [W, shard] when W * shard > max_count: pieces of p = max_count / W
 *     elements of every rank's block, packed into scratch [W, p], reduced into recv + offset;
 *   all-gather when W * shard > max_count: pieces of p elements of every block, described by a
 *     datatype of p floats whose extent is one shard, so block r of the piece lies at r * shard.
 * Device collectives (device memory, fp32): the backend's own (Backend.collectives; on CUDA
 * ncclReduceScatter / ncclAllGather / ncclAllReduce on its stream, kernels/cuda/cuda_comm.cu),
 * synchronised before returning; this file only runs them under the watchdog.
 * With a world of one every collective is an identity and calls nothing (reduce-scatter copies
 * send's shard to recv with the backend's copy when they differ). */
#include "trainer/comm.h"
#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "kernels/kernels.h"
#include "common/errors.h"

/* Device collectives (NCCL on CUDA) are the backend's (Backend.collectives, kernels/kernels.h):
 * this file runs them under the watchdog and knows nothing of the device. A backend whose
 * memory is on a device but that has no collectives (a CUDA build without NCCL) trains on one
 * rank only: comm_attach_backend refuses a larger world. */

#define COMM_DEFAULT_TIMEOUT_S 300.0
#define COMM_ABORT_GRACE_S 30 /* alarm() after the watchdog calls MPI_Abort */
#define DEVICE_ABORT_GRACE_S 10.0 /* the main thread's time to abort a timed-out device collective */

typedef struct CommImpl {
    const Backend *be;     /* set by comm_attach_backend */
    int inited_mpi;        /* we called MPI_Init_thread (so we call MPI_Finalize) */
    int have_comm;         /* comm is a valid duplicate of MPI_COMM_WORLD */
    MPI_Comm comm;
    long long max_count;   /* elements per MPI call */
    float *scratch;        /* host scratch for packed reduce-scatter pieces */
    size_t scratch_n;
    int on_device;         /* the backend's memory is device memory (be->device >= 0) */
    int have_device_comm;  /* be->collectives->init succeeded */
    /* watchdog */
    int watchdog_running;
    pthread_t watchdog;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    const char *op;        /* current collective, NULL when none */
    int op_on_device;      /* it is a device collective (its wait polls abort_flag) */
    volatile int abort_flag; /* set by the watchdog: the device collective must abort */
    int thread_multiple;   /* MPI granted MPI_THREAD_MULTIPLE: MPI_Abort is allowed on any thread */
    double op_start;       /* monotonic seconds */
    double op_timeout;     /* timeout_s read when the collective started */
    int rank;
} CommImpl;

/* ---- launcher detection ---- */

/* Parses a positive integer environment value; -1 when absent, 0 when not a positive integer. */
static long env_count(const char *name) {
    const char *s = getenv(name);
    if (!s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v <= 0 || v > INT_MAX) return 0;
    return v;
}

/* The number of ranks the launcher says it started (0 when no launcher was recognised), and the
 * variable that said so. Returns -1 (err filled) on a malformed value. */
static int launcher_ranks(const char **source, char *err) {
    static const char *const plain[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
    *source = NULL;
    for (int i = 0; i < 2; i++) {
        long v = env_count(plain[i]);
        if (v == 0) return set_err(err, "comm: %s='%s': expected a positive number of ranks", plain[i], getenv(plain[i]));
        if (v > 0) { *source = plain[i]; return (int)v; }
    }
    const char *size_var = NULL;
    if (getenv("PMIX_RANK"))
        size_var = getenv("PMIX_SIZE") ? "PMIX_SIZE" : getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : NULL;
    if (!size_var && getenv("SLURM_PROCID") && getenv("SLURM_STEP_NUM_TASKS")) size_var = "SLURM_STEP_NUM_TASKS";
    if (size_var) {
        long v = env_count(size_var);
        if (v <= 0) return set_err(err, "comm: %s='%s': expected a positive number of ranks", size_var, getenv(size_var));
        *source = size_var;
        return (int)v;
    }
    return 0;
}

/* ---- fatal errors and the watchdog ---- */

static void abort_job(int code) {
    fflush(stdout);
    fflush(stderr);
    signal(SIGALRM, SIG_DFL);
    alarm(COMM_ABORT_GRACE_S);   /* should MPI_Abort itself hang */
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

static void mpi_check(CommImpl *m, int rc, const char *op) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    fprintf(stderr, "phaselab: rank %d: collective %s failed: %s; aborting\n", m->rank, op, msg);
    abort_job(1);
}

static void op_begin_kind(Comm *c, const char *op, int on_device) {
    CommImpl *m = c->impl;
    pthread_mutex_lock(&m->mu);
    m->op = op;
    m->op_on_device = on_device;
    m->op_start = clock_seconds();
    m->op_timeout = c->timeout_s;
    pthread_mutex_unlock(&m->mu);
}

static void op_begin(Comm *c, const char *op) { op_begin_kind(c, op, 0); }

static void op_end(Comm *c) {
    CommImpl *m = c->impl;
    pthread_mutex_lock(&m->mu);
    m->op = NULL;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void *watchdog_main(void *arg) {
    CommImpl *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&m->cv, &m->mu, &until);
        if (m->stop) break;
        if (m->op && m->op_timeout > 0 && clock_seconds() - m->op_start > m->op_timeout) {
            fprintf(stderr, "phaselab: rank %d: collective %s did not complete within %g s (a rank died or hangs); aborting\n",
                    m->rank, m->op, m->op_timeout);
            if (m->op_on_device) {
                /* the main thread's wait sees the flag, aborts the communicator and the job */
                m->abort_flag = 1;
                const double t0 = clock_seconds();
                while (m->op && clock_seconds() - t0 < DEVICE_ABORT_GRACE_S) {
                    struct timespec w;
                    clock_gettime(CLOCK_MONOTONIC, &w);
                    w.tv_sec += 1;
                    pthread_cond_timedwait(&m->cv, &m->mu, &w);
                }
                if (!m->op) continue;   /* it returned: the main thread ends the job */
            }
            pthread_mutex_unlock(&m->mu);
            if (m->thread_multiple) abort_job(1);
            fprintf(stderr, "phaselab: rank %d: MPI's thread level does not allow MPI_Abort from the watchdog: "
                    "this rank exits; the launcher or the other ranks' watchdogs end the job\n", m->rank);
            fflush(stderr);
            _exit(1);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static int watchdog_start(CommImpl *m, char *err) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* the thread blocks every signal: handlers (SIGUSR1 ...) run on the program's threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&m->watchdog, NULL, watchdog_main, m);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&m->cv);
        return set_err(err, "comm: cannot start the collective watchdog thread: %s", strerror(rc));
    }
    m->watchdog_running = 1;
    return 0;
}

static void watchdog_stop(CommImpl *m) {
    if (!m->watchdog_running) return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->watchdog, NULL);
    pthread_cond_destroy(&m->cv);
    m->watchdog_running = 0;
}

/* ---- init / finalize ---- */

static int env_settings(Comm *c, CommImpl *m, char *err) {
    c->timeout_s = COMM_DEFAULT_TIMEOUT_S;
    const char *t = getenv("PHASELAB_COMM_TIMEOUT");
    if (t) {
        char *end;
        double v = strtod(t, &end);
        if (end == t || *end != '\0' || v != v)
            return set_err(err, "comm: PHASELAB_COMM_TIMEOUT='%s': expected a number of seconds (0 disables)", t);
        c->timeout_s = v;
    }
    m->max_count = INT_MAX;
    const char *mc = getenv("PHASELAB_COMM_MAX_COUNT");
    if (mc) {
        char *end;
        errno = 0;
        long long v = strtoll(mc, &end, 10);
        if (errno || end == mc || *end != '\0' || v < 1)
            return set_err(err, "comm: PHASELAB_COMM_MAX_COUNT='%s': expected a positive number of elements", mc);
        if (v < m->max_count) m->max_count = v;
    }
    return 0;
}

static void free_impl(Comm *c) {
    CommImpl *m = c->impl;
    if (!m) return;
    free(m->scratch);
    pthread_mutex_destroy(&m->mu);
    free(m);
    c->impl = NULL;
}

int comm_init(Comm *c, int *argc, char ***argv, char *err) {
    memset(c, 0, sizeof *c);
    c->rank = 0;
    c->world = 1;
    c->local_rank = 0;
    c->local_world = 1;
    CommImpl *m = calloc(1, sizeof *m);
    if (!m) return set_err(err, "comm: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    c->impl = m;
    if (env_settings(c, m, err) != 0) { free_impl(c); return -1; }

    int forced = -1;
    const char *f = getenv("PHASELAB_MPI");
    if (f && *f) {
        if (strcmp(f, "0") == 0) forced = 0;
        else if (strcmp(f, "1") == 0) forced = 1;
        else { free_impl(c); return set_err(err, "comm: PHASELAB_MPI='%s': expected 0 (never use MPI) or 1 (always)", f); }
    }
    if (forced == 0) return 0;
    const char *source = NULL;
    int n_launch = launcher_ranks(&source, err);
    if (n_launch < 0) { free_impl(c); return -1; }
    if (forced != 1 && n_launch <= 1) return 0;   /* a plain run: world of one, no MPI */

    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            free_impl(c);
            return set_err(err, "comm: MPI_Init_thread failed");
        }
        m->inited_mpi = 1;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    m->thread_multiple = level >= MPI_THREAD_MULTIPLE;
    int world = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (n_launch > 0 && n_launch != world) {
        set_err(err, "comm: the launcher started %d ranks (%s) but MPI sees a world of %d: start the ranks "
                "with a PMI plugin that the MPI library understands (srun --mpi=pmix or --mpi=pmi2) or with mpirun",
                n_launch, source, world);
        if (m->inited_mpi) MPI_Finalize();
        free_impl(c);
        return -1;
    }
    c->rank = m->rank = rank;
    c->world = world;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
        set_err(err, "comm: rank %d: MPI_Comm_dup failed", rank);
        if (m->inited_mpi) MPI_Finalize();
        free_impl(c);
        return -1;
    }
    m->have_comm = 1;
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm node;
    if (MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_world);
        MPI_Comm_free(&node);
    }
    c->using_mpi = 1;
    if (watchdog_start(m, err) != 0) {
        MPI_Comm_free(&m->comm);
        if (m->inited_mpi) MPI_Finalize();
        free_impl(c);
        c->using_mpi = 0;
        return -1;
    }
    return 0;
}

int comm_first_shared_device(const unsigned char *ids, size_t id_bytes, int world, int *r1, int *r2) {
    static const unsigned char zero[64];
    *r1 = *r2 = -1;
    for (int a = 0; a < world; a++) {
        const unsigned char *ia = ids + (size_t)a * id_bytes;
        if (id_bytes <= sizeof zero && memcmp(ia, zero, id_bytes) == 0) continue;   /* no identity */
        for (int b = a + 1; b < world; b++)
            if (memcmp(ia, ids + (size_t)b * id_bytes, id_bytes) == 0) { *r1 = a; *r2 = b; return 1; }
    }
    return 0;
}

/* Collectives talk to other ranks only when MPI is up with more than one rank. */
static int active(const Comm *c) { return c->impl && c->using_mpi && c->world > 1; }

int comm_attach_backend(Comm *c, const Backend *be, char *err) {
    CommImpl *m = c->impl;
    if (!m) return set_err(err, "comm: comm_attach_backend before comm_init");
    m->be = be;
    m->on_device = be && be->device >= 0;
    if (!active(c)) return 0;
    /* every rank must have chosen the same kind of backend: a host/device mix would hang in the
     * collectives */
    int flags[2] = { m->on_device, -m->on_device };
    op_begin(c, "attach_backend");
    mpi_check(m, MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, m->comm), "attach_backend");
    op_end(c);
    if (flags[0] != -flags[1])
        return set_err(err, "comm: rank %d: the ranks chose different backends (some cpu, some cuda; this rank %s): "
                       "set run.device to the same value on every rank", c->rank, be->name);
    if (!m->on_device) return 0;
    /* one GPU per rank: two ranks driving one GPU would time-share it (and NCCL refuses it) */
    unsigned char *ids = malloc((size_t)c->world * sizeof be->device_uuid);
    if (!ids) return set_err(err, "comm: rank %d: out of memory", c->rank);
    op_begin(c, "attach_backend");
    mpi_check(m, MPI_Allgather(be->device_uuid, (int)sizeof be->device_uuid, MPI_BYTE, ids, (int)sizeof be->device_uuid,
                               MPI_BYTE, m->comm), "attach_backend");
    op_end(c);
    int r1 = -1, r2 = -1;
    comm_first_shared_device(ids, sizeof be->device_uuid, c->world, &r1, &r2);
    free(ids);
    if (r1 >= 0)
        return set_err(err, "comm: ranks %d and %d run on the same GPU (its UUID is the same): one GPU per rank; "
                       "start at most as many ranks per node as it has GPUs (mpirun -np, srun --gpus-per-task=1, or "
                       "CUDA_VISIBLE_DEVICES per rank)", r1, r2);
    const BackendCollectives *co = be->collectives;
    if (!co)
        return set_err(err, "comm: rank %d: this build has no NCCL (tools/configure found none), so a %s run is "
                       "limited to one rank: rebuild with NCCL_HOME=<NCCL prefix>, or train with run.device=cpu",
                       c->rank, be->name);
    /* rank 0 makes the communicator's unique id, MPI broadcasts it, every rank joins */
    unsigned char id[256];
    char cerr[ERR_LEN] = "";
    if (co->id_bytes > sizeof id) return set_err(err, "comm: rank %d: communicator id of %zu bytes", c->rank, co->id_bytes);
    memset(id, 0, sizeof id);
    int bad = c->rank == 0 && co->make_id(be->ctx, id, cerr) != 0;
    op_begin(c, "nccl_init");
    mpi_check(m, MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, m->comm), "nccl_init");
    if (bad) {
        op_end(c);
        return set_err(err, "comm: rank %d: ncclGetUniqueId on rank 0 failed%s%s", c->rank,
                       c->rank == 0 ? ": " : "", c->rank == 0 ? cerr : "");
    }
    mpi_check(m, MPI_Bcast(id, (int)co->id_bytes, MPI_BYTE, 0, m->comm), "nccl_init");
    int rc = co->init(be->ctx, id, c->world, c->rank, &m->abort_flag, cerr);
    op_end(c);
    if (rc) return set_err(err, "comm: rank %d: %s", c->rank, cerr);
    m->have_device_comm = 1;
    return 0;
}

void comm_finalize(Comm *c) {
    CommImpl *m = c->impl;
    if (!m) { c->using_mpi = 0; return; }
    /* The ranks meet under the watchdog before MPI_Finalize, which no watchdog covers: a rank
     * stuck on its way out (rank 0 closing metrics.h5 on a dead file system) would otherwise
     * leave the others waiting in MPI_Finalize, and the job, for ever. */
    if (active(c)) {
        op_begin(c, "finalize");
        mpi_check(m, MPI_Barrier(m->comm), "finalize");
        op_end(c);
    }
    watchdog_stop(m);
    if (m->have_device_comm) m->be->collectives->destroy(m->be->ctx);
    m->have_device_comm = 0;
    if (m->have_comm) MPI_Comm_free(&m->comm);
    if (m->inited_mpi) MPI_Finalize();
    free_impl(c);
    c->using_mpi = 0;
}

void comm_abort(Comm *c, int code) {
    if (c && c->using_mpi) abort_job(code);
    fflush(stdout);
    exit(code);
}

/* ---- host collectives ---- */

void comm_barrier(Comm *c) {
    if (!active(c)) return;
    CommImpl *m = c->impl;
    op_begin(c, "barrier");
    mpi_check(m, MPI_Barrier(m->comm), "barrier");
    op_end(c);
}

/* In-place MPI_Allreduce of n elements of `size` bytes, in pieces of at most max_count. */
static void allreduce_pieces(Comm *c, void *buf, size_t n, size_t size, MPI_Datatype type, MPI_Op op, const char *name) {
    CommImpl *m = c->impl;
    op_begin(c, name);
    for (size_t off = 0; off < n;) {
        size_t len = n - off;
        if (len > (size_t)m->max_count) len = (size_t)m->max_count;
        mpi_check(m, MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * size, (int)len, type, op, m->comm), name);
        off += len;
    }
    op_end(c);
}

void comm_allreduce_sum_host(Comm *c, double *x, int n) {
    c->n_allreduce_sum_host++;
    if (!active(c) || n <= 0) return;
    allreduce_pieces(c, x, (size_t)n, sizeof(double), MPI_DOUBLE, MPI_SUM, "allreduce_sum_host");
}

void comm_allreduce_max_int(Comm *c, int *x, int n) {
    c->n_allreduce_max_int++;
    if (!active(c) || n <= 0) return;
    allreduce_pieces(c, x, (size_t)n, sizeof(int), MPI_INT, MPI_MAX, "allreduce_max_int");
}

/* The step's control record as one element of a datatype of 4 doubles [loss_sum, coverage_sum,
 * failed, stop_signal]: a commutative user op sums the first two and takes the max of the last two
 * (small integers, exact in a double). The sums are the additions MPI_SUM did before. */
#define STEP_CONTROL_SUMS 2
#define STEP_CONTROL_N 4
static void step_control_op(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const double *a = in;
    double *b = inout;
    for (int r = 0; r < *len; r++, a += STEP_CONTROL_N, b += STEP_CONTROL_N)
        for (int k = 0; k < STEP_CONTROL_N; k++) b[k] = k < STEP_CONTROL_SUMS ? a[k] + b[k] : (a[k] > b[k] ? a[k] : b[k]);
}

void comm_step_control(Comm *c, StepControl *s) {
    c->n_step_control++;
    if (!active(c)) return;
    CommImpl *m = c->impl;
    double x[STEP_CONTROL_N] = {s->loss_sum, s->coverage_sum, (double)s->failed, (double)s->stop_signal};
    MPI_Datatype rec;
    MPI_Op op;
    mpi_check(m, MPI_Type_contiguous(STEP_CONTROL_N, MPI_DOUBLE, &rec), "step_control");
    mpi_check(m, MPI_Type_commit(&rec), "step_control");
    mpi_check(m, MPI_Op_create(step_control_op, 1, &op), "step_control");
    op_begin(c, "step_control");
    mpi_check(m, MPI_Allreduce(MPI_IN_PLACE, x, 1, rec, op, m->comm), "step_control");
    op_end(c);
    MPI_Op_free(&op);
    MPI_Type_free(&rec);
    s->loss_sum = x[0];
    s->coverage_sum = x[1];
    s->failed = (int)x[2];
    s->stop_signal = (int)x[3];
}

void comm_bcast_host(Comm *c, void *buf, size_t bytes) {
    if (!active(c) || bytes == 0) return;
    CommImpl *m = c->impl;
    op_begin(c, "bcast_host");
    for (size_t off = 0; off < bytes;) {
        size_t len = bytes - off;
        if (len > (size_t)m->max_count) len = (size_t)m->max_count;
        mpi_check(m, MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, 0, m->comm), "bcast_host");
        off += len;
    }
    op_end(c);
}

void comm_gather_host(Comm *c, const void *send, size_t bytes, void *recv) {
    if (!active(c)) {
        if (bytes && recv != send) memcpy(recv, send, bytes);
        return;
    }
    CommImpl *m = c->impl;
    op_begin(c, "gather_host");
    mpi_check(m, MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, 0, m->comm), "gather_host");
    op_end(c);
}

/* ---- backend-memory collectives ---- */

static int use_device_comm(const Comm *c) { return ((const CommImpl *)c->impl)->have_device_comm; }

/* A failed device collective ends the job: the other ranks are blocked in it. */
static void device_check(Comm *c, int rc, const char *op, const char *why) {
    if (rc == 0) return;
    fprintf(stderr, "phaselab: rank %d: collective %s failed: %s; aborting\n", c->rank, op, why);
    abort_job(1);
}

/* One device collective of the backend, under the watchdog (it waits for the collective). */
#define DEVICE_COLLECTIVE(c, name, fn, ...) \
    do { \
        CommImpl *m_ = (c)->impl; \
        char why_[ERR_LEN] = ""; \
        op_begin_kind(c, name, 1); \
        device_check(c, m_->be->collectives->fn(m_->be->ctx, __VA_ARGS__, why_), name, why_); \
        op_end(c); \
    } while (0)

static float *scratch(CommImpl *m, size_t n) {
    if (m->scratch_n < n) {
        float *p = realloc(m->scratch, n * sizeof(float));
        if (!p) {
            fprintf(stderr, "phaselab: rank %d: collective reduce_scatter_sum: out of memory for %zu floats of scratch; aborting\n",
                    m->rank, n);
            abort_job(1);
        }
        m->scratch = p;
        m->scratch_n = n;
    }
    return m->scratch;
}

void comm_reduce_scatter_sum(Comm *c, const float *send, float *recv, size_t shard) {
    if (shard == 0) return;
    if (!active(c)) {
        /* a world of one: recv = send's (only) shard */
        const float *mine = send + (size_t)c->rank * shard;
        if (mine == recv) return;
        CommImpl *m = c->impl;
        if (m && m->be && m->be->copy) m->be->copy(m->be->ctx, recv, mine, shard * sizeof(float));
        else memmove(recv, mine, shard * sizeof(float));
        return;
    }
    CommImpl *m = c->impl;
    const char *name = "reduce_scatter_sum";
    size_t W = (size_t)c->world;
    if (use_device_comm(c)) {
        DEVICE_COLLECTIVE(c, name, reduce_scatter_sum, send, recv, shard);
        return;
    }
    op_begin(c, name);
    int overlaps = recv < send + W * shard && recv + shard > send;
    if (W * shard <= (size_t)m->max_count) {
        if (!overlaps) {
            mpi_check(m, MPI_Reduce_scatter_block(send, recv, (int)shard, MPI_FLOAT, MPI_SUM, m->comm), name);
        } else {   /* in place (recv = send + rank*shard): MPI forbids aliased buffers */
            float *tmp = scratch(m, shard);
            mpi_check(m, MPI_Reduce_scatter_block(send, tmp, (int)shard, MPI_FLOAT, MPI_SUM, m->comm), name);
            memcpy(recv, tmp, shard * sizeof(float));
        }
    } else {
        /* pieces [off, off+len) of every block, packed into scratch [W, len]. In place is safe:
         * a piece writes only recv[off, off+len), which no later piece reads. */
        size_t piece = (size_t)m->max_count / W;
        if (piece < 1) piece = 1;
        float *pack = scratch(m, W * piece);
        for (size_t off = 0; off < shard; off += piece) {
            size_t len = shard - off < piece ? shard - off : piece;
            for (size_t r = 0; r < W; r++) memcpy(pack + r * len, send + r * shard + off, len * sizeof(float));
            mpi_check(m, MPI_Reduce_scatter_block(pack, recv + off, (int)len, MPI_FLOAT, MPI_SUM, m->comm), name);
        }
    }
    op_end(c);
}

void comm_allgather(Comm *c, float *buf, size_t shard) {
    if (!active(c) || shard == 0) return;
    CommImpl *m = c->impl;
    const char *name = "allgather";
    size_t W = (size_t)c->world;
    if (use_device_comm(c)) {
        DEVICE_COLLECTIVE(c, name, allgather, buf, shard, c->rank);
        return;
    }
    op_begin(c, name);
    if (W * shard <= (size_t)m->max_count) {
        mpi_check(m, MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, m->comm), name);
    } else {
        /* pieces [off, off+len) of every block: one element of a type of len floats whose extent
         * is one shard, so rank r's part of the piece is at buf + off + r*shard */
        size_t piece = (size_t)m->max_count / W;
        if (piece < 1) piece = 1;
        for (size_t off = 0; off < shard; off += piece) {
            size_t len = shard - off < piece ? shard - off : piece;
            MPI_Datatype run, strided;
            mpi_check(m, MPI_Type_contiguous((int)len, MPI_FLOAT, &run), name);
            mpi_check(m, MPI_Type_create_resized(run, 0, (MPI_Aint)(shard * sizeof(float)), &strided), name);
            mpi_check(m, MPI_Type_commit(&strided), name);
            mpi_check(m, MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + off, 1, strided, m->comm), name);
            MPI_Type_free(&strided);
            MPI_Type_free(&run);
        }
    }
    op_end(c);
}

void comm_allreduce_sum(Comm *c, float *buf, size_t n) {
    if (!active(c) || n == 0) return;
    if (use_device_comm(c)) {
        DEVICE_COLLECTIVE(c, "allreduce_sum", allreduce_sum, buf, n);
        return;
    }
    allreduce_pieces(c, buf, n, sizeof(float), MPI_FLOAT, MPI_SUM, "allreduce_sum");
}
