/* Attention on the CPU: full causal, or the paper's compressed attention (docs/spec.md §2).
 *
 * A query at position t (head h, KV head g = h / (H/G), grid offset o_g: 0 aligned, staggered
 * floor(g S / G); in general o = o_base + o_g + u_b, per sequence b, docs/spec.md §6.1) sees
 * (kernels/visibility.h states the rule once)
 *   compressed entries j < nvis(t), nvis(t) = #{ j : o_g + jS + W - 1 <= t }  (none for full)
 *   raw tokens s in [lo(t), t]:  full: lo = 0;  window: lo = t - n_local + 1;
 *                                tail: lo = e_t + 1, e_t = o_g + (nvis-1)S + W - 1 (or -1)
 * One softmax over the union (entries first, then raw tokens), scale 1/sqrt(d), and with a
 * sink the denominator gains exp(sink_h):
 *   z_x = q . key_x / sqrt(d),   Z = exp(sink_h) + sum_x exp(z_x),   p_x = exp(z_x) / Z
 *   out = sum_x p_x value_x,     lse = log Z
 * Backward (p recomputed from lse): with dp_x = dout . value_x and D = dout . out,
 *   dz_x = p_x (dp_x - D),  dq = sum_x dz_x key_x / sqrt(d),  dkey_x += dz_x q / sqrt(d),
 *   dvalue_x += p_x dout,   dsink_h += -p_sink D.
 *
 * Blocked with sgemm: queries are taken in blocks of qb positions (block_rows: 16 or 32 from
 * the raw span a query sees) and hc heads of one KV group (heads_per_block: every head reading
 * KV head g sees the same keys), packed as one matrix of qb*hc rows (row r*hc + e: position
 * t0 + r, head h0 + e), so each sgemm has qb*hc rows rather than qb. The block's keys are the
 * entries visible to its last position plus the raw range [lo(first), last] (lo is
 * non-decreasing in t), so one block touches about qb x (nvis + qb + n_local) scores per head,
 * never T x T, and the cost of compressed attention grows with T*T/S + T*n_local. Scores of
 * keys a row may not see are masked to zero probability. Forward work is split over
 * (sequence b, head chunk, block); backward over (sequence b, KV head g): every key/value
 * gradient row of the pair is owned by one thread (no races, no order-dependent sums); sgemm
 * called inside the parallel region runs single-threaded. The forward softmax of a row
 * (softmax_row) takes the max and the exp-sum in 8 lanes, in a fixed order: deterministic; it
 * leaves the exps unnormalized, and the block's output rows are divided by Z after the value
 * GEMM (out = (e V) / Z: d multiplies per row instead of one per score). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

#define QB 32          /* most positions per block */
#define BLOCK_ROWS 128 /* most packed query rows (positions x heads) per block */

/* Query rows per block. A block's raw keys are [lo(first row), last row], about rows + span - 1
 * keys of which each row sees span (the raw tokens one query sees at most: n_local for the
 * window, W for the tail, all for full), so the masked part (exp'd and multiplied all the same)
 * is about rows - 1 keys per row. Rows: span rounded up to a multiple of 16, in [16, QB].
 * Measured on the bench shape (T 256, d 32, one thread, attention forward + backward of one
 * layer): full 122 ms at 64 rows, 61 ms at 32, 63 ms at 16; W8/S8 with n_local 16: 102 ms at
 * 64 rows, 71 ms at 32, 52 ms at 16. The choice depends on the shape only, so the sums are
 * the same on every run and thread count. */
static int block_rows(const AttnShape *s) {
    int span = s->visibility == VIS_WINDOW ? s->n_local : s->visibility == VIS_TAIL ? s->window : s->T;
    int r = (span + 15) / 16 * 16;
    return r < 16 ? 16 : r > QB ? QB : r;
}

