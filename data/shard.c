/* Token shards: reader (validate + mmap) and atomic writer. Format in data/shard.h.
 *
 * Reader. shard_open reads only the 1024-byte header (pread), validates it field by field
 * (magic @0, header size @8 == 1024, bytes per token @12 == 4, end-of-text id @20 below the
 * vocabulary size @16, fingerprint @32 printable ASCII then NULs) and the file length
 * (exactly 1024 + 4 * n_tokens bytes: a truncated or over-long file is an error that gives
 * both sizes), then maps the whole file read-only and closes the descriptor, so that a
 * dataset of thousands of shards holds mappings, not file descriptors. All sizes and offsets
 * are 64-bit; token i lives at byte offset 1024 + 4*i. Bytes 96..1023 are reserved (written
 * as zero) and not checked, so that a later format version can use them.
 * A file truncated in place while mapped turns reads past its new end into SIGBUS: every read
 * of the mapping here (shard_check_tokens, shard_read_tokens) runs under a SIGBUS guard (a
 * per-thread sigsetjmp target the handler jumps to) and reports the file instead of dying.
 *
 * Writer. Tokens are buffered and streamed to PATH.tmp behind a header whose n_tokens is 0;
 * shard_writer_close flushes, patches n_tokens at byte 24, fsyncs the file, renames it to
 * PATH and fsyncs the directory (the crash-safe writer of common/fsutil.h). A writer killed half-way leaves only PATH.tmp (whose
 * n_tokens of 0 no reader accepts against its length). */
#include "data/shard.h"
#include "common/errors.h"
#include "common/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data/shard.c maps little-endian tokens directly and needs a little-endian host"
#endif

enum {
    HDR_MAGIC = 0, HDR_HEADER_SIZE = 8, HDR_BYTES_PER_TOKEN = 12, HDR_VOCAB = 16, HDR_EOT = 20,
    HDR_N_TOKENS = 24, HDR_FINGERPRINT = 32
};
#define SHARD_BYTES_PER_TOKEN 4u

static uint32_t load_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t load_u64(const unsigned char *p) {
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}
static void store_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void store_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes the 8 magic bytes into a printable form for error messages ("PHL\x00..."). */
static void describe_magic(const unsigned char *m, char out[40]) {
    char *o = out;
    for (int i = 0; i < 8; i++) {
        if (m[i] >= 32 && m[i] < 127 && m[i] != '"' && m[i] != '\\') *o++ = (char)m[i];
        else o += sprintf(o, "\\x%02x", m[i]);
    }
    *o = 0;
}

