/* Boundary statistics of learned chunk boundaries (docs/spec.md §6.5, "Boundary statistics"):
 * where a model with model.boundaries = learned puts its entry ends, as a measurement over the
 * batches of one evaluation. Pure functions of the flags, scores and input tokens of a batch;
 * nothing here runs a model.
 *
 * Inputs per (batch, layer): flags bd [B, T] (1 = the token ends an entry), scores p [B, T]
 * (p_t = sigmoid(w_bd . a_t + c_bd)), the input ids tok [B, T]; W = model.window (longest
 * chunk), S = model.stride (target mean chunk length, the ratio loss's N). Per layer l, summed
 * over every (b, t) of every batch added (n_pos = sum of B T):
 *   chunk         tokens s..e of a row with bd_e = 1 and no flag in s..e-1 (s = 0, or one past
 *                 the previous flag): a COMPLETE chunk of length e - s + 1 in 1..W;
 *   unpooled      the tokens after the last flag of their row (in no entry)      count
 *   hist[k]       complete chunks of length k + 1, k = 0..W-1                    count [W]
 *   n_bd          flags = complete chunks = entries                              count
 *   mean_len      sum_k (k + 1) hist[k] / n_bd                                   tokens (NaN: no chunk)
 *   F             n_bd / n_pos                                   boundary rate, 1 / token
 *   G             (1 / n_pos) sum p                                mean score
 *   R             N/(N-1) ((N-1) F G + (1 - F)(1 - G)),  N = S     the ratio loss of §6.5 at the
 *                 evaluation's F and G (not a mean of per-batch values)
 *   forced        flags with p < 1/2 (the chunk reached W) / n_bd                fraction (NaN: none)
 *   class c       of a token: key, value, filler, eot, other (data/synth.h synth_token_class, or the
 *                 caller's function)
 *   class_rate[c] flags on class-c tokens / n_bd: where the boundaries fall;
 *   class_chance[c] class-c tokens / n_pos (over every layer's positions): the share a class would
 *                 get if boundaries ignored the content (chance);
 *   record pair   (t, t+1) in one row with tok_t a key and tok_{t+1} a value;
 *   split         pairs with bd_t = 1 (the key ends an entry, so key and value are in different
 *                 entries) / pairs; chance: F (a flag at a random position).
 * Every fraction k / n comes with n and its 95% Wilson interval (probe_wilson, trainer/probe_eval.h);
 * NaN when n = 0.
 *
 * How a caller uses it (one evaluation; the model's flags and scores after each forward):
 *     BoundaryStats st;
 *     if (boundary_stats_init(&st, n_layers, W, S, NULL, err)) ...           NULL: synth classes
 *     for each batch (tokens tok [B, T]):
 *         model_forward(...);
 *         for l in 0..n_layers-1:
 *             if (boundary_stats_add(&st, l, model_boundary_flags(m, l), model_boundary_probs(m, l),
 *                                    tok, B, T, err)) ...                    (model_boundary_batch gives B, T)
 *     boundary_stats_finalize(&st);                  fills the derived fields below
 *     boundary_stats_write_h5(&st, group, err);      any open HDF5 group (e.g. /boundaries/NNN)
 *     boundary_stats_free(&st);
 * Layers without learned boundaries are simply never added: their rows stay 0 / NaN. */
#ifndef PHASELAB_BOUNDARY_STATS_H
#define PHASELAB_BOUNDARY_STATS_H
#include <hdf5.h>
#include <stdint.h>

#include "data/synth.h"

#define BSTAT_N_CLASSES SYNTH_N_CLASSES

/* The class (0..BSTAT_N_CLASSES-1, SynthTokenClass order) of a token id. */
typedef int (*BoundaryTokenClass)(int32_t tok);

typedef struct {
    int n_layers, W, S;
    BoundaryTokenClass token_class;
    /* accumulated, per layer l (arrays [L] or [L, W] / [L, BSTAT_N_CLASSES], row-major) */
    long *positions;    /* n_pos: B T summed over the batches added */
    long *hist;         /* [L, W]: complete chunks of length k + 1 */
    long *boundaries;   /* n_bd */
    long *forced;       /* flags with p < 1/2 */
    long *unpooled;     /* tokens after the last flag of their row */
    double *prob_sum;   /* sum of p */
    long *class_bd;     /* [L, C]: flags on class-c tokens */
    long *class_tok;    /* [L, C]: class-c tokens */
    long *pairs;        /* adjacent (key, value) pairs */
    long *pair_split;   /* of them with a flag at the key */
    /* derived by boundary_stats_finalize */
    double *mean_len, *rate, *mean_prob, *ratio_loss;          /* [L] */
    double *forced_frac, *forced_lo, *forced_hi;               /* [L] */
    double *class_rate, *class_lo, *class_hi;                  /* [L, C] */
    double class_chance[BSTAT_N_CLASSES];
    double *split_frac, *split_lo, *split_hi;                  /* [L] */
} BoundaryStats;

/* Zeroed accumulators for n_layers >= 1, 2 <= S < W; token_class NULL = synth_token_class.
 * Returns 0, or -1 with err (ERR_LEN bytes). */
int boundary_stats_init(BoundaryStats *s, int n_layers, int W, int S, BoundaryTokenClass token_class, char *err);
void boundary_stats_free(BoundaryStats *s);

/* Adds one batch of layer `layer`: flags [B, T] (each 0 or 1), probs [B, T] (each in [0, 1]),
 * tokens [B, T]. Returns 0, or -1 with err and nothing added when an input breaks the rule of
 * §6.5 (a flag other than 0/1, a score outside [0, 1] or NaN, a chunk longer than W, a layer out
 * of range). */
int boundary_stats_add(BoundaryStats *s, int layer, const unsigned char *flags, const float *probs,
                       const int32_t *tokens, int B, int T, char *err);

/* Fills the derived fields from the accumulators (may be called again after more adds). */
void boundary_stats_finalize(BoundaryStats *s);

/* The accumulators as doubles (exact below 2^53), for a sum over ranks: boundary_stats_n_counts
 * values, pack into out, unpack from in (replacing the accumulators; finalise after). */
long boundary_stats_n_counts(const BoundaryStats *s);
void boundary_stats_pack(const BoundaryStats *s, double *out);
void boundary_stats_unpack(BoundaryStats *s, const double *in);

/* Writes the finalised statistics into the open group `group` (float64 unless said otherwise;
 * L = n_layers, C = 5 classes): chunk_length_hist [L, W] (int64), boundary_rate [L],
 * mean_prob [L], ratio_loss [L], mean_chunk_length [L], forced_fraction [L] (+ _lo, _hi),
 * unpooled [L] (int64), positions [L] (int64), boundaries [L] (int64), class_rate [L, C]
 * (+ _lo, _hi), class_chance [C], record_split [L] (+ _n int64, _lo, _hi); every dataset with
 * long_name, units where it has one, `definition`, and labelled dimensions (layer, chunk_length,
 * class); group attributes window, target_chunk_length, class_names, description. A dataset of
 * that name already in the group is an error. Returns 0, or -1 with err. */
int boundary_stats_write_h5(const BoundaryStats *s, hid_t group, char *err);
#endif