/* Heads per block: the largest divisor hc of the group (H/G heads reading one KV head) with
 * qb * hc <= BLOCK_ROWS. Each sgemm then has qb * hc rows (64 or 128 on the bench shapes instead
 * of 16 or 32), a quarter of the calls and of their fixed costs; the score buffers stay within
 * BLOCK_ROWS rows at any head count. Depends on the shape only (same sums on every run). */
static int heads_per_block(int group, int qb) {
    int hc = 1;
    for (int c = 1; c <= group; c++)
        if (group % c == 0 && c * qb <= BLOCK_ROWS) hc = c;
    return hc;
}

/* The visible set of query t of sequence b reading KV head g: *nvis compressed entries and raw
 * tokens [*lo, t]. */
static inline void visible_range(const AttnShape *s, int b, int g, int t, int *nvis, int *lo) {
    const VisQueryView v = attn_query_view(s, b, g, t);
    *nvis = v.n_entries;
    *lo = v.raw_lo;
}

/* One query block: rows t0..t1-1 of sequence b of a head reading KV head g see entries [0, ne)
 * and raw tokens [r0, t1). */
typedef struct { int t0, t1, ne, r0, nr, g, b; } Block;

static Block block_of(const AttnShape *s, int b, int g, int t0, int qb) {
    Block bk;
    bk.t0 = t0;
    bk.g = g;
    bk.b = b;
    bk.t1 = t0 + qb < s->T ? t0 + qb : s->T;
    int nv_last, lo_last, nv_first, lo_first;
    visible_range(s, b, g, bk.t1 - 1, &nv_last, &lo_last);
    visible_range(s, b, g, t0, &nv_first, &lo_first);
    bk.ne = nv_last;
    bk.r0 = lo_first;
    bk.nr = bk.t1 - lo_first;
    return bk;
}

/* Rows t0..t0+rows-1, heads h0..h0+hc-1 of x [B,T,H,d] (sequence b) into the packed block
 * xp [rows*hc, d] (row r*hc + e = position t0 + r, head h0 + e): one copy of hc*d floats per
 * position; unpack_rows is the inverse. */
static void pack_rows(float *xp, const float *x, const AttnShape *s, int b, int t0, int rows, int h0, int hc) {
    const size_t n = (size_t)hc * s->d;
    for (int r = 0; r < rows; r++) memcpy(xp + r * n, x + (((size_t)b * s->T + t0 + r) * s->H + h0) * s->d, n * sizeof(float));
}
static void unpack_rows(float *x, const float *xp, const AttnShape *s, int b, int t0, int rows, int h0, int hc) {
    const size_t n = (size_t)hc * s->d;
    for (int r = 0; r < rows; r++) memcpy(x + (((size_t)b * s->T + t0 + r) * s->H + h0) * s->d, xp + r * n, n * sizeof(float));
}
/* unpack_rows with packed row i (d floats) multiplied by row_scale[i]. */
static void unpack_rows_scaled(float *x, const float *xp, const float *row_scale, const AttnShape *s, int b, int t0,
                               int rows, int h0, int hc) {
    const int d = s->d;
    for (int r = 0; r < rows; r++) {
        float *dst = x + (((size_t)b * s->T + t0 + r) * s->H + h0) * d;
        for (int e = 0; e < hc; e++) {
            const float *src = xp + ((size_t)r * hc + e) * d, c = row_scale[r * hc + e];
            for (int j = 0; j < d; j++) dst[e * d + j] = src[j] * c;
        }
    }
}

/* Scores of block bk of sequence b for the packed query rows qp [rows*hc, d] into z [rows*hc, ne + nr],
 * scaled, keys row r*hc + e may not see (position t0 + r) = -inf: invisible ones and, with
 * s->entry_select, visible entries the query's top-k did not select (docs/spec.md §5.4). */
