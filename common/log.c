/* Run log (see common/log.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/log.h"
#include "common/errors.h"

static FILE *log_file;
static int log_quiet;
static volatile sig_atomic_t console_guarded;

void log_guard_console(void) { console_guarded = 1; }

/* The descriptor a guarded console line goes to, made once per stream: a regular file (never
 * blocks) and a socket (written with MSG_DONTWAIT) keep their own; a pipe or a terminal is
 * opened again through /proc/self/fd with O_NONBLOCK, a new open file description, so the flag
 * does not reach the shell's terminal. -1: none could be made (poll before each write then). */
static int guarded_fd(FILE *f, int *is_socket) {
    static int made[2] = {0, 0}, fds[2] = {-1, -1}, sock[2] = {0, 0};
    const int fd = fileno(f), k = f == stderr;
    if (!made[k]) {
        made[k] = 1;
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            if (S_ISREG(st.st_mode)) fds[k] = fd;
            else if (S_ISSOCK(st.st_mode)) { fds[k] = fd; sock[k] = 1; }
            else {
                char path[64];
                snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
                fds[k] = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            }
        }
    }
    *is_socket = sock[k];
    return fds[k] >= 0 ? fds[k] : -1;
}

/* One console line (stdout or stderr), formatted here and written with write(2), not stdio:
 * stdio retries a write that a signal cut short and would block again on a console nobody
 * reads. Before a stop signal the writes block as usual (a slow reader slows the run; nothing
 * is dropped). The stop signal's handler runs on the main thread (trainer.c forwards it there),
 * so a write blocked at that moment returns (EINTR or a short count; no SA_RESTART); from then
 * on the rest of the line, and every later line, goes out without blocking (guarded_fd): what
 * the console does not take within 100 ms is dropped. Lines are cut at 4095 bytes here; the
 * run's log file gets them whole. */
static void console_vprintf(FILE *f, const char *fmt, va_list ap) {
    char line[4096];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n <= 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    if (console_guarded) __fpurge(f);  /* bytes a signal left in stdio's buffer would block the exit-time flush */
    else fflush(f);                    /* keep the order of anything printed through stdio before */
    int off = 0;
    while (off < n && !console_guarded) {
        const ssize_t w = write(fileno(f), line + off, (size_t)(n - off));
        if (w > 0) off += (int)w;
        else if (!(w < 0 && errno == EINTR)) return;
    }
    int is_socket = 0;
    const int nb = off < n ? guarded_fd(f, &is_socket) : -1, fd = nb >= 0 ? nb : fileno(f);
    for (int waited = 0; off < n;) {
        if (nb < 0 || waited) {            /* blocking descriptor, or a full console: wait for room */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 100) != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) || !(p.revents & POLLOUT)) return;
        }
        const size_t len = nb < 0 && n - off > 256 ? 256 : (size_t)(n - off);
        const ssize_t w = is_socket ? send(fd, line + off, len, MSG_DONTWAIT | MSG_NOSIGNAL) : write(fd, line + off, len);
        if (w > 0) { off += (int)w; waited = 0; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !waited) { waited = 1; continue; }
        return;
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
    char *msg = NULL;
    va_start(ap, fmt);
    const int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0) msg = NULL;
    /* the run's log file first (as in log_printf), the whole line */
    if (log_file) {
        fprintf(log_file, "phaselab: %s\n", msg ? msg : fmt);
        fflush(log_file);
    }
    console_printf(stderr, "phaselab: %s\n", msg ? msg : fmt);
    free(msg);
}

void format_duration(double s, char *out, int len) {
    if (s < 0 || s != s) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, len, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, len, "%lds", t);
}
