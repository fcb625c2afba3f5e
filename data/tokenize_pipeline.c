/* The tokenize pipeline: raw text corpora -> token shards (format in data/shard.h), as a
 * library driven by TokenizeOptions (data/tokenize_pipeline.h); the program ./tokenize
 * (cli/tokenize_main.c) parses the command line into them.
 *
 *
 *   ./tokenize --tokenizer tokenizer.json|bytes --input 'GLOB' [--input 'GLOB2' ...] --out DIR
 *              [--field text] [--shard-tokens N] [--val-tokens N] [--threads N]
 *              [--txt-docs block|file] [--max-doc-bytes N] [--vocab-size N] [--quiet]
 *
 * Input: the files matching each GLOB (sorted), in the order given; .txt / .jsonl (.ndjson,
 * .json) and their .gz / .zst forms, and .parquet, read as streams (data/text_reader.h has the
 * record rules: .txt documents are blank-line separated blocks by default, or whole files with
 * --txt-docs file; .jsonl documents are the string FIELD of each line's object; .parquet
 * documents are the rows of its string column FIELD, read by tools/parquet-text with pyarrow).
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
 * A finished run records "complete" and a rerun only prints the summary.
 *
 * Errors: a bad input or a failed write ends the process with one line "phaselab: ..." and exit
 * status 2 (bad input) or 1 (runtime failure), from any of the pipeline's threads (fatal below):
 * the pipeline is one whole run of ./tokenize, and its state file makes a rerun resume. Inputs
 * holding no document at all (every file empty, every line bad) are bad input: "nothing
 * tokenized", exit 2, no state and no shards written (nothing done is never a success).
 * --out is created with its parents (mkdir -p); an existing non-directory there is refused. */
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
#include "data/tokenize_pipeline.h"
#include "common/clock.h"
#include "data/jsonl.h"
#include "data/shard.h"
#include "data/text_reader.h"
#include "data/tokenizer.h"
#include "common/errors.h"
#include "common/grow.h"
#include "common/json_num.h"
#include "common/fsutil.h"

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
    uint64_t docs, empty, bad, tokens, raw_bytes, doc_bytes;
    uint64_t invalid_docs, invalid_seqs, forced_splits;
    char first_bad[512], first_invalid[512], first_forced[512];
} Stats;

typedef struct {
    ShardWriter *w;
    uint32_t shard_index;           /* index of the shard being (or next to be) written */
    uint64_t tokens;                /* tokens in completed shards + the open one */
} SplitOut;

/* The batch queue between the reader thread, the workers and the writer; every field is
 * read and written under mu. A batch's state: 0 free, -1 being filled, 1 filled (queued),
 * 3 being tokenized, 2 done. */
typedef struct {
    Batch *batches;                 /* [n_batches] */
    int n_batches;
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_work, cv_done;
    uint64_t next_fill_seq, next_work_seq;
    uint64_t total_batches;         /* UINT64_MAX until the reader has seen the end */
} Queue;

/* The writer's cursor: the document being written (where it starts in the input, how many of
 * its tokens are out, which split it goes to) and what a resumed run must still skip. */
typedef struct {
    int active;                     /* inside a document (its first record was written) */
    int split, invalid;             /* its split; whether it had invalid UTF-8 (counted once) */
    int resume_split;               /* the split of the resumed document, -1 when none */
    uint64_t emitted;               /* its tokens already in shards (resume.skip_tokens) */
    uint64_t skip_tokens;           /* of the resumed document: tokens a previous run wrote */
    uint64_t index;                 /* documents completed before it */
    int file;                       /* its input file, line and decompressed offset */
    uint64_t offset, line;
} DocCursor;

/* One run of ./tokenize: everything the threads share, passed explicitly (no globals). */
typedef struct {
    TokenizeOptions opt;
    Tokenizer *tok;
    glob_t files;                   /* the inputs, every --input glob expanded in order */
    TextReader *reader;
    char options_json[1 << 16];     /* the "options" object of the state file */
    Queue q;
    SplitOut splits[2];             /* [SPLIT_VAL], [SPLIT_TRAIN] */
    Stats stats;                    /* as of the last record written */
    Stats stats_at_doc;             /* as of the current document's start (the state file's) */
    DocCursor doc;
    long kill_after;                /* test hook: SIGKILL after this many state writes (-1 off) */
    long checkpoints;               /* state writes so far */
    char state_path[2048];          /* the state file this run resumed from (for messages) */
    double last_progress;           /* when the progress line was last printed */
} Run;

