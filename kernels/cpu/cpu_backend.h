/* The CPU backend's public extras (kernels/cpu/): what callers outside the backend may ask of
 * its BLAS beyond the op API of kernels/kernels.h (the backend itself is backend_cpu there).
 * Used by --bench (cli/bench.c), whose sgemm references run outside the backend's ops, and by
 * tests/test_blas_threads.c. Implemented in kernels/cpu/cpu_backend.c and kernels/cpu/cpu_blas.c. */
#ifndef PHASELAB_CPU_BACKEND_H
#define PHASELAB_CPU_BACKEND_H

/* The thread count the BLAS uses for cblas calls made outside the backend's ops (--bench's
 * references). The CPU backend sets it before each of its own matmuls; until then the BLAS
 * runs on every core. threads <= 0: every core. */
void cpu_set_blas_threads(int threads);
/* The BLAS the build links ("OpenBLAS", "BLIS" or "CBLAS") and the thread count it is set to
 * now (kernels/cpu/cpu_blas.c). */
const char *cpu_blas_name(void);
int cpu_blas_thread_count(void);
/* The most threads the BLAS runs of `wanted` (wanted, or the BLAS's own cap when lower:
 * OpenBLAS's MAX_THREADS). backend_cpu caps its count with it (kernels/cpu/cpu_backend.c). */
int cpu_blas_max_threads(int wanted);
#endif
