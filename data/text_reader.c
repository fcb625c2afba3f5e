/* Streaming corpus reader (format and record rules in data/text_reader.h).
 *
 * Layers: a Stream gives decompressed bytes of one file (plain read, zlib inflate with the gzip
 * wrapper only, or zstd ZSTD_decompressStream, over 128 KiB input blocks; compressed input is
 * read strictly: not empty, nothing but complete gzip members / zstd frames; or a .parquet file's
 * column as JSON lines from tools/parquet-text through a pipe, data/parquet_stream.h); the reader keeps one buffer holding the
 * current record from `start` to `end` (compacted and refilled as records are consumed, grown
 * up to max_record + READ_CHUNK) and cuts records out of it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>
#include "data/text_reader.h"
#include "data/parquet_stream.h"
#include "common/errors.h"

#define READ_CHUNK (1u << 20)
#define ZSTD_IN (1u << 17)

typedef enum { STREAM_PLAIN, STREAM_GZ, STREAM_ZSTD, STREAM_PARQUET } StreamKind;

/* where a gzip stream is: before its first member, inside a member, or just after one */
typedef enum { GZ_START, GZ_MEMBER, GZ_BETWEEN } GzState;

typedef struct {
    StreamKind kind;
    FILE *f;
    z_stream zs;                /* gzip: inflate, gzip wrapper only (no zlib, raw or plain text) */
    int zs_init;
    GzState gz_state;
    ZSTD_DCtx *zd;
    char *zin;                  /* compressed input block (gzip and zstd) */
    ZSTD_inBuffer in;
    size_t zret;                /* last ZSTD_decompressStream result (0 = frame complete) */
    pid_t child;                /* parquet: the reader process until it was waited for, else 0 */
    uint64_t disk_pos;
} Stream;

struct TextReader {
    char *const *paths;
    int n_paths;
    InputKind *kinds;
    StreamKind *stream_kinds;
    uint64_t *disk_sizes;
    uint64_t disk_total, disk_done;
    TxtMode mode;
    size_t max_record;
    char field[256];            /* parquet: the column read (text_reader_set_field; default "text") */
    int file;                   /* current file index; -1 before the first */
    int open;
    Stream s;
    int eof;
    char *buf;
    size_t cap, start, end;     /* buf[start, end) holds unconsumed bytes */
    uint64_t line, offset;      /* line and decompressed offset of buf[start] */
    int continuing;             /* TXT: inside a document split into pieces */
    int file_doc_done;          /* TXT per file: this file's document was returned */
};

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int classify(const char *path, InputKind *kind, StreamKind *sk) {
    size_t n = strlen(path);
    *sk = STREAM_PLAIN;
    if (ends_with(path, n, ".parquet")) { *sk = STREAM_PARQUET; *kind = INPUT_JSONL; return 0; }
    if (ends_with(path, n, ".gz")) { *sk = STREAM_GZ; n -= 3; }
    else if (ends_with(path, n, ".zst")) { *sk = STREAM_ZSTD; n -= 4; }
    if (ends_with(path, n, ".jsonl") || ends_with(path, n, ".ndjson") || ends_with(path, n, ".json")) *kind = INPUT_JSONL;
    else if (ends_with(path, n, ".txt")) *kind = INPUT_TXT;
    else return -1;
    return 0;
}

