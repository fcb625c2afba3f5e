/* Synthetic retrieval corpus (data/synth.c). Each generated row is parsed here independently of
 * the generator against the layout of data/synth.h: exactly T tokens ending in end-of-text,
 * 0..23 leading fillers, n distinct "key value" records (n in 2..16 or 64), then queries whose
 * values answer the records, each pass covering every key before one repeats; the mix of
 * short and long rows, the spread of record phases, determinism, and the corpus files
 * (one window per row through the loader, caching, atomic rewrite on a new seed). */
#include "data/loader.h"
#include "data/shard.h"
#include "data/synth.h"
#include "common/errors.h"
#include "tests/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/scratch/test_synth"

static int is_key(uint32_t t) { return t >= 16 && t <= 79; }
static int is_value(uint32_t t) { return t >= 80 && t <= 207; }
static int is_filler(uint32_t t) { return t >= 208 && t <= 255; }

typedef struct { int n_filler, n_records, n_queries; } RowShape;

/* Parses a row; returns NULL when it follows the layout, else what is wrong. */
static const char *parse_row(const uint32_t *row, int T, RowShape *shape) {
    int pos = 0;
    while (pos < T && is_filler(row[pos])) pos++;
    shape->n_filler = pos;
    if (pos > 23) return "more than 23 leading fillers";
    int value_of[256];
    for (int i = 0; i < 256; i++) value_of[i] = -1;
    int n = 0;
    while (pos + 1 < T - 1 && is_key(row[pos]) && value_of[row[pos]] < 0) {
        if (!is_value(row[pos + 1])) return "record key not followed by a value";
        value_of[row[pos]] = (int)row[pos + 1];
        n++;
        pos += 2;
    }
    shape->n_records = n;
    if (n < 1) return "no records";
    int queries = 0, in_pass = 0;
    int asked[256] = {0};
    while (pos + 2 <= T - 1) {
        if (!is_key(row[pos]) || value_of[row[pos]] < 0) return "query is not one of the row's keys";
        if ((int)row[pos + 1] != value_of[row[pos]]) return "query value does not answer its record";
        if (asked[row[pos]]) return "a key repeats before every key of the row was queried";
        asked[row[pos]] = 1;
        if (++in_pass == n) { in_pass = 0; memset(asked, 0, sizeof asked); }
        queries++;
        pos += 2;
    }
    shape->n_queries = queries;
    if (queries < 1) return "no query";
    if (pos == T - 2) {
        if (!is_filler(row[pos])) return "single slot before end-of-text is not a filler";
        pos++;
    }
    if (pos != T - 1 || row[T - 1] != SYNTH_EOT) return "row does not end with end-of-text at T-1";
    for (int i = 0; i < T - 1; i++) if (row[i] == SYNTH_EOT) return "end-of-text inside the row";
    return NULL;
}

