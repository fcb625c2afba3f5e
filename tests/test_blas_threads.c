/* The CPU backend's BLAS follows the thread count it is given (kernels/cpu/cpu_blas.c): after
 * cpu_set_blas_threads(n) the BLAS itself reports n, and a backend made for n threads sets the
 * BLAS to n before its matmuls, whatever the count was before. A BLAS whose count the build
 * does not set (BLIS before cpu_blas.c knew it) stays at its own default and fails here. The
 * matmul's result is checked too, so a backend that skipped the product cannot pass.
 * Thread counts above the BLAS's cap (issue 37): a backend asked for 80 threads runs at most
 * what the BLAS runs (cpu_blas_max_threads: 64 for the usual OpenBLAS builds), and the RMSNorm
 * backward's per-thread weight-gradient rows are sized by its own team, not by the OpenMP
 * maximum that the BLAS sets: with the maximum set to 2 under a team of 8 (or 80) the former
 * sizing wrote past its buffer and dropped those threads' sums, so dw differed from the
 * serial sum computed here.
 * run.threads = 0 on a process bound to one core (the affinity mask, not the online cores) is
 * one thread. */
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <string.h>
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/check.h"

int main(void) {
    const char *name = cpu_blas_name();
    check(name && *name, "cpu_blas_name names the BLAS", "(empty)");
    for (int n = 1; n <= 2; n++) {
        cpu_set_blas_threads(n);
        check(cpu_blas_thread_count() == n, n == 1 ? "cpu_set_blas_threads(1): the BLAS reports 1 thread"
                                                   : "cpu_set_blas_threads(2): the BLAS reports 2 threads",
              "%s reports %d", name, cpu_blas_thread_count());
    }
    const Backend *be = backend_cpu(2);
    cpu_set_blas_threads(1);
    /* out [2,2] = in [2,3] w [2,3]^T */
    float in[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 0, 1, 1}, out[4] = {0};
    be->matmul_fwd(be->ctx, (act_t *)out, (const act_t *)in, (const act_t *)w, 2, 2, 3, 0);
    check(out[0] == 1 && out[1] == 5 && out[2] == 4 && out[3] == 11, "a 2-thread backend's matmul is right", "%g %g %g %g",
          out[0], out[1], out[2], out[3]);
    check(cpu_blas_thread_count() == 2, "a 2-thread backend's matmul runs the BLAS on 2 threads", "%s reports %d", name,
          cpu_blas_thread_count());

    const int cap80 = cpu_blas_max_threads(80);
    check(cap80 >= 1 && cap80 <= 80, "cpu_blas_max_threads(80) is in [1, 80]", "%d", cap80);
    check(cpu_blas_max_threads(1) == 1, "cpu_blas_max_threads(1) is 1", "%d", cpu_blas_max_threads(1));
    /* RMSNorm backward: rows [64, C] with dw summed over rows; reference in double */
    enum { ROWS = 64, C = 24 };
    static float x[ROWS * C], dy[ROWS * C], wt[C], rstd[ROWS], dx[ROWS * C], y[ROWS * C];
    double ref[C] = {0};
    for (int i = 0; i < ROWS * C; i++) {
        x[i] = (float)sin(0.37 * i) + 0.1f;
        dy[i] = (float)cos(0.11 * i);
    }
    for (int c = 0; c < C; c++) wt[c] = 1.0f + 0.01f * c;
    const int counts[3] = {8, 80, 200};
    for (int k = 0; k < 3; k++) {
        const Backend *b = backend_cpu(counts[k]);
        b->rmsnorm_fwd(b->ctx, (act_t *)y, rstd, (const act_t *)x, (const act_t *)wt, ROWS, C, 1e-6f);
        if (k == 0)
            for (int r = 0; r < ROWS; r++)
                for (int c = 0; c < C; c++) ref[c] += (double)dy[r * C + c] * x[r * C + c] * rstd[r];
        b->matmul_fwd(b->ctx, (act_t *)out, (const act_t *)in, (const act_t *)w, 2, 2, 3, 0);
        const int blas = cpu_blas_thread_count();
        char name[128];
        snprintf(name, sizeof name, "a backend asked for %d threads runs the BLAS on min(%d, its cap %d)", counts[k],
                 counts[k], cpu_blas_max_threads(counts[k]));
        check(blas == cpu_blas_max_threads(counts[k]) && blas <= counts[k], name, "%s reports %d", name, blas);
        omp_set_num_threads(2);            /* the OpenMP maximum below the team, as OpenBLAS's cap leaves it */
        float dw[C] = {0};
        b->rmsnorm_bwd(b->ctx, (act_t *)dx, dw, (const act_t *)dy, (const act_t *)x, (const act_t *)wt, rstd, ROWS, C, 0);
        double worst = 0;
        for (int c = 0; c < C; c++) {
            double e = fabs(dw[c] - ref[c]) / (fabs(ref[c]) + 1e-3);
            if (e > worst) worst = e;
        }
        snprintf(name, sizeof name, "rmsnorm backward on a %d-thread backend (OpenMP maximum 2): dw is the sum over all rows",
                 counts[k]);
        check(worst < 1e-4, name, "relative error %g", worst);
    }
    /* run.threads = 0 is every core the process may run on: bound to one core (taskset, mpirun's
     * default binding of -np 2) it is one thread, not one per online core */
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) == 0 && CPU_COUNT(&all) >= 2) {
        int first = 0;
        while (!CPU_ISSET(first, &all)) first++;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        sched_setaffinity(0, sizeof one, &one);
        const Backend *b0 = backend_cpu(0);
        b0->matmul_fwd(b0->ctx, (act_t *)out, (const act_t *)in, (const act_t *)w, 2, 2, 3, 0);
        check(cpu_blas_thread_count() == 1, "a backend of run.threads = 0 bound to one core runs 1 thread",
              "%s reports %d (%d CPUs online)", name, cpu_blas_thread_count(), CPU_COUNT(&all));
        sched_setaffinity(0, sizeof all, &all);
    } else {
        check_skip("a backend of run.threads = 0 bound to one core runs 1 thread", "fewer than 2 CPUs to run on");
    }
    return check_failures ? 1 : 0;
}