TextReader *text_reader_open(char *const *paths, int n_paths, TxtMode mode, size_t max_record, char *err) {
    TextReader *r = calloc(1, sizeof *r);
    if (!r) { set_err(err, "phaselab: reader: out of memory"); return NULL; }
    r->paths = paths;
    r->n_paths = n_paths;
    r->mode = mode;
    r->max_record = max_record;
    snprintf(r->field, sizeof r->field, "text");
    r->file = -1;
    r->kinds = calloc((size_t)n_paths + 1, sizeof *r->kinds);
    r->stream_kinds = calloc((size_t)n_paths + 1, sizeof *r->stream_kinds);
    r->disk_sizes = calloc((size_t)n_paths + 1, sizeof *r->disk_sizes);
    r->cap = READ_CHUNK * 2;
    r->buf = malloc(r->cap);
    if (!r->kinds || !r->stream_kinds || !r->disk_sizes || !r->buf) {
        text_reader_close(r);
        set_err(err, "phaselab: reader: out of memory");
        return NULL;
    }
    for (int i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            set_err(err, "phaselab: %s: %s", paths[i], strerror(errno));
            text_reader_close(r);
            return NULL;
        }
        if (S_ISDIR(st.st_mode)) {   /* a glob over a directory matches its subdirectories too */
            set_err(err, "phaselab: %s: is a directory (expected a file; for the files in it give a quoted glob, "
                    "such as --input '%s/*.txt')", paths[i], paths[i]);
            text_reader_close(r);
            return NULL;
        }
        if (classify(paths[i], &r->kinds[i], &r->stream_kinds[i])) {
            set_err(err, "phaselab: %s: unknown input type (expected .txt, .jsonl, .ndjson or .json, optionally .gz or .zst, "
                    "or .parquet; the type is read from the name: a plain-text file of another name, such as one "
                    "without an extension, needs a link or copy named *.txt)", paths[i]);
            text_reader_close(r);
            return NULL;
        }
        r->disk_sizes[i] = (uint64_t)st.st_size;
        r->disk_total += (uint64_t)st.st_size;
    }
    return r;
}

int text_reader_set_field(TextReader *r, const char *field, char *err) {
    if (!field || !*field || strlen(field) >= sizeof r->field)
        return set_err(err, "phaselab: reader: field name '%s' (expected 1 to %zu bytes)", field ? field : "", sizeof r->field - 1);
    snprintf(r->field, sizeof r->field, "%s", field);
    return 0;
}

static void stream_close(Stream *s) {
    if (s->f) fclose(s->f);
    if (s->child > 0) parquet_stream_abort(s->child);   /* closed before its end: a seek, an error */
    if (s->zs_init) inflateEnd(&s->zs);
    if (s->zd) ZSTD_freeDCtx(s->zd);
    free(s->zin);
    memset(s, 0, sizeof *s);
}

static int stream_open(Stream *s, StreamKind kind, const char *path, const char *field, char *err) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if (kind == STREAM_PARQUET) {
        pid_t pid;
        if (parquet_stream_open(path, field, &s->f, &pid, err)) return -1;
        s->child = pid;
        return 0;
    }
    s->f = fopen(path, "rb");
    if (!s->f) return set_err(err, "phaselab: %s: cannot open: %s", path, strerror(errno));
    if (kind != STREAM_PLAIN) {
        s->zin = malloc(ZSTD_IN);
        if (!s->zin) { stream_close(s); return set_err(err, "phaselab: %s: out of memory", path); }
    }
    if (kind == STREAM_ZSTD) {
        s->zd = ZSTD_createDCtx();
        if (!s->zd) { stream_close(s); return set_err(err, "phaselab: %s: out of memory", path); }
    }
    if (kind == STREAM_GZ) {
        if (inflateInit2(&s->zs, 16 + MAX_WBITS) != Z_OK) { stream_close(s); return set_err(err, "phaselab: %s: out of memory", path); }
        s->zs_init = 1;
        s->gz_state = GZ_START;
    }
    return 0;
}

/* gzip, read strictly: the file is one or more complete gzip members and nothing else (no
 * plain-text pass-through, no trailing bytes, not empty). Returns like stream_read. */
static long gz_read(Stream *s, char *dst, size_t n, const char *path, uint64_t at, char *err) {
    z_stream *z = &s->zs;
    size_t want = n > (1u << 30) ? (1u << 30) : n;
    z->next_out = (Bytef *)dst;
    z->avail_out = (uInt)want;
    while (z->avail_out == want) {
        if (z->avail_in == 0) {
            size_t got = fread(s->zin, 1, ZSTD_IN, s->f);
            if (got == 0) {
                if (ferror(s->f)) return set_err(err, "phaselab: %s: read error", path);
                if (s->gz_state == GZ_START)
                    return set_err(err, "phaselab: %s@0: empty file (expected gzip data)", path);
                if (s->gz_state == GZ_MEMBER)
                    return set_err(err, "phaselab: %s@%llu: gzip stream is truncated (expected the rest of a member)",
                                   path, (unsigned long long)at);
                return 0;
            }
            s->disk_pos += got;
            z->next_in = (Bytef *)s->zin;
            z->avail_in = (uInt)got;
        }
        int between = s->gz_state == GZ_BETWEEN;
        if (between) inflateReset(z);        /* the next bytes must start another member */
        if (s->gz_state != GZ_MEMBER) s->gz_state = GZ_MEMBER;
        uint64_t disk_at = s->disk_pos - z->avail_in;
        int rc = inflate(z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) s->gz_state = GZ_BETWEEN;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            if (between)
                return set_err(err, "phaselab: %s@%llu (compressed): trailing bytes after the gzip data (expected the "
                               "end of the file or another gzip member)", path, (unsigned long long)disk_at);
            return set_err(err, "phaselab: %s@%llu: %s: %s", path, (unsigned long long)at,
                           disk_at == 0 ? "not gzip data" : "gzip stream is corrupt", z->msg ? z->msg : "inflate error");
        }
    }
    return (long)(want - z->avail_out);
}