/* pread until n bytes or EOF; returns bytes read or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0) { if (errno == EINTR) continue; return -1; }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int shard_open(Shard *s, const char *path, char *err) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (strlen(path) >= sizeof s->path)
        return set_err(err, "%s: path longer than %zu bytes", path, sizeof s->path - 1);
    strcpy(s->path, path);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return set_err(err, "%s: cannot open token shard: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno; close(fd);
        return set_err(err, "%s: cannot stat token shard: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return set_err(err, "%s: not a regular file, expected a token shard", path);
    }
    uint64_t file_bytes = (uint64_t)st.st_size;
    unsigned char h[SHARD_HEADER_BYTES];
    if (file_bytes < SHARD_HEADER_BYTES) {
        close(fd);
        return set_err(err, "%s: file is %" PRIu64 " bytes, shorter than the %d-byte shard header",
                       path, file_bytes, SHARD_HEADER_BYTES);
    }
    if (pread_full(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        int e = errno; close(fd);
        return set_err(err, "%s: cannot read the %d-byte header: %s", path, SHARD_HEADER_BYTES,
                       strerror(e ? e : EIO));
    }
    int rc = -1;
    if (memcmp(h + HDR_MAGIC, SHARD_MAGIC, 8) != 0) {
        char m[40];
        describe_magic(h + HDR_MAGIC, m);
        set_err(err, "%s@%d: bad magic \"%s\", expected \"%s\" (not a token shard)", path,
                HDR_MAGIC, m, SHARD_MAGIC);
        goto fail;
    }
    uint32_t header_size = load_u32(h + HDR_HEADER_SIZE);
    if (header_size != SHARD_HEADER_BYTES) {
        set_err(err, "%s@%d: header size %" PRIu32 ", expected %d", path, HDR_HEADER_SIZE,
                header_size, SHARD_HEADER_BYTES);
        goto fail;
    }
    uint32_t bytes_per_token = load_u32(h + HDR_BYTES_PER_TOKEN);
    if (bytes_per_token != SHARD_BYTES_PER_TOKEN) {
        set_err(err, "%s@%d: %" PRIu32 " bytes per token, expected %u", path,
                HDR_BYTES_PER_TOKEN, bytes_per_token, SHARD_BYTES_PER_TOKEN);
        goto fail;
    }
    s->vocab_size = load_u32(h + HDR_VOCAB);
    if (s->vocab_size == 0) {
        set_err(err, "%s@%d: vocabulary size 0, expected a positive size", path, HDR_VOCAB);
        goto fail;
    }
    s->eot_id = load_u32(h + HDR_EOT);
    if (s->eot_id >= s->vocab_size) {
        set_err(err, "%s@%d: end-of-text id %" PRIu32 ", expected an id below the vocabulary "
                "size %" PRIu32, path, HDR_EOT, s->eot_id, s->vocab_size);
        goto fail;
    }
    s->n_tokens = load_u64(h + HDR_N_TOKENS);
    /* Fingerprint: printable ASCII, then only NULs. */
    {
        const unsigned char *f = h + HDR_FINGERPRINT;
        int len = 0;
        while (len < SHARD_FINGERPRINT_BYTES && f[len]) len++;
        for (int i = 0; i < SHARD_FINGERPRINT_BYTES; i++) {
            int bad = i < len ? (f[i] < 32 || f[i] > 126) : f[i] != 0;
            if (bad) {
                set_err(err, "%s@%d: byte 0x%02x in the tokenizer fingerprint, expected "
                        "printable ASCII padded with NULs", path, HDR_FINGERPRINT + i, f[i]);
                goto fail;
            }
        }
        memcpy(s->fingerprint, f, (size_t)len);
        s->fingerprint[len] = 0;
    }
    /* File length must be exactly header + tokens; guard the multiplication. */
    if (s->n_tokens > (UINT64_MAX - SHARD_HEADER_BYTES) / SHARD_BYTES_PER_TOKEN) {
        set_err(err, "%s@%d: n_tokens %" PRIu64 " is impossibly large (file is %" PRIu64 " bytes)",
                path, HDR_N_TOKENS, s->n_tokens, file_bytes);
        goto fail;
    }
    uint64_t expected = SHARD_HEADER_BYTES + SHARD_BYTES_PER_TOKEN * s->n_tokens;
    if (file_bytes != expected) {
        set_err(err, "%s: file is %" PRIu64 " bytes, expected %" PRIu64 " = %d-byte header + 4 * "
                "%" PRIu64 " tokens (n_tokens @%d): %s", path, file_bytes, expected,
                SHARD_HEADER_BYTES, s->n_tokens, HDR_N_TOKENS,
                file_bytes < expected ? "truncated" : "over-long (trailing bytes)");
        goto fail;
    }
    if ((uint64_t)(size_t)file_bytes != file_bytes) {
        set_err(err, "%s: %" PRIu64 " bytes do not fit this machine's address space", path,
                file_bytes);
        goto fail;
    }
    if (s->n_tokens > 0) {
        void *m = mmap(NULL, (size_t)file_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            set_err(err, "%s: cannot map %" PRIu64 " bytes: %s", path, file_bytes, strerror(errno));
            goto fail;
        }
        s->map = m;
        s->map_bytes = (size_t)file_bytes;
        s->tokens = (const uint32_t *)((const char *)m + SHARD_HEADER_BYTES);
    }
    rc = 0;
fail:
    close(fd);          /* the mapping outlives the descriptor */
    if (rc != 0) {
        s->map = NULL;
        s->tokens = NULL;
        s->map_bytes = 0;
    }
    return rc;
}

/* ---- SIGBUS guard for reads of a mapping ---- */
static _Thread_local sigjmp_buf *volatile bus_target;   /* set while this thread reads a mapping (volatile: the
                                                          * handler reads it; its stores must not be elided) */