static void block_scores(const AttnShape *s, int b, const Block *bk, int hc, const float *qp, const float *ckg,
                         const float *kg, float *z, float scale) {
    const int d = s->d, G = s->G, rows = bk->t1 - bk->t0, m = rows * hc, nk = bk->ne + bk->nr;
    if (bk->ne > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, bk->ne, d, scale, qp, d, ckg, G * d, 0.0f, z, nk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, bk->nr, d, scale, qp, d,
                kg + (size_t)bk->r0 * G * d, G * d, 0.0f, z + bk->ne, nk);
    for (int r = 0; r < rows; r++) {
        int nvis, lo, t = bk->t0 + r;
        visible_range(s, bk->b, bk->g, t, &nvis, &lo);
        for (int e = 0; e < hc; e++) {
            float *zr = z + ((size_t)r * hc + e) * nk;
            for (int j = nvis; j < bk->ne; j++) zr[j] = -INFINITY;
            if (s->entry_select) {
                const uint8_t *sel = s->entry_select + ((size_t)b * s->T + t) * s->n_windows;
                for (int j = 0; j < nvis; j++) if (!sel[j]) zr[j] = -INFINITY;
            }
            for (int x = bk->r0; x < lo; x++) zr[bk->ne + x - bk->r0] = -INFINITY;
            for (int x = t + 1; x < bk->t1; x++) zr[bk->ne + x - bk->r0] = -INFINITY;
        }
    }
}

/* One row of scores in place: z[x] = exp(z[x] - mx) over x < n, unnormalized, with mx = the max
 * of the row and of m0 (the sink logit, or -inf); returns mx and sets *sum = Z = (exp(m0 - mx)
 * when with_sink) + sum_x exp(z[x] - mx). The caller divides the output row by Z (d values,
 * not n). The max is exact in any order (four running maxima, so the compares do not wait on
 * each other); the sum is taken in 8 lanes (lane x mod 8, the tail of the row as a last vector
 * whose missing lanes are exp(-inf) = 0), the lanes added in lane order, then the sink: a fixed
 * order, so the same bits on every run and thread count. */
static float softmax_row(float *z, int n, float m0, int with_sink, float *sum) {
    const int nv = n & ~7, nt = n - nv;
    cpu_v8f vm[4] = {{0}, {0}, {0}, {0}};
    for (int a = 0; a < 4; a++) vm[a] += m0;
    int x = 0;
    for (; x + 32 <= nv; x += 32)
        for (int a = 0; a < 4; a++) {
            cpu_v8f v = cpu_v8_load(z + x + 8 * a, 8);
            vm[a] = cpu_v8_select(v > vm[a], v, vm[a]);
        }
    for (; x < nv; x += 8) {
        cpu_v8f v = cpu_v8_load(z + x, 8);
        vm[0] = cpu_v8_select(v > vm[0], v, vm[0]);
    }
    cpu_v8f tail = {0};
    if (nt) {
        const cpu_v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
        tail = cpu_v8_load(z + nv, nt);
        tail = cpu_v8_select(lane < nt, tail, tail - INFINITY);
        vm[0] = cpu_v8_select(tail > vm[0], tail, vm[0]);
    }
    float mx = m0;
    for (int a = 0; a < 4; a++)
        for (int l = 0; l < 8; l++) if (vm[a][l] > mx) mx = vm[a][l];
    cpu_v8f vs = {0};
    for (x = 0; x < nv; x += 8) {
        cpu_v8f e = cpu_expf8(cpu_v8_load(z + x, 8) - mx);
        cpu_v8_store(z + x, e, 8);
        vs += e;
    }
    if (nt) {
        tail = cpu_expf8(tail - mx);
        cpu_v8_store(z + nv, tail, nt);
        vs += tail;
    }
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += vs[l];
    if (with_sink) s += cpu_expf(m0 - mx);
    *sum = s;
    return mx;
}

