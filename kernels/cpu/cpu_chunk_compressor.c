/* Learned chunk boundaries on the CPU (model.boundaries = learned, docs/spec.md §6.5): the score and
 * decision scan, the chunk compressor (one branch per call), the straight-through factor and the
 * score's backward. The decision rule and the ratio loss: kernels/chunk_boundaries.h.
 *
 * Shapes (s: the layer's CompShape with n_windows = T entry rows per sequence):
 *   a [B, T, D] the compressor's input rows a_t (a'_t with token shift); w_bd [D], c_bd [1]
 *   prob, prob_sg [B, T]   p_t = sigmoid(w_bd . a_t + c_bd) and sg(p_t) (held values under a hold)
 *   flag [B, T]            bd_t;  ends [B, T]: e_{b,j} for j < count[b] (the rest T);  count [B]: n_b
 *   alpha [B, T, G, c], payload [B, T, G, d] (raw C a), pn_rstd [B, T, G]: per TOKEN (chunks do not
 *                          overlap: every token is in at most one entry; 0 for a token in no entry)
 *   entry [B, T, G, d]     E_{b,j,g} in row j < n_b, 0 in the rows after
 * Entry j of sequence b pools s_j = e_{j-1} + 1 .. e_j (s_0 = 0), L_j = e_j - s_j + 1 <= W tokens, as the
 * masked window of docs/spec.md §6.1 ending at e_j: token t sits at slot i = W - 1 - (e_j - t) (the
 * boundary token is slot W - 1), the slots i < W - L_j are masked, and with map m(i) (map_index):
 *   logit  z_t   = Z_{g,m(i)} a_t + b_{g,i}          [c]    (no Z, b: uniform gates, alpha = 1 / L_j)
 *   alpha_t      = softmax over the entry's tokens of z_t, per channel
 *   p_t          = C_{g,m(i)} a_t                    [d]    p'_t = p_t rstd_t w_pn (post-norm) or p_t
 *   E_j          = sum_{t in entry j} alpha_t * p'_t [d]    (scalar gates: alpha broadcast over d)
 * Backward from dE_j (as cpu_compressor.c, per token): dp'_t = alpha_t dE_j, dalpha_t = dE_j . p'_t,
 * dz_t = alpha_t (dalpha_t - sum_t' alpha_t' dalpha_t'), the post-norm backward dp' -> dp, then
 * dC_{g,m} += dp a_t^T, dZ_{g,m} += dz a_t^T, db_{g,i} += dz, da_t += C_{g,m}^T dp + Z_{g,m}^T dz.
 * Straight-through factor c_j = 1 + p_e - sg(p_e), e = e_j (value 1 unless the decisions are held):
 * Khat_j = c_j K'_j, Vhat_j = c_j V'_j, so dp_e += K'_j . dKhat_j (+ V'_j . dVhat_j untied) and
 * dK'_j = c_j dKhat_j. Score backward: dq_t = dp_t p_t (1 - p_t), dw_bd += sum dq_t a_t, dc_bd += sum dq_t,
 * da_t += dq_t w_bd.
 * Simple loops, parallel over independent outputs in a fixed order (the same bits on every run and
 * thread count): the forward over entries (b, j); the backward's per-token gradients over entries,
 * the weight gradients over (head g, map m) pairs (each owns dC_{g,m}, dZ_{g,m} and the bias slots of
 * map m, summed over tokens in (b, t) order), da over tokens, dw_pn and dw_bd over channels. FLOPs:
 * every token once per head, T (d + c) D multiply-adds per head and branch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"
#include "kernels/chunk_boundaries.h"

static inline const int32_t *seq_ends(const CompShape *s, int b) { return s->entry_ends + (size_t)b * s->n_windows; }
/* first token of entry j of sequence b */
static inline int entry_start(const CompShape *s, int b, int j) { return j > 0 ? seq_ends(s, b)[j - 1] + 1 : 0; }
static inline float dotf(const float *x, const float *y, int n) {
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc += x[k] * y[k];
    return acc;
}

