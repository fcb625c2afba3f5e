/* The chunked KV compressor on the CPU, one branch (key or value) per call (docs/spec.md §2).
 *
 * Window j of KV head g covers positions o_g + jS .. o_g + jS+W-1 (j < nW_g; o_g = 0 and
 * nW_g = nW for the aligned grid, staggered: kernels/visibility.h). With multi-rate strides
 * (docs/spec.md §6.4) S reads S_g, head g's own stride, everywhere below (comp_head_stride). In general the offset is
 * o_{b,g} = o_base + o_g + u_b (docs/spec.md §6.1: a per-sequence shift u_b with phase jitter), so
 * the rows and window counts below are per (sequence, head). For offset i (map m = i;
 * deepseek: m = 0 for i < S else 1; shared: m = 0), with a_p the normed input row of position p:
 *   gate logit   s_{j,i}   = Z_{g,m} a_{o_g+jS+i} + b_{g,i}  [c]   (c = 1 scalar, d vector)
 *   weights      alpha_{j,.} = softmax_i s_{j,.}  (per channel)     (uniform: 1/W)
 *   payload      p_{j,i}   = C_{g,m} a_{o_g+jS+i}            [d]
 *   post-norm    p'_{j,i}  = RMSNorm(p_{j,i}) * w_pn              (optional)
 *   entry        E_j       = sum_i alpha_{j,i} * p'_{j,i}     [d]
 * Partial windows (o < 0, a negative o_base: docs/spec.md §6.1, DeepSeek-V4's CSA geometry): the
 * slots i < f_j = max(0, -(o + jS)) of window j lie before the sequence and are MASKED: alpha = 0,
 * p = 0 (pn_rstd = 0), the softmax runs over the present slots i >= f_j only (per channel; uniform
 * gates: 1/(W - f_j)), so E_j pools the present slots; no projection reads a masked slot's row
 * (each offset i's sgemm starts at window vis_first_window_of_slot(i)), and every gradient of a
 * masked slot (dp, ds, db, and da / dC / dZ through it) is 0. Window W-1's last slot is always
 * present (o > -W), so no softmax is empty.
 * All windows at once: for each (b, g, i) the rows a_{o_g+jS+i}, j = 0..nW_g-1, are a strided
 * matrix (leading dimension S*D), so every projection is one sgemm of nW_g rows, and one of
 * B*nW_g rows when sequence b+1's rows continue sequence b's stride (row_blocks below). Rows
 * j >= nW_g of a head (staggered grids only) do not exist: their entry, payload and alpha are 0.
 * Heads with the same grid offset (a head group: every head on the aligned grid, one head each
 * on the staggered grid when G <= S) read the same rows, so their payload and gate projections
 * are one sgemm: the group's weights of map m stacked per head, [C_{g,m}; Z_{g,m}] (d + c rows
 * each, c = 0 for uniform gates; pack_group_weights), give N = group size x (d + c) columns
 * instead of 2 x group-size sgemms of d and c columns, each of which packed the same rows again.
 * Threads: the projections run one single-threaded sgemm per task (the OpenMP build of OpenBLAS,
 * which tools/configure prefers, and MKL run single-threaded inside an OpenMP region; a pthreads
 * BLAS would oversubscribe, as in cpu_attention.c), tasks in parallel, each writing its own outputs in a
 * fixed order, so results do not depend on the thread count or the schedule:
 *   forward   one task per (head group, i): its payload and gate slots;
 *   dC, dZ    one task per (head group, m): the offsets i of map m in ascending order, summed in
 *             a task buffer that is then added to the group's dC_{g,m} and dZ_{g,m};
 *   da        one task per residue r = (o_{b,g} + i) mod S: the rows at in-sequence positions
 *             t = r mod S, which only the (b, g, i) with that residue touch, in (head group, i) order.
 *
 * Backward, from dE_j:
 *   dp'_{j,i} = alpha_{j,i} * dE_j;   dalpha_{j,i} = dE_j . p'_{j,i} (per channel for vector gates)
 *   (+ dalpha_extra_{j,i}, the gate-coverage penalty's gradient, when given)
 *   ds_{j,i}  = alpha_{j,i} (dalpha_{j,i} - sum_k alpha_{j,k} dalpha_{j,k})
 *   post-norm backward dp'->dp;  dC_{g,m} += dp^T a;  dZ_{g,m} += ds^T a;  db_{g,i} += sum_j ds
 *   da_{o_g+jS+i} += dp C_{g,m} + ds Z_{g,m}
 * Buffers: alpha [B,nW,G,W,c], payload [B,nW,G,W,d] (raw p), pn_rstd [B,nW,G,W]; inside the
 * backward, dgrad [B,nW,W,G,d+c] holds (dp, ds) per slot with the heads of one offset i side by
 * side, the layout the group sgemms read. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

/* offsets into the [B,nW,G,W,X] buffers */
static inline size_t slot(const CompShape *s, int b, int j, int g, int i) {
    return (((size_t)b * s->n_windows + j) * s->G + g) * s->window + i;
}

