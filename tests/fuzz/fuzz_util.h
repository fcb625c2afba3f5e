/* Helpers shared by the libFuzzer harnesses tests/fuzz/fuzz_*.c (see docs/fuzzing.md).
 *
 * The parsers under test read files (shards are memory-mapped, inih and cJSON callers read
 * by path), so each input is written to a scratch file and the real entry point is called on
 * that path. Scratch files live in one directory per process, under $FUZZ_TMPDIR, else
 * /dev/shm (memory, no disk traffic), else $TMPDIR or /tmp; it is removed at exit. */
#ifndef PHASELAB_FUZZ_UTIL_H
#define PHASELAB_FUZZ_UTIL_H
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir[512];

static void fuzz_remove_dir(void) {
    char cmd[600];
    if (!fuzz_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* The per-process scratch directory (created on first use). */
static const char *fuzz_scratch_dir(void) {
    if (fuzz_dir[0]) return fuzz_dir;
    const char *base = getenv("FUZZ_TMPDIR");
    struct stat st;
    if (!base && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    if (!base) base = getenv("TMPDIR");
    if (!base) base = "/tmp";
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/phaselab-fuzz-%d", base, (int)getpid());
    if (mkdir(fuzz_dir, 0700) != 0 && access(fuzz_dir, W_OK) != 0) {
        perror(fuzz_dir);
        abort();
    }
    atexit(fuzz_remove_dir);
    return fuzz_dir;
}

/* Writes data to scratch file `name` (replacing it) and returns its path (static storage, one
 * per name slot: callers use distinct names for files that must coexist). */
static const char *fuzz_write_file(const char *name, const void *data, size_t size) {
    static char paths[4][1024];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 1024, "%s/%s", fuzz_scratch_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); abort(); }
    const char *p = (const char *)data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n <= 0) { perror(path); abort(); }
        p += n;
        size -= (size_t)n;
    }
    close(fd);
    return path;
}

/* Reads a little-endian u32 (input parameters taken from the fuzz data). */
static inline uint32_t fuzz_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif
