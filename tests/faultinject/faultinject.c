/* Fault injection at the system-call boundary, loaded with LD_PRELOAD (tests/faultinject/README.md):
 * counts the calls that make data durable or visible (write, pwrite, pwrite64, writev, fsync,
 * fdatasync, rename, renameat, renameat2) and, at the N-th one, fails it with ENOSPC or kills
 * the process with SIGKILL before it runs. Environment:
 *   FAULT_AT=N      1-based index of the call to fault; 0 or unset: count only
 *   FAULT_MODE=M    enospc       the N-th counted call and every later one fail with ENOSPC
 *                                (a disk that stays full)
 *                   enospc-once  only the N-th fails
 *                   kill         SIGKILL at the N-th, before it runs
 *                   hang         the N-th never returns (a dead file system): the process
 *                                sleeps until it is killed
 *   FAULT_DIR=DIR   count only calls on files at or under DIR (a file descriptor's path is read
 *                   from /proc/self/fd, a rename counts when either name is under DIR); unset:
 *                   every call (stdout and stderr too)
 *   FAULT_LOG=FILE  one line per counted call appended to FILE: "N CALL PATH[ -> PATH] ACTION"
 *                   (ACTION: ok, enospc, kill or hang), so a first run without FAULT_AT counts them
 * Each process counts from 1 (a child inherits the variables and counts its own calls). Writes
 * through stdio reach the kernel by glibc's internal write, which no preload can see: the code
 * under test writes files with write() (common/fsutil.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

typedef enum { MODE_COUNT, MODE_ENOSPC, MODE_ENOSPC_ONCE, MODE_KILL, MODE_HANG } Mode;

static struct {
    int ready;
    long at;
    Mode mode;
    char dir[PATH_MAX];
    size_t dir_len;               /* 0: every call counts */
    char log[PATH_MAX];
    long count;
    ssize_t (*write)(int, const void *, size_t);
} F;

static void init(void) {
    if (F.ready) return;
    F.write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *at = getenv("FAULT_AT"), *mode = getenv("FAULT_MODE"), *dir = getenv("FAULT_DIR"), *log = getenv("FAULT_LOG");
    F.at = at ? strtol(at, NULL, 10) : 0;
    F.mode = !mode || !F.at ? MODE_COUNT : !strcmp(mode, "kill") ? MODE_KILL : !strcmp(mode, "hang") ? MODE_HANG
           : !strcmp(mode, "enospc-once") ? MODE_ENOSPC_ONCE : MODE_ENOSPC;
    if (dir && *dir && realpath(dir, F.dir)) F.dir_len = strlen(F.dir);
    else if (dir && *dir) snprintf(F.dir, sizeof F.dir, "%s", dir), F.dir_len = strlen(F.dir);
    if (log) snprintf(F.log, sizeof F.log, "%s", log);
    F.ready = 1;
}

static int under_dir(const char *p) {
    if (!F.dir_len) return 1;
    return !strncmp(p, F.dir, F.dir_len) && (p[F.dir_len] == 0 || p[F.dir_len] == '/');
}

/* the file behind fd ("" when it cannot be read) */
static void fd_path(int fd, char *out, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, out, n - 1);
    out[k > 0 ? k : 0] = 0;
}

enum { ABS_MAX = 3 * PATH_MAX + 4 };

/* path made absolute with its directory resolved (the file itself may not exist); out [ABS_MAX] */
static void abs_path(int dirfd, const char *path, char out[ABS_MAX]) {
    char base[PATH_MAX], joined[2 * PATH_MAX + 2], dir[2 * PATH_MAX + 2], real[PATH_MAX];
    if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
    else {
        if (dirfd == AT_FDCWD) { if (!getcwd(base, sizeof base)) base[0] = 0; }
        else fd_path(dirfd, base, sizeof base);
        snprintf(joined, sizeof joined, "%s/%s", base, path);
    }
    const char *slash = strrchr(joined, '/');
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - joined), joined);
    if (realpath(dir[0] ? dir : "/", real)) snprintf(out, ABS_MAX, "%s/%s", real, slash + 1);
    else snprintf(out, ABS_MAX, "%s", joined);
}

/* Counts a call on path (and path2, a rename's target) when under FAULT_DIR; returns 0 to run
 * it, -1 to fail it with ENOSPC (kill and hang never return). */
static int fault(const char *call, const char *path, const char *path2) {
    if (!under_dir(path) && !(path2 && under_dir(path2))) return 0;
    long n = __atomic_add_fetch(&F.count, 1, __ATOMIC_SEQ_CST);
    const char *action = "ok";
    if (F.mode != MODE_COUNT && (n == F.at || (F.mode == MODE_ENOSPC && n > F.at)))
        action = F.mode == MODE_KILL ? "kill" : F.mode == MODE_HANG ? "hang" : "enospc";
    if (F.log[0]) {
        char line[2 * ABS_MAX + 128];
        int len = snprintf(line, sizeof line, "%ld %s %s%s%s %s\n", n, call, path, path2 ? " -> " : "", path2 ? path2 : "", action);
        int fd = open(F.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (F.write(fd, line, len < (int)sizeof line ? (size_t)len : sizeof line - 1) < 0) { /* the log is best effort */ }
            close(fd);
        }
    }
    if (!strcmp(action, "kill")) kill(getpid(), SIGKILL);
    if (!strcmp(action, "hang")) for (;;) pause();   /* signal handlers run; the call never returns */
    if (!strcmp(action, "enospc")) { errno = ENOSPC; return -1; }
    return 0;
}

static int fault_fd(const char *call, int fd) {
    init();
    char p[PATH_MAX];
    fd_path(fd, p, sizeof p);
    return fault(call, p, NULL);
}

/* the next definition of name (libc's), looked up once; name_fn is its pointer type */
#define REAL(name) static name##_fn real_##name; if (!real_##name) real_##name = (name##_fn)dlsym(RTLD_NEXT, #name)

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef int (*fsync_fn)(int);
typedef int (*fdatasync_fn)(int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);

ssize_t write(int fd, const void *buf, size_t n) {
    init();
    if (fault_fd("write", fd)) return -1;
    return F.write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite);
    if (fault_fd("pwrite", fd)) return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    REAL(pwrite64);
    if (fault_fd("pwrite64", fd)) return -1;
    return real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev);
    if (fault_fd("writev", fd)) return -1;
    return real_writev(fd, iov, cnt);
}

int fsync(int fd) {
    REAL(fsync);
    if (fault_fd("fsync", fd)) return -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    if (fault_fd("fdatasync", fd)) return -1;
    return real_fdatasync(fd);
}

static int fault_rename(const char *call, int olddir, const char *from, int newdir, const char *to) {
    init();
    char a[ABS_MAX], b[ABS_MAX];
    abs_path(olddir, from, a);
    abs_path(newdir, to, b);
    return fault(call, a, b);
}

int rename(const char *from, const char *to) {
    REAL(rename);
    if (fault_rename("rename", AT_FDCWD, from, AT_FDCWD, to)) return -1;
    return real_rename(from, to);
}

int renameat(int olddir, const char *from, int newdir, const char *to) {
    REAL(renameat);
    if (fault_rename("renameat", olddir, from, newdir, to)) return -1;
    return real_renameat(olddir, from, newdir, to);
}

int renameat2(int olddir, const char *from, int newdir, const char *to, unsigned flags) {
    REAL(renameat2);
    if (fault_rename("renameat2", olddir, from, newdir, to)) return -1;
    return real_renameat2(olddir, from, newdir, to, flags);
}
