/* The CPU backend's BLAS follows the thread count it is given (kernels/cpu/cpu_blas.c): after
 * cpu_set_blas_threads(n) the BLAS itself reports n, and a backend made for n threads sets the
 * BLAS to n before its matmuls, whatever the count was before. A BLAS whose count the build
 * does not set (BLIS before cpu_blas.c knew it) stays at its own default and fails here. The
 * matmul's result is checked too, so a backend that skipped the product cannot pass. */
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
    return check_failures ? 1 : 0;
}
