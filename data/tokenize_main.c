/* ./tokenize: raw text corpora -> token shards (format in data/shard.h).
 *
 *   ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB2' ...] --out DIR
 *              [--field text] [--shard-tokens N] [--val-tokens N] [--threads N]
 *              [--txt-docs block|file] [--max-doc-bytes N] [--vocab-size N] [--quiet]
 *
 * Input: the files matching each GLOB (sorted), in the order given; .txt / .jsonl (.ndjson,
 * .json) and their .gz / .zst forms, read as streams (data/text_reader.h has the record
 * rules: .txt documents are blank-line separated blocks by default, or whole files with
 * --txt-docs file; .jsonl documents are the string FIELD of each line's object).
 *
 * Output stream: each document's ids followed by the end-of-text id, documents in input
 * order. The first documents go to the validation split until it holds at least
 * --val-tokens tokens (whole documents: the document that crosses the threshold is the last
 * one in val); the rest go to train. Each split is cut into shards of exactly --shard-tokens
 * tokens (the last one shorter; a document may continue in the next shard):
 * DIR/val_000000.bin ..., DIR/train_000000.bin ...
 *
 * Bad input rule (never a crash, never a silent drop; all counted in the summary with the
 * first occurrence as FILE:LINE):
 *   - a JSONL line that is not a JSON object, lacks FIELD, has a non-string FIELD or is longer
 *     than --max-doc-bytes is skipped and counted as a bad line;
 *   - blank lines and empty documents are skipped and counted as empty;
 *   - invalid UTF-8 inside a document: every maximal ill-formed subsequence is replaced by
 *     U+FFFD (as Python's errors="replace") and the document kept; the documents and the
 *     sequences replaced are counted (for both tokenizers);
 *   - a .txt document longer than --max-doc-bytes is tokenized in pieces cut before a line
 *     starting with printable ASCII (exact); without such a line it is cut at a character
 *     boundary and counted as a forced split.
 * Unreadable or corrupt (compressed) files are fatal errors naming file and offset.
 *
 * Parallelism: a reader thread cuts records into batches (~1 MiB); --threads workers parse
 * and tokenize batches, each with its own TokenizerState; the main thread takes finished
 * batches strictly in sequence order and writes the shards, so the output does not depend on
 * the thread count. Memory is bounded by (2 * threads + 2) batches.
 *
 * Resumption: after every completed shard, DIR/tokenize-state.json is rewritten atomically
 * with the options, the shard counts, the input position of the document being written
 * (file, decompressed offset, line), how many of its tokens are already in shards, and the
 * summary counters as of that document's start. A rerun with the same options continues from
 * there, skipping completed shards; its output is byte-identical to an uninterrupted run.
 * A finished run records "complete" and a rerun only prints the summary. */
#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "data/jsonl.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "data/tokenizer.h"
#include "model/errors.h"
#include "model/json_num.h"
#include "trainer/fsutil.h"

#define BATCH_BYTES (1u << 20)
#define BATCH_ITEMS 4096
#define STATE_FILE "tokenize-state.json"

enum { SPLIT_VAL = 0, SPLIT_TRAIN = 1 };
static const char *split_names[2] = {"val", "train"};
enum { ITEM_DOC, ITEM_BAD };

typedef struct {
    uint8_t kind, more, forced;
    uint8_t input_kind;             /* InputKind of the record's file */
    int file_index;
    uint64_t line, offset;
    size_t text_off, text_len;      /* raw record bytes in the batch's text */
    size_t ids_off, ids_len;        /* output ids in the batch's ids */
    uint64_t doc_bytes;             /* document bytes after JSON decoding */
    long replaced;                  /* invalid UTF-8 sequences replaced */
    char bad[160];                  /* why a bad line is bad */
} Item;

typedef struct {
    uint64_t seq;
    int state;                      /* 0 free, 1 filled (queued), 2 done */
    Item *items;
    size_t n_items, cap_items;
    TextBuf text;
    TokenIds ids;
    uint64_t disk_pos, raw_bytes;
} Batch;

typedef struct {
    const char *tokenizer, *out, *field;
    char **inputs;
    int n_inputs;
    uint64_t shard_tokens, val_tokens, max_doc_bytes;
    uint32_t vocab_size;
    int threads, quiet;
    TxtMode txt_mode;
} Options;

typedef struct {
    uint64_t docs, empty, bad, tokens, raw_bytes, doc_bytes;
    uint64_t invalid_docs, invalid_seqs, forced_splits;
    char first_bad[512], first_invalid[512], first_forced[512];
} Stats;