static void test_rows(void) {
    SynthParams p;
    synth_default_params(&p);
    enum { T = 256, ROWS = 2000, GUARD = 8 };
    uint32_t row[T + GUARD];
    int ok = 1, long_rows = 0, filler_seen[24] = {0}, phase_seen[8] = {0};
    const char *why = NULL;
    long bad_row = -1;
    for (int r = 0; r < ROWS && ok; r++) {
        for (int i = 0; i < GUARD; i++) row[T + i] = 0xdeadbeef;
        int n = synth_row(&p, T, 1, SYNTH_STREAM_TRAIN, (uint64_t)r, row);
        RowShape s;
        why = parse_row(row, T, &s);
        for (int i = 0; i < GUARD && !why; i++) if (row[T + i] != 0xdeadbeef) why = "wrote past T tokens";
        if (!why && s.n_records != n) why = "returned record count differs from the row";
        if (!why && !((n >= 2 && n <= 16) || n == 64)) why = "record count outside 2..16 and 64";
        if (why) { ok = 0; bad_row = r; break; }
        long_rows += n == 64;
        filler_seen[s.n_filler] = 1;
        phase_seen[s.n_filler % 8] = 1;
    }
    check(ok, "synth: rows of T = 256 follow the layout", "row %ld: %s", bad_row, why ? why : "");
    double frac = (double)long_rows / ROWS;
    check(frac > 0.25 && frac < 0.35, "synth: about 30% of rows hold 64 records", "%.3f", frac);
    int all = 1;
    for (int i = 0; i < 24; i++) all &= filler_seen[i];
    for (int i = 0; i < 8; i++) all &= phase_seen[i];
    check(all, "synth: filler counts 0..23 all occur (records at every phase)", "");

    /* Small T: long rows are clamped, the layout still holds; below the minimum T is an error. */
    enum { SMALL = 30 };   /* 23 fillers + 2 records + 1 query + end-of-text */
    uint32_t small[SMALL];
    ok = 1;
    for (int r = 0; r < 500 && ok; r++) {
        synth_row(&p, SMALL, 3, SYNTH_STREAM_TRAIN, (uint64_t)r, small);
        RowShape s;
        why = parse_row(small, SMALL, &s);
        if (why) { ok = 0; bad_row = r; }
    }
    check(ok, "synth: rows of the smallest T = 30 follow the layout", "row %ld: %s", bad_row, why ? why : "");
    char err[ERR_LEN] = "";
    check(synth_check_params(&p, 30, err) == 0 && synth_check_params(&p, 29, err) != 0 &&
          strstr(err, "T = 29"), "synth: T below the minimum rejected", "\"%s\"", err);
    SynthParams q = p;
    q.long_records = 65;
    check(synth_check_params(&q, 256, err) != 0, "synth: more than 64 records rejected", "");

    /* A mix of only short rows, a parameter of the generator. */
    q = p;
    q.long_fraction = 0.0;
    ok = 1;
    for (int r = 0; r < 500 && ok; r++) ok = synth_row(&q, T, 1, SYNTH_STREAM_TRAIN, (uint64_t)r, row) <= 16;
    check(ok, "synth: long_fraction 0 gives only short rows", "");

    /* ordered_fraction 1: every query pass repeats the list in its order, so from the first
     * query on, token i of the query part equals token i mod 2n of the list. */
    q = p;
    q.ordered_fraction = 1.0;
    ok = 1;
    for (int r = 0; r < 200 && ok; r++) {
        int n = synth_row(&q, T, 1, SYNTH_STREAM_TRAIN, (uint64_t)r, row);
        int f = 0;
        while (row[f] >= SYNTH_FILLER_FIRST) f++;
        for (int i = f + 2 * n; i + 1 < T - 1 && ok; i += 2)
            ok = row[i] == row[f + (i - f) % (2 * n)] && row[i + 1] == row[f + (i - f) % (2 * n) + 1];
        if (!ok) bad_row = r;
    }
    check(ok, "synth: ordered_fraction 1 repeats the list in order in every pass", "row %ld", bad_row);
    q.ordered_fraction = 1.5;
    check(synth_check_params(&q, 256, err) != 0 && strstr(err, "ordered_fraction"),
          "synth: ordered_fraction outside 0..1 rejected", "\"%s\"", err);

    /* row_tokens L: the row proper in L tokens, then end-of-text to T. Row r of a T-token
     * corpus with row_tokens 64 is row r of a 64-token corpus, padded; every query of it
     * (a repeated key) is in the first 64 tokens, and the row ends in the end-of-text. */
    q = p;
    q.max_filler = 7;
    q.long_fraction = 0.0;
    q.short_max = 4;
    uint32_t short_row[64];
    ok = synth_check_params(&q, 64, err) == 0;
    q.row_tokens = 64;
    ok = ok && synth_check_params(&q, T, err) == 0;
    for (int r = 0; r < 300 && ok; r++) {
        SynthParams q64 = q;
        q64.row_tokens = 0;
        int n64 = synth_row(&q64, 64, 1, SYNTH_STREAM_TRAIN, (uint64_t)r, short_row);
        int n = synth_row(&q, T, 1, SYNTH_STREAM_TRAIN, (uint64_t)r, row);
        ok = n == n64 && memcmp(row, short_row, sizeof short_row) == 0;
        for (int t = 64; t < T && ok; t++) ok = row[t] == SYNTH_EOT;
        if (!ok) bad_row = r;
    }
    check(ok, "synth: row_tokens 64 in 256-token rows is the 64-token row, then end-of-text", "row %ld: %s", bad_row, err);
    q.row_tokens = T + 1;
    check(synth_check_params(&q, T, err) != 0 && strstr(err, "row_tokens"), "synth: row_tokens above T rejected",
          "\"%s\"", err);
    q.row_tokens = 10;
    check(synth_check_params(&q, T, err) != 0 && strstr(err, "row_tokens = 10"),
          "synth: row_tokens too short for fillers, records and a query rejected", "\"%s\"", err);

    /* Determinism and independence of streams and seeds. */
    uint32_t a[T], b[T], c[T], d[T];
    synth_row(&p, T, 1, SYNTH_STREAM_TRAIN, 17, a);
    synth_row(&p, T, 1, SYNTH_STREAM_TRAIN, 17, b);
    synth_row(&p, T, 2, SYNTH_STREAM_TRAIN, 17, c);
    synth_row(&p, T, 1, SYNTH_STREAM_VAL, 17, d);
    check(memcmp(a, b, sizeof a) == 0, "synth: same seed and row, same tokens", "");
    check(memcmp(a, c, sizeof a) != 0 && memcmp(a, d, sizeof a) != 0,
          "synth: another seed or the validation stream gives another row", "");
}