static void fatal(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", strncmp(msg, "phaselab: ", 10) ? "phaselab: " : "", msg);
    exit(code);
}

/* ---------------------------------------------------------------- reader thread */

static Batch *take_free_batch(Run *r) {
    pthread_mutex_lock(&r->q.mu);
    Batch *b = NULL;
    for (;;) {
        for (int i = 0; i < r->q.n_batches && !b; i++)
            if (r->q.batches[i].state == 0) b = &r->q.batches[i];
        if (b) break;
        pthread_cond_wait(&r->q.cv_free, &r->q.mu);
    }
    b->state = -1;                  /* being filled */
    pthread_mutex_unlock(&r->q.mu);
    b->n_items = 0;
    b->text.len = 0;
    b->ids.n = 0;
    b->raw_bytes = 0;
    return b;
}

static void publish(Run *r, Batch *b) {
    pthread_mutex_lock(&r->q.mu);
    b->seq = r->q.next_fill_seq++;
    b->state = 1;
    pthread_cond_broadcast(&r->q.cv_work);
    pthread_mutex_unlock(&r->q.mu);
}

static void *reader_main(void *arg) {
    Run *r = arg;
    char err[ERR_LEN];
    Batch *b = take_free_batch(r);
    TextRecord rec;
    int got;
    while ((got = text_reader_next(r->reader, &rec, err)) == 1) {
        Item *grown = grow_array(b->items, &b->cap_items, b->n_items + 1, sizeof *b->items, 256);
        if (!grown) fatal(1, "out of memory");
        b->items = grown;
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
            snprintf(it->bad, sizeof it->bad, "line longer than --max-doc-bytes %llu", (unsigned long long)r->opt.max_doc_bytes);
        it->input_kind = (uint8_t)rec.kind;
        if (text_buf_append(&b->text, rec.data, rec.len)) fatal(1, "out of memory");
        b->raw_bytes += rec.len;
        if (b->text.len >= BATCH_BYTES || b->n_items >= BATCH_ITEMS) {
            b->disk_pos = text_reader_disk_pos(r->reader);
            publish(r, b);
            b = take_free_batch(r);
        }
    }
    if (got < 0) fatal(1, "%s", err);
    b->disk_pos = text_reader_disk_pos(r->reader);
    publish(r, b);
    pthread_mutex_lock(&r->q.mu);
    r->q.total_batches = r->q.next_fill_seq;
    pthread_cond_broadcast(&r->q.cv_work);
    pthread_cond_broadcast(&r->q.cv_done);
    pthread_mutex_unlock(&r->q.mu);
    return arg;
}

/* ---------------------------------------------------------------- workers */