void cpu_boundary_decide(BackendCtx *ctx, const CompShape *s, float *prob, float *prob_sg, uint8_t *flag, int32_t *ends,
                         int32_t *count, const act_t *a_, const act_t *w_bd_, const act_t *c_bd_, int hold) {
    const int B = s->B, T = s->T, D = s->D, W = s->window, rows = s->n_windows;
    const float *a = CF(a_), *w = CF(w_bd_), c0 = CF(c_bd_)[0];
    const long N = (long)B * T;
    #pragma omp parallel for schedule(static) if (N * D > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (long n = 0; n < N; n++) prob[n] = 1.0f / (1.0f + expf(-(dotf(w, a + n * D, D) + c0)));
    if (hold) return;                      /* model_hold_boundaries: decisions and sg(p) of the held forward */
    memcpy(prob_sg, prob, sizeof(float) * (size_t)N);
    for (int b = 0; b < B; b++) {
        int open = 0, n = 0;               /* the scan: s = t + 1 after a boundary at t */
        for (int t = 0; t < T; t++) {
            const int bd = chunk_boundary(prob[(size_t)b * T + t], t - open + 1, W);
            flag[(size_t)b * T + t] = (uint8_t)bd;
            if (bd) { ends[(size_t)b * rows + n++] = t; open = t + 1; }
        }
        for (int j = n; j < rows; j++) ends[(size_t)b * rows + j] = T;
        count[b] = n;
    }
}

void cpu_chunk_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry_, float *alpha, act_t *payload_, float *pn_rstd,
                              const act_t *a_, const act_t *gate_w_, const act_t *gate_b_, const act_t *payload_w_,
                              const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, c = s->channels, M = s->n_maps;
    const int rows = s->n_windows;
    float *entry = F(entry_), *payload = F(payload_);
    const float *a = CF(a_), *gate_w = CF(gate_w_), *gate_b = CF(gate_b_), *payload_w = CF(payload_w_), *post_w = CF(post_w_);
    const int gated = s->gate != GATE_UNIFORM;
    memset(entry, 0, sizeof(float) * (size_t)B * rows * G * d);
    memset(alpha, 0, sizeof(float) * (size_t)B * T * G * c);
    memset(payload, 0, sizeof(float) * (size_t)B * T * G * d);
    if (pn_rstd) memset(pn_rstd, 0, sizeof(float) * (size_t)B * T * G);
    #pragma omp parallel for collapse(2) schedule(dynamic, 4) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < rows; j++) {
            if (j >= s->entry_count[b]) continue;
            const int e = seq_ends(s, b)[j], s0 = entry_start(s, b, j), L = e - s0 + 1;
            for (int g = 0; g < G; g++) {
                for (int t = s0; t <= e; t++) {
                    const int i = W - 1 - (e - t), m = comp_map_index(s, i);
                    const size_t tg = ((size_t)b * T + t) * G + g;
                    const float *x = a + ((size_t)b * T + t) * D;
                    float *p = payload + tg * d;
                    for (int r = 0; r < d; r++) p[r] = dotf(payload_w + (((size_t)g * M + m) * d + r) * D, x, D);
                    if (post_w) pn_rstd[tg] = 1.0f / sqrtf(dotf(p, p, d) / d + s->eps);
                    float *al = alpha + tg * c;
                    if (gated)
                        for (int ch = 0; ch < c; ch++)
                            al[ch] = dotf(gate_w + (((size_t)g * M + m) * c + ch) * D, x, D) +
                                     (gate_b ? gate_b[((size_t)g * W + i) * c + ch] : 0.0f);
                    else al[0] = 1.0f / L;
                }
                if (gated)       /* softmax over the entry's tokens, per channel */
                    for (int ch = 0; ch < c; ch++) {
                        float mx = -INFINITY, sum = 0.0f;
                        for (int t = s0; t <= e; t++) mx = fmaxf(mx, alpha[(((size_t)b * T + t) * G + g) * c + ch]);
                        for (int t = s0; t <= e; t++) {
                            float *v = &alpha[(((size_t)b * T + t) * G + g) * c + ch];
                            *v = cpu_expf(*v - mx);
                            sum += *v;
                        }
                        for (int t = s0; t <= e; t++) alpha[(((size_t)b * T + t) * G + g) * c + ch] /= sum;
                    }
                float *E = entry + (((size_t)b * rows + j) * G + g) * d;
                for (int t = s0; t <= e; t++) {
                    const size_t tg = ((size_t)b * T + t) * G + g;
                    const float *p = payload + tg * d, *al = alpha + tg * c, rs = post_w ? pn_rstd[tg] : 1.0f;
                    for (int r = 0; r < d; r++) E[r] += al[c == 1 ? 0 : r] * p[r] * rs * (post_w ? post_w[r] : 1.0f);
                }
            }
        }
}