static int file_id(const char *path, struct stat *st) { return stat(path, st) == 0; }

static void test_corpus(void) {
    enum { T = 64, TRAIN = 300, VAL = 50 };
    char err[ERR_LEN] = "";
    const char *dir = DIR "/corpus";
    int rc = synth_write_corpus(dir, T, TRAIN, VAL, 7, err);
    check(rc == 0, "corpus: written", "\"%s\"", err);
    if (rc != 0) return;
    Shard s;
    rc = shard_open(&s, DIR "/corpus/train_000.bin", err);
    int ok = rc == 0 && s.n_tokens == (uint64_t)TRAIN * T + 1 && s.vocab_size == 256 &&
             s.eot_id == 0 && strcmp(s.fingerprint, "synthetic") == 0;
    check(ok, "corpus: train shard header (vocab 256, eot 0, \"synthetic\", rows*T + 1 tokens)", "\"%s\"", err);
    if (rc == 0) shard_close(&s);

    /* One window per row; window k's inputs are row k, its last target the next row's start. */
    TrainLoader *L = NULL;
    rc = train_loader_open(&L, DIR "/corpus/train_*.bin", T, SYNTH_VOCAB, 1, err);
    ok = rc == 0 && train_loader_n_windows(L) == TRAIN;
    int32_t w[T + 1];
    uint32_t row[T];
    SynthParams p;
    synth_default_params(&p);
    for (int k = 0; ok && k < TRAIN; k++) {
        ok = train_loader_window(L, (uint64_t)k, w, err) == 0;
        RowShape shape;
        for (int i = 0; ok && i < T; i++) row[i] = (uint32_t)w[i];
        ok = ok && parse_row(row, T, &shape) == NULL;
        uint32_t expect[T];
        synth_row(&p, T, 7, SYNTH_STREAM_TRAIN, (uint64_t)k, expect);
        ok = ok && memcmp(row, expect, sizeof row) == 0;
        ok = ok && (k + 1 < TRAIN ? (w[T] == SYNTH_EOT || is_filler((uint32_t)w[T]) || is_key((uint32_t)w[T]))
                                  : w[T] == SYNTH_EOT);
    }
    check(ok, "corpus: 300 rows give 300 training windows, window k = row k", "\"%s\"", err);
    if (rc == 0) train_loader_close(L);

    ValSet *V = NULL;
    rc = val_set_open(&V, DIR "/corpus/val_*.bin", T, SYNTH_VOCAB, -1, err);
    ok = rc == 0 && val_set_n_windows(V) == VAL;
    int differs = 0;
    for (int k = 0; ok && k < VAL; k++) {
        uint32_t train_row[T];
        ok = val_set_window(V, k, w, err) == 0;
        for (int i = 0; ok && i < T; i++) row[i] = (uint32_t)w[i];
        RowShape shape;
        ok = ok && parse_row(row, T, &shape) == NULL;
        synth_row(&p, T, 7, SYNTH_STREAM_TRAIN, (uint64_t)k, train_row);
        differs += memcmp(row, train_row, sizeof row) != 0;
    }
    check(ok && differs == VAL, "corpus: 50 validation windows, none equal to a training row",
          "\"%s\" %d differ", err, differs);
    if (rc == 0) val_set_close(V);

    /* Cache: the same call keeps the files (same inode, same mtime); another seed rewrites. */
    struct stat before, after;
    file_id(DIR "/corpus/train_000.bin", &before);
    rc = synth_write_corpus(dir, T, TRAIN, VAL, 7, err);
    file_id(DIR "/corpus/train_000.bin", &after);
    check(rc == 0 && before.st_ino == after.st_ino && before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
          before.st_mtim.tv_nsec == after.st_mtim.tv_nsec, "corpus: unchanged request keeps the files", "\"%s\"", err);
    rc = synth_write_corpus(dir, T, TRAIN, VAL, 8, err);
    file_id(DIR "/corpus/train_000.bin", &after);
    int rewrote = rc == 0 && before.st_ino != after.st_ino;
    if (rewrote && shard_open(&s, DIR "/corpus/train_000.bin", err) == 0) {
        uint32_t expect[T];
        synth_row(&p, T, 8, SYNTH_STREAM_TRAIN, 0, expect);
        rewrote = memcmp(s.tokens, expect, sizeof expect) == 0;
        shard_close(&s);
    }
    check(rewrote, "corpus: another seed rewrites the files", "\"%s\"", err);
    file_id(DIR "/corpus/train_000.bin", &before);
    rc = synth_write_corpus(dir, T + 2, TRAIN, VAL, 8, err);
    file_id(DIR "/corpus/train_000.bin", &after);
    check(rc == 0 && before.st_ino != after.st_ino, "corpus: another T rewrites the files", "\"%s\"", err);
    struct stat st;
    check(stat(DIR "/corpus/train_000.bin.tmp", &st) != 0 && stat(DIR "/corpus/val_000.bin.tmp", &st) != 0,
          "corpus: no temporary files left", "");

    /* Two directories, same seed: byte-identical files. */
    rc = synth_write_corpus(DIR "/again", T + 2, TRAIN, VAL, 8, err);
    int same = rc == 0 && system("cmp -s " DIR "/corpus/train_000.bin " DIR "/again/train_000.bin") == 0 &&
               system("cmp -s " DIR "/corpus/val_000.bin " DIR "/again/val_000.bin") == 0;
    check(same, "corpus: deterministic from the seed", "\"%s\"", err);
    rc = synth_write_corpus(DIR "/bad", 10, TRAIN, VAL, 8, err);
    check(rc != 0 && strstr(err, "T = 10"), "corpus: too small T is an error", "\"%s\"", err);
}