static void process_item(Run *r, TokenizerState *st, Batch *b, Item *it, TextBuf *clean, char *err) {
    const char *text = b->text.data + it->text_off;
    size_t len = it->text_len;
    InputKind kind = (InputKind)it->input_kind;
    it->ids_off = b->ids.n;
    it->ids_len = 0;
    it->doc_bytes = 0;
    if (it->kind == ITEM_BAD) return;
    cJSON *obj = NULL;
    if (kind == INPUT_JSONL) {
        int rc = jsonl_document(text, len, r->opt.field, &obj, &text, &len, it->bad, sizeof it->bad);
        if (rc == JSONL_BLANK) return;                         /* blank line: empty */
        if (rc == JSONL_BAD) { it->kind = ITEM_BAD; return; }
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
    Run *r = arg;
    TokenizerState *st = tokenizer_state_new(r->tok);
    if (!st) fatal(1, "out of memory");
    TextBuf clean = {0};
    char err[ERR_LEN];
    for (;;) {
        pthread_mutex_lock(&r->q.mu);
        Batch *b = NULL;
        for (;;) {
            for (int i = 0; i < r->q.n_batches && !b; i++)
                if (r->q.batches[i].state == 1 && r->q.batches[i].seq == r->q.next_work_seq) b = &r->q.batches[i];
            if (b || r->q.next_work_seq >= r->q.total_batches) break;
            pthread_cond_wait(&r->q.cv_work, &r->q.mu);
        }
        if (!b) { pthread_mutex_unlock(&r->q.mu); break; }
        r->q.next_work_seq++;
        b->state = 3;               /* being tokenized */
        pthread_mutex_unlock(&r->q.mu);
        for (size_t i = 0; i < b->n_items; i++) process_item(r, st, b, &b->items[i], &clean, err);
        pthread_mutex_lock(&r->q.mu);
        b->state = 2;
        pthread_cond_broadcast(&r->q.cv_done);
        pthread_mutex_unlock(&r->q.mu);
    }
    text_buf_free(&clean);
    tokenizer_state_free(st);
    return arg;
}

/* ---------------------------------------------------------------- writer (main thread) */

static void shard_path(Run *r, char *path, size_t n, int split, uint32_t index) {
    snprintf(path, n, "%s/%s_%06u.bin", r->opt.out, split_names[split], index);
}

static void write_state(Run *r, int complete) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "options", cJSON_Parse(r->options_json));
    cJSON_AddBoolToObject(root, "complete", complete);
    for (int s = 0; s < 2; s++) {
        cJSON *o = cJSON_AddObjectToObject(root, split_names[s]);
        cJSON_AddNumberToObject(o, "shards_done", r->splits[s].shard_index);
        cJSON_AddNumberToObject(o, "tokens", (double)r->splits[s].tokens);
    }
    const Stats *st = complete ? &r->stats : &r->stats_at_doc;
    cJSON *res = cJSON_AddObjectToObject(root, "resume");
    cJSON_AddNumberToObject(res, "file", r->doc.file);
    cJSON_AddStringToObject(res, "file_name", r->doc.file < (int)r->files.gl_pathc ? r->files.gl_pathv[r->doc.file] : "");
    cJSON_AddNumberToObject(res, "offset", (double)r->doc.offset);
    cJSON_AddNumberToObject(res, "line", (double)r->doc.line);
    cJSON_AddNumberToObject(res, "skip_tokens", (double)r->doc.emitted);
    cJSON_AddNumberToObject(res, "split", r->doc.split);
    cJSON_AddNumberToObject(res, "doc_index", (double)r->doc.index);
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
    snprintf(path, sizeof path, "%s/%s", r->opt.out, STATE_FILE);
    if (fs_write_atomic(path, text, strlen(text), err)) fatal(1, "%s", err);
    free(text);
    r->checkpoints++;
    if (r->kill_after >= 0 && r->checkpoints >= r->kill_after) raise(SIGKILL);   /* test hook */
}

static void close_shard(Run *r, int s) {
    char err[ERR_LEN];
    if (!r->splits[s].w) return;
    if (shard_writer_close(r->splits[s].w, err)) fatal(1, "%s", err);
    r->splits[s].w = NULL;
    r->splits[s].shard_index++;
    write_state(r, 0);
}

static void emit(Run *r, const uint32_t *ids, size_t n) {
    char err[ERR_LEN], path[2048];
    if (r->doc.skip_tokens) {
        size_t drop = n < r->doc.skip_tokens ? n : (size_t)r->doc.skip_tokens;
        ids += drop; n -= drop;
        r->doc.skip_tokens -= drop;
        r->doc.emitted += drop;
    }
    SplitOut *so = &r->splits[r->doc.split];
    while (n > 0) {
        if (!so->w) {
            shard_path(r, path, sizeof path, r->doc.split, so->shard_index);
            so->w = shard_writer_open(path, r->opt.vocab_size, tokenizer_eot_id(r->tok), tokenizer_fingerprint(r->tok), err);
            if (!so->w) fatal(1, "%s", err);
        }
        uint64_t room = r->opt.shard_tokens - shard_writer_count(so->w);
        size_t take = n < room ? n : (size_t)room;
        if (shard_writer_append(so->w, ids, take, err)) fatal(1, "%s", err);
        ids += take; n -= take;
        so->tokens += take;
        r->doc.emitted += take;
        r->stats.tokens += take;
        if (shard_writer_count(so->w) == r->opt.shard_tokens) close_shard(r, r->doc.split);
    }
}

