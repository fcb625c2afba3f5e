/* Filesystem helpers (see common/fsutil.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/fsutil.h"
#include "common/errors.h"

int fs_mkdirs(const char *path, char *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return set_err(err, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return set_err(err, "%s: cannot create directory: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) || !S_ISDIR(st.st_mode)) return set_err(err, "%s: exists and is not a directory", buf);
    return 0;
}

int fs_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int fs_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st)) return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return -1;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            fs_remove_tree(child);
        }
        closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

int fs_fsync_parent(const char *path, char *err) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return set_err(err, "%s: cannot open directory to fsync: %s", dir, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0) { set_err(err, "%s: directory fsync failed: %s", dir, strerror(e)); errno = e; return -1; }
    return 0;
}

int fs_rename_durable(const char *from, const char *to, char *err) {
    if (rename(from, to) != 0) {
        int e = errno;
        set_err(err, "%s: cannot rename to %s: %s", from, to, strerror(e));
        errno = e;
        return -1;
    }
    return fs_fsync_parent(to, err);
}

/* fills err with "TMP: WHAT: strerror(errno)", removes PATH.tmp, returns -1 with errno kept */
static int atomic_fail(AtomicFile *a, const char *what, char *err) {
    int e = errno;
    set_err(err, "%s: %s: %s", a->tmp, what, strerror(e));
    fs_atomic_abort(a);
    errno = e;
    return -1;
}

int fs_atomic_open(AtomicFile *a, const char *path, char *err) {
    a->fd = -1;
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path)
        return set_err(err, "%.64s...: path longer than %zu bytes", path, sizeof a->path - 1);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (a->fd < 0) {
        int e = errno;
        set_err(err, "%s: cannot create: %s", a->tmp, strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

int fs_atomic_write(AtomicFile *a, const void *data, size_t n, char *err) {
    for (size_t done = 0; done < n;) {
        ssize_t r = write(a->fd, (const char *)data + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return atomic_fail(a, "write failed", err);
        }
        done += (size_t)r;
    }
    return 0;
}

int fs_atomic_commit(AtomicFile *a, char *err) {
    if (fsync(a->fd) != 0) return atomic_fail(a, "fsync failed", err);
    int rc = close(a->fd);
    a->fd = -1;
    if (rc != 0) {
        int e = errno;
        unlink(a->tmp);
        errno = e;
        return atomic_fail(a, "close failed", err);
    }
    if (rename(a->tmp, a->path) != 0) {
        int e = errno;
        set_err(err, "%s: cannot rename to %s: %s", a->tmp, a->path, strerror(e));
        unlink(a->tmp);
        errno = e;
        return -1;
    }
    return fs_fsync_parent(a->path, err);
}

void fs_atomic_abort(AtomicFile *a) {
    if (a->fd < 0) return;                             /* committed, or already aborted */
    close(a->fd);
    a->fd = -1;
    unlink(a->tmp);
}

int fs_write_atomic(const char *path, const void *data, size_t bytes, char *err) {
    AtomicFile a;
    if (fs_atomic_open(&a, path, err) || fs_atomic_write(&a, data, bytes, err)) return -1;
    return fs_atomic_commit(&a, err);
}

char *fs_read_file(const char *path, size_t *bytes, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {                                          /* errno from fopen (ENOENT, ...) */
        int e = errno;
        set_err(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;                                    /* fopen opens a directory too: refuse it by name */
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        set_err(err, "%s: cannot open: %s (expected a file)", path, strerror(EISDIR));
        errno = EISDIR;
        return NULL;
    }
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    int e = !buf ? (n < 0 ? EIO : ENOMEM) : fread(buf, 1, (size_t)n, f) != (size_t)n ? EIO : 0;
    fclose(f);
    if (e) {
        free(buf);
        set_err(err, "%s: cannot read: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    buf[n] = 0;
    if (bytes) *bytes = (size_t)n;
    return buf;
}

char *fs_read_all(const char *path, size_t *bytes) { return fs_read_file(path, bytes, NULL); }

int fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int fs_lock_dir_held(const char *dir, int fd, char *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", dir);
    struct stat held, now;
    if (fstat(fd, &held)) return set_err(err, "%s: cannot stat the held run lock: %s", path, strerror(errno));
    if (stat(path, &now) || now.st_dev != held.st_dev || now.st_ino != held.st_ino)
        return set_err(err, "%s: the run directory was removed or replaced while this run was running (its lock is not "
                       "the file this run holds); nothing more is written there: the run stops here", path);
    return 0;
}

int fs_lock_dir(const char *dir, int *fd_out, char *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", dir);
    *fd_out = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return set_err(err, "%s: cannot open the run lock: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            return set_err(err, "%s: the run directory is in use by pid %s (another ./train of this run.name); wait for "
                           "it to end or use another run.name", path, pid[0] ? pid : "?"), -2;
        return set_err(err, "%s: cannot lock: %s", path, strerror(e));
    }
    /* ours (a stale lock of a dead process is released by the kernel): record our pid */
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, pid, (size_t)len, 0) != len) {
        close(fd);
        return set_err(err, "%s: cannot write the run lock: %s", path, strerror(errno));
    }
    *fd_out = fd;
    return 0;
}
