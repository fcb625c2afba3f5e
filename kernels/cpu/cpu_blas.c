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
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"

#if defined(PHASELAB_OPENBLAS)
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char *openblas_get_corename(void);
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

/* The ISA level of an OpenBLAS x86 core name: 3 AVX-512 kernels, 2 AVX2, 1 AVX, 0 SSE only; -1 for a
 * name not listed (another architecture, a newer OpenBLAS: left alone). */
static int core_level(const char *core) {
    static const struct { const char *name; int level; } cores[] = {
        {"SapphireRapids", 3}, {"Cooperlake", 3}, {"SkylakeX", 3},
        {"Haswell", 2}, {"Zen", 2}, {"Sandybridge", 1}, {"Bulldozer", 1}, {"Piledriver", 1}, {"Steamroller", 1},
        {"Excavator", 1}, {"Prescott", 0}, {"Core2", 0}, {"Penryn", 0}, {"Dunnington", 0}, {"Nehalem", 0},
        {"Atom", 0}, {"Opteron", 0}, {"Opteron(SSE3)", 0}, {"Barcelona", 0}, {"Bobcat", 0}, {"Katmai", 0},
        {"Coppermine", 0}, {"Northwood", 0}, {"Banias", 0}};
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].name)) return cores[i].level;
    return -1;
}

const char *cpu_blas_better_core(const char *current, int avx2_fma, int avx512) {
    const int have = core_level(current);
    if (have < 0) return NULL;
    if (avx512 && have < 3) return "SkylakeX";
    if (avx2_fma && have < 2) return "Haswell";
    return NULL;
}

const char *cpu_blas_core(void) {
#if defined(PHASELAB_OPENBLAS)
    const char *c = openblas_get_corename();
    return c ? c : "";
#else
    return "";
#endif
}

void cpu_blas_prefer_core(char **argv) {
#if defined(PHASELAB_OPENBLAS) && defined(__x86_64__)
    const char *keep = getenv("PHASELAB_BLAS_CORE");
    if (getenv("OPENBLAS_CORETYPE") || (keep && !strcmp(keep, "keep")) || !argv || !argv[0]) return;
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *want = cpu_blas_better_core(openblas_get_corename(), avx2, avx512);
    if (!want || setenv("OPENBLAS_CORETYPE", want, 1)) return;
    execv("/proc/self/exe", argv);   /* returns only on failure: run on the kernels loaded */
#else
    (void)argv;
#endif
}