static void on_sigbus(int sig) {
    if (bus_target) siglongjmp(*bus_target, 1);
    signal(sig, SIG_DFL);                             /* not ours: die as before */
    raise(sig);
}

static void install_bus_guard(void) {
    static int installed;
    if (installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    installed = 1;
}

static int shrank(const Shard *s, uint64_t index, char *err) {
    struct stat st;
    long long now = stat(s->path, &st) == 0 ? (long long)st.st_size : -1;
    return set_err(err, "%s@%" PRIu64 ": the file shrank while in use (now %lld bytes, expected %zu): it was "
                   "truncated or rewritten in place during the run", s->path,
                   (uint64_t)SHARD_HEADER_BYTES + SHARD_BYTES_PER_TOKEN * index, now, s->map_bytes);
}

static int bad_token(const Shard *s, uint64_t i, uint32_t t, uint32_t vocab_limit, char *err) {
    return set_err(err, "%s@%" PRIu64 ": token %" PRIu32 " (token index %" PRIu64
                   "), expected an id below the vocabulary size %" PRIu32,
                   s->path, (uint64_t)SHARD_HEADER_BYTES + SHARD_BYTES_PER_TOKEN * i, t, i, vocab_limit);
}

int shard_check_tokens(const Shard *s, uint64_t begin, uint64_t end, uint32_t vocab_limit,
                       char *err) {
    if (begin > end || end > s->n_tokens)
        return set_err(err, "%s: token range [%" PRIu64 ", %" PRIu64 ") outside the shard's %"
                       PRIu64 " tokens", s->path, begin, end, s->n_tokens);
    const uint32_t *t = s->tokens;
    volatile uint64_t i = begin;                      /* read after a longjmp */
    sigjmp_buf target;
    install_bus_guard();
    if (sigsetjmp(target, 1)) { bus_target = NULL; return shrank(s, i, err); }
    bus_target = &target;
    for (; i < end; i++) {
        if (t[i] >= vocab_limit) {
            uint32_t bad = t[i];
            bus_target = NULL;
            return bad_token(s, i, bad, vocab_limit, err);
        }
    }
    bus_target = NULL;
    return 0;
}

int shard_read_tokens(const Shard *s, uint64_t begin, uint64_t end, uint32_t vocab_limit, uint32_t *out,
                      char *err) {
    if (begin > end || end > s->n_tokens)
        return set_err(err, "%s: token range [%" PRIu64 ", %" PRIu64 ") outside the shard's %"
                       PRIu64 " tokens", s->path, begin, end, s->n_tokens);
    sigjmp_buf target;
    install_bus_guard();
    if (sigsetjmp(target, 1)) { bus_target = NULL; return shrank(s, begin, err); }
    bus_target = &target;
    memcpy(out, s->tokens + begin, (size_t)(end - begin) * sizeof *out);
    bus_target = NULL;
    for (uint64_t i = begin; i < end; i++)
        if (out[i - begin] >= vocab_limit) return bad_token(s, i, out[i - begin], vocab_limit, err);
    return 0;
}

void shard_close(Shard *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->map_bytes);
    if (s->fd >= 0) close(s->fd);
    s->map = NULL;
    s->tokens = NULL;
    s->map_bytes = 0;
    s->n_tokens = 0;
    s->fd = -1;
}

/* ---------------------------------------------------------------- writer */

#define WRITER_BUFFER_TOKENS (1u << 18)   /* 1 MiB of tokens between write() calls */

struct ShardWriter {
    AtomicFile file;                      /* PATH.tmp until shard_writer_close publishes it */
    uint32_t vocab_size;
    uint64_t n_tokens;                    /* appended so far (written + buffered) */
    size_t n_buffered;
    uint32_t *buffer;                     /* [WRITER_BUFFER_TOKENS] */
};