/* ---------------------------------------------------------------- globals of the run */

static Options opt;
static Tokenizer *tok;
static glob_t files;
static TextReader *reader;
static Batch *batches;
static int n_batches;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_free = PTHREAD_COND_INITIALIZER, cv_work = PTHREAD_COND_INITIALIZER,
                      cv_done = PTHREAD_COND_INITIALIZER;
static uint64_t next_fill_seq, next_work_seq, total_batches = UINT64_MAX;
static char options_json[1 << 16];

static void fatal(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", strncmp(msg, "phaselab: ", 10) ? "phaselab: " : "", msg);
    exit(code);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------- reader thread */

static Batch *take_free_batch(void) {
    pthread_mutex_lock(&mu);
    Batch *b = NULL;
    for (;;) {
        for (int i = 0; i < n_batches && !b; i++)
            if (batches[i].state == 0) b = &batches[i];
        if (b) break;
        pthread_cond_wait(&cv_free, &mu);
    }
    b->state = -1;                  /* being filled */
    pthread_mutex_unlock(&mu);
    b->n_items = 0;
    b->text.len = 0;
    b->ids.n = 0;
    b->raw_bytes = 0;
    return b;
}

static void publish(Batch *b) {
    pthread_mutex_lock(&mu);
    b->seq = next_fill_seq++;
    b->state = 1;
    pthread_cond_broadcast(&cv_work);
    pthread_mutex_unlock(&mu);
}

static void *reader_main(void *arg) {
    char err[ERR_LEN];
    Batch *b = take_free_batch();
    TextRecord rec;
    int got;
    while ((got = text_reader_next(reader, &rec, err)) == 1) {
        if (b->n_items == b->cap_items) {
            b->cap_items = b->cap_items ? 2 * b->cap_items : 256;
            b->items = realloc(b->items, b->cap_items * sizeof *b->items);
            if (!b->items) fatal(1, "out of memory");
        }
        Item *it = &b->items[b->n_items++];
        memset(it, 0, sizeof *it);
        it->kind = rec.too_long ? ITEM_BAD : ITEM_DOC;
        it->more = (uint8_t)rec.more;
        it->forced = (uint8_t)rec.forced_split;
        it->file_index = rec.file_index;
        it->line = rec.line;
        it->offset = rec.offset;
        it->text_off = b->text.len;
        it->text_len = rec.len;
        if (rec.too_long)
            snprintf(it->bad, sizeof it->bad, "line longer than --max-doc-bytes %llu", (unsigned long long)opt.max_doc_bytes);
        it->input_kind = (uint8_t)rec.kind;
        if (text_buf_append(&b->text, rec.data, rec.len)) fatal(1, "out of memory");
        b->raw_bytes += rec.len;
        if (b->text.len >= BATCH_BYTES || b->n_items >= BATCH_ITEMS) {
            b->disk_pos = text_reader_disk_pos(reader);
            publish(b);
            b = take_free_batch();
        }
    }
    if (got < 0) fatal(1, "%s", err);
    b->disk_pos = text_reader_disk_pos(reader);
    publish(b);
    pthread_mutex_lock(&mu);
    total_batches = next_fill_seq;
    pthread_cond_broadcast(&cv_work);
    pthread_cond_broadcast(&cv_done);
    pthread_mutex_unlock(&mu);
    return arg;
}

/* ---------------------------------------------------------------- workers */

static void process_item(TokenizerState *st, Batch *b, Item *it, TextBuf *clean, char *err) {
    const char *text = b->text.data + it->text_off;
    size_t len = it->text_len;
    InputKind kind = (InputKind)it->input_kind;
    it->ids_off = b->ids.n;
    it->ids_len = 0;
    it->doc_bytes = 0;
    if (it->kind == ITEM_BAD) return;
    cJSON *obj = NULL;
    if (kind == INPUT_JSONL) {
        int r = jsonl_document(text, len, opt.field, &obj, &text, &len, it->bad, sizeof it->bad);
        if (r == JSONL_BLANK) return;                          /* blank line: empty */
        if (r == JSONL_BAD) { it->kind = ITEM_BAD; return; }
    }
    if (utf8_valid_prefix(text, len) != len) {
        clean->len = 0;
        it->replaced = utf8_sanitize(text, len, clean);
        if (it->replaced < 0) fatal(1, "out of memory");
        text = clean->data;
        len = clean->len;
    }
    it->doc_bytes = len;
    if (tokenizer_encode(st, text, len, &b->ids, err) < 0) fatal(1, "%s", err);
    it->ids_len = b->ids.n - it->ids_off;
    cJSON_Delete(obj);
}

static void *worker_main(void *arg) {
    TokenizerState *st = tokenizer_state_new(tok);
    if (!st) fatal(1, "out of memory");
    TextBuf clean = {0};
    char err[ERR_LEN];
    for (;;) {
        pthread_mutex_lock(&mu);
        Batch *b = NULL;
        for (;;) {
            for (int i = 0; i < n_batches && !b; i++)
                if (batches[i].state == 1 && batches[i].seq == next_work_seq) b = &batches[i];
            if (b || next_work_seq >= total_batches) break;
            pthread_cond_wait(&cv_work, &mu);
        }
        if (!b) { pthread_mutex_unlock(&mu); break; }
        next_work_seq++;
        b->state = 3;               /* being tokenized */
        pthread_mutex_unlock(&mu);
        for (size_t i = 0; i < b->n_items; i++) process_item(st, b, &b->items[i], &clean, err);
        pthread_mutex_lock(&mu);
        b->state = 2;
        pthread_cond_broadcast(&cv_done);
        pthread_mutex_unlock(&mu);
    }
    text_buf_free(&clean);
    tokenizer_state_free(st);
    return arg;
}

/* ---------------------------------------------------------------- writer (main thread) */

typedef struct {
    ShardWriter *w;
    uint32_t shard_index;           /* index of the shard being (or next to be) written */
    uint64_t tokens;                /* tokens in completed shards + the open one */
} SplitOut;

static SplitOut splits[2];
static Stats stats, stats_at_doc;
static int in_doc, doc_split, doc_invalid, resume_split = -1;
static uint64_t doc_emitted, skip_tokens, doc_index;
static int doc_file;
static uint64_t doc_offset, doc_line;
static long kill_after = -1, checkpoints;
static char state_path[2048];      /* the state file this run resumed from (for messages) */

static void shard_path(char *path, size_t n, int split, uint32_t index) {
    snprintf(path, n, "%s/%s_%06u.bin", opt.out, split_names[split], index);
}

static void write_state(int complete) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "options", cJSON_Parse(options_json));
    cJSON_AddBoolToObject(root, "complete", complete);
    for (int s = 0; s < 2; s++) {
        cJSON *o = cJSON_AddObjectToObject(root, split_names[s]);
        cJSON_AddNumberToObject(o, "shards_done", splits[s].shard_index);
        cJSON_AddNumberToObject(o, "tokens", (double)splits[s].tokens);
    }
    const Stats *st = complete ? &stats : &stats_at_doc;
    cJSON *r = cJSON_AddObjectToObject(root, "resume");
    cJSON_AddNumberToObject(r, "file", doc_file);
    cJSON_AddStringToObject(r, "file_name", doc_file < (int)files.gl_pathc ? files.gl_pathv[doc_file] : "");
    cJSON_AddNumberToObject(r, "offset", (double)doc_offset);
    cJSON_AddNumberToObject(r, "line", (double)doc_line);
    cJSON_AddNumberToObject(r, "skip_tokens", (double)doc_emitted);
    cJSON_AddNumberToObject(r, "split", doc_split);
    cJSON_AddNumberToObject(r, "doc_index", (double)doc_index);
    cJSON *c = cJSON_AddObjectToObject(root, "stats");
    cJSON_AddNumberToObject(c, "documents", (double)st->docs);
    cJSON_AddNumberToObject(c, "empty", (double)st->empty);
    cJSON_AddNumberToObject(c, "bad_lines", (double)st->bad);
    cJSON_AddNumberToObject(c, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(c, "raw_bytes", (double)st->raw_bytes);
    cJSON_AddNumberToObject(c, "doc_bytes", (double)st->doc_bytes);
    cJSON_AddNumberToObject(c, "invalid_utf8_docs", (double)st->invalid_docs);
    cJSON_AddNumberToObject(c, "invalid_utf8_seqs", (double)st->invalid_seqs);
    cJSON_AddNumberToObject(c, "forced_splits", (double)st->forced_splits);
    cJSON_AddStringToObject(c, "first_bad", st->first_bad);
    cJSON_AddStringToObject(c, "first_invalid", st->first_invalid);
    cJSON_AddStringToObject(c, "first_forced", st->first_forced);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char path[2048], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/%s", opt.out, STATE_FILE);
    if (fs_write_atomic(path, text, strlen(text), err)) fatal(1, "%s", err);
    free(text);
    checkpoints++;
    if (kill_after >= 0 && checkpoints >= kill_after) raise(SIGKILL);   /* test hook */
}

