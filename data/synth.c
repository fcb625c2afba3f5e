/* Synthetic key-value retrieval corpus: row generator and cached, atomic corpus writer.
 * The row layout and the vocabulary are described in data/synth.h.
 *
 * Randomness: row r of stream s draws from a splitmix64 sequence whose state starts at
 * mix(seed, s, r), so every row is independent of the others and of the row count; uniform
 * integers in [0, k) are x mod k (bias below 2^-57 for k <= 64), probabilities compare the top
 * 53 bits as a double in [0, 1). */
#include "data/synth.h"
#include "data/shard.h"
#include "common/errors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ random numbers */

typedef struct { uint64_t state; } SynthRng;

static uint64_t splitmix_next(SynthRng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int rng_below(SynthRng *r, int k) { return (int)(splitmix_next(r) % (uint64_t)k); }
static double rng_unit(SynthRng *r) { return (double)(splitmix_next(r) >> 11) * 0x1.0p-53; }

static SynthRng row_rng(uint64_t seed, int stream, uint64_t row) {
    SynthRng r = {seed ^ 0x243f6a8885a308d3ULL};
    r.state = splitmix_next(&r) ^ (uint64_t)stream * 0x13198a2e03707344ULL;
    r.state = splitmix_next(&r) ^ row;
    splitmix_next(&r);
    return r;
}

/* ------------------------------------------------------------------ rows */

void synth_default_params(SynthParams *p) {
    p->max_filler = 23;
    p->short_min = 2;
    p->short_max = 16;
    p->long_records = 64;
    p->long_fraction = 0.3;
    p->ordered_fraction = 0.0;
    p->row_tokens = 0;
}

int synth_check_params(const SynthParams *p, int T, char *err) {
    if (p->max_filler < 0)
        return set_err(err, "synthetic corpus: max_filler %d, expected >= 0", p->max_filler);
    if (p->short_min < 1 || p->short_min > p->short_max || p->short_max > SYNTH_N_KEYS)
        return set_err(err, "synthetic corpus: short rows of %d..%d records, expected "
                       "1 <= min <= max <= %d", p->short_min, p->short_max, SYNTH_N_KEYS);
    if (p->long_records < 1 || p->long_records > SYNTH_N_KEYS)
        return set_err(err, "synthetic corpus: long rows of %d records, expected 1..%d",
                       p->long_records, SYNTH_N_KEYS);
    if (!(p->long_fraction >= 0.0 && p->long_fraction <= 1.0))
        return set_err(err, "synthetic corpus: long_fraction %g, expected 0..1", p->long_fraction);
    if (!(p->ordered_fraction >= 0.0 && p->ordered_fraction <= 1.0))
        return set_err(err, "synthetic corpus: ordered_fraction %g, expected 0..1", p->ordered_fraction);
    if (p->row_tokens < 0 || p->row_tokens > T)
        return set_err(err, "synthetic corpus: row_tokens %d, expected 1..T = %d (or 0: T)", p->row_tokens, T);
    int L = p->row_tokens ? p->row_tokens : T;
    int min_T = p->max_filler + 2 * p->short_min + 2 + 1;
    if (L < min_T)
        return set_err(err, "synthetic corpus: %s = %d, expected at least %d (fillers, %d records, "
                       "one query and the end-of-text)", p->row_tokens ? "row_tokens" : "T", L, min_T, p->short_min);
    return 0;
}

int synth_row(const SynthParams *p, int T, uint64_t seed, int stream, uint64_t row, uint32_t *out) {
    SynthRng r = row_rng(seed, stream, row);
    const int L = p->row_tokens ? p->row_tokens : T; /* the row proper; L..T-1 end-of-text */
    for (int t = L; t < T; t++) out[t] = SYNTH_EOT;
    int pos = 0, body = L - 1;                       /* out[L-1] is the end-of-text */
    int n_filler = rng_below(&r, p->max_filler + 1);
    for (; pos < n_filler; pos++) out[pos] = SYNTH_FILLER_FIRST + (uint32_t)rng_below(&r, SYNTH_N_FILLERS);

    int n = rng_unit(&r) < p->long_fraction
                ? p->long_records
                : p->short_min + rng_below(&r, p->short_max - p->short_min + 1);
    int room = (body - pos - 2) / 2;                 /* records that leave one query */
    if (n > room) n = room;

    int keys[SYNTH_N_KEYS];                          /* partial Fisher-Yates: n distinct keys */
    uint32_t value_of[SYNTH_N_KEYS];
    for (int i = 0; i < SYNTH_N_KEYS; i++) keys[i] = i;
    for (int i = 0; i < n; i++) {
        int j = i + rng_below(&r, SYNTH_N_KEYS - i);
        int t = keys[i]; keys[i] = keys[j]; keys[j] = t;
        value_of[keys[i]] = SYNTH_VALUE_FIRST + (uint32_t)rng_below(&r, SYNTH_N_VALUES);
        out[pos++] = SYNTH_KEY_FIRST + (uint32_t)keys[i];
        out[pos++] = value_of[keys[i]];
    }

    /* Drawn only when the option is on, so that the default rows stay what they always were. */
    int ordered = p->ordered_fraction > 0.0 && rng_unit(&r) < p->ordered_fraction;
    int order[SYNTH_N_KEYS];                         /* query passes over the row's keys */
    int left_in_pass = 0;
    while (pos + 2 <= body) {
        if (left_in_pass == 0) {
            for (int i = 0; i < n; i++) order[i] = keys[i];
            for (int i = n - 1; i > 0 && !ordered; i--) {
                int j = rng_below(&r, i + 1);
                int t = order[i]; order[i] = order[j]; order[j] = t;
            }
            left_in_pass = n;
        }
        int key = order[n - left_in_pass--];
        out[pos++] = SYNTH_KEY_FIRST + (uint32_t)key;
        out[pos++] = value_of[key];
    }
    if (pos < body) out[pos++] = SYNTH_FILLER_FIRST + (uint32_t)rng_below(&r, SYNTH_N_FILLERS);
    out[pos] = SYNTH_EOT;
    return n;
}

void synth_answer_targets(const int32_t *window, int T, int32_t *targets) {
    unsigned char seen[SYNTH_N_KEYS] = {0};
    for (int t = 0; t < T; t++) {
        int32_t tok = window[t];
        int is_key = synth_token_class(tok) == SYNTH_CLASS_KEY;
        targets[t] = is_key && seen[tok - SYNTH_KEY_FIRST] ? window[t + 1] : -1;
        if (is_key) seen[tok - SYNTH_KEY_FIRST] = 1;
    }
}

/* ------------------------------------------------------------------ corpus files */

#define SYNTH_CHUNK_ROWS 1024

/* 1 when path is a shard holding exactly rows rows of this stream plus the trailing EOT. */
static int synth_file_matches(const char *path, const SynthParams *p, int T, long rows,
                              uint64_t seed, int stream, uint32_t *row_buf) {
    Shard s;
    char ignored[ERR_LEN];
    if (shard_open(&s, path, ignored) != 0) return 0;
    int ok = s.vocab_size == SYNTH_VOCAB && s.eot_id == SYNTH_EOT &&
             strcmp(s.fingerprint, SYNTH_FINGERPRINT) == 0 &&
             s.n_tokens == (uint64_t)rows * (uint64_t)T + 1;
    for (long i = 0; ok && i < rows; i++) {
        synth_row(p, T, seed, stream, (uint64_t)i, row_buf);
        ok = memcmp(row_buf, s.tokens + (uint64_t)i * (uint64_t)T, (size_t)T * sizeof(uint32_t)) == 0;
    }
    if (ok) ok = s.tokens[(uint64_t)rows * (uint64_t)T] == SYNTH_EOT;
    shard_close(&s);
    return ok;
}

static int synth_write_file(const char *path, const SynthParams *p, int T, long rows,
                            uint64_t seed, int stream, char *err) {
    uint32_t *buf = malloc((size_t)SYNTH_CHUNK_ROWS * (size_t)T * sizeof(uint32_t));
    if (!buf) return set_err(err, "%s: out of memory for the synthetic corpus", path);
    if (synth_file_matches(path, p, T, rows, seed, stream, buf)) { free(buf); return 0; }
    ShardWriter *w = shard_writer_open(path, SYNTH_VOCAB, SYNTH_EOT, SYNTH_FINGERPRINT, err);
    if (!w) { free(buf); return -1; }
    for (long first = 0; first < rows; first += SYNTH_CHUNK_ROWS) {
        long count = rows - first < SYNTH_CHUNK_ROWS ? rows - first : SYNTH_CHUNK_ROWS;
        for (long i = 0; i < count; i++)
            synth_row(p, T, seed, stream, (uint64_t)(first + i), buf + (size_t)i * (size_t)T);
        if (shard_writer_append(w, buf, (size_t)count * (size_t)T, err) != 0) {
            shard_writer_abort(w);
            free(buf);
            return -1;
        }
    }
    uint32_t trailing_eot = SYNTH_EOT;                /* makes the last row a full window */
    free(buf);
    if (shard_writer_append(w, &trailing_eot, 1, err) != 0) { shard_writer_abort(w); return -1; }
    return shard_writer_close(w, err);
}

/* mkdir -p */
static int make_dirs(const char *dir, char *err) {
    char path[1024];
    if (strlen(dir) >= sizeof path) return set_err(err, "%s: path too long", dir);
    strcpy(path, dir);
    for (char *c = path + 1;; c++) {
        if (*c == '/' || *c == 0) {
            char saved = *c;
            *c = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return set_err(err, "%s: cannot create directory: %s", path, strerror(errno));
            *c = saved;
            if (saved == 0) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return set_err(err, "%s: not a directory, expected the synthetic corpus directory", dir);
    return 0;
}

int synth_write_corpus_params(const char *dir, int T, long train_rows, long val_rows,
                              uint64_t seed, const SynthParams *p, char *err) {
    if (synth_check_params(p, T, err) != 0) return -1;
    if (train_rows < 1 || val_rows < 1)
        return set_err(err, "%s: synthetic corpus of %ld training and %ld validation rows, "
                       "expected at least one of each", dir, train_rows, val_rows);
    if (make_dirs(dir, err) != 0) return -1;
    char path[1100];
    snprintf(path, sizeof path, "%s/train_000.bin", dir);
    if (synth_write_file(path, p, T, train_rows, seed, SYNTH_STREAM_TRAIN, err) != 0) return -1;
    snprintf(path, sizeof path, "%s/val_000.bin", dir);
    return synth_write_file(path, p, T, val_rows, seed, SYNTH_STREAM_VAL, err);
}

int synth_write_corpus(const char *dir, int T, long train_rows, long val_rows, uint64_t seed,
                       char *err) {
    SynthParams p;
    synth_default_params(&p);
    return synth_write_corpus_params(dir, T, train_rows, val_rows, seed, &p, err);
}