static void note_first(Run *r, char *slot, const Item *it, const char *what) {
    if (slot[0]) return;
    snprintf(slot, 512, "%s:%llu%s%s", r->files.gl_pathv[it->file_index], (unsigned long long)it->line, what[0] ? ": " : "", what);
}

static void write_item(Run *r, const Batch *b, const Item *it) {
    r->stats.raw_bytes += it->text_len;
    if (it->kind == ITEM_BAD) {
        r->stats.bad++;
        note_first(r, r->stats.first_bad, it, it->bad);
        return;
    }
    if (!r->doc.active) {
        if (it->ids_len == 0 && !it->more) { r->stats.empty++; return; }
        r->doc.active = 1;
        r->stats_at_doc = r->stats;
        r->stats_at_doc.raw_bytes -= it->text_len;
        r->doc.file = it->file_index;
        r->doc.offset = it->offset;
        r->doc.line = it->line;
        r->doc.emitted = 0;
        r->doc.invalid = 0;
        if (r->doc.resume_split >= 0) { r->doc.split = r->doc.resume_split; r->doc.resume_split = -1; }
        else r->doc.split = r->splits[SPLIT_VAL].tokens < r->opt.val_tokens ? SPLIT_VAL : SPLIT_TRAIN;
    }
    if (it->replaced > 0) {
        r->stats.invalid_seqs += (uint64_t)it->replaced;
        if (!r->doc.invalid) r->stats.invalid_docs++;      /* a document counts once, whatever its pieces */
        r->doc.invalid = 1;
        note_first(r, r->stats.first_invalid, it, "");
    }
    if (it->forced) { r->stats.forced_splits++; note_first(r, r->stats.first_forced, it, ""); }
    r->stats.doc_bytes += it->doc_bytes;
    emit(r, b->ids.ids + it->ids_off, it->ids_len);
    if (it->more) return;
    uint32_t eot = tokenizer_eot_id(r->tok);
    emit(r, &eot, 1);
    if (r->doc.skip_tokens)
        fatal(1, "%s: resume.skip_tokens: %llu more tokens than the document at %s:%llu has (the input changed, or "
              "an edited state; delete the directory to start over)", r->state_path, (unsigned long long)r->doc.skip_tokens,
              r->files.gl_pathv[r->doc.file], (unsigned long long)r->doc.line);
    r->stats.docs++;
    r->doc.index++;
    if (r->doc.split == SPLIT_VAL && r->splits[SPLIT_VAL].tokens >= r->opt.val_tokens) close_shard(r, SPLIT_VAL);
    r->doc.active = 0;
}

/* ---------------------------------------------------------------- progress and summary */