/* data.loss_targets = answers: the counted targets of a window are exactly the values of its
 * queries (positions found by parse_row, independently of synth_answer_targets), each equal to
 * the value its record gave the key; every other target, the records' included, is -1. */
static void test_answer_targets(void) {
    enum { T = 256, ROWS = 200 };
    SynthParams p;
    synth_default_params(&p);
    uint32_t row[T];
    int32_t window[T + 1], targets[T];
    int bad = 0, rows_ok = 0;
    long counted = 0, queries = 0;
    char why[160] = "";
    for (int r = 0; r < ROWS; r++) {
        synth_row(&p, T, 5, SYNTH_STREAM_TRAIN, (uint64_t)r, row);
        RowShape sh;
        if (parse_row(row, T, &sh)) { bad++; continue; }
        for (int t = 0; t < T; t++) window[t] = (int32_t)row[t];
        window[T] = (int32_t)SYNTH_KEY_FIRST;    /* the next row's first token: never counted */
        synth_answer_targets(window, T, targets);
        int first_query = sh.n_filler + 2 * sh.n_records, ok = 1;
        for (int t = 0; t < T; t++) {
            int is_query = t >= first_query && t < first_query + 2 * sh.n_queries && (t - first_query) % 2 == 0;
            int32_t want = is_query ? window[t + 1] : -1;
            if (is_query) {       /* the record's value of this key */
                for (int k = sh.n_filler; k < first_query; k += 2)
                    if (window[k] == window[t] && window[k + 1] != want) ok = 0;
            }
            if (targets[t] != want) {
                ok = 0;
                if (!why[0]) snprintf(why, sizeof why, "row %d t %d: target %d, expected %d", r, t, targets[t], want);
            }
            counted += targets[t] >= 0;
        }
        queries += sh.n_queries;
        rows_ok += ok;
    }
    check(bad == 0 && rows_ok == ROWS, "answer targets: exactly the query values of each row", "%d of %d rows; %s",
          rows_ok, ROWS - bad, why);
    check(counted == queries && queries > ROWS, "answer targets: one counted target per query", "%ld counted, %ld queries",
          counted, queries);
}

int main(void) {
    system("rm -rf " DIR " && mkdir -p " DIR);
    test_rows();
    test_answer_targets();
    test_corpus();
    system("rm -rf " DIR);
    return check_exit_code();
}