static void close_shard(int s) {
    char err[ERR_LEN];
    if (!splits[s].w) return;
    if (shard_writer_close(splits[s].w, err)) fatal(1, "%s", err);
    splits[s].w = NULL;
    splits[s].shard_index++;
    write_state(0);
}

static void emit(const uint32_t *ids, size_t n) {
    char err[ERR_LEN], path[2048];
    if (skip_tokens) {
        size_t drop = n < skip_tokens ? n : (size_t)skip_tokens;
        ids += drop; n -= drop;
        skip_tokens -= drop;
        doc_emitted += drop;
    }
    SplitOut *so = &splits[doc_split];
    while (n > 0) {
        if (!so->w) {
            shard_path(path, sizeof path, doc_split, so->shard_index);
            so->w = shard_writer_open(path, opt.vocab_size, tokenizer_eot_id(tok), tokenizer_fingerprint(tok), err);
            if (!so->w) fatal(1, "%s", err);
        }
        uint64_t room = opt.shard_tokens - shard_writer_count(so->w);
        size_t take = n < room ? n : (size_t)room;
        if (shard_writer_append(so->w, ids, take, err)) fatal(1, "%s", err);
        ids += take; n -= take;
        so->tokens += take;
        doc_emitted += take;
        stats.tokens += take;
        if (shard_writer_count(so->w) == opt.shard_tokens) close_shard(doc_split);
    }
}