/* The rows (b, j), j < nW_{b,g}, of head g as strided blocks: one block of B*nW_g rows when the
 * last window of sequence b is followed, one stride on, by the first of sequence b+1, both in a
 * (nW_g S = T) and in the [B,nW,G,W,.] buffers (nW_g = nW): the aligned grid when S divides T and
 * no sequence is shifted (and o >= 0: no masked slots); otherwise one block per sequence b, of
 * nW_{b,g} rows (maybe 0) at that sequence's offset. Block k starts at sequence b = k. blk has room
 * for B blocks. Offset i's rows of a block start at window block_skip(blk, i): the windows before
 * it hold slot i masked (a partial window, o < 0). */
typedef struct { int rows, o, S; } RowBlock;   /* S: the head's stride S_g (docs/spec.md §6.4), the row step */
static int row_blocks(const CompShape *s, int g, RowBlock *blk) {
    const int nWg = comp_head_windows(s, 0, g), Sg = comp_head_stride(s, g);
    if (!s->grid_shift && nWg == s->n_windows && (long)nWg * Sg == s->T && comp_head_offset(s, 0, g) >= 0) {
        blk[0].rows = s->B * nWg;
        blk[0].o = comp_head_offset(s, 0, g);
        blk[0].S = Sg;
        return nWg > 0 ? 1 : 0;
    }
    for (int b = 0; b < s->B; b++) {
        blk[b].rows = comp_head_windows(s, b, g);
        blk[b].o = comp_head_offset(s, b, g);
        blk[b].S = Sg;
    }
    return s->B;
}

static inline int block_skip(const CompShape *s, const RowBlock *blk, int i) {
    const int j0 = vis_first_window_of_slot(i, blk->S, blk->o);
    return j0 < blk->rows ? j0 : blk->rows;
}

/* enough work to be worth an OpenMP region: the projections' multiply-adds */
static int projections_parallel(const CompShape *s) {
    return (size_t)s->B * s->n_windows * s->G * s->window * s->d * s->D > CPU_SERIAL_WORK;
}

/* Columns one head contributes to a group sgemm: its d payload channels, then its c gate
 * channels (none for uniform gates, which have no gate weights). */
static int head_cols(const CompShape *s) { return s->d + (s->gate != GATE_UNIFORM ? s->channels : 0); }

/* The head groups: maximal runs [start[k], start[k+1]) of consecutive KV heads with the same grid
 * offset and stride (the offsets are non-decreasing in g), which then have the same windows.
 * Returns the number of groups; start has G + 1 entries. */
static int head_groups(const CompShape *s, int *start) {
    int n = 0;                        /* (the same in every sequence: a shift moves every head alike) */
    for (int g = 0; g < s->G; g++)
        if (g == 0 || comp_head_offset(s, 0, g) != comp_head_offset(s, 0, g - 1) ||
            comp_head_stride(s, g) != comp_head_stride(s, g - 1)) start[n++] = g;
    start[n] = s->G;
    return n;
}

