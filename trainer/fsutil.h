/* Small filesystem helpers for crash-safe output: mkdir -p, fsync of a file or directory,
 * recursive removal, atomic whole-file writes (PATH.tmp, fsync, rename, fsync the directory),
 * the run-directory lock. */
#ifndef PHASELAB_FSUTIL_H
#define PHASELAB_FSUTIL_H
#include <stddef.h>
int fs_mkdirs(const char *path, char *err);
int fs_fsync_path(const char *path);          /* file or directory */
int fs_remove_tree(const char *path);
/* The one crash-safe writer: PATH.tmp, fsync, rename over PATH, fsync the directory. */
int fs_write_atomic(const char *path, const void *data, size_t bytes, char *err);
/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on failure, with errno set
 * (ENOENT for a missing file). The one reader of whole state/config files. */
char *fs_read_all(const char *path, size_t *bytes);
int fs_exists(const char *path);
/* Locks DIR/lock (flock, exclusive, held until *fd_out is closed or the process ends) and
 * writes this pid into it. Returns 0, -2 when another live process holds it (err names its
 * pid, as read from the file), -1 on other errors. */
int fs_lock_dir(const char *dir, int *fd_out, char *err);
#endif
