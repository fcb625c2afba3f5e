/* The lightning indexer of a csa layer (docs/spec.md §5.4): scores, top-k selection, the KL term
 * that trains it and the backward of the scores, on host fp32 arrays: the CPU backend's ops
 * indexer_* (kernels/ops.def, kernels/cpu/cpu_indexer.c) and the reference of the CUDA ones
 * (kernels/cuda/cuda_indexer.cu). IndexerShape is the shape of those ops (kernels/kernels.h).
 *
 * For sequence b, query t and entry j (visible iff j < n_t = vis_n_entries(t, W, S, o, nW)):
 *   I(t, j) = sum_h w'_{t,h} ReLU(q^I_{t,h} . k^I_j),   w'_{t,h} = (x_norm W_w^T)_{t,h} / sqrt(dI HI)
 *   selected(t) = the min(topk, n_t) visible entries of largest I (ties: the lower j first)
 * The KL term over a set S_t (the selected entries; every visible one in the dense warm-up):
 *   P_j  = sum_h exp(q_{t,h} . Khat_{j,g(h)} / sqrt(d) - lse_{t,h})    the main attention's
 *          weight on entry j summed over heads (lse: the layer's own softmax normaliser)
 *   p_j  = P_j / sum_{i in S_t} P_i          (target, detached: no gradient to the main model)
 *   r_j  = softmax over S_t of I(t, j)        (the indexer's distribution)
 *   KL_t = sum_{j in S_t} p_j (ln p_j - ln r_j),   dKL_t / dI(t, j) = r_j - p_j
 * Shapes: iq [B*T, HI*dI], iw [B*T, HI] (unscaled), ik [B, nW, dI], q [B*T, H*d],
 * ck [B, nW, G, d], lse [B*T*H], score/dscore [B, T, nW], sel [B, T, nW] (1 = selected). */
#ifndef PHASELAB_INDEXER_H
#define PHASELAB_INDEXER_H
#include <stdint.h>

typedef struct {
    int B, T, nW;             /* sequences, positions, entry rows of the layer */
    int t0;                   /* position of row t = t0 + t (0; the decoder's one row: its position) */
    int W, S, o;              /* the layer's window, stride and grid offset o_base (visibility; S - W on csa layers) */
    int HI, dI, topk;         /* indexer heads, their dimension, entries kept per query */
    int H, G, d;              /* the main attention's heads (for the KL target) */
} IndexerShape;

/* score = I(t, j) for visible j, -INFINITY elsewhere. */
void indexer_scores(const IndexerShape *s, const float *iq, const float *iw, const float *ik, float *score);
/* sel: the top-k of each query's visible entries (all of them when n_t <= topk). */
void indexer_select(const IndexerShape *s, const float *score, uint8_t *sel);
/* The KL term of every query with a non-empty set (sel NULL: every visible entry): returns the sum
 * of KL_t, *count the queries; dscore = r_j - p_j on the set, 0 elsewhere. */
double indexer_kl(const IndexerShape *s, const float *q, const float *ck, const float *lse, const float *score,
                  const uint8_t *sel, float *dscore, long *count);
/* Backward of indexer_scores for dscore * scale: diq, diw, dik are overwritten. */
void indexer_scores_bwd(const IndexerShape *s, const float *iq, const float *iw, const float *ik, const float *dscore,
                        float scale, float *diq, float *diw, float *dik);
#endif