void cpu_chunk_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da_, float *dgate_w, float *dgate_b,
                              float *dpayload_w, float *dpost_w, const act_t *dentry_, const float *alpha, const act_t *payload_,
                              const float *pn_rstd, const act_t *a_, const act_t *gate_w_, const act_t *payload_w_,
                              const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, c = s->channels, M = s->n_maps;
    const int rows = s->n_windows, gated = s->gate != GATE_UNIFORM;
    float *da = F(da_);
    const float *dentry = CF(dentry_), *payload = CF(payload_), *a = CF(a_), *gate_w = CF(gate_w_), *payload_w = CF(payload_w_),
                *post_w = CF(post_w_);
    const size_t NG = (size_t)B * T * G;
    /* per token and head: dp [d] (after the post-norm backward), dpp [d] (dp', for dw_pn), dz [c]; the slot i of
     * each token (-1: in no entry) */
    float *dp = cpu_scratch_zeroed(sizeof(float) * NG * d, "chunk compressor payload gradients");
    float *dpp = post_w ? cpu_scratch_zeroed(sizeof(float) * NG * d, "chunk compressor post-norm gradients") : NULL;
    float *dz = gated ? cpu_scratch_zeroed(sizeof(float) * NG * c, "chunk compressor gate gradients") : NULL;
    int *slot = cpu_scratch(sizeof(int) * (size_t)B * T, "chunk compressor slots");
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) slot[(size_t)b * T + t] = -1;
        for (int j = 0; j < s->entry_count[b]; j++)
            for (int e = seq_ends(s, b)[j], t = entry_start(s, b, j); t <= e; t++) slot[(size_t)b * T + t] = W - 1 - (e - t);
    }
    #pragma omp parallel for collapse(2) schedule(dynamic, 4) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < rows; j++) {
            if (j >= s->entry_count[b]) continue;
            const int e = seq_ends(s, b)[j], s0 = entry_start(s, b, j);
            for (int g = 0; g < G; g++) {
                const float *dE = dentry + (((size_t)b * rows + j) * G + g) * d;
                for (int t = s0; t <= e; t++) {
                    const size_t tg = ((size_t)b * T + t) * G + g;
                    const float *p = payload + tg * d, *al = alpha + tg * c, rs = post_w ? pn_rstd[tg] : 1.0f;
                    float *dpt = dp + tg * d, *dzt = gated ? dz + tg * c : NULL;
                    for (int r = 0; r < d; r++) {
                        const float pn = p[r] * rs * (post_w ? post_w[r] : 1.0f);
                        if (gated) dzt[c == 1 ? 0 : r] += dE[r] * pn;          /* dalpha for now */
                        dpt[r] = al[c == 1 ? 0 : r] * dE[r];                    /* dp' */
                    }
                    if (post_w) {          /* RMSNorm backward: dp = rs (dp' w - p rs mean(dp' w p rs)) */
                        float dot = 0.0f;
                        for (int r = 0; r < d; r++) { dpp[tg * d + r] = dpt[r]; dot += dpt[r] * post_w[r] * p[r] * rs; }
                        dot /= d;
                        for (int r = 0; r < d; r++) dpt[r] = rs * (dpt[r] * post_w[r] - p[r] * rs * dot);
                    }
                }
                if (gated)                 /* softmax backward over the entry's tokens, per channel */
                    for (int ch = 0; ch < c; ch++) {
                        float sum = 0.0f;
                        for (int t = s0; t <= e; t++) {
                            const size_t x = (((size_t)b * T + t) * G + g) * c + ch;
                            sum += alpha[x] * dz[x];
                        }
                        for (int t = s0; t <= e; t++) {
                            const size_t x = (((size_t)b * T + t) * G + g) * c + ch;
                            dz[x] = alpha[x] * (dz[x] - sum);
                        }
                    }
            }
        }
    /* weight gradients: one task per (g, m), tokens in (b, t) order */
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(ctx->threads)
    for (int g = 0; g < G; g++)
        for (int m = 0; m < M; m++)
            for (size_t n = 0; n < (size_t)B * T; n++) {
                const int i = slot[n];
                if (i < 0 || comp_map_index(s, i) != m) continue;
                const float *x = a + n * D;
                const size_t tg = n * G + g;
                for (int r = 0; r < d; r++) {
                    float *dw = dpayload_w + (((size_t)g * M + m) * d + r) * D;
                    const float v = dp[tg * d + r];
                    if (v != 0.0f) for (int k = 0; k < D; k++) dw[k] += v * x[k];
                }
                if (gated)
                    for (int ch = 0; ch < c; ch++) {
                        const float v = dz[tg * c + ch];
                        float *dw = dgate_w + (((size_t)g * M + m) * c + ch) * D;
                        for (int k = 0; k < D; k++) dw[k] += v * x[k];
                        if (dgate_b) dgate_b[((size_t)g * W + i) * c + ch] += v;
                    }
            }
    /* da_t += C^T dp + Z^T dz, per token */
    #pragma omp parallel for schedule(static) num_threads(ctx->threads)
    for (size_t n = 0; n < (size_t)B * T; n++) {
        const int i = slot[n];
        if (i < 0) continue;
        const int m = comp_map_index(s, i);
        float *dx = da + n * D;
        for (int g = 0; g < G; g++) {
            const size_t tg = n * G + g;
            for (int r = 0; r < d; r++) {
                const float v = dp[tg * d + r], *w = payload_w + (((size_t)g * M + m) * d + r) * D;
                for (int k = 0; k < D; k++) dx[k] += v * w[k];
            }
            if (gated)
                for (int ch = 0; ch < c; ch++) {
                    const float v = dz[tg * c + ch], *w = gate_w + (((size_t)g * M + m) * c + ch) * D;
                    for (int k = 0; k < D; k++) dx[k] += v * w[k];
                }
        }
    }
    if (post_w && dpost_w)          /* dw_pn += dp' p rs, per channel over tokens and heads in order */
        for (size_t tg = 0; tg < NG; tg++) {
            const float rs = pn_rstd[tg];
            if (rs == 0.0f) continue;                     /* a token in no entry */
            for (int r = 0; r < d; r++) dpost_w[r] += dpp[tg * d + r] * payload[tg * d + r] * rs;
        }
    free(dp);
    free(dpp);
    free(dz);
    free(slot);
}