ShardWriter *shard_writer_open(const char *path, uint32_t vocab_size, uint32_t eot_id,
                               const char *fingerprint, char *err) {
    if (strlen(path) >= 1024) { set_err(err, "%s: path longer than 1023 bytes", path); return NULL; }
    if (vocab_size == 0 || eot_id >= vocab_size) {
        set_err(err, "%s: end-of-text id %" PRIu32 " and vocabulary size %" PRIu32 ", expected "
                "an id below a positive size", path, eot_id, vocab_size);
        return NULL;
    }
    size_t fp_len = fingerprint ? strlen(fingerprint) : 0;
    if (fp_len > SHARD_FINGERPRINT_BYTES) {
        set_err(err, "%s: tokenizer fingerprint \"%s\" is %zu bytes, expected at most %d", path,
                fingerprint, fp_len, SHARD_FINGERPRINT_BYTES);
        return NULL;
    }
    for (size_t i = 0; i < fp_len; i++)
        if (fingerprint[i] < 32 || fingerprint[i] > 126) {
            set_err(err, "%s: tokenizer fingerprint has byte 0x%02x, expected printable ASCII",
                    path, (unsigned char)fingerprint[i]);
            return NULL;
        }
    ShardWriter *w = calloc(1, sizeof *w);
    if (!w || !(w->buffer = malloc(WRITER_BUFFER_TOKENS * sizeof(uint32_t)))) {
        free(w);
        set_err(err, "%s: out of memory for the shard writer", path);
        return NULL;
    }
    w->vocab_size = vocab_size;
    if (fs_atomic_open(&w->file, path, err)) {
        free(w->buffer); free(w);
        return NULL;
    }
    unsigned char h[SHARD_HEADER_BYTES] = {0};
    memcpy(h + HDR_MAGIC, SHARD_MAGIC, 8);
    store_u32(h + HDR_HEADER_SIZE, SHARD_HEADER_BYTES);
    store_u32(h + HDR_BYTES_PER_TOKEN, SHARD_BYTES_PER_TOKEN);
    store_u32(h + HDR_VOCAB, vocab_size);
    store_u32(h + HDR_EOT, eot_id);
    store_u64(h + HDR_N_TOKENS, 0);       /* patched by shard_writer_close */
    if (fp_len) memcpy(h + HDR_FINGERPRINT, fingerprint, fp_len);
    if (fs_atomic_write(&w->file, h, sizeof h, err) != 0) {
        set_err(err, "%s: cannot write the header: %s", w->file.tmp, strerror(errno));
        shard_writer_abort(w);
        return NULL;
    }
    return w;
}

static int writer_flush(ShardWriter *w, char *err) {
    if (w->n_buffered == 0) return 0;
    if (fs_atomic_write(&w->file, w->buffer, w->n_buffered * sizeof(uint32_t), err) != 0)
        return set_err(err, "%s: write failed after %" PRIu64 " tokens: %s", w->file.tmp,
                       w->n_tokens - w->n_buffered, strerror(errno));
    w->n_buffered = 0;
    return 0;
}

int shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, char *err) {
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= w->vocab_size)
            return set_err(err, "%s: token %" PRIu32 " at token index %" PRIu64 ", expected an id "
                           "below the vocabulary size %" PRIu32, w->file.tmp, tokens[i],
                           w->n_tokens + i, w->vocab_size);
    }
    while (n > 0) {
        size_t room = WRITER_BUFFER_TOKENS - w->n_buffered;
        size_t take = n < room ? n : room;
        memcpy(w->buffer + w->n_buffered, tokens, take * sizeof(uint32_t));
        w->n_buffered += take;
        w->n_tokens += take;
        tokens += take;
        n -= take;
        if (w->n_buffered == WRITER_BUFFER_TOKENS && writer_flush(w, err) != 0) return -1;
    }
    return 0;
}

uint64_t shard_writer_count(const ShardWriter *w) { return w->n_tokens; }

int shard_writer_close(ShardWriter *w, char *err) {
    if (writer_flush(w, err) != 0) { shard_writer_abort(w); return -1; }
    unsigned char n_bytes[8];
    store_u64(n_bytes, w->n_tokens);
    if (pwrite(w->file.fd, n_bytes, 8, HDR_N_TOKENS) != 8) {
        set_err(err, "%s@%d: cannot patch n_tokens: %s", w->file.tmp, HDR_N_TOKENS, strerror(errno));
        shard_writer_abort(w);
        return -1;
    }
    int rc = fs_atomic_commit(&w->file, err);
    free(w->buffer);
    free(w);
    return rc;
}

void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    fs_atomic_abort(&w->file);
    free(w->buffer);
    free(w);
}