/* wcat [ng*(d+c), D]: for each head g0 + e of the group, C_{g,m} (d rows) then Z_{g,m} (c rows). */
static void pack_group_weights(const CompShape *s, float *wcat, int g0, int ng, int m, const float *payload_w,
                               const float *gate_w) {
    const int d = s->d, c = s->channels, D = s->D, M = s->n_maps, hc = head_cols(s);
    for (int e = 0; e < ng; e++) {
        const int g = g0 + e;
        memcpy(wcat + (size_t)e * hc * D, payload_w + ((size_t)g * M + m) * d * D, sizeof(float) * d * D);
        if (hc > d) memcpy(wcat + ((size_t)e * hc + d) * D, gate_w + ((size_t)g * M + m) * c * D, sizeof(float) * c * D);
    }
}

/* offset of slot (b, j, i, g) in dgrad [B,nW,W,G,d+c] */
static inline size_t dgrad_at(const CompShape *s, int b, int j, int i, int g) {
    return ((((size_t)b * s->n_windows + j) * s->window + i) * s->G + g) * head_cols(s);
}

void cpu_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry_, float *alpha, act_t *payload_, float *pn_rstd,
                        const act_t *a_, const act_t *gate_w_, const act_t *gate_b_,
                        const act_t *payload_w_, const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window;
    const int nW = s->n_windows, c = s->channels;
    float *entry = F(entry_), *payload = F(payload_);
    const float *a = CF(a_), *gate_w = CF(gate_w_), *gate_b = CF(gate_b_), *payload_w = CF(payload_w_), *post_w = CF(post_w_);
    if (nW == 0) return;
    cpu_blas_threads(ctx);      /* for the serial (small) case: sgemm threads itself on ctx's count */
    /* projections: one task per (head group, i), one sgemm per row block into out [rows, ng*(d+c)],
     * then scattered to the payload and gate slots */
    int group_start[G + 1];
    const int n_groups = head_groups(s, group_start), hc = head_cols(s);
    #pragma omp parallel if (projections_parallel(s)) num_threads(ctx->threads)
    {
        float *wcat = cpu_scratch(sizeof(float) * (size_t)G * hc * D, "compressor group weights"); /* [ng*(d+c), D] */
        float *out = cpu_scratch(sizeof(float) * (size_t)B * nW * G * hc, "compressor projections");      /* [rows, ng*(d+c)] */
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int k = 0; k < n_groups; k++)
            for (int i = 0; i < W; i++) {
                const int g0 = group_start[k], ng = group_start[k + 1] - g0;
                RowBlock blk[B];
                const int n_blocks = row_blocks(s, g0, blk);
                pack_group_weights(s, wcat, g0, ng, comp_map_index(s, i), payload_w, gate_w);
                for (int b = 0; b < n_blocks; b++) {
                    const int j0 = block_skip(s, &blk[b], i), rows_n = blk[b].rows - j0, o = blk[b].o, S = blk[b].S;
                    if (rows_n <= 0) continue;
                    const float *rows = a + ((size_t)b * T + o + j0 * S + i) * D;    /* a_{o_g+jS+i}, j >= j0, stride S*D */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows_n, ng * hc, D, 1.0f, rows, S * D, wcat, D,
                                0.0f, out, ng * hc);
                    for (int r = 0; r < rows_n; r++)
                        for (int e = 0; e < ng; e++) {
                            const float *src = out + ((size_t)r * ng + e) * hc;
                            memcpy(payload + slot(s, b, j0 + r, g0 + e, i) * d, src, sizeof(float) * d);
                            if (hc > d) memcpy(alpha + slot(s, b, j0 + r, g0 + e, i) * c, src + d, sizeof(float) * c);
                        }
                }
            }
        free(wcat);
        free(out);
    }
    /* softmax over offsets, post-norm, pooling: independent per (b, j, g) */
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * nW * G * W * d > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nW; j++)
            for (int g = 0; g < G; g++) {
                float *al = alpha + slot(s, b, j, g, 0) * c;          /* [W, c] */
                if (j >= comp_head_windows(s, b, g)) {                      /* no such window for this head */
                    memset(al, 0, sizeof(float) * W * c);
                    memset(payload + slot(s, b, j, g, 0) * d, 0, sizeof(float) * W * d);
                    memset(entry + (((size_t)b * nW + j) * G + g) * d, 0, sizeof(float) * d);
                    if (pn_rstd) for (int i = 0; i < W; i++) pn_rstd[slot(s, b, j, g, i)] = 0.0f;
                    continue;
                }
                /* slots i < f before the sequence (a partial window): masked, alpha = 0, p = 0 */
                const int f = vis_window_first_slot(j, comp_head_stride(s, g), comp_head_offset(s, b, g));
                if (f > 0) {
                    memset(al, 0, sizeof(float) * f * c);
                    memset(payload + slot(s, b, j, g, 0) * d, 0, sizeof(float) * f * d);
                    if (pn_rstd) for (int i = 0; i < f; i++) pn_rstd[slot(s, b, j, g, i)] = 0.0f;
                }
                if (s->gate == GATE_UNIFORM) {
                    for (int x = f * c; x < W * c; x++) al[x] = 1.0f / (W - f);
                } else {
                    if (gate_b)
                        for (int x = f * c; x < W * c; x++) al[x] += gate_b[(size_t)g * W * c + x];
                    for (int ch = 0; ch < c; ch++) {
                        float mx = -INFINITY, sum = 0.0f;
                        for (int i = f; i < W; i++) if (al[i * c + ch] > mx) mx = al[i * c + ch];
                        for (int i = f; i < W; i++) { al[i * c + ch] = cpu_expf(al[i * c + ch] - mx); sum += al[i * c + ch]; }
                        for (int i = f; i < W; i++) al[i * c + ch] /= sum;
                    }
                }
                float *e = entry + (((size_t)b * nW + j) * G + g) * d;
                memset(e, 0, sizeof(float) * d);
                for (int i = f; i < W; i++) {
                    const float *p = payload + slot(s, b, j, g, i) * d;
                    float rs = 1.0f;
                    const float *w = NULL;
                    if (post_w) {
                        float ss = 0.0f;
                        for (int x = 0; x < d; x++) ss += p[x] * p[x];
                        rs = 1.0f / sqrtf(ss / d + s->eps);
                        pn_rstd[slot(s, b, j, g, i)] = rs;
                        w = post_w;
                    }
                    const float *ai = al + i * c;
                    for (int x = 0; x < d; x++)
                        e[x] += ai[c == 1 ? 0 : x] * p[x] * rs * (w ? w[x] : 1.0f);
                }
            }
}

