/* Run log (see common/log.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <string.h>
#include <unistd.h>
#include "common/log.h"
#include "common/errors.h"

static FILE *log_file;
static int log_quiet;
static volatile sig_atomic_t console_guarded;

void log_guard_console(void) { console_guarded = 1; }

/* One console line (stdout or stderr). Unguarded: stdio, flushed. Guarded (after a stop signal):
 * the line is formatted here and written with write(2) in pieces of at most 256 bytes, each only
 * when poll() says the console takes it within 100 ms; otherwise the rest of the line is dropped.
 * stdio's buffer is purged first: bytes of a write that the signal interrupted would otherwise
 * block the exit-time flush. */
static void console_vprintf(FILE *f, const char *fmt, va_list ap) {
    if (!console_guarded) {
        vfprintf(f, fmt, ap);
        fflush(f);
        return;
    }
    char line[4096];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n <= 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    __fpurge(f);
    const int fd = fileno(f);
    for (int off = 0; off < n;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, 100) != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) || !(p.revents & POLLOUT)) return;
        const ssize_t w = write(fd, line + off, n - off < 256 ? (size_t)(n - off) : 256);
        if (w <= 0) return;
        off += (int)w;
    }
}

static void console_printf(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    console_vprintf(f, fmt, ap);
    va_end(ap);
}

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
    /* the run's log file first: after SIGTERM a launcher (mpirun) may already have stopped
     * reading stdout, and the log must still get the line */
    if (log_file) {
        va_start(ap, fmt);
        vfprintf(log_file, fmt, ap);
        va_end(ap);
        fflush(log_file);
    }
    va_start(ap, fmt);
    console_vprintf(stdout, fmt, ap);
    va_end(ap);
}

void log_error(const char *fmt, ...) {
    va_list ap;
    char msg[4096];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    console_printf(stderr, "phaselab: %s\n", msg);
    if (log_file) {
        fprintf(log_file, "phaselab: %s\n", msg);
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
