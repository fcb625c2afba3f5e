/* The lightning indexer's ops on the CPU backend (kernels/ops.def indexer_*, docs/spec.md §5.4):
 * act_t is float here, so each op is the host fp32 math of kernels/indexer.c on its buffers.
 *   score[b,t,j] = sum_h w'_{t,h} ReLU(q^I_{t,h} . k^I_j)  (visible j; -inf elsewhere)
 *   sel = top-k by (score desc, j asc);  KL_t = sum_{j in S_t} p_j (ln p_j - ln r_j), dscore = r - p
 *   diq, diw, dik = the scores' backward for dscore * scale. */
#include "kernels/cpu/cpu_internal.h"

void cpu_indexer_scores(BackendCtx *ctx, const IndexerShape *s, float *score, const act_t *iq, const act_t *iw,
                        const act_t *ik) {
    (void)ctx;
    indexer_scores(s, CF(iq), CF(iw), CF(ik), score);
}

void cpu_indexer_select(BackendCtx *ctx, const IndexerShape *s, uint8_t *sel, const float *score) {
    (void)ctx;
    indexer_select(s, score, sel);
}

double cpu_indexer_kl(BackendCtx *ctx, const IndexerShape *s, float *dscore, const act_t *q, const act_t *ck,
                      const float *lse, const float *score, const uint8_t *sel, long *count) {
    (void)ctx;
    return indexer_kl(s, CF(q), CF(ck), lse, score, sel, dscore, count);
}

void cpu_indexer_scores_bwd(BackendCtx *ctx, const IndexerShape *s, act_t *diq, act_t *diw, act_t *dik,
                            const float *dscore, const act_t *iq, const act_t *iw, const act_t *ik, float scale) {
    (void)ctx;
    indexer_scores_bwd(s, CF(iq), CF(iw), CF(ik), dscore, scale, F(diq), F(diw), F(dik));
}