void cpu_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da_, float *dgate_w, float *dgate_b, float *dpayload_w,
                        float *dpost_w, const act_t *dentry_, const float *alpha, const act_t *payload_,
                        const float *pn_rstd, const act_t *a_, const act_t *gate_w_,
                        const act_t *payload_w_, const act_t *post_w_, const float *dalpha_extra) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window;
    const int nW = s->n_windows, c = s->channels, M = s->n_maps;
    float *da = F(da_);
    const float *dentry = CF(dentry_), *payload = CF(payload_), *a = CF(a_), *gate_w = CF(gate_w_), *payload_w = CF(payload_w_),
                *post_w = CF(post_w_);
    if (nW == 0) return;
    cpu_blas_threads(ctx);
    const size_t n_slots = (size_t)B * nW * G * W;
    const int hc = head_cols(s), has_gate = s->gate != GATE_UNIFORM;
    float *dgrad = cpu_scratch(sizeof(float) * n_slots * hc, "compressor slot gradients");              /* [B,nW,W,G,d+c]: dp (raw), ds */
    float *dpost_part = post_w ? cpu_scratch_zeroed(sizeof(float) * (size_t)B * nW * G * d, "compressor post-norm gradients") : NULL;
    #pragma omp parallel num_threads(ctx->threads)
    {
        /* dalpha [W, c] of one window, per thread on the heap (W x c reaches 65536 x 4096 floats:
         * never a stack array) */
        float *dal = cpu_scratch(sizeof(float) * ((size_t)W * c > 0 ? (size_t)W * c : 1), "compressor gate gradients");
        #pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < nW; j++)
                for (int g = 0; g < G; g++) {
                    if (j >= comp_head_windows(s, b, g)) continue;              /* no such window: never read */
                    const float *de = dentry + (((size_t)b * nW + j) * G + g) * d;
                    const float *al = alpha + slot(s, b, j, g, 0) * c;
                    const int f = vis_window_first_slot(j, comp_head_stride(s, g), comp_head_offset(s, b, g));   /* masked slots i < f */
                    for (int i = 0; i < f; i++) {          /* no gradient: dp = ds = 0 (never read by the sgemms) */
                        memset(dgrad + dgrad_at(s, b, j, i, g), 0, sizeof(float) * hc);
                        for (int ch = 0; ch < c; ch++) dal[i * c + ch] = 0.0f;
                    }
                    for (int i = f; i < W; i++) {
                        size_t sl = slot(s, b, j, g, i);
                        const float *p = payload + sl * d;
                        float *dpi = dgrad + dgrad_at(s, b, j, i, g);
                        float rs = post_w ? pn_rstd[sl] : 1.0f;
                        const float *ai = al + i * c;
                        /* p' = p * rs * w; dalpha = dE . p'; dp' = alpha dE */
                        for (int ch = 0; ch < c; ch++) dal[i * c + ch] = 0.0f;
                        for (int x = 0; x < d; x++) {
                            float pn = p[x] * rs * (post_w ? post_w[x] : 1.0f);
                            dal[i * c + (c == 1 ? 0 : x)] += de[x] * pn;
                            dpi[x] = ai[c == 1 ? 0 : x] * de[x];       /* dp' for now */
                        }
                        if (post_w) {
                            /* RMSNorm backward: dp = rs (dp'w - p rs mean(dp'w p rs)) ; dw += dp' p rs */
                            float *dpw = dpost_part + (((size_t)b * nW + j) * G + g) * d;
                            float dot = 0.0f;
                            for (int x = 0; x < d; x++) {
                                dpw[x] += dpi[x] * p[x] * rs;
                                dot += dpi[x] * post_w[x] * p[x] * rs;
                            }
                            dot /= d;
                            for (int x = 0; x < d; x++) dpi[x] = rs * (dpi[x] * post_w[x] - p[x] * rs * dot);
                        }
                    }
                    if (has_gate) {
                        if (dalpha_extra) {
                            const float *dx = dalpha_extra + slot(s, b, j, g, 0) * c;
                            for (int x = f * c; x < W * c; x++) dal[x] += dx[x];
                        }
                        for (int ch = 0; ch < c; ch++) {
                            float sum = 0.0f;
                            for (int i = f; i < W; i++) sum += al[i * c + ch] * dal[i * c + ch];
                            for (int i = f; i < W; i++)
                                dgrad[dgrad_at(s, b, j, i, g) + d + ch] = al[i * c + ch] * (dal[i * c + ch] - sum);
                        }
                    }
                }
        free(dal);
    }
    /* bias and post-norm weight gradients: fixed-order sums */
    if (dgate_b && has_gate)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < nW; j++)
                for (int g = 0; g < G; g++)
                    if (j < comp_head_windows(s, b, g))
                        for (int i = 0; i < W; i++)
                            for (int ch = 0; ch < c; ch++)
                                dgate_b[((size_t)g * W + i) * c + ch] += dgrad[dgrad_at(s, b, j, i, g) + d + ch];
    if (dpost_w) {
        for (size_t r = 0; r < (size_t)B * nW * G; r++)
            for (int x = 0; x < d; x++) dpost_w[x] += dpost_part[r * d + x];
    }
    const int par = projections_parallel(s);
    int group_start[G + 1];
    const int n_groups = head_groups(s, group_start);
    const int ld_dgrad = W * G * hc;          /* dgrad rows (b, j) at one offset i */
    /* weight gradients [dC_{g,m}; dZ_{g,m}] += dgrad_i^T a_i over the offsets i of map m, one task
     * per (head group, m), summed in acc [ng*(d+c), D] and then added to each head's gradients */
    #pragma omp parallel if (par) num_threads(ctx->threads)
    {
        float *acc = cpu_scratch(sizeof(float) * (size_t)G * hc * D, "compressor weight gradients");          /* [ng*(d+c), D] */
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int k = 0; k < n_groups; k++)
            for (int m = 0; m < M; m++) {
                const int g0 = group_start[k], ng = group_start[k + 1] - g0;
                RowBlock blk[B];
                const int n_blocks = row_blocks(s, g0, blk);
                float beta = 0.0f;                     /* the first product sets acc, the rest add */
                for (int i = 0; i < W; i++) {
                    if (comp_map_index(s, i) != m) continue;
                    for (int b = 0; b < n_blocks; b++) {
                        const int j0 = block_skip(s, &blk[b], i);
                        if (blk[b].rows - j0 <= 0) continue;
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ng * hc, D, blk[b].rows - j0, 1.0f,
                                    dgrad + dgrad_at(s, b, j0, i, g0), ld_dgrad,
                                    a + ((size_t)b * T + blk[b].o + j0 * blk[b].S + i) * D, blk[b].S * D, beta, acc, D);
                        beta = 1.0f;
                    }
                }
                if (beta == 0.0f) continue;            /* no offset uses map m, or no windows */
                for (int e = 0; e < ng; e++) {
                    const int g = g0 + e;
                    float *dC = dpayload_w + ((size_t)g * M + m) * d * D;
                    const float *src = acc + (size_t)e * hc * D;
                    for (size_t x = 0; x < (size_t)d * D; x++) dC[x] += src[x];
                    if (has_gate) {
                        float *dZ = dgate_w + ((size_t)g * M + m) * c * D;
                        for (size_t x = 0; x < (size_t)c * D; x++) dZ[x] += src[(size_t)d * D + x];
                    }
                }
            }
        free(acc);
    }
    /* input gradient da_{o_g+jS+i} += [dp | ds]_{group, i} [C; Z]_{group, m}: one task per row
     * residue r mod Sr, Sr the gcd of the heads' strides (S; multi-rate strides, docs/spec.md §6.4:
     * head g's rows o + i + j S_g all have the residue (o + i) mod Sr, so the tasks write disjoint rows) */
    int Sr = comp_head_stride(s, 0);
    for (int g = 1; g < G; g++) {
        int x = comp_head_stride(s, g);
        while (x) { int t = Sr % x; Sr = x; x = t; }
    }
    #pragma omp parallel if (par) num_threads(ctx->threads)
    {
        float *wcat = cpu_scratch(sizeof(float) * (size_t)G * hc * D, "compressor group weights"); /* [ng*(d+c), D] */
        #pragma omp for schedule(dynamic, 1)
        for (int r = 0; r < Sr; r++)
            for (int k = 0; k < n_groups; k++) {
                const int g0 = group_start[k], ng = group_start[k + 1] - g0;
                RowBlock blk[B];
                const int n_blocks = row_blocks(s, g0, blk);
                for (int i = 0; i < W; i++) {
                    int packed = 0;
                    for (int b = 0; b < n_blocks; b++) {
                        const int j0 = block_skip(s, &blk[b], i);
                        if (blk[b].rows - j0 <= 0 || vis_phase(blk[b].o + i, Sr, 0) != r) continue;
                        if (!packed++) pack_group_weights(s, wcat, g0, ng, comp_map_index(s, i), payload_w, gate_w);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blk[b].rows - j0, D, ng * hc, 1.0f,
                                    dgrad + dgrad_at(s, b, j0, i, g0), ld_dgrad, wcat, D, 1.0f,
                                    da + ((size_t)b * T + blk[b].o + j0 * blk[b].S + i) * D, blk[b].S * D);
                    }
                }
            }
        free(wcat);
    }
    free(dgrad);
    free(dpost_part);
}
