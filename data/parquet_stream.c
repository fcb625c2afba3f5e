/* Parquet input (data/parquet_stream.h): the bytes of a .parquet file's text column as JSON
 * lines, produced by a child process (tools/parquet-text, Python with pyarrow: Debian has no
 * Arrow C library) and read through a pipe.
 *
 * The child is started with posix_spawnp (safe in the tokenizer's multi-threaded process), its
 * stdout on the pipe, its stderr the tokenizer's (so its one-line errors reach the user), every
 * other descriptor of ours closed in it (the pipe is opened O_CLOEXEC). Which Python: the
 * environment's PHASELAB_PYTHON, else `python3` on PATH. Which script: PHASELAB_PARQUET_READER,
 * else tools/parquet-text next to the running program (the repository root holds ./tokenize and
 * ./train), else the same path relative to the current directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "data/parquet_stream.h"
#include "common/errors.h"

extern char **environ;

/* The reader script: PHASELAB_PARQUET_READER, or tools/parquet-text beside the executable. */
static int find_reader(char *out, size_t n) {
    const char *env = getenv("PHASELAB_PARQUET_READER");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return access(out, R_OK) == 0;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            /* ./tokenize at the root, or a build directory's bin/ one level below it */
            const char *rel[] = {"/tools/parquet-text", "/../tools/parquet-text", "/../../tools/parquet-text"};
            for (int i = 0; i < 3; i++) {
                snprintf(out, n, "%s%s", exe, rel[i]);
                if (access(out, R_OK) == 0) return 1;
            }
        }
    }
    snprintf(out, n, "tools/parquet-text");
    return access(out, R_OK) == 0;
}

int parquet_stream_open(const char *path, const char *field, FILE **f, pid_t *pid, char *err) {
    *f = NULL;
    *pid = -1;
    char script[PATH_MAX + 64];
    if (!find_reader(script, sizeof script))
        return set_err(err, "phaselab: %s: reading parquet needs tools/parquet-text (looked beside the program and in "
                       "the current directory; PHASELAB_PARQUET_READER=PATH names it)", path);
    const char *py = getenv("PHASELAB_PYTHON");
    if (!py || !*py) py = "python3";
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return set_err(err, "phaselab: %s: pipe: %s", path, strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);   /* dup2 clears O_CLOEXEC on fd 1 */
    char *argv[] = {(char *)py, script, (char *)path, (char *)field, NULL};
    int rc = posix_spawnp(pid, py, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        *pid = -1;
        return set_err(err, "phaselab: %s: cannot start %s for tools/parquet-text: %s (PHASELAB_PYTHON=a Python with pyarrow)",
                       path, py, strerror(rc));
    }
    *f = fdopen(fds[0], "rb");
    if (!*f) {
        close(fds[0]);
        parquet_stream_abort(*pid);
        *pid = -1;
        return set_err(err, "phaselab: %s: fdopen: %s", path, strerror(errno));
    }
    return 0;
}

int parquet_stream_finish(pid_t pid, const char *path, char *err) {
    int st = 0;
    pid_t got;
    while ((got = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
    if (got < 0) return set_err(err, "phaselab: %s: waiting for tools/parquet-text: %s", path, strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFEXITED(st))
        return set_err(err, "phaselab: %s: tools/parquet-text failed (exit %d%s; its message is above)", path, WEXITSTATUS(st),
                       WEXITSTATUS(st) == 127 ? ": the Python was not found, PHASELAB_PYTHON names one" : "");
    return set_err(err, "phaselab: %s: tools/parquet-text was killed by signal %d", path, WTERMSIG(st));
}

void parquet_stream_abort(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}
