/* Run log (see common/log.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "common/log.h"
#include "common/errors.h"

static FILE *log_file;
static int log_quiet;

int log_open(const char *path, char *err) {
    log_file = fopen(path, "a");
    if (!log_file) return set_err(err, "%s: cannot open the run log for writing: %s", path, strerror(errno));
    return 0;
}

void log_close(void) {
    if (log_file) fclose(log_file);
    log_file = NULL;
}

void log_set_quiet(int quiet) { log_quiet = quiet; }

void log_printf(const char *fmt, ...) {
    if (log_quiet) return;
    va_list ap;
    /* the run's log file first: after SIGTERM a launcher (mpirun) may already have closed the
     * pipe behind stdout, and the log must still get the line */
    if (log_file) {
        va_start(ap, fmt);
        vfprintf(log_file, fmt, ap);
        va_end(ap);
        fflush(log_file);
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void log_error(const char *fmt, ...) {
    va_list ap;
    fputs("phaselab: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (log_file) {
        fputs("phaselab: ", log_file);
        va_start(ap, fmt);
        vfprintf(log_file, fmt, ap);
        va_end(ap);
        fputc('\n', log_file);
        fflush(log_file);
    }
}

void format_duration(double s, char *out, int len) {
    if (s < 0 || s != s) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, len, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, len, "%lds", t);
}