static void note_first(char *slot, const Item *it, const char *what) {
    if (slot[0]) return;
    snprintf(slot, 512, "%s:%llu%s%s", files.gl_pathv[it->file_index], (unsigned long long)it->line, what[0] ? ": " : "", what);
}

static void write_item(const Batch *b, const Item *it) {
    stats.raw_bytes += it->text_len;
    if (it->kind == ITEM_BAD) {
        stats.bad++;
        note_first(stats.first_bad, it, it->bad);
        return;
    }
    if (!in_doc) {
        if (it->ids_len == 0 && !it->more) { stats.empty++; return; }
        in_doc = 1;
        stats_at_doc = stats;
        stats_at_doc.raw_bytes -= it->text_len;
        doc_file = it->file_index;
        doc_offset = it->offset;
        doc_line = it->line;
        doc_emitted = 0;
        doc_invalid = 0;
        if (resume_split >= 0) { doc_split = resume_split; resume_split = -1; }
        else doc_split = splits[SPLIT_VAL].tokens < opt.val_tokens ? SPLIT_VAL : SPLIT_TRAIN;
    }
    if (it->replaced > 0) {
        stats.invalid_seqs += (uint64_t)it->replaced;
        if (!doc_invalid) stats.invalid_docs++;      /* a document counts once, whatever its pieces */
        doc_invalid = 1;
        note_first(stats.first_invalid, it, "");
    }
    if (it->forced) { stats.forced_splits++; note_first(stats.first_forced, it, ""); }
    stats.doc_bytes += it->doc_bytes;
    emit(b->ids.ids + it->ids_off, it->ids_len);
    if (it->more) return;
    uint32_t eot = tokenizer_eot_id(tok);
    emit(&eot, 1);
    if (skip_tokens)
        fatal(1, "%s: resume.skip_tokens: %llu more tokens than the document at %s:%llu has (the input changed, or "
              "an edited state; delete the directory to start over)", state_path, (unsigned long long)skip_tokens,
              files.gl_pathv[doc_file], (unsigned long long)doc_line);
    stats.docs++;
    doc_index++;
    if (doc_split == SPLIT_VAL && splits[SPLIT_VAL].tokens >= opt.val_tokens) close_shard(SPLIT_VAL);
    in_doc = 0;
}

/* ---------------------------------------------------------------- progress and summary */