/* Reads up to n decompressed bytes; returns the count (0 at the end) or -1 with err. */
static long stream_read(Stream *s, char *dst, size_t n, const char *path, uint64_t at, char *err) {
    if (s->kind == STREAM_PLAIN) {
        size_t got = fread(dst, 1, n, s->f);
        if (got == 0 && ferror(s->f)) return set_err(err, "phaselab: %s@%llu: read error", path, (unsigned long long)at);
        s->disk_pos += got;
        return (long)got;
    }
    if (s->kind == STREAM_GZ) return gz_read(s, dst, n, path, at, err);
    if (s->kind == STREAM_PARQUET) {   /* the reader's JSON lines; at their end, its exit status */
        size_t got = fread(dst, 1, n, s->f);
        if (got > 0) return (long)got;
        if (ferror(s->f)) return set_err(err, "phaselab: %s@%llu: read error on the parquet reader's pipe", path, (unsigned long long)at);
        if (s->child > 0) {
            fclose(s->f);
            s->f = NULL;
            pid_t pid = s->child;
            s->child = 0;
            if (parquet_stream_finish(pid, path, err)) return -1;
        }
        return 0;
    }
    ZSTD_outBuffer out = {dst, n, 0};
    while (out.pos == 0) {
        if (s->in.pos == s->in.size) {
            size_t got = fread(s->zin, 1, ZSTD_IN, s->f);
            s->disk_pos += got;
            s->in.src = s->zin; s->in.size = got; s->in.pos = 0;
            if (got == 0) {
                if (ferror(s->f)) return set_err(err, "phaselab: %s: read error", path);
                if (s->disk_pos == 0)
                    return set_err(err, "phaselab: %s@0: empty file (expected a zstd frame)", path);
                if (s->zret != 0)
                    return set_err(err, "phaselab: %s@%llu: zstd stream is truncated (expected the rest of a frame)", path, (unsigned long long)at);
                return 0;
            }
        }
        s->zret = ZSTD_decompressStream(s->zd, &out, &s->in);
        if (ZSTD_isError(s->zret))
            return set_err(err, "phaselab: %s@%llu: zstd stream is corrupt: %s", path, (unsigned long long)at, ZSTD_getErrorName(s->zret));
    }
    return (long)out.pos;
}

/* Makes room and reads more; returns 1 if bytes were added, 0 at end of file, -1 on error. */
static int fill(TextReader *r, char *err) {
    if (r->eof) return 0;
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->cap - r->end < READ_CHUNK / 2) {
        size_t cap = r->cap * 2;
        if (cap > r->max_record + 2 * (size_t)READ_CHUNK) cap = r->max_record + 2 * (size_t)READ_CHUNK;
        if (cap > r->cap) {
            char *b = realloc(r->buf, cap);
            if (!b) return set_err(err, "phaselab: reader: out of memory");
            r->buf = b;
            r->cap = cap;
        }
    }
    if (r->cap == r->end) return set_err(err, "phaselab: reader: record buffer full");
    long got = stream_read(&r->s, r->buf + r->end, r->cap - r->end, r->paths[r->file], r->offset + (r->end - r->start), err);
    if (got < 0) return -1;
    if (got == 0) { r->eof = 1; return 0; }
    r->end += (size_t)got;
    return 1;
}