/* c_j of entry j of sequence b */
static inline float st_factor(const CompShape *s, int b, int j, const float *prob, const float *prob_sg) {
    const size_t e = (size_t)b * s->T + seq_ends(s, b)[j];
    return 1.0f + prob[e] - prob_sg[e];
}

void cpu_boundary_scale(BackendCtx *ctx, const CompShape *s, act_t *x_, const float *prob, const float *prob_sg) {
    const int GD = s->G * s->d;
    float *x = F(x_);
    for (int b = 0; b < s->B; b++)
        for (int j = 0; j < s->entry_count[b]; j++) {
            const float cj = st_factor(s, b, j, prob, prob_sg);
            float *row = x + ((size_t)b * s->n_windows + j) * GD;
            for (int k = 0; k < GD; k++) row[k] *= cj;
        }
}

void cpu_boundary_scale_bwd(BackendCtx *ctx, const CompShape *s, float *dprob, act_t *dx_, const act_t *x_, const float *prob,
                            const float *prob_sg) {
    const int GD = s->G * s->d;
    float *dx = F(dx_);
    const float *x = CF(x_);
    for (int b = 0; b < s->B; b++)
        for (int j = 0; j < s->entry_count[b]; j++) {
            const float cj = st_factor(s, b, j, prob, prob_sg);
            const size_t row = ((size_t)b * s->n_windows + j) * GD;
            dprob[(size_t)b * s->T + seq_ends(s, b)[j]] += dotf(x + row, dx + row, GD) / cj;   /* x' = x / c_j */
            for (int k = 0; k < GD; k++) dx[row + k] *= cj;
        }
}

void cpu_boundary_bwd(BackendCtx *ctx, const CompShape *s, act_t *da_, float *dw_bd, float *dc_bd, float *dprob,
                      const float *prob, const act_t *a_, const act_t *w_bd_, float dprob_all) {
    const int D = s->D;
    const size_t N = (size_t)s->B * s->T;
    float *da = F(da_);
    const float *a = CF(a_), *w = CF(w_bd_);
    float dc = 0.0f;
    for (size_t n = 0; n < N; n++) {           /* dprob becomes dq */
        dprob[n] = (dprob[n] + dprob_all) * prob[n] * (1.0f - prob[n]);
        dc += dprob[n];
    }
    dc_bd[0] += dc;
    #pragma omp parallel for schedule(static) if (N * D > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int k = 0; k < D; k++) {
        float acc = 0.0f;
        for (size_t n = 0; n < N; n++) acc += dprob[n] * a[n * D + k];
        dw_bd[k] += acc;
    }
    #pragma omp parallel for schedule(static) if (N * D > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (size_t n = 0; n < N; n++)
        for (int k = 0; k < D; k++) da[n * D + k] += dprob[n] * w[k];
}
