/* Filler sweep (docs/spec.md §4.4, the FP8-completion flip): for a prompt, two candidate next
 * tokens a and b and a filler token f, prepend L fillers for L = L0 .. L1 and measure
 * P(a), P(b) (full-vocabulary softmax at the prompt's last token) and P(a) - P(b) per L, then
 * the periodogram of P(a) - P(b) over L and its peak period.
 *
 * Sweep file: INI, one section [sweep]:
 *   prompt    = token ids separated by spaces or commas     (or)
 *   text      = the prompt as text, with tokenizer = PATH to a tokenizer.json or "bytes"
 *   a, b      = candidate token ids                         (or a_text, b_text: one token each)
 *   filler    = filler token id                             (or filler_text: one token)
 *   L0, L1    = the filler range, 0 <= L0 < L1 (at least 4 points)
 * Relative paths (tokenizer) are taken relative to the sweep file's directory.
 *
 * Periodogram (choice: docs/spec.md §4.4 does not fix the estimator): x_L = P(a) - P(b) minus its
 * least-squares line over the N = L1 - L0 + 1 points (mean and linear trend removed: a slow
 * drift of P(a) - P(b) with L would otherwise own the lowest frequencies); power(k) = |sum_L x_L e^{-2 pi i k (L - L0) / N}|^2 / N at the
 * Fourier frequencies k = 1 .. floor(N/2); the peak period is N / k* for the k* of the largest
 * power (the lowest k on ties). Choose N a multiple of the expected period (e.g. 8 periods of S)
 * to see it exactly. A periodic curve with sharp dips puts much of its power into harmonics
 * (S/2, S/3, ...), so the sweep also reports the folded period: for each integer p in
 * 2..N/2 the fraction of the variance explained by the means of the points folded modulo p,
 * and the smallest p reaching 90% of the best fraction (S for a clean period-S flip). */
#ifndef PHASELAB_FILLER_SWEEP_H
#define PHASELAB_FILLER_SWEEP_H
#include <stdint.h>
#include "trainer/ckpt_source.h"
#include "trainer/run_config.h"

typedef struct {
    int32_t *prompt;         /* [n_prompt] */
    int n_prompt;
    int32_t a, b, filler;
    int L0, L1;
    char *text_source;        /* "tokens" or "text via TOKENIZER" (for the record; heap) */
    char tokenizer_fingerprint[65];   /* of the tokenizer of text keys ("" for token ids) */
} FillerSweepSpec;

/* Reads and checks path against the model's vocabulary and T (L1 + n_prompt <= T). Every value
 * is read whole (no length limit; integers parsed as integers, leading zeros allowed); a key given
 * twice, or a key with its alternative (a and a_text, prompt and text), is an error naming both
 * lines. Returns 0, or -1 with "PATH[:LINE]: ..." in err. */
int filler_sweep_load(const char *path, int vocab_size, int T, FillerSweepSpec *spec, char *err);
/* The same against a checkpoint: its vocab_size and seq_len, and the tokenizer of text keys must
 * be the checkpoint's (ckpt_source_check_text_tokenizer), checked before any text is encoded. */
int filler_sweep_load_checked(const char *path, const CkptSource *src, FillerSweepSpec *spec, char *err);
void filler_sweep_free(FillerSweepSpec *spec);

/* Periodogram of x [n] (mean and linear trend removed): power [n/2] at k = 1..n/2 (power[k-1]), period [n/2] = n/k.
 * Returns the peak period (NaN when n < 4). */
double periodogram(const double *x, int n, double *power, double *period);

/* Folded period of x [n]: explained [n/2 - 1] (index p - 2) = between-fold variance / total for
 * p = 2..n/2; returns the smallest p with explained >= 0.9 max, or -1 (n < 4 or a flat curve). */
int folded_period(const double *x, int n, double *explained);

typedef struct {
    const Config *cfg;
    const char *ckpt, *out_path;
    CkptSource *src;                 /* the checkpoint: tokenizer fingerprint, weights */
} FillerSweepEnv;

/* ./train --eval CKPT --filler-sweep FILE: runs, prints, stores; returns the exit status. */
int filler_sweep_main(const FillerSweepEnv *env, const char *path);
#endif