static void human_time(double s, char *out, size_t n) {
    if (s < 0 || s > 1e7) { snprintf(out, n, "--:--:--"); return; }
    long t = (long)s;
    snprintf(out, n, "%02ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

static void progress(Run *r, double t0, uint64_t disk_pos0, uint64_t bytes0, uint64_t tokens0, uint64_t disk_pos, int final) {
    double t = clock_seconds();
    int tty = isatty(2);
    if (r->opt.quiet || (!final && t - r->last_progress < (tty ? 0.25 : 10.0))) return;
    r->last_progress = t;
    double el = t - t0 > 1e-9 ? t - t0 : 1e-9;
    uint64_t total = text_reader_disk_total(r->reader);
    double frac = total ? (double)disk_pos / (double)total : 1.0;
    double disk_rate = (double)(disk_pos - disk_pos0) / el;
    char eta[32];
    human_time(disk_rate > 0 ? (double)(total - disk_pos) / disk_rate : -1, eta, sizeof eta);
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "%s[%s] %5.1f%%  %7.2f MB/s  %6.2f M tok/s  ETA %s  docs %llu%s", tty ? "\r" : "", bar, 100 * frac,
            (double)(r->stats.raw_bytes - bytes0) / el / 1e6, (double)(r->stats.tokens - tokens0) / el / 1e6, eta,
            (unsigned long long)r->stats.docs, tty && !final ? "" : "\n");
    fflush(stderr);
}

static void summary(Run *r, double seconds, uint64_t tokens_this_run, int resumed) {
    printf("tokenize: %s -> %s (%s)\n", r->opt.tokenizer, r->opt.out, resumed ? "resumed run" : "fresh run");
    printf("  documents       %llu (end-of-text after each)\n", (unsigned long long)r->stats.docs);
    printf("  tokens          %llu (train %llu in %u shards, val %llu in %u shards)\n", (unsigned long long)r->stats.tokens,
           (unsigned long long)r->splits[SPLIT_TRAIN].tokens, r->splits[SPLIT_TRAIN].shard_index,
           (unsigned long long)r->splits[SPLIT_VAL].tokens, r->splits[SPLIT_VAL].shard_index);
    printf("  bytes           %llu read (records), %llu of document text\n", (unsigned long long)r->stats.raw_bytes,
           (unsigned long long)r->stats.doc_bytes);
    printf("  empty           %llu (blank lines and empty documents, skipped)\n", (unsigned long long)r->stats.empty);
    printf("  bad lines       %llu%s%s%s\n", (unsigned long long)r->stats.bad, r->stats.bad ? " (skipped; first at " : "",
           r->stats.first_bad, r->stats.bad ? ")" : "");
    printf("  invalid UTF-8   %llu documents, %llu sequences replaced by U+FFFD%s%s%s\n", (unsigned long long)r->stats.invalid_docs,
           (unsigned long long)r->stats.invalid_seqs, r->stats.invalid_docs ? " (first at " : "", r->stats.first_invalid,
           r->stats.invalid_docs ? ")" : "");
    printf("  forced splits   %llu%s%s%s\n", (unsigned long long)r->stats.forced_splits, r->stats.forced_splits ? " (first at " : "",
           r->stats.first_forced, r->stats.forced_splits ? ")" : "");
    if (seconds > 0)
        printf("  speed           %.1f s, %.3f M tokens/s with %d threads\n", seconds, (double)tokens_this_run / seconds / 1e6, r->opt.threads);
    if (r->stats.invalid_docs) {   /* most often a file in another encoding (Latin-1, UTF-16): say so where it is seen */
        fflush(stdout);
        fprintf(stderr, "phaselab: warning: %llu of %llu documents had invalid UTF-8 (first at %s), replaced by U+FFFD: "
                "the input is read as UTF-8; convert text in another encoding first (e.g. iconv -f LATIN1 -t UTF-8 FILE > "
                "FILE.utf8.txt) and tokenize again into a new --out\n", (unsigned long long)r->stats.invalid_docs,
                (unsigned long long)r->stats.docs, r->stats.first_invalid);
    }
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

static void load_stats(Run *r, const char *path, const cJSON *c) {
#define NUM(field, key) r->stats.field = state_u64(path, c, "stats.", key, JSON_MAX_EXACT)
    NUM(docs, "documents"); NUM(empty, "empty"); NUM(bad, "bad_lines"); NUM(tokens, "tokens");
    NUM(raw_bytes, "raw_bytes"); NUM(doc_bytes, "doc_bytes"); NUM(invalid_docs, "invalid_utf8_docs");
    NUM(invalid_seqs, "invalid_utf8_seqs"); NUM(forced_splits, "forced_splits");
#undef NUM
    const char *s;
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_bad")))) snprintf(r->stats.first_bad, 512, "%s", s);
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_invalid")))) snprintf(r->stats.first_invalid, 512, "%s", s);
    if ((s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "first_forced")))) snprintf(r->stats.first_forced, 512, "%s", s);
}

