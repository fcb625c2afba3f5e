/* Filesystem helpers, the project's one copy of each: mkdir -p, fsync of a file or directory,
 * recursive removal, the crash-safe writer (PATH.tmp, fsync, rename, fsync the directory), the
 * whole-file reader, the run-directory lock. */
#ifndef PHASELAB_FSUTIL_H
#define PHASELAB_FSUTIL_H
#include <stddef.h>
int fs_mkdirs(const char *path, char *err);
int fs_fsync_path(const char *path);          /* file or directory */
int fs_remove_tree(const char *path);
/* The one crash-safe writer. A file is written to PATH.tmp (created with mode 0666 minus the
 * umask, truncated), and fs_atomic_commit publishes it: fsync the file, close it, rename
 * PATH.tmp over PATH, fsync PATH's directory. Until the commit, PATH is untouched (a crash
 * leaves at most PATH.tmp); fs_atomic_abort closes and removes PATH.tmp. Every function that
 * fails has already aborted (PATH.tmp removed) and filled err naming the file; errno is kept. */
typedef struct {
    int fd;                 /* of PATH.tmp; -1 once committed or aborted */
    char path[4096];        /* PATH */
    char tmp[4100];         /* PATH.tmp */
} AtomicFile;
int fs_atomic_open(AtomicFile *a, const char *path, char *err);
/* Appends n bytes (all of them: short writes are retried). */
int fs_atomic_write(AtomicFile *a, const void *data, size_t n, char *err);
int fs_atomic_commit(AtomicFile *a, char *err);
void fs_atomic_abort(AtomicFile *a);
/* Open, one write, commit: a whole file from memory. */
int fs_write_atomic(const char *path, const void *data, size_t bytes, char *err);
/* rename(from, to), then fsync to's directory so that the rename is durable: how a finished
 * file or directory (a checkpoint) is published. */
int fs_rename_durable(const char *from, const char *to, char *err);
/* fsyncs the directory holding path ("." when path has no '/'). */
int fs_fsync_parent(const char *path, char *err);
/* The one whole-file reader: a malloc'd NUL-terminated buffer (*bytes, when not NULL, gets the
 * length, without the NUL); NULL on failure, with errno set (ENOENT for a missing file, EISDIR
 * for a directory, the error of fopen/fread otherwise) and, when err is not NULL, err filled: "PATH: cannot open:
 * WHY" or "PATH: cannot read: WHY". */
char *fs_read_file(const char *path, size_t *bytes, char *err);
/* fs_read_file without a message (callers that word their own from errno). */
char *fs_read_all(const char *path, size_t *bytes);
int fs_exists(const char *path);
/* Locks DIR/lock (flock, exclusive, held until *fd_out is closed or the process ends) and
 * writes this pid into it. Returns 0, -2 when another live process holds it (err names its
 * pid, as read from the file), -1 on other errors. */
int fs_lock_dir(const char *dir, int *fd_out, char *err);
/* 0 when DIR/lock is still the file fd (from fs_lock_dir) locks: the same device and inode; -1 with
 * err when the directory or its lock was removed or replaced since (a user's rm -r of a running
 * run: writing on would recreate a stub directory beside the lost one). */
int fs_lock_dir_held(const char *dir, int fd, char *err);
#endif
