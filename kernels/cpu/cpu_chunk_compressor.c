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
 * The projections as GEMMs: every token t in an entry has one slot i, hence one map m(i) (paper:
 * M = W maps, m = i; shared: M = 1), so the tokens are grouped by map (map_order: order [n_in] lists
 * the tokens n = b T + t in an entry, by map and then by n; map m's run is moff[m] .. moff[m+1]) and
 * each map's rows meet the stacked weights of all heads, wall_m [G (d + c), D] = for each head g,
 * C_{g,m} (d rows) then Z_{g,m} (c rows; none for uniform gates) (pack_weights, as
 * cpu_compressor.c's pack_group_weights):
 *   forward   x [n_in, D] the rows a_t gathered in map order; out [n_in, G (d+c)] = x wall_m^T per run
 *             of map m's rows, scattered to payload [B,T,G,d] and the gate logits (alpha [B,T,G,c]);
 *             then per entry (b, j) the bias b_{g,i}, pn_rstd, the softmax over the entry's tokens and
 *             the pooling as above;
 *   backward  dp, dz per token as above (per entry), gathered in map order to dg [n_in, G (d+c)]
 *             (head g's dp then dz) beside x [n_in, D] (the rows a_t); dC_{g,m} += dg_{m,g,dp}^T x_m and
 *             dZ_{g,m} += dg_{m,g,dz}^T x_m (sgemms over map m's rows, K = n_m); da rows = dg_m wall_m,
 *             one sgemm per row run, added to da_t (each token in one map: no two runs share a row);
 *             db_{g,i} += dz and dw_pn serially in (b, t) order.
 * Threads: one single-threaded sgemm per task in an OpenMP loop (the OpenMP build of OpenBLAS, which
 * tools/configure prefers, and MKL run single-threaded inside an OpenMP region; in the serial small case
 * the region is off and sgemm threads itself on ctx's count, cpu_blas_threads first), a fixed
 * decomposition independent of the thread count, each task owning its outputs (the same bits on
 * every run and thread count):
 *   forward projections and da   one task per run of at most CHUNK_ROWS = 256 gathered rows of one map
 *                                (row_tasks; a row's products do not depend on its neighbours);
 *   dC, dZ                       one task per (map m, head g): one sgemm over all of map m's rows;
 *   softmax, pooling, dp / dz    one task per entry (b, j).
 * FLOPs: every token once per head, T (d + c) D multiply-adds per head and branch, as GEMMs. */
#include <cblas.h>
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
    for (int b = 0; b < B; b++)
        count[b] = chunk_scan_row(prob + (size_t)b * T, T, W, rows, flag + (size_t)b * T, ends + (size_t)b * rows);
}

/* The tokens of the entries, grouped by map: order[k], k < n_in, lists the tokens n = b T + t that are in an
 * entry, sorted by the map m(i) of their slot and within a map by n; map m's tokens are k = moff[m] ..
 * moff[m+1] - 1. slot[n]: the token's slot i (-1: in no entry). Returns n_in. */
static size_t map_order(const CompShape *s, int *slot, size_t *order, size_t *moff) {
    const int B = s->B, T = s->T, W = s->window, M = s->n_maps;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) slot[(size_t)b * T + t] = -1;
        for (int j = 0; j < s->entry_count[b]; j++)
            for (int e = seq_ends(s, b)[j], t = entry_start(s, b, j); t <= e; t++) slot[(size_t)b * T + t] = W - 1 - (e - t);
    }
    for (int m = 0; m <= M; m++) moff[m] = 0;
    for (size_t n = 0; n < (size_t)B * T; n++)
        if (slot[n] >= 0) moff[comp_map_index(s, slot[n]) + 1]++;
    for (int m = 0; m < M; m++) moff[m + 1] += moff[m];
    size_t *fill = cpu_scratch(sizeof(size_t) * (M > 0 ? M : 1), "chunk compressor map fill");
    memcpy(fill, moff, sizeof(size_t) * M);
    for (size_t n = 0; n < (size_t)B * T; n++)
        if (slot[n] >= 0) order[fill[comp_map_index(s, slot[n])]++] = n;
    free(fill);
    return moff[M];
}

/* The row tasks of the per-map sgemms: blocks of at most CHUNK_ROWS gathered rows, none across a map's
 * end, in (m, k) order; a fixed decomposition (not the thread count's). task has room for
 * n_in / CHUNK_ROWS + M entries; returns their count. */
#define CHUNK_ROWS 256
typedef struct { int m; size_t k0, rows; } RowTask;
static int row_tasks(const CompShape *s, const size_t *moff, RowTask *task) {
    int n = 0;
    for (int m = 0; m < s->n_maps; m++)
        for (size_t k = moff[m]; k < moff[m + 1]; k += CHUNK_ROWS) {
            task[n].m = m;
            task[n].k0 = k;
            task[n].rows = moff[m + 1] - k < CHUNK_ROWS ? moff[m + 1] - k : CHUNK_ROWS;
            n++;
        }
    return n;
}

/* Columns one head contributes to the stacked projections: its d payload channels, then its c gate
 * channels (none for uniform gates). */
static int head_cols(const CompShape *s) { return s->d + (s->gate != GATE_UNIFORM ? s->channels : 0); }

/* wall [M, G*(d+c), D]: for each map m and head g, C_{g,m} (d rows) then Z_{g,m} (c rows) */
static float *pack_weights(const CompShape *s, const float *payload_w, const float *gate_w) {
    const int d = s->d, c = s->channels, D = s->D, M = s->n_maps, G = s->G, hc = head_cols(s);
    float *wall = cpu_scratch(sizeof(float) * (size_t)M * G * hc * D, "chunk compressor stacked weights");
    for (int m = 0; m < M; m++)
        for (int g = 0; g < G; g++) {
            float *dst = wall + ((size_t)m * G + g) * hc * D;
            memcpy(dst, payload_w + ((size_t)g * M + m) * d * D, sizeof(float) * d * D);
            if (hc > d) memcpy(dst + (size_t)d * D, gate_w + ((size_t)g * M + m) * c * D, sizeof(float) * c * D);
        }
    return wall;
}

void cpu_chunk_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry_, float *alpha, act_t *payload_, float *pn_rstd,
                              const act_t *a_, const act_t *gate_w_, const act_t *gate_b_, const act_t *payload_w_,
                              const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, c = s->channels, M = s->n_maps;
    const int rows = s->n_windows, hc = head_cols(s), GH = G * hc;
    float *entry = F(entry_), *payload = F(payload_);
    const float *a = CF(a_), *gate_w = CF(gate_w_), *gate_b = CF(gate_b_), *payload_w = CF(payload_w_), *post_w = CF(post_w_);
    const int gated = s->gate != GATE_UNIFORM;
    const size_t N = (size_t)B * T;
    memset(entry, 0, sizeof(float) * (size_t)B * rows * G * d);
    memset(alpha, 0, sizeof(float) * N * G * c);
    memset(payload, 0, sizeof(float) * N * G * d);
    if (pn_rstd) memset(pn_rstd, 0, sizeof(float) * N * G);
    int *slot = cpu_scratch(sizeof(int) * (N > 0 ? N : 1), "chunk compressor slots");
    size_t *order = cpu_scratch(sizeof(size_t) * (N > 0 ? N : 1), "chunk compressor token order");
    size_t *moff = cpu_scratch(sizeof(size_t) * (M + 1), "chunk compressor map offsets");
    const size_t n_in = map_order(s, slot, order, moff);
    if (n_in > 0) {
        cpu_blas_threads(ctx);     /* for the serial (small) case: sgemm threads itself on ctx's count */
        float *wall = pack_weights(s, payload_w, gate_w);
        RowTask *task = cpu_scratch(sizeof(RowTask) * (n_in / CHUNK_ROWS + M), "chunk compressor tasks");
        const int n_tasks = row_tasks(s, moff, task);
        const int par = n_in * (size_t)GH * D > CPU_SERIAL_WORK;
        /* projections: the rows a_t gathered in map order, x [n_in, D]; per task out [rows, G*(d+c)] =
         * x wall_m^T (in one shared buffer [n_in, G*(d+c)]), scattered to the payload and the gate logits */
        float *x = cpu_scratch(sizeof(float) * n_in * D, "chunk compressor gathered rows");
        float *out = cpu_scratch(sizeof(float) * n_in * GH, "chunk compressor projections");
        #pragma omp parallel for schedule(static) if (par) num_threads(ctx->threads)
        for (size_t k = 0; k < n_in; k++) memcpy(x + k * D, a + order[k] * D, sizeof(float) * D);
        #pragma omp parallel for schedule(dynamic, 1) if (par) num_threads(ctx->threads)
        for (int q = 0; q < n_tasks; q++) {
            const RowTask *tk = &task[q];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)tk->rows, GH, D, 1.0f, x + tk->k0 * D, D,
                        wall + (size_t)tk->m * GH * D, D, 0.0f, out + tk->k0 * GH, GH);
        }
        #pragma omp parallel for schedule(static) if (par) num_threads(ctx->threads)
        for (size_t k = 0; k < n_in; k++) {
            const size_t n = order[k];
            for (int g = 0; g < G; g++) {
                const float *src = out + k * GH + (size_t)g * hc;
                memcpy(payload + (n * G + g) * d, src, sizeof(float) * d);
                if (gated) memcpy(alpha + (n * G + g) * c, src + d, sizeof(float) * c);
            }
        }
        free(x);
        free(out);
        free(task);
        free(wall);
    }
    free(order);
    free(moff);
    /* bias, post-norm scale, softmax and pooling: independent per entry (b, j) */
    #pragma omp parallel for collapse(2) schedule(dynamic, 4) if (N * G * d > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < rows; j++) {
            if (j >= s->entry_count[b]) continue;
            const int e = seq_ends(s, b)[j], s0 = entry_start(s, b, j), L = e - s0 + 1;
            for (int g = 0; g < G; g++) {
                for (int t = s0; t <= e; t++) {
                    const int i = W - 1 - (e - t);
                    const size_t tg = ((size_t)b * T + t) * G + g;
                    const float *p = payload + tg * d;
                    if (post_w) pn_rstd[tg] = 1.0f / sqrtf(dotf(p, p, d) / d + s->eps);
                    float *al = alpha + tg * c;
                    if (!gated) al[0] = 1.0f / L;
                    else if (gate_b)
                        for (int ch = 0; ch < c; ch++) al[ch] += gate_b[((size_t)g * W + i) * c + ch];
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
    free(slot);
}

void cpu_chunk_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da_, float *dgate_w, float *dgate_b,
                              float *dpayload_w, float *dpost_w, const act_t *dentry_, const float *alpha, const act_t *payload_,
                              const float *pn_rstd, const act_t *a_, const act_t *gate_w_, const act_t *payload_w_,
                              const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, c = s->channels, M = s->n_maps;
    const int rows = s->n_windows, gated = s->gate != GATE_UNIFORM, hc = head_cols(s), GH = G * hc;
    float *da = F(da_);
    const float *dentry = CF(dentry_), *payload = CF(payload_), *a = CF(a_), *gate_w = CF(gate_w_), *payload_w = CF(payload_w_),
                *post_w = CF(post_w_);
    const size_t N = (size_t)B * T, NG = N * G;
    /* per token and head: dp [d] (after the post-norm backward), dpp [d] (dp', for dw_pn), dz [c]; the slot i of
     * each token (-1: in no entry) and the tokens grouped by map */
    float *dp = cpu_scratch_zeroed(sizeof(float) * (NG > 0 ? NG : 1) * d, "chunk compressor payload gradients");
    float *dpp = post_w ? cpu_scratch_zeroed(sizeof(float) * NG * d, "chunk compressor post-norm gradients") : NULL;
    float *dz = gated ? cpu_scratch_zeroed(sizeof(float) * NG * c, "chunk compressor gate gradients") : NULL;
    int *slot = cpu_scratch(sizeof(int) * (N > 0 ? N : 1), "chunk compressor slots");
    size_t *order = cpu_scratch(sizeof(size_t) * (N > 0 ? N : 1), "chunk compressor token order");
    size_t *moff = cpu_scratch(sizeof(size_t) * (M + 1), "chunk compressor map offsets");
    const size_t n_in = map_order(s, slot, order, moff);
    #pragma omp parallel for collapse(2) schedule(dynamic, 4) if (NG * d > CPU_SERIAL_WORK) num_threads(ctx->threads)
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
    if (gated && dgate_b)           /* db_{g,i} += dz over the tokens of slot i, in (b, t) order */
        for (size_t n = 0; n < N; n++) {
            const int i = slot[n];
            if (i < 0) continue;
            for (int g = 0; g < G; g++)
                for (int ch = 0; ch < c; ch++) dgate_b[((size_t)g * W + i) * c + ch] += dz[(n * G + g) * c + ch];
        }
    if (n_in > 0) {
        cpu_blas_threads(ctx);
        const int par = n_in * (size_t)GH * D > CPU_SERIAL_WORK;
        /* gathered in map order: x [n_in, D] the rows a_t, dg [n_in, G*(d+c)] the (dp, dz) of each head */
        float *x = cpu_scratch(sizeof(float) * n_in * D, "chunk compressor gathered rows");
        float *dg = cpu_scratch(sizeof(float) * n_in * GH, "chunk compressor gathered gradients");
        #pragma omp parallel for schedule(static) if (par) num_threads(ctx->threads)
        for (size_t k = 0; k < n_in; k++) {
            const size_t n = order[k];
            memcpy(x + k * D, a + n * D, sizeof(float) * D);
            for (int g = 0; g < G; g++) {
                memcpy(dg + k * GH + (size_t)g * hc, dp + (n * G + g) * d, sizeof(float) * d);
                if (gated) memcpy(dg + k * GH + (size_t)g * hc + d, dz + (n * G + g) * c, sizeof(float) * c);
            }
        }
        /* weight gradients dC_{g,m} += dp^T x, dZ_{g,m} += dz^T x over map m's rows: one task per (m, g),
         * each owning its outputs */
        #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (par) num_threads(ctx->threads)
        for (int m = 0; m < M; m++)
            for (int g = 0; g < G; g++) {
                const size_t k0 = moff[m], nm = moff[m + 1] - k0;
                if (nm == 0) continue;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, D, (int)nm, 1.0f, dg + k0 * GH + (size_t)g * hc, GH,
                            x + k0 * D, D, 1.0f, dpayload_w + ((size_t)g * M + m) * d * D, D);
                if (gated)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, D, (int)nm, 1.0f, dg + k0 * GH + (size_t)g * hc + d, GH,
                                x + k0 * D, D, 1.0f, dgate_w + ((size_t)g * M + m) * c * D, D);
            }
        /* input gradient: per row task, x <- dg [C; Z]_m (x is free now), then added to da_t (every token
         * in one map: the tasks write disjoint rows) */
        float *wall = pack_weights(s, payload_w, gate_w);
        RowTask *task = cpu_scratch(sizeof(RowTask) * (n_in / CHUNK_ROWS + M), "chunk compressor tasks");
        const int n_tasks = row_tasks(s, moff, task);
        #pragma omp parallel for schedule(dynamic, 1) if (par) num_threads(ctx->threads)
        for (int q = 0; q < n_tasks; q++) {
            const RowTask *tk = &task[q];
            float *dx = x + tk->k0 * D;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tk->rows, D, GH, 1.0f, dg + tk->k0 * GH, GH,
                        wall + (size_t)tk->m * GH * D, D, 0.0f, dx, D);
            for (size_t r = 0; r < tk->rows; r++) {
                float *dst = da + order[tk->k0 + r] * D;
                for (int k = 0; k < D; k++) dst[k] += dx[r * D + k];
            }
        }
        free(task);
        free(wall);
        free(x);
        free(dg);
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
    free(order);
    free(moff);
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