void cpu_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out_, float *lse, const act_t *q_, const act_t *k_,
                       const act_t *v_, const act_t *ck_, const act_t *cv_, const float *sink) {
    const int B = s->B, T = s->T, H = s->H, G = s->G, d = s->d, nW = s->n_windows, group = H / G;
    const float scale = 1.0f / sqrtf((float)d);
    float *out = F(out_);
    const float *q = CF(q_), *k = CF(k_), *v = CF(v_), *ck = CF(ck_), *cv = CF(cv_);
    const int qb = block_rows(s), n_blocks = (T + qb - 1) / qb, hc = heads_per_block(group, qb), n_chunks = H / hc;
    #pragma omp parallel num_threads(ctx->threads)
    {
        float *z = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * (nW + T), "attention scores");   /* [rows*hc, nk] */
        float *qp = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * d, "attention queries"); /* [rows*hc, d] */
        float *op = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * d, "attention outputs");         /* [rows*hc, d] unnormalized */
        float inv_sum[BLOCK_ROWS];                                           /* [rows*hc] 1 / Z */
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < n_chunks; c++)
                for (int blk = 0; blk < n_blocks; blk++) {
                    const int h0 = c * hc, g = h0 / group;
                    const float *kg = k + (size_t)b * T * G * d + g * d, *vg = v + (size_t)b * T * G * d + g * d;
                    const float *ckg = nW ? ck + (size_t)b * nW * G * d + g * d : NULL;
                    const float *cvg = nW ? cv + (size_t)b * nW * G * d + g * d : NULL;
                    Block bk = block_of(s, b, g, blk * qb, qb);
                    const int rows = bk.t1 - bk.t0, m = rows * hc, nk = bk.ne + bk.nr;
                    pack_rows(qp, q, s, b, bk.t0, rows, h0, hc);
                    block_scores(s, b, &bk, hc, qp, ckg, kg, z, scale);
                    for (int i = 0; i < m; i++) {
                        const int r = i / hc, h = h0 + i % hc;
                        float sum, mx = softmax_row(z + (size_t)i * nk, nk, sink ? sink[h] : -INFINITY, sink != NULL, &sum);
                        lse[((size_t)b * T + bk.t0 + r) * H + h] = mx + logf(sum);
                        inv_sum[i] = 1.0f / sum;
                    }
                    if (bk.ne > 0)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, bk.ne, 1.0f, z, nk, cvg, G * d,
                                    0.0f, op, d);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, bk.nr, 1.0f, z + bk.ne, nk,
                                vg + (size_t)bk.r0 * G * d, G * d, bk.ne > 0 ? 1.0f : 0.0f, op, d);
                    unpack_rows_scaled(out, op, inv_sum, s, b, bk.t0, rows, h0, hc);   /* out = (e V) / Z */
                }
        free(z);
        free(qp);
        free(op);
    }
}

