/* Token shard reader and writer (data/shard.c): round trip through the writer checked against
 * the byte layout of data/shard.h built by hand here, the atomic-rename behaviour of a killed
 * writer, every header corruption the reader must name (file and byte offset), tokens beyond
 * the vocabulary, missing files and globs, and a sparse shard of more than 2^32 tokens (16 GiB)
 * whose tokens must be read at 64-bit offsets. Scratch files live in build/scratch/test_shard/. */
#include "data/loader.h"
#include "data/shard.h"
#include "common/errors.h"
#include "tests/check.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIR "build/scratch/test_shard"

static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i); }
static uint32_t get_u32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* A header laid out by hand from data/shard.h. */
static void make_header(unsigned char h[1024], uint32_t vocab, uint32_t eot, uint64_t n, const char *fp) {
    memset(h, 0, 1024);
    memcpy(h, "PHLTOKv1", 8);
    put_u32(h + 8, 1024);
    put_u32(h + 12, 4);
    put_u32(h + 16, vocab);
    put_u32(h + 20, eot);
    put_u64(h + 24, n);
    memcpy(h + 32, fp, strlen(fp));
}

/* Writes header + tokens (little-endian) + extra trailing bytes, without the code under test. */
static void write_raw(const char *path, const unsigned char h[1024], const uint32_t *tok, size_t n,
                      size_t extra_bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fwrite(h, 1, 1024, f);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[4];
        put_u32(b, tok[i]);
        fwrite(b, 1, 4, f);
    }
    for (size_t i = 0; i < extra_bytes; i++) fputc(0, f);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len ? *len : 1);
    if (fread(b, 1, *len, f) != *len) { free(b); b = NULL; }
    fclose(f);
    return b;
}

static int exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

/* Expects shard_open to fail with every needle in the message. */
static void expect_open_error(const char *name, const char *path, const char *n1, const char *n2,
                              const char *n3) {
    Shard s;
    char err[ERR_LEN] = "";
    int rc = shard_open(&s, path, err);
    if (rc == 0) shard_close(&s);
    int ok = rc != 0 && strstr(err, path) && strstr(err, n1) && (!n2 || strstr(err, n2)) &&
             (!n3 || strstr(err, n3));
    check(ok, name, "rc %d, message \"%s\" should name %s and contain \"%s\" \"%s\" \"%s\"", rc,
          err, path, n1, n2 ? n2 : "", n3 ? n3 : "");
}

static void test_round_trip(void) {
    const char *path = DIR "/round.bin";
    enum { N = 300001 };                       /* crosses the writer's 2^18-token buffer */
    uint32_t *tok = malloc(N * sizeof *tok);
    for (uint32_t i = 0; i < N; i++) tok[i] = (i * 2654435761u) % 50000u;
    char err[ERR_LEN] = "";
    ShardWriter *w = shard_writer_open(path, 50000, 7, "bytes", err);
    int ok = w != NULL;
    size_t parts[] = {0, 1, 5, 262140, 30000, N - 1 - 5 - 262140 - 30000};
    size_t at = 0;
    for (int p = 0; ok && p < 6; p++) {
        ok = shard_writer_append(w, tok + at, parts[p], err) == 0;
        at += parts[p];
    }
    ok = ok && shard_writer_count(w) == N && !exists(path) && exists(DIR "/round.bin.tmp");
    ok = ok && shard_writer_close(w, err) == 0;
    check(ok, "writer: appends, renames on close", "%s", err);
    check(!exists(DIR "/round.bin.tmp") && exists(path), "writer: no .tmp left after close", "");

    size_t len = 0;
    unsigned char *b = read_all(path, &len);
    int layout = b && len == 1024 + 4ull * N && memcmp(b, "PHLTOKv1", 8) == 0 &&
                 get_u32(b + 8) == 1024 && get_u32(b + 12) == 4 && get_u32(b + 16) == 50000 &&
                 get_u32(b + 20) == 7 && get_u32(b + 24) == N && get_u32(b + 28) == 0 &&
                 memcmp(b + 32, "bytes", 6) == 0;
    for (int i = 37; layout && i < 1024; i++) layout = b[i] == 0;
    for (size_t i = 0; layout && i < N; i++) layout = get_u32(b + 1024 + 4 * i) == tok[i];
    check(layout, "writer: bytes match the data/shard.h layout", "file of %zu bytes differs", len);
    free(b);

    Shard s;
    ok = shard_open(&s, path, err) == 0;
    ok = ok && s.n_tokens == N && s.vocab_size == 50000 && s.eot_id == 7 &&
         strcmp(s.fingerprint, "bytes") == 0 && memcmp(s.tokens, tok, N * sizeof *tok) == 0;
    check(ok, "reader: round trip of header and tokens", "%s", err);
    check(ok && s.fd < 0, "reader: descriptor closed after mapping", "fd %d", ok ? s.fd : -2);
    ok = ok && shard_check_tokens(&s, 0, N, 50000, err) == 0;
    check(ok, "reader: all tokens below the vocabulary pass", "%s", err);
    shard_close(&s);

    /* empty shard */
    w = shard_writer_open(DIR "/empty.bin", 10, 0, "", err);
    ok = w && shard_writer_close(w, err) == 0 && shard_open(&s, DIR "/empty.bin", err) == 0;
    ok = ok && s.n_tokens == 0 && s.tokens == NULL;
    check(ok, "reader: empty shard opens with no tokens", "%s", err);
    if (ok) shard_close(&s);
    free(tok);
}