static void consume(TextReader *r, size_t n) {
    const char *p = r->buf + r->start, *e = p + n;
    while ((p = memchr(p, '\n', (size_t)(e - p)))) { r->line++; p++; }
    r->start += n;
    r->offset += n;
}

static int open_file(TextReader *r, int index, char *err) {
    if (r->open) {
        stream_close(&r->s);
        r->disk_done += r->disk_sizes[r->file];
        r->open = 0;
    }
    r->file = index;
    r->start = r->end = 0;
    r->eof = 0;
    r->line = 1;
    r->offset = 0;
    r->continuing = 0;
    r->file_doc_done = 0;
    if (index >= r->n_paths) return 0;
    if (stream_open(&r->s, r->stream_kinds[index], r->paths[index], r->field, err)) return -1;
    r->open = 1;
    return 0;
}

int text_reader_seek(TextReader *r, int file_index, uint64_t offset, uint64_t line, char *err) {
    if (file_index < 0 || file_index > r->n_paths) return set_err(err, "phaselab: reader: resume file index %d out of range", file_index);
    r->disk_done = 0;
    for (int i = 0; i < file_index; i++) r->disk_done += r->disk_sizes[i];
    if (r->open) { stream_close(&r->s); r->open = 0; }
    if (open_file(r, file_index, err)) return -1;
    if (file_index == r->n_paths) return 0;
    uint64_t skipped = 0, lines = 1;
    char last = '\n';
    while (skipped < offset) {
        if (r->start == r->end) {
            int f = fill(r, err);
            if (f < 0) return -1;
            if (f == 0) return set_err(err, "phaselab: %s: shorter than the resume offset %llu (the input changed since the run started?)",
                                       r->paths[file_index], (unsigned long long)offset);
        }
        size_t take = r->end - r->start;
        if (take > offset - skipped) take = (size_t)(offset - skipped);
        const char *p = r->buf + r->start, *e = p + take;
        while ((p = memchr(p, '\n', (size_t)(e - p)))) { lines++; p++; }
        last = r->buf[r->start + take - 1];
        r->start += take;
        skipped += take;
    }
    /* a resume point is where a record starts: the start of a line, whose number is known */
    if (last != '\n' || lines != line)
        return set_err(err, "phaselab: %s@%llu: resume point %s line %llu (expected the start of line %llu; the input "
                       "changed, or an edited state)", r->paths[file_index], (unsigned long long)offset,
                       last != '\n' ? "is inside a line, not at the start of" : "is the start of", (unsigned long long)lines,
                       (unsigned long long)line);
    r->offset = offset;
    r->line = line;
    return 0;
}

/* Index (relative to start) just past the next '\n' at or after rel, filling as needed.
 * Returns 0 with *line_end = end-of-data at EOF, or when more than limit bytes are
 * buffered without a newline (*overflow = 1). */
static int next_line_end(TextReader *r, size_t rel, size_t limit, size_t *line_end, int *overflow, char *err) {
    *overflow = 0;
    size_t scan = rel;
    for (;;) {
        size_t avail = r->end - r->start;
        const char *nl = scan < avail ? memchr(r->buf + r->start + scan, '\n', avail - scan) : NULL;
        if (nl) { *line_end = (size_t)(nl - (r->buf + r->start)) + 1; return 0; }
        scan = avail;
        if (avail > limit) { *line_end = avail; *overflow = 1; return 0; }
        int f = fill(r, err);
        if (f < 0) return -1;
        if (f == 0) { *line_end = r->end - r->start; return 0; }
    }
}

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n' && p[i] != '\f' && p[i] != '\v') return 0;
    return 1;
}

static void start_record(TextReader *r, TextRecord *rec) {
    memset(rec, 0, sizeof *rec);
    rec->kind = r->kinds[r->file];
    rec->file_index = r->file;
    rec->line = r->line;
    rec->offset = r->offset;
    rec->data = r->buf + r->start;
}