static void human_time(double s, char *out, size_t n) {
    if (s < 0 || s > 1e7) { snprintf(out, n, "--:--:--"); return; }
    long t = (long)s;
    snprintf(out, n, "%02ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

static void progress(double t0, uint64_t disk_pos0, uint64_t bytes0, uint64_t tokens0, uint64_t disk_pos, int final) {
    static double last;
    double t = now_s();
    int tty = isatty(2);
    if (opt.quiet || (!final && t - last < (tty ? 0.25 : 10.0))) return;
    last = t;
    double el = t - t0 > 1e-9 ? t - t0 : 1e-9;
    uint64_t total = text_reader_disk_total(reader);
    double frac = total ? (double)disk_pos / (double)total : 1.0;
    double disk_rate = (double)(disk_pos - disk_pos0) / el;
    char eta[32];
    human_time(disk_rate > 0 ? (double)(total - disk_pos) / disk_rate : -1, eta, sizeof eta);
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "%s[%s] %5.1f%%  %7.2f MB/s  %6.2f M tok/s  ETA %s  docs %llu%s", tty ? "\r" : "", bar, 100 * frac,
            (double)(stats.raw_bytes - bytes0) / el / 1e6, (double)(stats.tokens - tokens0) / el / 1e6, eta,
            (unsigned long long)stats.docs, tty && !final ? "" : "\n");
    fflush(stderr);
}

static void summary(double seconds, uint64_t tokens_this_run, int resumed) {
    printf("tokenize: %s -> %s (%s)\n", opt.tokenizer, opt.out, resumed ? "resumed run" : "fresh run");
    printf("  documents       %llu (end-of-text after each)\n", (unsigned long long)stats.docs);
    printf("  tokens          %llu (train %llu in %u shards, val %llu in %u shards)\n", (unsigned long long)stats.tokens,
           (unsigned long long)splits[SPLIT_TRAIN].tokens, splits[SPLIT_TRAIN].shard_index,
           (unsigned long long)splits[SPLIT_VAL].tokens, splits[SPLIT_VAL].shard_index);
    printf("  bytes           %llu read (records), %llu of document text\n", (unsigned long long)stats.raw_bytes,
           (unsigned long long)stats.doc_bytes);
    printf("  empty           %llu (blank lines and empty documents, skipped)\n", (unsigned long long)stats.empty);
    printf("  bad lines       %llu%s%s%s\n", (unsigned long long)stats.bad, stats.bad ? " (skipped; first at " : "",
           stats.first_bad, stats.bad ? ")" : "");
    printf("  invalid UTF-8   %llu documents, %llu sequences replaced by U+FFFD%s%s%s\n", (unsigned long long)stats.invalid_docs,
           (unsigned long long)stats.invalid_seqs, stats.invalid_docs ? " (first at " : "", stats.first_invalid,
           stats.invalid_docs ? ")" : "");
    printf("  forced splits   %llu%s%s%s\n", (unsigned long long)stats.forced_splits, stats.forced_splits ? " (first at " : "",
           stats.first_forced, stats.forced_splits ? ")" : "");
    if (seconds > 0)
        printf("  speed           %.1f s, %.3f M tokens/s with %d threads\n", seconds, (double)tokens_this_run / seconds / 1e6, opt.threads);
}

/* ---------------------------------------------------------------- state file */

/* A whole number in [0, hi] at obj[key] of the state file, else a fatal error naming it. */
static uint64_t state_u64(const char *path, const cJSON *obj, const char *where, const char *key, uint64_t hi) {
    uint64_t v;
    if (json_get_u64(obj, key, 0, hi, &v))
        fatal(1, "%s: %s%s: missing or not an integer in [0, %llu] (expected a state written by ./tokenize; delete "
              "the directory to start over)", path, where, key, (unsigned long long)hi);
    return v;
}

static void load_stats(const char *path, const cJSON *c) {
#define NUM(field, key) stats.field = state_u64(path, c, "stats.", key, JSON_MAX_EXACT)
    NUM(docs, "documents"); NUM(empty, "empty"); NUM(bad, "bad_lines"); NUM(tokens, "tokens");
    NUM(raw_bytes, "raw_bytes"); NUM(doc_bytes, "doc_bytes"); NUM(invalid_docs, "invalid_utf8_docs");
    NUM(invalid_seqs, "invalid_utf8_seqs"); NUM(forced_splits, "forced_splits");
#undef NUM
    const char *s;
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_bad")))) snprintf(stats.first_bad, 512, "%s", s);
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_invalid")))) snprintf(stats.first_invalid, 512, "%s", s);
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_forced")))) snprintf(stats.first_forced, 512, "%s", s);
}

/* Returns 1 when a state was loaded (resume), 2 when the run is already complete, 0 fresh. */
static int load_state(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", opt.out, STATE_FILE);
    char *text = fs_read_all(path, NULL);
    if (!text) {
        if (errno != ENOENT) fatal(1, "%s: cannot read: %s", path, strerror(errno));
        glob_t g;
        char pat[2100];
        snprintf(pat, sizeof pat, "%s/*_[0-9][0-9][0-9][0-9][0-9][0-9].bin", opt.out);
        int found = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        if (found) fatal(2, "%s: holds shards but no %s (expected an empty or new --out directory)", opt.out, STATE_FILE);
        globfree(&g);
        return 0;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fatal(1, "%s: not valid JSON (expected a state written by ./tokenize; delete it to start over)", path);
    char *have = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "options"));
    cJSON *want_obj = cJSON_Parse(options_json);
    char *want = cJSON_PrintUnformatted(want_obj);
    if (!have || strcmp(have, want) != 0)
        fatal(2, "%s: this directory was tokenized with other options or inputs (expected the same --tokenizer, --input files, --field, --shard-tokens, --val-tokens, --txt-docs, --max-doc-bytes, --vocab-size; use another --out)", path);
    free(have); free(want); cJSON_Delete(want_obj);
    /* every counter is checked against the output it describes: the shards listed as done
     * exist, are valid and hold exactly the recorded tokens */
    for (int s = 0; s < 2; s++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, split_names[s]);
        char where[16];
        snprintf(where, sizeof where, "%s.", split_names[s]);
        splits[s].shard_index = (uint32_t)state_u64(path, o, where, "shards_done", 999999);
        splits[s].tokens = state_u64(path, o, where, "tokens", JSON_MAX_EXACT);
        uint64_t in_shards = 0;
        for (uint32_t i = 0; i < splits[s].shard_index; i++) {
            char sp[2048], serr[ERR_LEN];
            Shard sh;
            shard_path(sp, sizeof sp, s, i);
            struct stat sst;
            if (stat(sp, &sst) != 0) fatal(1, "%s: listed as complete in %s but missing (delete the directory to start over)", sp, path);
            if (shard_open(&sh, sp, serr)) fatal(1, "%s (listed as complete in %s)", serr, path);
            in_shards += sh.n_tokens;
            shard_close(&sh);
        }
        if (in_shards != splits[s].tokens)
            fatal(1, "%s: %s.tokens is %llu but its %u shards hold %llu tokens (edited or corrupt state; delete the "
                  "directory to start over)", path, split_names[s], (unsigned long long)splits[s].tokens,
                  splits[s].shard_index, (unsigned long long)in_shards);
    }
    load_stats(path, cJSON_GetObjectItemCaseSensitive(root, "stats"));
    int complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "complete"));
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "resume");
    doc_file = (int)state_u64(path, r, "resume.", "file", files.gl_pathc);
    doc_offset = state_u64(path, r, "resume.", "offset", JSON_MAX_EXACT);
    doc_line = state_u64(path, r, "resume.", "line", JSON_MAX_EXACT);
    skip_tokens = state_u64(path, r, "resume.", "skip_tokens", JSON_MAX_EXACT);
    resume_split = (int)state_u64(path, r, "resume.", "split", 1);
    doc_index = state_u64(path, r, "resume.", "doc_index", JSON_MAX_EXACT);
    if (doc_line < 1 && doc_file < (int)files.gl_pathc)
        fatal(1, "%s: resume.line 0, expected a 1-based line", path);
    /* the resumed document's first skip_tokens tokens are in the resumed split's shards */
    if (skip_tokens > splits[resume_split].tokens)
        fatal(1, "%s: resume.skip_tokens %llu exceeds the %llu tokens of the %s shards (edited or corrupt state)", path,
              (unsigned long long)skip_tokens, (unsigned long long)splits[resume_split].tokens, split_names[resume_split]);
    snprintf(state_path, sizeof state_path, "%s", path);
    cJSON_Delete(root);
    return complete ? 2 : 1;
}

