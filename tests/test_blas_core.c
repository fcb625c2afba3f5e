/* The rule that picks OpenBLAS's kernels on a CPU its DYNAMIC_ARCH build does not recognise
 * (cpu_blas_better_core, kernels/cpu/cpu_backend.h), against a table written here: a core older
 * than the CPU's widest vector unit is replaced by SkylakeX (AVX-512) or Haswell (AVX2 + FMA); a
 * core as good or better, or one the rule does not know (another architecture, a newer name), is
 * left alone. The re-exec itself is checked end to end by tests/test_blas_core_exec.py. */
#include <string.h>
#include "kernels/cpu/cpu_backend.h"
#include "tests/check.h"

int main(void) {
    static const struct { const char *core; int avx2, avx512; const char *want; } cases[] = {
        {"Prescott", 1, 1, "SkylakeX"},  {"Prescott", 1, 0, "Haswell"},   {"Prescott", 0, 0, NULL},
        {"PRESCOTT", 1, 1, "SkylakeX"},  {"Nehalem", 1, 0, "Haswell"},    {"Core2", 1, 1, "SkylakeX"},
        {"Sandybridge", 1, 1, "SkylakeX"}, {"Sandybridge", 1, 0, "Haswell"}, {"Sandybridge", 0, 0, NULL},
        {"Haswell", 1, 1, "SkylakeX"},   {"Haswell", 1, 0, NULL},         {"Zen", 1, 0, NULL},
        {"SkylakeX", 1, 1, NULL},        {"Cooperlake", 1, 1, NULL},      {"SapphireRapids", 1, 1, NULL},
        {"ARMV8", 1, 1, NULL},           {"NeoverseN1", 0, 0, NULL},      {"", 1, 1, NULL},
        {NULL, 1, 1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = cpu_blas_better_core(cases[i].core, cases[i].avx2, cases[i].avx512);
        char name[160];
        snprintf(name, sizeof name, "blas_core_%s_avx2_%d_avx512_%d", cases[i].core ? cases[i].core : "null", cases[i].avx2,
                 cases[i].avx512);
        const int ok = cases[i].want ? got && !strcmp(got, cases[i].want) : got == NULL;
        check(ok, name, "got %s, expected %s", got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
    }
    check(cpu_blas_core() != NULL, "blas_core_names_the_loaded_core", "NULL");
    return check_exit_code();
}
