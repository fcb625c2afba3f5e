/* Minimal test reporting shared by every C test binary.
 * Each check prints one line that tests/run_tests.sh counts:
 *   "ok - NAME"                  passed
 *   "not ok - NAME: WHY"         failed
 *   "skip - NAME: skipped: WHY"  skipped (e.g. "skipped: no GPU")
 * A test binary exits 1 when any of its checks failed. CHECK_ONLY=TEXT reports only the checks
 * whose name contains TEXT (see check_selected). */
#ifndef PHASELAB_TESTS_CHECK_H
#define PHASELAB_TESTS_CHECK_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;

/* CHECK_NAME_PREFIX (a string) is put before every name: the GPU tests built against the CPU
 * emulator (tests/cuemu) report as "cuemu: cuda_parity_..." so they never pass for GPU runs. */
#ifndef CHECK_NAME_PREFIX
#define CHECK_NAME_PREFIX ""
#endif

/* CHECK_ONLY=TEXT in the environment (tests/run_tests.sh --check TEXT): only the checks whose
 * name contains TEXT are reported and counted; the others still run but stay silent, and
 * their failures do not fail the program. */
static inline int check_selected(const char *name) {
    static const char *only;
    static int looked;
    if (!looked) { only = getenv("CHECK_ONLY"); looked = 1; }
    return !only || !*only || strstr(name, only) != NULL;
}

/* Reports a check; fmt describes the failure and is printed only when ok is false. */
static inline int check(int ok, const char *name, const char *fmt, ...) {
    if (!check_selected(name)) return ok;
    if (ok) {
        printf("ok - %s%s\n", CHECK_NAME_PREFIX, name);
    } else {
        va_list ap;
        printf("not ok - %s%s: ", CHECK_NAME_PREFIX, name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        check_failures++;
    }
    fflush(stdout);
    return ok;
}

static inline void check_skip(const char *name, const char *why) {
    if (!check_selected(name)) return;
    printf("skip - %s%s: skipped: %s\n", CHECK_NAME_PREFIX, name, why);
    fflush(stdout);
}

static inline int check_exit_code(void) { return check_failures ? 1 : 0; }
#endif
