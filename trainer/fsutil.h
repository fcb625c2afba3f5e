/* Small filesystem helpers for crash-safe output: mkdir -p, fsync of a file or directory,
 * recursive removal, atomic whole-file writes (PATH.tmp, fsync, rename, fsync the directory). */
#ifndef PHASELAB_FSUTIL_H
#define PHASELAB_FSUTIL_H
#include <stddef.h>
int fs_mkdirs(const char *path, char *err);
int fs_fsync_path(const char *path);          /* file or directory */
int fs_remove_tree(const char *path);
int fs_write_atomic(const char *path, const void *data, size_t bytes, char *err);
/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on failure. */
char *fs_read_all(const char *path, size_t *bytes);
int fs_exists(const char *path);
#endif
