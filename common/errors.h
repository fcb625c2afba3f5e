/* Error reporting convention for library code: functions return 0 on success and a
 * non-zero code on failure, writing one human-readable line (file, line or offset, what was
 * expected) into a caller-provided buffer of ERR_LEN bytes. Programs print it and exit. */
#ifndef PHASELAB_ERRORS_H
#define PHASELAB_ERRORS_H
#include <stdio.h>
#include <stdarg.h>

#define ERR_LEN 1024

/* Formats into err (may be NULL) and returns -1, so that `return set_err(err, ...)` reads well. */
static inline int set_err(char *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}
#endif