static void test_writer_failures(void) {
    char err[ERR_LEN] = "";
    uint32_t bad[3] = {1, 2, 99};
    ShardWriter *w = shard_writer_open(DIR "/bad_tok.bin", 50, 0, "x", err);
    int rc = w ? shard_writer_append(w, bad, 3, err) : 0;
    check(w && rc != 0 && strstr(err, "99") && strstr(err, "index 2"),
          "writer: token >= vocabulary rejected", "rc %d \"%s\"", rc, err);
    if (w) shard_writer_abort(w);
    check(!exists(DIR "/bad_tok.bin") && !exists(DIR "/bad_tok.bin.tmp"),
          "writer: abort removes PATH.tmp", "");

    char long_fp[80];
    memset(long_fp, 'a', 79);
    long_fp[79] = 0;
    w = shard_writer_open(DIR "/fp.bin", 50, 0, long_fp, err);
    check(!w && strstr(err, "fingerprint"), "writer: fingerprint over 64 bytes rejected", "\"%s\"", err);
    if (w) shard_writer_abort(w);

    /* A writer killed before close leaves only PATH.tmp, which no reader accepts. */
    pid_t pid = fork();
    if (pid == 0) {
        char e[ERR_LEN];
        ShardWriter *kw = shard_writer_open(DIR "/killed.bin", 50, 0, "x", e);
        uint32_t t[300000] = {0};
        if (kw) shard_writer_append(kw, t, 300000, e);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    Shard s;
    rc = shard_open(&s, DIR "/killed.bin.tmp", err);
    if (rc == 0) shard_close(&s);
    check(!exists(DIR "/killed.bin") && exists(DIR "/killed.bin.tmp") && rc != 0 &&
          strstr(err, "over-long"), "writer: killed writer leaves no complete-looking file",
          "rc %d \"%s\"", rc, err);
}

static void test_corruptions(void) {
    unsigned char h[1024];
    uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)i;

    make_header(h, 256, 0, 100, "t");
    memcpy(h, "PHLTOKv2", 8);
    write_raw(DIR "/magic.bin", h, tok, 100, 0);
    expect_open_error("reader: wrong magic", DIR "/magic.bin", "@0", "PHLTOKv2", "PHLTOKv1");

    make_header(h, 256, 0, 100, "t");
    put_u32(h + 8, 512);
    write_raw(DIR "/hsize.bin", h, tok, 100, 0);
    expect_open_error("reader: wrong header size", DIR "/hsize.bin", "@8", "512", "1024");

    make_header(h, 256, 0, 100, "t");
    put_u32(h + 12, 2);
    write_raw(DIR "/bpt.bin", h, tok, 100, 0);
    expect_open_error("reader: wrong bytes per token", DIR "/bpt.bin", "@12", "2 bytes per token", NULL);

    make_header(h, 256, 300, 100, "t");
    write_raw(DIR "/eot.bin", h, tok, 100, 0);
    expect_open_error("reader: end-of-text id beyond the vocabulary", DIR "/eot.bin", "@20", "300", NULL);

    make_header(h, 256, 0, 100, "t");
    h[40] = 0x07;
    write_raw(DIR "/fp.bin", h, tok, 100, 0);
    expect_open_error("reader: non-ASCII fingerprint", DIR "/fp.bin", "@40", "fingerprint", NULL);

    /* 100 tokens promised, 99 present: 1420 bytes instead of 1024 + 400 = 1424. */
    make_header(h, 256, 0, 100, "t");
    write_raw(DIR "/trunc.bin", h, tok, 99, 0);
    expect_open_error("reader: truncated file", DIR "/trunc.bin", "1420 bytes", "expected 1424", "truncated");

    make_header(h, 256, 0, 100, "t");
    write_raw(DIR "/long.bin", h, tok, 100, 3);
    expect_open_error("reader: over-long file", DIR "/long.bin", "1427 bytes", "expected 1424", "over-long");

    write_raw(DIR "/short.bin", h, tok, 0, 0);
    truncate(DIR "/short.bin", 100);
    expect_open_error("reader: file shorter than the header", DIR "/short.bin", "100 bytes", "1024", NULL);

    expect_open_error("reader: missing file", DIR "/does_not_exist.bin", "No such file", NULL, NULL);
    expect_open_error("reader: a directory is not a shard", DIR, "not a regular file", NULL, NULL);

    /* token 37 is 300 >= 256: byte offset 1024 + 4 * 37 = 1172 */
    tok[37] = 300;
    make_header(h, 256, 0, 100, "t");
    write_raw(DIR "/vocab.bin", h, tok, 100, 0);
    Shard s;
    char err[ERR_LEN] = "";
    int ok = shard_open(&s, DIR "/vocab.bin", err) == 0;
    check(ok, "reader: header of a shard with a bad token is valid", "%s", err);
    if (ok) {
        int rc = shard_check_tokens(&s, 0, 100, 256, err);
        check(rc != 0 && strstr(err, DIR "/vocab.bin@1172:") && strstr(err, "300"),
              "reader: token >= vocabulary named by file and byte offset", "rc %d \"%s\"", rc, err);
        rc = shard_check_tokens(&s, 38, 100, 256, err);
        check(rc == 0, "reader: range after the bad token passes", "\"%s\"", err);
        rc = shard_check_tokens(&s, 0, 100, 301, err);
        check(rc == 0, "reader: larger vocabulary accepts the token", "\"%s\"", err);
        rc = shard_check_tokens(&s, 90, 101, 301, err);
        check(rc != 0 && strstr(err, "101"), "reader: range past the end rejected", "\"%s\"", err);
        shard_close(&s);
    }

    TrainLoader *L = NULL;
    int rc = train_loader_open(&L, DIR "/nothing_*.bin", 4, 256, 1, err);
    check(rc != 0 && L == NULL && strstr(err, DIR "/nothing_*.bin") && strstr(err, "no file"),
          "loader: empty glob is an error naming the glob", "rc %d \"%s\"", rc, err);
    if (L) train_loader_close(L);
}