void cpu_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq_, act_t *dk_, act_t *dv_, act_t *dck_, act_t *dcv_,
                       float *dsink, const act_t *dout_, const act_t *out_, const float *lse,
                       const act_t *q_, const act_t *k_, const act_t *v_, const act_t *ck_,
                       const act_t *cv_, const float *sink) {
    const int B = s->B, T = s->T, H = s->H, G = s->G, d = s->d, nW = s->n_windows, group = H / G;
    const float scale = 1.0f / sqrtf((float)d);
    float *dq = F(dq_), *dk = F(dk_), *dv = F(dv_), *dck = F(dck_), *dcv = F(dcv_);
    const float *dout = CF(dout_), *out = CF(out_), *q = CF(q_), *k = CF(k_), *v = CF(v_), *ck = CF(ck_), *cv = CF(cv_);
    const int qb = block_rows(s), n_blocks = (T + qb - 1) / qb, hc = heads_per_block(group, qb);
    memset(dk, 0, sizeof(float) * (size_t)B * T * G * d);
    memset(dv, 0, sizeof(float) * (size_t)B * T * G * d);
    if (nW > 0) {
        memset(dck, 0, sizeof(float) * (size_t)B * nW * G * d);
        memset(dcv, 0, sizeof(float) * (size_t)B * nW * G * d);
    }
    float *dsink_part = sink ? cpu_scratch_zeroed(sizeof(float) * (size_t)B * H, "attention sink gradients") : NULL; /* [B, H] */
    #pragma omp parallel num_threads(ctx->threads)
    {
        float *p = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * (nW + T), "attention probabilities");    /* [rows*hc, nk] probabilities, then dz */
        float *dp = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * (nW + T), "attention score gradients");   /* [rows*hc, nk] */
        float *qp = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * d, "attention queries"); /* [rows*hc, d] packed q, dout, dq */
        float *dop = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * d, "attention output gradients");
        float *dqp = cpu_scratch(sizeof(float) * (size_t)BLOCK_ROWS * d, "attention query gradients");
        float Drow[BLOCK_ROWS];
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < G; g++) {
                const size_t kv0 = (size_t)b * T * G * d + g * d, e0 = (size_t)b * nW * G * d + g * d;
                for (int h0 = g * group; h0 < (g + 1) * group; h0 += hc)
                    for (int blk = 0; blk < n_blocks; blk++) {
                        Block bk = block_of(s, b, g, blk * qb, qb);
                        const int rows = bk.t1 - bk.t0, m = rows * hc, nk = bk.ne + bk.nr;
                        pack_rows(qp, q, s, b, bk.t0, rows, h0, hc);
                        pack_rows(dop, dout, s, b, bk.t0, rows, h0, hc);
                        block_scores(s, b, &bk, hc, qp, nW ? ck + e0 : NULL, k + kv0, p, scale);
                        for (int i = 0; i < m; i++) {
                            const int h = h0 + i % hc;
                            const size_t row = ((size_t)b * T + bk.t0 + i / hc) * H + h;
                            float L = lse[row], *pr = p + (size_t)i * nk;
                            cpu_exp_shifted(pr, pr, L, nk);
                            const float *dor = dout + row * d, *orow = out + row * d;
                            float D = 0.0f;
                            for (int x = 0; x < d; x++) D += dor[x] * orow[x];
                            Drow[i] = D;
                            if (sink) dsink_part[(size_t)b * H + h] -= cpu_expf(sink[h] - L) * D;
                        }
                        /* dp = dout . values */
                        if (bk.ne > 0)
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, bk.ne, d, 1.0f, dop, d,
                                        cv + e0, G * d, 0.0f, dp, nk);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, bk.nr, d, 1.0f, dop, d,
                                    v + kv0 + (size_t)bk.r0 * G * d, G * d, 0.0f, dp + bk.ne, nk);
                        /* dvalue += p^T dout */
                        if (bk.ne > 0)
                            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk.ne, d, m, 1.0f, p, nk, dop,
                                        d, 1.0f, dcv + e0, G * d);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk.nr, d, m, 1.0f, p + bk.ne, nk,
                                    dop, d, 1.0f, dv + kv0 + (size_t)bk.r0 * G * d, G * d);
                        /* dz = p (dp - D) scale  (in place in p) */
                        for (int i = 0; i < m; i++) {
                            float *pr = p + (size_t)i * nk, *dpr = dp + (size_t)i * nk;
                            for (int x = 0; x < nk; x++) pr[x] = pr[x] * (dpr[x] - Drow[i]) * scale;
                        }
                        if (bk.ne > 0) {
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, bk.ne, 1.0f, p, nk,
                                        ck + e0, G * d, 0.0f, dqp, d);
                            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk.ne, d, m, 1.0f, p, nk, qp,
                                        d, 1.0f, dck + e0, G * d);
                        }
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, bk.nr, 1.0f, p + bk.ne, nk,
                                    k + kv0 + (size_t)bk.r0 * G * d, G * d, bk.ne > 0 ? 1.0f : 0.0f, dqp, d);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk.nr, d, m, 1.0f, p + bk.ne, nk,
                                    qp, d, 1.0f, dk + kv0 + (size_t)bk.r0 * G * d, G * d);
                        unpack_rows(dq, dqp, s, b, bk.t0, rows, h0, hc);
                    }
            }
        free(p);
        free(dp);
        free(qp);
        free(dop);
        free(dqp);
    }
    if (sink) {
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) dsink[h] += dsink_part[(size_t)b * H + h];
        free(dsink_part);
    }
}