/* Returns 1 when a state was loaded (resume), 2 when the run is already complete, 0 fresh. */
static int load_state(Run *r) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", r->opt.out, STATE_FILE);
    char *text = fs_read_all(path, NULL);
    if (!text) {
        if (errno != ENOENT) fatal(1, "%s: cannot read: %s", path, strerror(errno));
        glob_t g;
        char pat[2100];
        snprintf(pat, sizeof pat, "%s/*_[0-9][0-9][0-9][0-9][0-9][0-9].bin", r->opt.out);
        int found = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        if (found) fatal(2, "%s: holds shards but no %s (expected an empty or new --out directory)", r->opt.out, STATE_FILE);
        globfree(&g);
        return 0;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fatal(1, "%s: not valid JSON (expected a state written by ./tokenize; delete it to start over)", path);
    char *have = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "options"));
    cJSON *want_obj = cJSON_Parse(r->options_json);
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
        r->splits[s].shard_index = (uint32_t)state_u64(path, o, where, "shards_done", 999999);
        r->splits[s].tokens = state_u64(path, o, where, "tokens", JSON_MAX_EXACT);
        uint64_t in_shards = 0;
        for (uint32_t i = 0; i < r->splits[s].shard_index; i++) {
            char sp[2048], serr[ERR_LEN];
            Shard sh;
            shard_path(r, sp, sizeof sp, s, i);
            struct stat sst;
            if (stat(sp, &sst) != 0) fatal(1, "%s: listed as complete in %s but missing (delete the directory to start over)", sp, path);
            if (shard_open(&sh, sp, serr)) fatal(1, "%s (listed as complete in %s)", serr, path);
            in_shards += sh.n_tokens;
            shard_close(&sh);
        }
        if (in_shards != r->splits[s].tokens)
            fatal(1, "%s: %s.tokens is %llu but its %u shards hold %llu tokens (edited or corrupt state; delete the "
                  "directory to start over)", path, split_names[s], (unsigned long long)r->splits[s].tokens,
                  r->splits[s].shard_index, (unsigned long long)in_shards);
    }
    load_stats(r, path, cJSON_GetObjectItemCaseSensitive(root, "stats"));
    int complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "complete"));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resume");
    r->doc.file = (int)state_u64(path, res, "resume.", "file", r->files.gl_pathc);
    r->doc.offset = state_u64(path, res, "resume.", "offset", JSON_MAX_EXACT);
    r->doc.line = state_u64(path, res, "resume.", "line", JSON_MAX_EXACT);
    r->doc.skip_tokens = state_u64(path, res, "resume.", "skip_tokens", JSON_MAX_EXACT);
    r->doc.resume_split = (int)state_u64(path, res, "resume.", "split", 1);
    r->doc.index = state_u64(path, res, "resume.", "doc_index", JSON_MAX_EXACT);
    if (r->doc.line < 1 && r->doc.file < (int)r->files.gl_pathc)
        fatal(1, "%s: resume.line 0, expected a 1-based line", path);
    /* the resumed document's first skip_tokens tokens are in the resumed split's shards */
    if (r->doc.skip_tokens > r->splits[r->doc.resume_split].tokens)
        fatal(1, "%s: resume.skip_tokens %llu exceeds the %llu tokens of the %s shards (edited or corrupt state)", path,
              (unsigned long long)r->doc.skip_tokens, (unsigned long long)r->splits[r->doc.resume_split].tokens, split_names[r->doc.resume_split]);
    snprintf(r->state_path, sizeof r->state_path, "%s", path);
    cJSON_Delete(root);
    return complete ? 2 : 1;
}

/* ---------------------------------------------------------------- the run */

