/* Synthetic key-value retrieval corpus: what a tiny model learns lookup from in minutes
 * (measured: a 2-layer model learns the lookup in a few hundred steps), for the default run and the tests.
 *
 * Vocabulary of 256: 0 end-of-text, 1 separator (reserved, not emitted), 16..79 keys (64),
 * 80..207 values (128), 208..255 fillers (48); 2..15 unused. Shards carry the tokenizer
 * fingerprint "synthetic".
 *
 * A row is exactly T tokens, the last one end-of-text:
 *   f filler tokens            f uniform in 0..max_filler (23): shifts every record, so keys
 *                              sit at every phase
 *   n records "key value"      n distinct keys, each with a uniform random value; n uniform in
 *                              short_min..short_max (2..16) with probability 1 - long_fraction,
 *                              long_records (64) with probability long_fraction (0.3)
 *   queries "key value"        the row's keys in a random order, reshuffled after each full
 *                              pass, each followed by its record's value, until the row is full
 *                              (with probability ordered_fraction, 0: every pass in list order)
 *   [one filler]               when a single slot is left before the end-of-text
 *   end-of-text
 *   [end-of-text padding]      with row_tokens L < T: the row above is built in L tokens (its
 *                              end-of-text at L-1) and positions L..T-1 are end-of-text, so a
 *                              query sees at most L-1 tokens of context while the window stays
 *                              T long (the loss of data.loss_targets = answers ignores them)
 * n is clamped so that at least one query fits (relevant only for small T). Row r of a stream
 * depends only on (seed, stream, r, T, params): rows are generated independently.
 *
 * Files: DIR/train_000.bin holds train_rows rows (stream 0), DIR/val_000.bin val_rows rows
 * (stream 1), each followed by ONE extra end-of-text token so that the windowing of
 * data/loader.h (window k = tokens [kT, kT+T]) gives exactly one window per row: window k's
 * inputs are row k. */
#ifndef PHASELAB_SYNTH_H
#define PHASELAB_SYNTH_H
#include <stdint.h>

#define SYNTH_VOCAB 256
#define SYNTH_EOT 0
#define SYNTH_SEP 1
#define SYNTH_KEY_FIRST 16
#define SYNTH_N_KEYS 64
#define SYNTH_VALUE_FIRST 80
#define SYNTH_N_VALUES 128
#define SYNTH_FILLER_FIRST 208
#define SYNTH_N_FILLERS 48
#define SYNTH_FINGERPRINT "synthetic"

enum { SYNTH_STREAM_TRAIN = 0, SYNTH_STREAM_VAL = 1 };

/* The class of a token of the synthetic vocabulary (the one statement of the ranges above):
 * key 16..79, value 80..207, filler 208..255, end-of-text 0, other (the separator, the unused
 * ids 2..15 and anything outside 0..255). */
typedef enum {
    SYNTH_CLASS_KEY = 0, SYNTH_CLASS_VALUE, SYNTH_CLASS_FILLER, SYNTH_CLASS_EOT, SYNTH_CLASS_OTHER, SYNTH_N_CLASSES
} SynthTokenClass;

static inline int synth_token_class(int32_t tok) {
    if (tok >= SYNTH_KEY_FIRST && tok < SYNTH_KEY_FIRST + SYNTH_N_KEYS) return SYNTH_CLASS_KEY;
    if (tok >= SYNTH_VALUE_FIRST && tok < SYNTH_VALUE_FIRST + SYNTH_N_VALUES) return SYNTH_CLASS_VALUE;
    if (tok >= SYNTH_FILLER_FIRST && tok < SYNTH_FILLER_FIRST + SYNTH_N_FILLERS) return SYNTH_CLASS_FILLER;
    if (tok == SYNTH_EOT) return SYNTH_CLASS_EOT;
    return SYNTH_CLASS_OTHER;
}

/* "key", "value", "filler", "eot", "other" (indexed by SynthTokenClass). */
static inline const char *synth_class_name(int k) {
    static const char *const names[SYNTH_N_CLASSES] = {"key", "value", "filler", "eot", "other"};
    return k >= 0 && k < SYNTH_N_CLASSES ? names[k] : "?";
}

typedef struct {
    int max_filler;          /* leading fillers uniform in 0..max_filler            [23] */
    int short_min, short_max;/* records of a short row, uniform in this range    [2, 16] */
    int long_records;        /* records of a long row                               [64] */
    double long_fraction;    /* probability that a row is long                     [0.3] */
    double ordered_fraction; /* probability that a row's query passes all follow the list
                                order (each pass an exact repeat of the list, so every token
                                of a pass is predictable by induction) instead of a fresh
                                shuffle per pass                                    [0.0] */
    int row_tokens;          /* L: tokens of the row before the end-of-text padding, 0 = T;
                                a row of L tokens is exactly row r of a corpus made with T = L,
                                padded                                                [0] */
} SynthParams;

void synth_default_params(SynthParams *p);
/* Validates params and T: the row length (row_tokens, or T) must be at least
 * max_filler + 2*short_min + 3 (fillers, the shortest list, one query, the end-of-text), and
 * row_tokens at most T. */
int synth_check_params(const SynthParams *p, int T, char *err);

/* Fills row [T] with row `row` of `stream`; returns its number of records n. T must satisfy
 * synth_check_params. */
int synth_row(const SynthParams *p, int T, uint64_t seed, int stream, uint64_t row, uint32_t *out);

/* The answer targets of a window of the synthetic corpus (data.loss_targets = answers): for
 * t < T, targets[t] = window[t+1] when window[t] is a key that already occurred at some s < t
 * of the window (a query: its next token is the value the row's record gives it), else -1
 * (not counted: fillers, the records themselves, the keys of the queries and the end-of-text
 * are not predictable from the row). window [T+1] holds one row and the next row's first token
 * (data/loader.h), so the rule sees exactly one row. This is the MQAR set-up of Arora et al.
 * 2023 (loss on the answers only). */
void synth_answer_targets(const int32_t *window, int T, int32_t *targets);

/* Writes DIR/train_000.bin and DIR/val_000.bin (creating DIR), each atomically, with the
 * default params. A file that already holds exactly what would be written (same T, seed,
 * row count and params: its header and content are compared with the generator's output) is
 * kept as it is. */
int synth_write_corpus(const char *dir, int T, long train_rows, long val_rows, uint64_t seed,
                       char *err);
int synth_write_corpus_params(const char *dir, int T, long train_rows, long val_rows,
                              uint64_t seed, const SynthParams *p, char *err);
#endif
