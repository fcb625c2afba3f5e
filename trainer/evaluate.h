/* Evaluation on the validation set (docs/spec.md §3):
 * - per-residue validation loss: the mean next-token cross-entropy of the tokens whose
 *   predicted position t (the logit's position) has t mod P = r, plus the plain mean, over the
 *   first floor(val_tokens / T) windows of the validation set;
 * - gate concentration per layer l, KV head g and branch (0 key, 1 value), over the same windows:
 *     static     exp(H(E[alpha]))        (entropy of the mean gate distribution)
 *     per-window E[exp(H(alpha))]        (mean effective number of offsets of each window)
 *     profile    g(i) = E[alpha_i] * W
 *   H in nats; vector gates: each quantity per channel, then averaged over the channels; with
 *   tied keys and values the value branch repeats the key branch.
 *   A layer schedule (docs/spec.md §5): every compressed layer (csa, hca, compressed) with its own
 *   W, c and windows; the arrays are as wide as the widest W (eval_gate_window), offsets past a
 *   layer's W and layers without a compressor (window, full) are NaN.
 * Windows are split round-robin over the ranks and the sums reduced, so every rank ends with
 * the same result.
 * The scored tokens are those window_targets keeps (data.loss_targets, the training loss's own
 * rule): every token with loss_targets = all, only the answers of the synthetic corpus with
 * answers (the mean and each residue's mean are then over those tokens).
 * Uncertainty (docs/spec.md §4.8, trainer/loss_stats.h): the same token losses summed per
 * validation window and residue, and per window and phase t mod S (S = probe_phase_fold: the
 * stride, 8 for full attention; head 0's grid, o_0 = 0, with grid = staggered), give per-residue
 * and per-phase means with bootstrap standard errors over the windows (LOSS_STATS_B replicates,
 * LOSS_STATS_SEED) and the homogeneity test across residues and across phases. */
#ifndef PHASELAB_EVALUATE_H
#define PHASELAB_EVALUATE_H
#include "trainer/run_config.h"
#include "data/loader.h"
#include "data/targets.h"   /* window_targets: the scored tokens */
#include "trainer/loss_stats.h"
#include "trainer/boundary_stats.h"

struct Model;
struct Comm;

typedef struct {
    int residues;               /* P */
    long windows, tokens;
    double loss;                /* mean over every scored token */
    double *loss_by_residue;    /* [P] */
    int has_gates;
    int L, G, W;
    float *eff_static;          /* [L, G, 2] */
    float *eff_window;          /* [L, G, 2] */
    float *profile;             /* [L, G, 2, W] */
    int phases;                 /* S of the fold by phase */
    LossStats by_residue;       /* K = P: means, bootstrap SEs over the windows, homogeneity test */
    LossStats by_phase;         /* K = S: the same by phase t mod S */
    int has_boundaries;         /* learned chunk boundaries (docs/spec.md §6.5): bounds holds their statistics */
    BoundaryStats bounds;       /* over the same windows, finalised (trainer/boundary_stats.h) */
} EvalResult;

int evaluate_validation(struct Model *m, const ModelConfig *mc, const ValSet *val, int T, int micro_batch,
                        int residues, int loss_targets, struct Comm *comm, int show_progress, EvalResult *res,
                        char *err);

void eval_result_free(EvalResult *r);

/* The W of the gate arrays: the widest window of the compressed layers (every layer's own config,
 * a schedule included); 0 when no layer is compressed (no gate statistics). */
int eval_gate_window(const ModelConfig *mc, int T);

/* Gate statistics of one batch of gate weights, accumulated into sums (used by
 * evaluate_validation; exposed for tests). alpha [B, nW, G, W, c]. sum_alpha [G, W, c] +=,
 * sum_eff [G] += sum over windows of exp(H) averaged over channels. */
void gate_stats_accumulate(const float *alpha, int B, int nW, int G, int W, int c, double *sum_alpha, double *sum_eff);
/* Same, where KV head g has only its first head_windows[g] of the nW rows (grid = staggered,
 * docs/spec.md §2b: each head's statistics over its own windows); head_windows NULL = all nW. */
void gate_stats_accumulate_heads(const float *alpha, int B, int nW, int G, int W, int c, const int *head_windows,
                                 double *sum_alpha, double *sum_eff);
/* From the sums over n windows: eff_static [G], profile [G, W]. */
void gate_stats_finish(const double *sum_alpha, long n, int G, int W, int c, float *eff_static, float *profile);
#endif
