/* The chunked KV compressor on the CPU, one branch (key or value) per call (SPEC.md section 2).
 *
 * Window j of KV head g covers positions o_g + jS .. o_g + jS+W-1 (j < nW_g; o_g = 0 and
 * nW_g = nW for the aligned grid, staggered: kernels/visibility.h). For offset i (map m = i;
 * deepseek: m = 0 for i < S else 1; shared: m = 0), with a_p the normed input row of position p:
 *   gate logit   s_{j,i}   = Z_{g,m} a_{o_g+jS+i} + b_{g,i}  [c]   (c = 1 scalar, d vector)
 *   weights      alpha_{j,.} = softmax_i s_{j,.}  (per channel)     (uniform: 1/W)
 *   payload      p_{j,i}   = C_{g,m} a_{o_g+jS+i}            [d]
 *   post-norm    p'_{j,i}  = RMSNorm(p_{j,i}) * w_pn              (optional)
 *   entry        E_j       = sum_i alpha_{j,i} * p'_{j,i}     [d]
 * All windows at once: for each (b, g, i) the rows a_{o_g+jS+i}, j = 0..nW_g-1, are a strided
 * matrix (leading dimension S*D), so every projection is one sgemm of nW_g rows, and one of
 * B*nW_g rows when sequence b+1's rows continue sequence b's stride (row_blocks below). Rows
 * j >= nW_g of a head (staggered grids only) do not exist: their entry, payload and alpha are 0.
 * Threads: the projections run one single-threaded sgemm per task (the OpenMP build of OpenBLAS,
 * which tools/configure prefers, and MKL run single-threaded inside an OpenMP region; a pthreads
 * BLAS would oversubscribe, as in cpu_attention.c), tasks in parallel, each writing its own outputs in a
 * fixed order, so results do not depend on the thread count or the schedule:
 *   forward   one task per (g, i): its payload and gate slots;
 *   dC, dZ    one task per (g, m): the offsets i of map m in ascending order;
 *   da        one task per residue r = (o_g + i) mod S: the rows at in-sequence positions
 *             t = r mod S, which only the (g, i) with that residue touch, in (g, i) order (the
 *             same order per row as a serial loop over b, g, i).
 *
 * Backward, from dE_j:
 *   dp'_{j,i} = alpha_{j,i} * dE_j;   dalpha_{j,i} = dE_j . p'_{j,i} (per channel for vector gates)
 *   (+ dalpha_extra_{j,i}, the gate-coverage penalty's gradient, when given)
 *   ds_{j,i}  = alpha_{j,i} (dalpha_{j,i} - sum_k alpha_{j,k} dalpha_{j,k})
 *   post-norm backward dp'->dp;  dC_{g,m} += dp^T a;  dZ_{g,m} += ds^T a;  db_{g,i} += sum_j ds
 *   da_{o_g+jS+i} += dp C_{g,m} + ds Z_{g,m}
 * Buffers: alpha [B,nW,G,W,c], payload [B,nW,G,W,d] (raw p), pn_rstd [B,nW,G,W]. */
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

/* The rows (b, j), j < nW_g, of head g as strided blocks: one block of B*nW_g rows when the last
 * window of sequence b is followed, one stride on, by the first of sequence b+1, both in a
 * (nW_g S = T) and in the [B,nW,G,W,.] buffers (nW_g = nW): the aligned grid when S divides T;
 * otherwise one block of nW_g rows per sequence. Block k starts at sequence b = k. */
static int row_blocks(const CompShape *s, int g, int *rows_per_block) {
    const int nWg = comp_head_windows(s, g);
    if (nWg == s->n_windows && (long)nWg * s->stride == s->T) {
        *rows_per_block = s->B * nWg;
        return nWg > 0 ? 1 : 0;
    }
    *rows_per_block = nWg;
    return nWg > 0 ? s->B : 0;
}

/* enough work to be worth an OpenMP region: the projections' multiply-adds */
static int projections_parallel(const CompShape *s) {
    return (size_t)s->B * s->n_windows * s->G * s->window * s->d * s->D > CPU_SERIAL_WORK;
}