/* ---------------------------------------------------------------- command line */

static void usage(void) {
    fprintf(stderr,
            "usage: ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB' ...] --out DIR\n"
            "                  [--field text] [--shard-tokens N] [--val-tokens N] [--threads N]\n"
            "                  [--txt-docs block|file] [--max-doc-bytes N] [--vocab-size N] [--quiet]\n");
}

static uint64_t parse_u64(const char *flag, const char *v, uint64_t min, uint64_t max) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x < min || x > max)
        fatal(2, "%s: \"%s\" is not valid (expected an integer in [%llu, %llu])", flag, v, (unsigned long long)min,
              (unsigned long long)max);
    return x;
}

static void parse_args(int argc, char **argv, char ***globs, int *n_globs) {
    opt.field = "text";
    opt.shard_tokens = 100000000;
    opt.val_tokens = 0;
    opt.max_doc_bytes = 64ull << 20;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    opt.threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;
    opt.txt_mode = TXT_DOC_PER_BLOCK;
    *globs = calloc((size_t)argc, sizeof **globs);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); exit(0); }
        if (!strcmp(a, "--quiet")) { opt.quiet = 1; continue; }
        if (i + 1 >= argc) { usage(); fatal(2, "%s: missing value", a); }
        const char *v = argv[++i];
        if (!strcmp(a, "--tokenizer")) opt.tokenizer = v;
        else if (!strcmp(a, "--input")) (*globs)[(*n_globs)++] = (char *)v;
        else if (!strcmp(a, "--out")) opt.out = v;
        else if (!strcmp(a, "--field")) opt.field = v;
        else if (!strcmp(a, "--shard-tokens")) opt.shard_tokens = parse_u64(a, v, 1, (uint64_t)1 << 40);
        else if (!strcmp(a, "--val-tokens")) opt.val_tokens = parse_u64(a, v, 0, (uint64_t)1 << 50);
        else if (!strcmp(a, "--threads")) opt.threads = (int)parse_u64(a, v, 1, 256);
        else if (!strcmp(a, "--max-doc-bytes")) opt.max_doc_bytes = parse_u64(a, v, 4096, (uint64_t)1 << 40);
        else if (!strcmp(a, "--vocab-size")) opt.vocab_size = (uint32_t)parse_u64(a, v, 1, UINT32_MAX);
        else if (!strcmp(a, "--txt-docs")) {
            if (!strcmp(v, "block")) opt.txt_mode = TXT_DOC_PER_BLOCK;
            else if (!strcmp(v, "file")) opt.txt_mode = TXT_DOC_PER_FILE;
            else fatal(2, "--txt-docs: \"%s\" (expected block or file)", v);
        } else { usage(); fatal(2, "unknown option %s", a); }
    }
    if (!opt.tokenizer || !*n_globs || !opt.out) { usage(); fatal(2, "--tokenizer, --input and --out are required"); }
}

