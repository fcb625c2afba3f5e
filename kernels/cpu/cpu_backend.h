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

/* OpenBLAS's kernels on this CPU (kernels/cpu/cpu_blas.c). A DYNAMIC_ARCH OpenBLAS (Debian's)
 * picks its kernels once, when it loads, from the CPU's model id; a CPU it does not know (many
 * virtual machines report a generic "Intel Xeon Processor") gets Prescott's SSE3 kernels even
 * when it has AVX-512: 3.1x slower training here (8.2k against 25.8k tokens/s on the mini
 * recipe's first stage, one thread). The kernels can only be chosen before the library loads,
 * through OPENBLAS_CORETYPE, so:
 *   cpu_blas_better_core(current, avx2_fma, avx512)  the core to ask for: "SkylakeX" when the CPU
 *       has AVX-512 (F, DQ, BW, VL) and the current core is older, "Haswell" when it has AVX2 + FMA
 *       and the current core is older than that; NULL when the current core is as good or unknown
 *       (the rule; tests/test_blas_core.c);
 *   cpu_blas_prefer_core(argv)  at the start of main: when OPENBLAS_CORETYPE is unset and
 *       PHASELAB_BLAS_CORE is not "keep", and cpu_blas_better_core names a core for this CPU,
 *       sets OPENBLAS_CORETYPE to it and re-executes the program with the same arguments (before
 *       MPI or any file is opened; the variable then stops a second re-exec). Returns when nothing
 *       is to be done or the re-exec failed (the program then runs on the kernels it has).
 *   cpu_blas_core()  the core OpenBLAS runs ("" for other BLASes). */
const char *cpu_blas_better_core(const char *current, int avx2_fma, int avx512);
void cpu_blas_prefer_core(char **argv);
const char *cpu_blas_core(void);
#endif