void cpu_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry_, float *alpha, act_t *payload_, float *pn_rstd,
                        const act_t *a_, const act_t *gate_w_, const act_t *gate_b_,
                        const act_t *payload_w_, const act_t *post_w_) {
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, S = s->stride;
    const int nW = s->n_windows, c = s->channels, M = s->n_maps;
    float *entry = F(entry_), *payload = F(payload_);
    const float *a = CF(a_), *gate_w = CF(gate_w_), *gate_b = CF(gate_b_), *payload_w = CF(payload_w_), *post_w = CF(post_w_);
    if (nW == 0) return;
    cpu_blas_threads(ctx);      /* for the serial (small) case: sgemm threads itself on ctx's count */
    /* projections: one task per (g, i), one sgemm per row block */
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (projections_parallel(s)) num_threads(ctx->threads)
    for (int g = 0; g < G; g++)
        for (int i = 0; i < W; i++) {
            int rows_n, n_blocks = row_blocks(s, g, &rows_n);
            const int m = comp_map_index(s, i), o = comp_head_offset(s, g);
            for (int b = 0; b < n_blocks; b++) {
                const float *rows = a + ((size_t)b * T + o + i) * D;    /* a_{o_g+jS+i}, stride S*D */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows_n, d, D, 1.0f, rows, S * D,
                            payload_w + ((size_t)g * M + m) * d * D, D, 0.0f,
                            payload + slot(s, b, 0, g, i) * d, G * W * d);
                if (s->gate != GATE_UNIFORM)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows_n, c, D, 1.0f, rows, S * D,
                                gate_w + ((size_t)g * M + m) * c * D, D, 0.0f,
                                alpha + slot(s, b, 0, g, i) * c, G * W * c);
            }
        }
    /* softmax over offsets, post-norm, pooling: independent per (b, j, g) */
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * nW * G * W * d > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nW; j++)
            for (int g = 0; g < G; g++) {
                float *al = alpha + slot(s, b, j, g, 0) * c;          /* [W, c] */
                if (j >= comp_head_windows(s, g)) {                         /* no such window for this head */
                    memset(al, 0, sizeof(float) * W * c);
                    memset(payload + slot(s, b, j, g, 0) * d, 0, sizeof(float) * W * d);
                    memset(entry + (((size_t)b * nW + j) * G + g) * d, 0, sizeof(float) * d);
                    if (pn_rstd) for (int i = 0; i < W; i++) pn_rstd[slot(s, b, j, g, i)] = 0.0f;
                    continue;
                }
                if (s->gate == GATE_UNIFORM) {
                    for (int x = 0; x < W * c; x++) al[x] = 1.0f / W;
                } else {
                    if (gate_b)
                        for (int x = 0; x < W * c; x++) al[x] += gate_b[(size_t)g * W * c + x];
                    for (int ch = 0; ch < c; ch++) {
                        float mx = -INFINITY, sum = 0.0f;
                        for (int i = 0; i < W; i++) if (al[i * c + ch] > mx) mx = al[i * c + ch];
                        for (int i = 0; i < W; i++) { al[i * c + ch] = cpu_expf(al[i * c + ch] - mx); sum += al[i * c + ch]; }
                        for (int i = 0; i < W; i++) al[i * c + ch] /= sum;
                    }
                }
                float *e = entry + (((size_t)b * nW + j) * G + g) * d;
                memset(e, 0, sizeof(float) * d);
                for (int i = 0; i < W; i++) {
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
    const int B = s->B, T = s->T, D = s->D, G = s->G, d = s->d, W = s->window, S = s->stride;
    const int nW = s->n_windows, c = s->channels, M = s->n_maps;
    float *da = F(da_);
    const float *dentry = CF(dentry_), *payload = CF(payload_), *a = CF(a_), *gate_w = CF(gate_w_), *payload_w = CF(payload_w_),
                *post_w = CF(post_w_);
    if (nW == 0) return;
    cpu_blas_threads(ctx);
    size_t n_slots = (size_t)B * nW * G * W;
    float *dp = malloc(sizeof(float) * n_slots * d);                 /* d payload (raw) [B,nW,G,W,d] */
    float *ds = s->gate != GATE_UNIFORM ? malloc(sizeof(float) * n_slots * c) : NULL; /* [B,nW,G,W,c] */
    float *dpost_part = post_w ? calloc((size_t)B * nW * G * d, sizeof(float)) : NULL;
    #pragma omp parallel for collapse(2) schedule(static) num_threads(ctx->threads)
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nW; j++)
            for (int g = 0; g < G; g++) {
                if (j >= comp_head_windows(s, g)) continue;                 /* no such window: never read */
                const float *de = dentry + (((size_t)b * nW + j) * G + g) * d;
                const float *al = alpha + slot(s, b, j, g, 0) * c;
                float dal[W * c > 0 ? W * c : 1];
                for (int i = 0; i < W; i++) {
                    size_t sl = slot(s, b, j, g, i);
                    const float *p = payload + sl * d;
                    float *dpi = dp + sl * d;
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
                if (ds) {
                    float *dsj = ds + slot(s, b, j, g, 0) * c;
                    if (dalpha_extra) {
                        const float *dx = dalpha_extra + slot(s, b, j, g, 0) * c;
                        for (int x = 0; x < W * c; x++) dal[x] += dx[x];
                    }
                    for (int ch = 0; ch < c; ch++) {
                        float sum = 0.0f;
                        for (int i = 0; i < W; i++) sum += al[i * c + ch] * dal[i * c + ch];
                        for (int i = 0; i < W; i++) dsj[i * c + ch] = al[i * c + ch] * (dal[i * c + ch] - sum);
                    }
                }
            }
    /* bias and post-norm weight gradients: fixed-order sums */
    if (dgate_b && ds)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < nW; j++)
                for (int g = 0; g < G; g++)
                    if (j < comp_head_windows(s, g))
                        for (int x = 0; x < W * c; x++) dgate_b[(size_t)g * W * c + x] += ds[slot(s, b, j, g, 0) * c + x];
    if (dpost_w) {
        for (size_t r = 0; r < (size_t)B * nW * G; r++)
            for (int x = 0; x < d; x++) dpost_w[x] += dpost_part[r * d + x];
    }
    const int par = projections_parallel(s);
    /* weight gradients dC_{g,m} += dp^T a, dZ_{g,m} += ds^T a: one task per (g, m) */
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (par) num_threads(ctx->threads)
    for (int g = 0; g < G; g++)
        for (int m = 0; m < M; m++) {
            int rows_n, n_blocks = row_blocks(s, g, &rows_n);
            const int o = comp_head_offset(s, g);
            for (int i = 0; i < W; i++) {
                if (comp_map_index(s, i) != m) continue;
                for (int b = 0; b < n_blocks; b++) {
                    const float *rows = a + ((size_t)b * T + o + i) * D;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, D, rows_n, 1.0f, dp + slot(s, b, 0, g, i) * d,
                                G * W * d, rows, S * D, 1.0f, dpayload_w + ((size_t)g * M + m) * d * D, D);
                    if (ds)
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c, D, rows_n, 1.0f, ds + slot(s, b, 0, g, i) * c,
                                    G * W * c, rows, S * D, 1.0f, dgate_w + ((size_t)g * M + m) * c * D, D);
                }
            }
        }
    /* input gradient da_{o_g+jS+i} += dp C_{g,m} + ds Z_{g,m}: one task per row residue r mod S */
    #pragma omp parallel for schedule(dynamic, 1) if (par) num_threads(ctx->threads)
    for (int r = 0; r < S; r++)
        for (int g = 0; g < G; g++) {
            int rows_n, n_blocks = row_blocks(s, g, &rows_n);
            const int o = comp_head_offset(s, g);
            for (int i = 0; i < W; i++) {
                if ((o + i) % S != r) continue;
                const int m = comp_map_index(s, i);
                for (int b = 0; b < n_blocks; b++) {
                    float *drows = da + ((size_t)b * T + o + i) * D;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows_n, D, d, 1.0f, dp + slot(s, b, 0, g, i) * d,
                                G * W * d, payload_w + ((size_t)g * M + m) * d * D, D, 1.0f, drows, S * D);
                    if (ds)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows_n, D, c, 1.0f, ds + slot(s, b, 0, g, i) * c,
                                    G * W * c, gate_w + ((size_t)g * M + m) * c * D, D, 1.0f, drows, S * D);
                }
            }
        }
    free(dp);
    free(ds);
    free(dpost_part);
}
