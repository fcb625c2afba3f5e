/* The CPU backend's BLAS: which one the build links (tools/configure defines PHASELAB_OPENBLAS
 * or PHASELAB_BLIS; anything else is a plain CBLAS) and how its thread count is set. The count
 * is a per-library rule, kept here only:
 *   OpenBLAS   keeps its own count: openblas_set_num_threads (its OpenMP build also caps itself
 *              at 1 thread inside an OpenMP region, which cpu_compressor.c relies on);
 *   BLIS       keeps its own global count too (bli_thread_set_num_threads); without it BLIS runs
 *              on BLIS_NUM_THREADS or one thread, whatever --threads says;
 *   otherwise  the OpenMP runtime's count (MKL's GNU-OpenMP layer and most others follow it).
 * Each sgemm is issued outside any OpenMP region after cpu_blas_threads(ctx), so every op runs
 * on its own context's count. */
#include <omp.h>
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_internal.h"

#if defined(PHASELAB_OPENBLAS)
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
#elif defined(PHASELAB_BLIS)
#include <blis.h>
#endif

void cpu_blas_threads(const BackendCtx *ctx) {
#if defined(PHASELAB_OPENBLAS)
    openblas_set_num_threads(ctx->threads);
#elif defined(PHASELAB_BLIS)
    bli_thread_set_num_threads((dim_t)ctx->threads);
#else
    omp_set_num_threads(ctx->threads);
#endif
}

/* OpenBLAS runs at most its build's MAX_THREADS (64 in most distributions' builds) and silently
 * clamps a larger count; asked for more, it is set to `wanted` and read back, then restored.
 * BLIS and the OpenMP-following CBLASes take any count. */
int cpu_blas_max_threads(int wanted) {
#if defined(PHASELAB_OPENBLAS)
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(wanted);
    const int got = openblas_get_num_threads();
    openblas_set_num_threads(before);
    return got < 1 ? 1 : got < wanted ? got : wanted;
#else
    return wanted;
#endif
}

int cpu_blas_thread_count(void) {
#if defined(PHASELAB_OPENBLAS)
    return openblas_get_num_threads();
#elif defined(PHASELAB_BLIS)
    return (int)bli_thread_get_num_threads();
#else
    return omp_get_max_threads();
#endif
}

const char *cpu_blas_name(void) {
#if defined(PHASELAB_OPENBLAS)
    return "OpenBLAS";
#elif defined(PHASELAB_BLIS)
    return "BLIS";
#else
    return "CBLAS";
#endif
}