static int next_jsonl(TextReader *r, TextRecord *rec, char *err) {
    size_t line_end;
    int overflow;
    if (next_line_end(r, 0, r->max_record, &line_end, &overflow, err)) return -1;
    if (line_end == 0) return 0;                      /* end of this file */
    start_record(r, rec);
    /* longer than max_record without its '\n': too long, also when the whole line happened to
     * be in the buffer already (overflow only sees lines that outgrow it) */
    if (!overflow && line_end - (rec->data[line_end - 1] == '\n') > r->max_record) {
        rec->too_long = 1;
        rec->data = "";
        consume(r, line_end);
        return 1;
    }
    if (overflow) {                                   /* skip the rest of the long line */
        rec->too_long = 1;
        for (;;) {
            consume(r, line_end);
            if (next_line_end(r, 0, READ_CHUNK, &line_end, &overflow, err)) return -1;
            if (!overflow) { consume(r, line_end); break; }
        }
        rec->data = "";
        return 1;
    }
    size_t len = line_end;
    if (len && rec->data[len - 1] == '\n') len--;
    if (len && rec->data[len - 1] == '\r') len--;
    consume(r, line_end);
    if (len > r->max_record) {                        /* long, but it fitted the read buffer */
        rec->too_long = 1;
        rec->data = "";
        return 1;
    }
    rec->len = len;
    return 1;
}

/* Largest cut <= limit at a UTF-8 character start (never 0 unless limit is 0). */
static size_t utf8_cut(const char *p, size_t limit) {
    size_t cut = limit;
    while (cut > 0 && ((unsigned char)p[cut] & 0xC0) == 0x80) cut--;
    return cut ? cut : limit;
}

static int next_txt(TextReader *r, TextRecord *rec, char *err) {
    size_t line_end;
    int overflow;
    if (r->mode == TXT_DOC_PER_BLOCK && !r->continuing) {   /* skip blank lines */
        for (;;) {
            if (next_line_end(r, 0, r->max_record, &line_end, &overflow, err)) return -1;
            if (line_end == 0) return 0;
            if (overflow || !is_blank(r->buf + r->start, line_end)) break;
            consume(r, line_end);
        }
    }
    if (r->mode == TXT_DOC_PER_FILE && r->file_doc_done) return 0;
    start_record(r, rec);
    size_t rel = 0, last_safe = 0;
    for (;;) {
        if (next_line_end(r, rel, r->max_record, &line_end, &overflow, err)) return -1;
        rec->data = r->buf + r->start;                 /* fill may have moved the buffer */
        int at_eof = !overflow && line_end == rel;     /* nothing more in this file */
        if (!at_eof && r->mode == TXT_DOC_PER_BLOCK && rel > 0 && is_blank(rec->data + rel, line_end - rel)) at_eof = 1;
        if (at_eof) {
            size_t len = rel;
            if (r->mode == TXT_DOC_PER_BLOCK) {
                if (len && rec->data[len - 1] == '\n') len--;
                if (len && rec->data[len - 1] == '\r') len--;
            }
            rec->len = len;
            consume(r, rel);
            r->continuing = 0;
            if (r->mode == TXT_DOC_PER_FILE) r->file_doc_done = 1;
            return 1;
        }
        if (line_end > r->max_record) {                /* too long: emit a piece */
            size_t cut = last_safe;
            if (cut == 0) { cut = utf8_cut(rec->data, r->max_record); rec->forced_split = 1; }
            rec->len = cut;
            rec->more = 1;
            consume(r, cut);
            r->continuing = 1;
            return 1;
        }
        if (rel > 0 && (unsigned char)rec->data[rel] > 0x20 && (unsigned char)rec->data[rel] < 0x7F) last_safe = rel;
        rel = line_end;
    }
}

int text_reader_next(TextReader *r, TextRecord *rec, char *err) {
    for (;;) {
        if (r->file < 0 && open_file(r, 0, err)) return -1;
        if (r->file >= r->n_paths) return 0;
        int got = r->kinds[r->file] == INPUT_JSONL ? next_jsonl(r, rec, err) : next_txt(r, rec, err);
        if (got != 0) return got;
        if (open_file(r, r->file + 1, err)) return -1;
    }
}

uint64_t text_reader_disk_pos(const TextReader *r) { return r->disk_done + (r->open ? r->s.disk_pos : 0); }
uint64_t text_reader_disk_total(const TextReader *r) { return r->disk_total; }

void text_reader_close(TextReader *r) {
    if (!r) return;
    if (r->open) stream_close(&r->s);
    free(r->kinds);
    free(r->stream_kinds);
    free(r->disk_sizes);
    free(r->buf);
    free(r);
}