static void build_options_json(Run *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tokenizer_fingerprint", tokenizer_fingerprint(r->tok));
    cJSON_AddStringToObject(o, "field", r->opt.field);
    cJSON_AddNumberToObject(o, "shard_tokens", (double)r->opt.shard_tokens);
    cJSON_AddNumberToObject(o, "val_tokens", (double)r->opt.val_tokens);
    cJSON_AddNumberToObject(o, "max_doc_bytes", (double)r->opt.max_doc_bytes);
    cJSON_AddNumberToObject(o, "vocab_size", r->opt.vocab_size);
    cJSON_AddStringToObject(o, "txt_docs", r->opt.txt_mode == TXT_DOC_PER_FILE ? "file" : "block");
    cJSON *in = cJSON_AddArrayToObject(o, "inputs");
    for (size_t i = 0; i < r->files.gl_pathc; i++) {
        struct stat st;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", r->files.gl_pathv[i]);
        cJSON_AddNumberToObject(e, "bytes", stat(r->files.gl_pathv[i], &st) == 0 ? (double)st.st_size : -1.0);
        cJSON_AddItemToArray(in, e);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (strlen(s) >= sizeof r->options_json) fatal(2, "too many input files for the state file (%zu)", r->files.gl_pathc);
    strcpy(r->options_json, s);
    free(s);
    cJSON_Delete(o);
}

/* A run with nothing read yet: an empty queue, no resumed document, the test hook off. */
static Run *run_init(Run *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->q.mu, NULL);
    pthread_cond_init(&r->q.cv_free, NULL);
    pthread_cond_init(&r->q.cv_work, NULL);
    pthread_cond_init(&r->q.cv_done, NULL);
    r->q.total_batches = UINT64_MAX;
    r->doc.resume_split = -1;
    r->kill_after = -1;
    return r;
}
int tokenize_run(const TokenizeOptions *opt, char **globs, int n_globs) {
    char err[ERR_LEN];
    static Run run;                 /* 64 KiB+: static storage rather than the stack (one run a process) */
    Run *r = run_init(&run);
    r->opt = *opt;
    for (int i = 0; i < n_globs; i++) {
        int rc = glob(globs[i], i ? GLOB_APPEND : 0, NULL, &r->files);
        if (rc == GLOB_NOMATCH || (rc == 0 && r->files.gl_pathc == 0)) fatal(2, "--input '%s': no file matches", globs[i]);
        if (rc != 0 && rc != GLOB_NOMATCH) fatal(2, "--input '%s': cannot expand", globs[i]);
    }
    r->tok = tokenizer_open(r->opt.tokenizer, err);
    if (!r->tok) fatal(2, "%s", err);
    if (tokenizer_eot_id(r->tok) == UINT32_MAX) fatal(2, "%s: no <|endoftext|> added token (expected one for document separators)", r->opt.tokenizer);
    if (!r->opt.vocab_size) {
        uint32_t n = tokenizer_n_ids(r->tok);
        if (tokenizer_is_bytes(r->tok)) r->opt.vocab_size = n;
        else if (tokenizer_eot_id(r->tok) == 151643 && n <= 151936) r->opt.vocab_size = 151936;   /* Qwen2/Qwen3 models */
        else r->opt.vocab_size = (n + 127) / 128 * 128;
    }
    if (r->opt.vocab_size < tokenizer_n_ids(r->tok))
        fatal(2, "--vocab-size %u is below the tokenizer's %u ids", r->opt.vocab_size, tokenizer_n_ids(r->tok));
    /* --out: a directory, created with its parents (mkdir -p) when missing */
    struct stat out_st;
    int out_existed = stat(r->opt.out, &out_st) == 0;
    if (out_existed && !S_ISDIR(out_st.st_mode))
        fatal(2, "%s: --out names an existing file that is not a directory; expected the directory for the shards "
              "(created with its parents when missing)", r->opt.out);
    if (!out_existed && fs_mkdirs(r->opt.out, err)) {
        int e = errno;
        fatal(e == ENOSPC || e == EIO || e == EDQUOT || e == ENOMEM ? 1 : 2, "--out: %s", err);
    }
    build_options_json(r);
    const char *ka = getenv("PHASELAB_TOKENIZE_KILL_AFTER_SHARDS");   /* test hook: SIGKILL itself */
    if (ka) r->kill_after = atol(ka);

    int resumed = load_state(r);
    r->reader = text_reader_open(r->files.gl_pathv, (int)r->files.gl_pathc, r->opt.txt_mode, r->opt.max_doc_bytes, err);
    if (!r->reader || text_reader_set_field(r->reader, r->opt.field, err)) fatal(2, "%s", err);
    if (resumed == 2) {
        summary(r, 0, 0, 1);
        printf("  (already complete: nothing to do)\n");
        return 0;
    }
    if (resumed == 1) {
        if (text_reader_seek(r->reader, r->doc.file, r->doc.offset, r->doc.line, err)) fatal(1, "%s", err);
        if (!r->opt.quiet)
            fprintf(stderr, "tokenize: resuming at %s:%llu (%u train and %u val shards done)\n",
                    r->doc.file < (int)r->files.gl_pathc ? r->files.gl_pathv[r->doc.file] : "end", (unsigned long long)r->doc.line,
                    r->splits[SPLIT_TRAIN].shard_index, r->splits[SPLIT_VAL].shard_index);
    }

    r->q.n_batches = 2 * r->opt.threads + 2;
    r->q.batches = calloc((size_t)r->q.n_batches, sizeof *r->q.batches);
    pthread_t rd, *wk = calloc((size_t)r->opt.threads, sizeof *wk);
    if (!r->q.batches || !wk) fatal(1, "out of memory");
    double t0 = clock_seconds();
    uint64_t disk0 = text_reader_disk_pos(r->reader), bytes0 = r->stats.raw_bytes, tokens0 = r->stats.tokens;
    pthread_create(&rd, NULL, reader_main, r);
    for (int i = 0; i < r->opt.threads; i++) pthread_create(&wk[i], NULL, worker_main, r);

    uint64_t disk_pos = disk0;
    for (uint64_t seq = 0;; seq++) {
        pthread_mutex_lock(&r->q.mu);
        Batch *b = NULL;
        for (;;) {
            for (int i = 0; i < r->q.n_batches && !b; i++)
                if (r->q.batches[i].state == 2 && r->q.batches[i].seq == seq) b = &r->q.batches[i];
            if (b || seq >= r->q.total_batches) break;
            pthread_cond_wait(&r->q.cv_done, &r->q.mu);
        }
        pthread_mutex_unlock(&r->q.mu);
        if (!b) break;
        for (size_t i = 0; i < b->n_items; i++) write_item(r, b, &b->items[i]);
        disk_pos = b->disk_pos;
        pthread_mutex_lock(&r->q.mu);
        b->state = 0;
        pthread_cond_broadcast(&r->q.cv_free);
        pthread_mutex_unlock(&r->q.mu);
        progress(r, t0, disk0, bytes0, tokens0, disk_pos, 0);
    }
    pthread_join(rd, NULL);
    for (int i = 0; i < r->opt.threads; i++) pthread_join(wk[i], NULL);
    free(wk);
    if (r->doc.active) fatal(1, "internal: input ended inside a document");
    /* final partial shards */
    char errc[ERR_LEN];
    for (int s = 0; s < 2; s++)
        if (r->splits[s].w) {
            if (shard_writer_close(r->splits[s].w, errc)) fatal(1, "%s", errc);
            r->splits[s].w = NULL;
            r->splits[s].shard_index++;
        }
    if (r->stats.docs == 0) {   /* nothing was done: never a success (and no empty "complete" state) */
        if (!out_existed) rmdir(r->opt.out);
        fatal(2, "nothing tokenized: the %zu input file(s) of --input held no document (%llu empty, %llu bad line(s)%s%s); "
              "expected at least one non-empty document (.txt: text; .jsonl: objects with a string field \"%s\", "
              "--field)", r->files.gl_pathc, (unsigned long long)r->stats.empty, (unsigned long long)r->stats.bad,
              r->stats.bad ? ", the first at " : "", r->stats.bad ? r->stats.first_bad : "", r->opt.field);
    }
    r->doc.file = (int)r->files.gl_pathc;
    r->doc.offset = r->doc.line = 0;
    r->doc.emitted = 0;
    write_state(r, 1);
    double seconds = clock_seconds() - t0;
    progress(r, t0, disk0, bytes0, tokens0, text_reader_disk_total(r->reader), 1);
    summary(r, seconds, r->stats.tokens - tokens0, resumed);
    text_reader_close(r->reader);
    tokenizer_free(r->tok);
    globfree(&r->files);
    return 0;
}
