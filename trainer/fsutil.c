/* Filesystem helpers (see trainer/fsutil.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trainer/fsutil.h"
#include "model/errors.h"

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

int fs_write_atomic(const char *path, const void *data, size_t bytes, char *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return set_err(err, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, bytes, f) == bytes && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f)) ok = 0;
    if (!ok) { unlink(tmp); return set_err(err, "%s: write failed: %s", tmp, strerror(errno)); }
    if (rename(tmp, path)) { unlink(tmp); return set_err(err, "%s: cannot rename into place: %s", path, strerror(errno)); }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) { *slash = 0; fs_fsync_path(dir); }
    return 0;
}

char *fs_read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;                               /* errno from fopen (ENOENT, ...) */
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf) { int e = n < 0 ? EIO : ENOMEM; fclose(f); errno = e; return NULL; }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); fclose(f); errno = EIO; return NULL; }
    buf[n] = 0;
    fclose(f);
    if (bytes) *bytes = (size_t)n;
    return buf;
}

int fs_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
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