/* A sparse shard of 2^32 + 4097 tokens (16 GiB + 17 KiB, a few pages on disk): tokens written
 * beyond byte 2^32 and beyond token index 2^32 must read back through the mapping, and the
 * token count itself needs the header's full 64 bits. */
static void test_sparse_large(void) {
    const char *path = DIR "/sparse.bin";
    const uint64_t n = (1ull << 32) + 4097;     /* n - 1 is a multiple of T = 4096 */
    const uint64_t bytes = 1024 + 4 * n;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        if (fd >= 0) close(fd);
        unlink(path);
        check_skip("reader: sparse shard over 16 GiB", "filesystem refused a 16 GiB sparse file");
        return;
    }
    unsigned char h[1024];
    make_header(h, 1u << 20, 0, n, "sparse");
    struct { uint64_t index; uint32_t value; } marks[] = {
        {(1ull << 30) - 300, 11111}, /* byte offset below 2^32 */
        {(1ull << 30) + 5, 22222},   /* byte offset 2^32 + 1044 */
        {(1ull << 32) + 5, 44444},   /* token index beyond 2^32 */
        {n - 2, 333},
        {n - 1, 5000},
    };
    int ok = pwrite(fd, h, 1024, 0) == 1024;
    for (int i = 0; i < 5; i++) {
        unsigned char b[4];
        put_u32(b, marks[i].value);
        ok = ok && pwrite(fd, b, 4, (off_t)(1024 + 4 * marks[i].index)) == 4;
    }
    close(fd);
    check(ok, "reader: sparse shard written", "pwrite failed");

    Shard s;
    char err[ERR_LEN] = "";
    ok = ok && shard_open(&s, path, err) == 0;
    check(ok && s.n_tokens == n && s.map_bytes == bytes, "reader: sparse shard of 2^32 + 4097 tokens opens",
          "%s", err);
    if (ok) {
        int good = 1;
        for (int i = 0; i < 5; i++) good = good && s.tokens[marks[i].index] == marks[i].value;
        good = good && s.tokens[(1ull << 30) + 6] == 0 && s.tokens[n - 3] == 0;
        check(good, "reader: tokens at 64-bit offsets read back", "values differ");
        int rc = shard_check_tokens(&s, n - 10, n, 1000, err);
        char want[128];
        snprintf(want, sizeof want, "sparse.bin@%" PRIu64 ":", 1024 + 4 * (n - 1));
        check(rc != 0 && strstr(err, want), "reader: bad token beyond 16 GiB named with its 64-bit offset",
              "rc %d \"%s\", expected \"%s\"", rc, err, want);
        shard_close(&s);

        /* The loader's last window of this file ends at token n - 1. */
        TrainLoader *L = NULL;
        const int T = 4096;
        rc = train_loader_open(&L, path, T, 1u << 20, 3, err);
        uint64_t expect_windows = (n - 1) / T;
        int32_t *out = malloc((T + 1) * sizeof *out);
        int lok = rc == 0 && train_loader_n_windows(L) == expect_windows &&
                  train_loader_window(L, expect_windows - 1, out, err) == 0 &&
                  (uint64_t)(expect_windows - 1) * T + T == n - 1 &&
                  out[T] == 5000 && out[T - 1] == 333;
        check(lok, "loader: last window of a 16 GiB shard", "rc %d \"%s\"", rc, err);
        free(out);
        train_loader_close(L);
    }
    unlink(path);
    check(!exists(path), "reader: sparse shard deleted", "");
}

int main(void) {
    system("rm -rf " DIR " && mkdir -p " DIR);
    test_round_trip();
    test_writer_failures();
    test_corruptions();
    test_sparse_large();
    system("rm -rf " DIR);
    return check_exit_code();
}