static void build_options_json(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tokenizer_fingerprint", tokenizer_fingerprint(tok));
    cJSON_AddStringToObject(o, "field", opt.field);
    cJSON_AddNumberToObject(o, "shard_tokens", (double)opt.shard_tokens);
    cJSON_AddNumberToObject(o, "val_tokens", (double)opt.val_tokens);
    cJSON_AddNumberToObject(o, "max_doc_bytes", (double)opt.max_doc_bytes);
    cJSON_AddNumberToObject(o, "vocab_size", opt.vocab_size);
    cJSON_AddStringToObject(o, "txt_docs", opt.txt_mode == TXT_DOC_PER_FILE ? "file" : "block");
    cJSON *in = cJSON_AddArrayToObject(o, "inputs");
    for (size_t i = 0; i < files.gl_pathc; i++) {
        struct stat st;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", files.gl_pathv[i]);
        cJSON_AddNumberToObject(e, "bytes", stat(files.gl_pathv[i], &st) == 0 ? (double)st.st_size : -1.0);
        cJSON_AddItemToArray(in, e);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (strlen(s) >= sizeof options_json) fatal(2, "too many input files for the state file (%zu)", files.gl_pathc);
    strcpy(options_json, s);
    free(s);
    cJSON_Delete(o);
}

int main(int argc, char **argv) {
    char err[ERR_LEN];
    char **globs;
    int n_globs = 0;
    parse_args(argc, argv, &globs, &n_globs);
    for (int i = 0; i < n_globs; i++) {
        int rc = glob(globs[i], i ? GLOB_APPEND : 0, NULL, &files);
        if (rc == GLOB_NOMATCH || (rc == 0 && files.gl_pathc == 0)) fatal(2, "--input '%s': no file matches", globs[i]);
        if (rc != 0 && rc != GLOB_NOMATCH) fatal(2, "--input '%s': cannot expand", globs[i]);
    }
    free(globs);
    tok = tokenizer_open(opt.tokenizer, err);
    if (!tok) fatal(2, "%s", err);
    if (tokenizer_eot_id(tok) == UINT32_MAX) fatal(2, "%s: no <|endoftext|> added token (expected one for document separators)", opt.tokenizer);
    if (!opt.vocab_size) {
        uint32_t n = tokenizer_n_ids(tok);
        if (tokenizer_is_bytes(tok)) opt.vocab_size = n;
        else if (tokenizer_eot_id(tok) == 151643 && n <= 151936) opt.vocab_size = 151936;   /* Qwen2/Qwen3 models */
        else opt.vocab_size = (n + 127) / 128 * 128;
    }
    if (opt.vocab_size < tokenizer_n_ids(tok))
        fatal(2, "--vocab-size %u is below the tokenizer's %u ids", opt.vocab_size, tokenizer_n_ids(tok));
    if (mkdir(opt.out, 0755) != 0 && errno != EEXIST) fatal(1, "%s: cannot create: %s", opt.out, strerror(errno));
    build_options_json();
    const char *ka = getenv("PHASELAB_TOKENIZE_KILL_AFTER_SHARDS");   /* test hook: SIGKILL itself */
    if (ka) kill_after = atol(ka);

    int resumed = load_state();
    reader = text_reader_open(files.gl_pathv, (int)files.gl_pathc, opt.txt_mode, opt.max_doc_bytes, err);
    if (!reader) fatal(2, "%s", err);
    if (resumed == 2) {
        summary(0, 0, 1);
        printf("  (already complete: nothing to do)\n");
        return 0;
    }
    if (resumed == 1) {
        if (text_reader_seek(reader, doc_file, doc_offset, doc_line, err)) fatal(1, "%s", err);
        if (!opt.quiet)
            fprintf(stderr, "tokenize: resuming at %s:%llu (%u train and %u val shards done)\n",
                    doc_file < (int)files.gl_pathc ? files.gl_pathv[doc_file] : "end", (unsigned long long)doc_line,
                    splits[SPLIT_TRAIN].shard_index, splits[SPLIT_VAL].shard_index);
    }

    n_batches = 2 * opt.threads + 2;
    batches = calloc((size_t)n_batches, sizeof *batches);
    pthread_t rd, *wk = calloc((size_t)opt.threads, sizeof *wk);
    if (!batches || !wk) fatal(1, "out of memory");
    double t0 = now_s();
    uint64_t disk0 = text_reader_disk_pos(reader), bytes0 = stats.raw_bytes, tokens0 = stats.tokens;
    pthread_create(&rd, NULL, reader_main, NULL);
    for (int i = 0; i < opt.threads; i++) pthread_create(&wk[i], NULL, worker_main, NULL);

    uint64_t disk_pos = disk0;
    for (uint64_t seq = 0;; seq++) {
        pthread_mutex_lock(&mu);
        Batch *b = NULL;
        for (;;) {
            for (int i = 0; i < n_batches && !b; i++)
                if (batches[i].state == 2 && batches[i].seq == seq) b = &batches[i];
            if (b || seq >= total_batches) break;
            pthread_cond_wait(&cv_done, &mu);
        }
        pthread_mutex_unlock(&mu);
        if (!b) break;
        for (size_t i = 0; i < b->n_items; i++) write_item(b, &b->items[i]);
        disk_pos = b->disk_pos;
        pthread_mutex_lock(&mu);
        b->state = 0;
        pthread_cond_broadcast(&cv_free);
        pthread_mutex_unlock(&mu);
        progress(t0, disk0, bytes0, tokens0, disk_pos, 0);
    }
    pthread_join(rd, NULL);
    for (int i = 0; i < opt.threads; i++) pthread_join(wk[i], NULL);
    free(wk);
    if (in_doc) fatal(1, "internal: input ended inside a document");
    /* final partial shards */
    char errc[ERR_LEN];
    for (int s = 0; s < 2; s++)
        if (splits[s].w) {
            if (shard_writer_close(splits[s].w, errc)) fatal(1, "%s", errc);
            splits[s].w = NULL;
            splits[s].shard_index++;
        }
    doc_file = (int)files.gl_pathc;
    doc_offset = doc_line = 0;
    doc_emitted = 0;
    write_state(1);
    double seconds = now_s() - t0;
    progress(t0, disk0, bytes0, tokens0, text_reader_disk_total(reader), 1);
    summary(seconds, stats.tokens - tokens0, resumed);
    text_reader_close(reader);
    tokenizer_free(tok);
    globfree(&files);
    return 0;
}
