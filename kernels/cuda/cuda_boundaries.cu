/* Learned chunk boundaries on the CUDA backend (model.boundaries = learned, docs/spec.md §6.5): the score
 * and decision scan, the chunk compressor (one branch per call), the straight-through factor and the
 * score's backward. kernels/cpu/cpu_chunk_compressor.c is the reference; the decision rule is
 * chunk_boundary (kernels/chunk_boundaries.h), called here on the device.
 *
 * Shapes (s: the layer's CompShape with n_windows = T entry rows per sequence; bf16 = act_t):
 *   a [B, T, D] bf16 the compressor's input; w_bd [D], c_bd [1] bf16
 *   prob, prob_sg [B, T] fp32       p_t = sigmoid(w_bd . a_t + c_bd), sg(p_t)
 *   flag [B, T] u8, ends [B, T] i32 (T after the last entry), count [B] i32 (device memory: what
 *                                   boundary_decide writes); the other ops read s->entry_ends /
 *                                   s->entry_count (host memory, copied to the device per call)
 *   alpha [B, T, G, c] fp32, payload [B, T, G, d] bf16, pn_rstd [B, T, G] fp32: per token (0 for a
 *                                   token in no entry); entry [B, T, G, d] bf16 (rows j >= n_b zero)
 * Entry j of sequence b pools tokens s_j = e_{j-1} + 1 .. e_j; token t sits at slot
 * i = W - 1 - (e_j - t) with map m = map_index(i) (the per-slot maps are computed on the host):
 *   z_t = Z_{g,m} a_t + b_{g,i}  (gate logits, c channels)   p_t = C_{g,m} a_t  (payload, d rows)
 *   alpha_t = softmax over the entry's tokens of z_t (uniform gates: 1 / L_j)
 *   p'_t = p_t rstd_t w_pn (post-norm) or p_t                 E_j = sum_t alpha_t * p'_t
 * Backward from dE_j: dp' = alpha dE, dalpha = dE . p', dz = alpha (dalpha - sum alpha dalpha), the
 * post-norm backward dp' -> dp; dC_{g,m} += dp a^T, dZ_{g,m} += dz a^T, db_{g,i} += dz, da += C^T dp + Z^T dz.
 * Straight-through factor c_j = 1 + p_e - sg(p_e), e = e_j: boundary_scale x_j *= c_j; its backward
 * dprob[e] += (x_j / c_j) . dx_j, dx_j *= c_j. Score backward: dq = (dprob + dprob_all) p (1 - p),
 * dw_bd += sum_t dq_t a_t, dc_bd += sum_t dq_t, da_t += dq_t w_bd.
 *
 * Kernels: plain per-output threads (one thread per token and output row for the projections, per
 * (b, j, g) entry for the pooling and its backward, per weight element for the weight gradients), each
 * summing sequentially in the CPU reference's order: no atomics, no GEMM, the same bits on every run.
 * Chunks do not overlap, so every token's per-token state has one writer. The weight gradients walk all
 * B T tokens per element (T (d + c) D G multiply-adds per map): fine at the model sizes this backend
 * trains; cuBLASLt GEMMs over gathered per-map rows would be the faster form (not built). */
#include "kernels/cuda/cuda_common.h"
extern "C" {
#include "kernels/chunk_boundaries.h"
}

#define BD_MAX_W 256     /* slots per entry whose map index travels with the dims */
#define BD_THREADS 256

typedef struct {
    int B, T, D, G, d, W, c, M, rows, gated;
    float eps;
    int map_of_slot[BD_MAX_W];   /* map_index (kernels/kernels.h) of slot i, computed on the host */
} BdDims;

static BdDims bd_dims(const CompShape *s) {
    BdDims q;
    q.B = s->B; q.T = s->T; q.D = s->D; q.G = s->G; q.d = s->d; q.W = s->window; q.c = s->channels;
    q.M = s->n_maps; q.rows = s->n_windows; q.gated = s->gate != GATE_UNIFORM; q.eps = s->eps;
    if (q.W > BD_MAX_W) cu_fail(__FILE__, __LINE__, "learned boundaries", "window > 256 is not supported");
    for (int i = 0; i < q.W; i++) q.map_of_slot[i] = comp_map_index(s, i);
    return q;
}

/* ---------------- score and decisions ---------------- */
__global__ void bd_prob_kernel(float *prob, float *prob_sg, const bf16 *a, const bf16 *w, const bf16 *c0, long N, int D,
                               int hold) {
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < N; n += (long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < D; k++) acc += bf(w[k]) * bf(a[n * D + k]);
        const float p = 1.0f / (1.0f + expf(-(acc + bf(c0[0]))));
        prob[n] = p;
        if (!hold) prob_sg[n] = p;
    }
}

/* one thread per sequence: the scan of docs/spec.md §6.5 (sequential by definition) */
__global__ void bd_scan_kernel(uint8_t *flag, int32_t *ends, int32_t *count, const float *prob, int B, int T, int W, int rows) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    count[b] = chunk_scan_row(prob + (size_t)b * T, T, W, rows, flag + (size_t)b * T, ends + (size_t)b * rows);
}

void cu_boundary_decide(BackendCtx *ctx, const CompShape *s, float *prob, float *prob_sg, uint8_t *flag, int32_t *ends,
                        int32_t *count, const act_t *a, const act_t *w_bd, const act_t *c_bd, int hold) {
    const long N = (long)s->B * s->T;
    if (N <= 0) return;
    CU_KERNEL(bd_prob_kernel, cu_blocks((size_t)N, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        prob, prob_sg, (const bf16 *)a, (const bf16 *)w_bd, (const bf16 *)c_bd, N, s->D, hold);
    CU_LAUNCH();
    if (hold) return;     /* model_hold_boundaries: decisions and sg(p) of the held forward */
    CU_KERNEL(bd_scan_kernel, cu_blocks((size_t)s->B, 32), 32, 0, ctx->stream)(flag, ends, count, prob, s->B, s->T,
                                                                               s->window, s->n_windows);
    CU_LAUNCH();
}

/* ---------------- entries on the device ---------------- */
typedef struct { const int32_t *ends, *count; } BdEntries;
static BdEntries bd_entries(BackendCtx *ctx, const CompShape *s) {
    BdEntries e;
    e.ends = cu_device_ints(ctx, WS_BD_ENDS, s->entry_ends, s->B * s->n_windows);
    e.count = cu_device_ints(ctx, WS_BD_COUNT, s->entry_count, s->B);
    if (!e.ends || !e.count) cu_fail(__FILE__, __LINE__, "learned boundaries", "the shape has no entry ends");
    return e;
}
__device__ __forceinline__ int bd_start(const int32_t *ends_b, int j) { return j > 0 ? ends_b[j - 1] + 1 : 0; }

/* slot[b*T + t] = W - 1 - (e_j - t) for the token's entry j, -1 (preset) for a token in no entry */
__global__ void bd_slot_kernel(int32_t *slot, BdEntries en, int B, int T, int W, int rows) {
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < (long)B * rows; x += (long)gridDim.x * blockDim.x) {
        const int b = (int)(x / rows), j = (int)(x % rows);
        if (j >= en.count[b]) continue;
        const int32_t *e_b = en.ends + (size_t)b * rows;
        const int e = e_b[j];
        for (int t = bd_start(e_b, j); t <= e; t++) slot[(size_t)b * T + t] = W - 1 - (e - t);
    }
}
static int32_t *bd_slots(BackendCtx *ctx, const BdDims &q, const BdEntries &en) {
    int32_t *slot = (int32_t *)cu_workspace(ctx, WS_BD_SLOT, (size_t)q.B * q.T * sizeof(int32_t));
    CU(cudaMemsetAsync(slot, 0xff, (size_t)q.B * q.T * sizeof(int32_t), ctx->stream));
    CU_KERNEL(bd_slot_kernel, cu_blocks((size_t)q.B * q.rows, BD_THREADS), BD_THREADS, 0, ctx->stream)(slot, en, q.B, q.T, q.W,
                                                                                                       q.rows);
    CU_LAUNCH();
    return slot;
}

/* ---------------- chunk compressor forward ---------------- */
/* one thread per (token n, head g, output row r): r < cg gate logit r (into alpha), else payload row r - cg */
__global__ void bd_proj_kernel(float *alpha, float *p32, bf16 *payload, const int32_t *slot, const bf16 *a, const bf16 *gate_w,
                               const bf16 *gate_b, const bf16 *payload_w, BdDims q) {
    const int cg = q.gated ? q.c : 0, R = cg + q.d;
    const long total = (long)q.B * q.T * q.G * R;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int r = (int)(x % R), g = (int)((x / R) % q.G);
        const long n = x / ((long)R * q.G);
        const int i = slot[n];
        if (i < 0) continue;                        /* in no entry: the zeros of the memsets */
        const int m = q.map_of_slot[i];
        const bf16 *xa = a + n * q.D;
        const size_t tg = (size_t)n * q.G + g;
        const bf16 *wrow = r < cg ? gate_w + (((size_t)g * q.M + m) * q.c + r) * q.D
                                  : payload_w + (((size_t)g * q.M + m) * q.d + (r - cg)) * q.D;
        float acc = 0.0f;
        for (int k = 0; k < q.D; k++) acc += bf(wrow[k]) * bf(xa[k]);
        if (r < cg) alpha[tg * q.c + r] = acc + (gate_b ? bf(gate_b[((size_t)g * q.W + i) * q.c + r]) : 0.0f);
        else {
            p32[tg * q.d + (r - cg)] = acc;
            payload[tg * q.d + (r - cg)] = tobf(acc);
        }
    }
}

/* one thread per (b, j, g) with j < n_b: post-norm statistics, the softmax over the entry's tokens, E_j */
__global__ void bd_pool_kernel(bf16 *entry, float *alpha, float *pn_rstd, const float *p32, const bf16 *post_w, BdEntries en,
                               BdDims q) {
    const long total = (long)q.B * q.rows * q.G;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int g = (int)(x % q.G), j = (int)((x / q.G) % q.rows), b = (int)(x / ((long)q.G * q.rows));
        if (j >= en.count[b]) continue;
        const int32_t *e_b = en.ends + (size_t)b * q.rows;
        const int e = e_b[j], s0 = bd_start(e_b, j), L = e - s0 + 1;
        for (int t = s0; t <= e; t++) {
            const size_t tg = ((size_t)b * q.T + t) * q.G + g;
            if (post_w) {
                float ss = 0.0f;
                for (int r = 0; r < q.d; r++) ss += p32[tg * q.d + r] * p32[tg * q.d + r];
                pn_rstd[tg] = 1.0f / sqrtf(ss / q.d + q.eps);
            }
            if (!q.gated) alpha[tg * q.c] = 1.0f / L;
        }
        if (q.gated)
            for (int ch = 0; ch < q.c; ch++) {
                float mx = -INFINITY, sum = 0.0f;
                for (int t = s0; t <= e; t++) mx = fmaxf(mx, alpha[(((size_t)b * q.T + t) * q.G + g) * q.c + ch]);
                for (int t = s0; t <= e; t++) {
                    float *v = &alpha[(((size_t)b * q.T + t) * q.G + g) * q.c + ch];
                    *v = expf(*v - mx);
                    sum += *v;
                }
                for (int t = s0; t <= e; t++) alpha[(((size_t)b * q.T + t) * q.G + g) * q.c + ch] /= sum;
            }
        bf16 *E = entry + (((size_t)b * q.rows + j) * q.G + g) * q.d;
        for (int r = 0; r < q.d; r++) {
            float acc = 0.0f;
            for (int t = s0; t <= e; t++) {
                const size_t tg = ((size_t)b * q.T + t) * q.G + g;
                const float rs = post_w ? pn_rstd[tg] : 1.0f, al = alpha[tg * q.c + (q.c == 1 ? 0 : r)];
                acc += al * p32[tg * q.d + r] * rs * (post_w ? bf(post_w[r]) : 1.0f);
            }
            E[r] = tobf(acc);
        }
    }
}

void cu_chunk_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry, float *alpha, act_t *payload, float *pn_rstd,
                             const act_t *a, const act_t *gate_w, const act_t *gate_b, const act_t *payload_w,
                             const act_t *post_w) {
    BdDims q = bd_dims(s);
    const size_t NG = (size_t)q.B * q.T * q.G;
    CU(cudaMemsetAsync(entry, 0, (size_t)q.B * q.rows * q.G * q.d * sizeof(bf16), ctx->stream));
    CU(cudaMemsetAsync(alpha, 0, NG * q.c * sizeof(float), ctx->stream));
    CU(cudaMemsetAsync(payload, 0, NG * q.d * sizeof(bf16), ctx->stream));
    if (pn_rstd) CU(cudaMemsetAsync(pn_rstd, 0, NG * sizeof(float), ctx->stream));
    if (NG == 0 || q.rows <= 0) return;
    const BdEntries en = bd_entries(ctx, s);
    const int32_t *slot = bd_slots(ctx, q, en);
    float *p32 = (float *)cu_workspace(ctx, WS_BD_P32, NG * q.d * sizeof(float));
    const size_t n_proj = NG * ((q.gated ? q.c : 0) + q.d);
    CU_KERNEL(bd_proj_kernel, cu_blocks(n_proj, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        alpha, p32, (bf16 *)payload, slot, (const bf16 *)a, q.gated ? (const bf16 *)gate_w : NULL,
        q.gated ? (const bf16 *)gate_b : NULL, (const bf16 *)payload_w, q);
    CU_LAUNCH();
    CU_KERNEL(bd_pool_kernel, cu_blocks((size_t)q.B * q.rows * q.G, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        (bf16 *)entry, alpha, post_w ? pn_rstd : NULL, p32, (const bf16 *)post_w, en, q);
    CU_LAUNCH();
}

/* ---------------- chunk compressor backward ---------------- */
/* one thread per (b, j, g) with j < n_b: per token dp (after the post-norm backward), dpp (dp', for dw_pn), dz */
__global__ void bd_pool_bwd_kernel(float *dp, float *dpp, float *dz, const bf16 *dentry, const float *alpha, const bf16 *payload,
                                   const float *pn_rstd, const bf16 *post_w, BdEntries en, BdDims q) {
    const long total = (long)q.B * q.rows * q.G;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int g = (int)(x % q.G), j = (int)((x / q.G) % q.rows), b = (int)(x / ((long)q.G * q.rows));
        if (j >= en.count[b]) continue;
        const int32_t *e_b = en.ends + (size_t)b * q.rows;
        const int e = e_b[j], s0 = bd_start(e_b, j);
        const bf16 *dE = dentry + (((size_t)b * q.rows + j) * q.G + g) * q.d;
        for (int t = s0; t <= e; t++) {
            const size_t tg = ((size_t)b * q.T + t) * q.G + g;
            const float rs = post_w ? pn_rstd[tg] : 1.0f;
            const float *al = alpha + tg * q.c;
            const bf16 *p = payload + tg * q.d;
            float *dpt = dp + tg * q.d, *dzt = q.gated ? dz + tg * q.c : NULL;
            for (int r = 0; r < q.d; r++) {
                const float pn = bf(p[r]) * rs * (post_w ? bf(post_w[r]) : 1.0f), de = bf(dE[r]);
                if (q.gated) dzt[q.c == 1 ? 0 : r] += de * pn;       /* dalpha for now */
                dpt[r] = al[q.c == 1 ? 0 : r] * de;                   /* dp' */
            }
            if (post_w) {      /* RMSNorm backward: dp = rs (dp' w - p rs mean(dp' w p rs)) */
                float dot = 0.0f;
                for (int r = 0; r < q.d; r++) {
                    dpp[tg * q.d + r] = dpt[r];
                    dot += dpt[r] * bf(post_w[r]) * bf(p[r]) * rs;
                }
                dot /= q.d;
                for (int r = 0; r < q.d; r++) dpt[r] = rs * (dpt[r] * bf(post_w[r]) - bf(p[r]) * rs * dot);
            }
        }
        if (q.gated)           /* softmax backward over the entry's tokens, per channel */
            for (int ch = 0; ch < q.c; ch++) {
                float sum = 0.0f;
                for (int t = s0; t <= e; t++) {
                    const size_t y = (((size_t)b * q.T + t) * q.G + g) * q.c + ch;
                    sum += alpha[y] * dz[y];
                }
                for (int t = s0; t <= e; t++) {
                    const size_t y = (((size_t)b * q.T + t) * q.G + g) * q.c + ch;
                    dz[y] = alpha[y] * (dz[y] - sum);
                }
            }
    }
}

/* dW[g, m, r, k] += sum over tokens n (in order) with map m of v[n, g, r] a[n, k]; rows_per_head = d (payload) or c (gate) */
__global__ void bd_dw_kernel(float *dw, const float *v, const int32_t *slot, const bf16 *a, int rows_per_head, BdDims q) {
    const long total = (long)q.G * q.M * rows_per_head * q.D;
    const long N = (long)q.B * q.T;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int k = (int)(x % q.D), r = (int)((x / q.D) % rows_per_head);
        const int m = (int)((x / ((long)q.D * rows_per_head)) % q.M), g = (int)(x / ((long)q.D * rows_per_head * q.M));
        float acc = dw[x];
        for (long n = 0; n < N; n++) {
            const int i = slot[n];
            if (i < 0 || q.map_of_slot[i] != m) continue;
            acc += v[((size_t)n * q.G + g) * rows_per_head + r] * bf(a[n * q.D + k]);
        }
        dw[x] = acc;
    }
}

/* dgate_b[g, i, ch] += sum over tokens n (in order) at slot i of dz[n, g, ch] */
__global__ void bd_db_kernel(float *db, const float *dz, const int32_t *slot, BdDims q) {
    const long total = (long)q.G * q.W * q.c;
    const long N = (long)q.B * q.T;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int ch = (int)(x % q.c), i = (int)((x / q.c) % q.W), g = (int)(x / ((long)q.c * q.W));
        float acc = db[x];
        for (long n = 0; n < N; n++)
            if (slot[n] == i) acc += dz[((size_t)n * q.G + g) * q.c + ch];
        db[x] = acc;
    }
}

/* da[n, k] += sum_g (sum_r dp C_{g,m}[r, k] + sum_ch dz Z_{g,m}[ch, k]), per token in the CPU's order */
__global__ void bd_da_kernel(bf16 *da, const float *dp, const float *dz, const int32_t *slot, const bf16 *gate_w,
                             const bf16 *payload_w, BdDims q) {
    const long total = (long)q.B * q.T * q.D;
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < total; x += (long)gridDim.x * blockDim.x) {
        const int k = (int)(x % q.D);
        const long n = x / q.D;
        const int i = slot[n];
        if (i < 0) continue;
        const int m = q.map_of_slot[i];
        float acc = bf(da[x]);
        for (int g = 0; g < q.G; g++) {
            const size_t tg = (size_t)n * q.G + g;
            for (int r = 0; r < q.d; r++) acc += dp[tg * q.d + r] * bf(payload_w[(((size_t)g * q.M + m) * q.d + r) * q.D + k]);
            if (q.gated)
                for (int ch = 0; ch < q.c; ch++) acc += dz[tg * q.c + ch] * bf(gate_w[(((size_t)g * q.M + m) * q.c + ch) * q.D + k]);
        }
        da[x] = tobf(acc);
    }
}

/* dw_pn[r] += sum over (token, head) in order of dp'_r p_r rs (tokens in no entry have rs = 0: skipped) */
__global__ void bd_dpost_kernel(float *dpost_w, const float *dpp, const bf16 *payload, const float *pn_rstd, size_t NG, int d) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= d) return;
    float acc = dpost_w[r];
    for (size_t tg = 0; tg < NG; tg++) {
        const float rs = pn_rstd[tg];
        if (rs == 0.0f) continue;
        acc += dpp[tg * d + r] * bf(payload[tg * d + r]) * rs;
    }
    dpost_w[r] = acc;
}

void cu_chunk_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da, float *dgate_w, float *dgate_b, float *dpayload_w,
                             float *dpost_w, const act_t *dentry, const float *alpha, const act_t *payload,
                             const float *pn_rstd, const act_t *a, const act_t *gate_w, const act_t *payload_w,
                             const act_t *post_w) {
    BdDims q = bd_dims(s);
    const size_t NG = (size_t)q.B * q.T * q.G;
    if (NG == 0 || q.rows <= 0) return;
    const BdEntries en = bd_entries(ctx, s);
    const int32_t *slot = bd_slots(ctx, q, en);
    float *dp = (float *)cu_workspace(ctx, WS_BD_DP, NG * q.d * sizeof(float));
    float *dpp = post_w ? (float *)cu_workspace(ctx, WS_BD_DPP, NG * q.d * sizeof(float)) : NULL;
    float *dz = q.gated ? (float *)cu_workspace(ctx, WS_BD_DZ, NG * q.c * sizeof(float)) : NULL;
    CU(cudaMemsetAsync(dp, 0, NG * q.d * sizeof(float), ctx->stream));
    if (dpp) CU(cudaMemsetAsync(dpp, 0, NG * q.d * sizeof(float), ctx->stream));
    if (dz) CU(cudaMemsetAsync(dz, 0, NG * q.c * sizeof(float), ctx->stream));
    CU_KERNEL(bd_pool_bwd_kernel, cu_blocks((size_t)q.B * q.rows * q.G, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        dp, dpp, dz, (const bf16 *)dentry, alpha, (const bf16 *)payload, pn_rstd, (const bf16 *)post_w, en, q);
    CU_LAUNCH();
    const size_t n_dpw = (size_t)q.G * q.M * q.d * q.D;
    CU_KERNEL(bd_dw_kernel, cu_blocks(n_dpw, BD_THREADS), BD_THREADS, 0, ctx->stream)(dpayload_w, dp, slot, (const bf16 *)a, q.d, q);
    CU_LAUNCH();
    if (q.gated) {
        const size_t n_dgw = (size_t)q.G * q.M * q.c * q.D;
        CU_KERNEL(bd_dw_kernel, cu_blocks(n_dgw, BD_THREADS), BD_THREADS, 0, ctx->stream)(dgate_w, dz, slot, (const bf16 *)a, q.c, q);
        CU_LAUNCH();
        if (dgate_b) {
            CU_KERNEL(bd_db_kernel, cu_blocks((size_t)q.G * q.W * q.c, BD_THREADS), BD_THREADS, 0, ctx->stream)(dgate_b, dz, slot, q);
            CU_LAUNCH();
        }
    }
    CU_KERNEL(bd_da_kernel, cu_blocks((size_t)q.B * q.T * q.D, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        (bf16 *)da, dp, dz, slot, q.gated ? (const bf16 *)gate_w : NULL, (const bf16 *)payload_w, q);
    CU_LAUNCH();
    if (post_w && dpost_w) {
        CU_KERNEL(bd_dpost_kernel, cu_blocks((size_t)q.d, 32), 32, 0, ctx->stream)(dpost_w, dpp, (const bf16 *)payload, pn_rstd, NG, q.d);
        CU_LAUNCH();
    }
}

/* ---------------- the straight-through factor ---------------- */
__device__ __forceinline__ float bd_factor(const float *prob, const float *prob_sg, size_t e) { return 1.0f + prob[e] - prob_sg[e]; }

/* one thread per element of the rows j < n_b: x_j *= c_j */
__global__ void bd_scale_kernel(bf16 *x, const float *prob, const float *prob_sg, BdEntries en, int B, int T, int rows, int GD) {
    const long total = (long)B * rows * GD;
    for (long y = blockIdx.x * (long)blockDim.x + threadIdx.x; y < total; y += (long)gridDim.x * blockDim.x) {
        const int j = (int)((y / GD) % rows), b = (int)(y / ((long)GD * rows));
        if (j >= en.count[b]) continue;
        x[y] = tobf(bf(x[y]) * bd_factor(prob, prob_sg, (size_t)b * T + en.ends[(size_t)b * rows + j]));
    }
}

void cu_boundary_scale(BackendCtx *ctx, const CompShape *s, act_t *x, const float *prob, const float *prob_sg) {
    const int GD = s->G * s->d;
    if (s->B <= 0 || s->n_windows <= 0 || GD <= 0) return;
    const BdEntries en = bd_entries(ctx, s);
    CU_KERNEL(bd_scale_kernel, cu_blocks((size_t)s->B * s->n_windows * GD, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        (bf16 *)x, prob, prob_sg, en, s->B, s->T, s->n_windows, GD);
    CU_LAUNCH();
}

/* one thread per entry (b, j < n_b): dprob[b, e_j] += (x_j / c_j) . dx_j, then dx_j *= c_j (each end has one entry) */
__global__ void bd_scale_bwd_kernel(float *dprob, bf16 *dx, const bf16 *x, const float *prob, const float *prob_sg, BdEntries en,
                                    int B, int T, int rows, int GD) {
    for (long y = blockIdx.x * (long)blockDim.x + threadIdx.x; y < (long)B * rows; y += (long)gridDim.x * blockDim.x) {
        const int j = (int)(y % rows), b = (int)(y / rows);
        if (j >= en.count[b]) continue;
        const size_t e = (size_t)b * T + en.ends[(size_t)b * rows + j], row = (size_t)y * GD;
        const float cj = bd_factor(prob, prob_sg, e);
        float dot = 0.0f;
        for (int k = 0; k < GD; k++) dot += bf(x[row + k]) * bf(dx[row + k]);
        dprob[e] += dot / cj;
        for (int k = 0; k < GD; k++) dx[row + k] = tobf(bf(dx[row + k]) * cj);
    }
}

void cu_boundary_scale_bwd(BackendCtx *ctx, const CompShape *s, float *dprob, act_t *dx, const act_t *x, const float *prob,
                           const float *prob_sg) {
    const int GD = s->G * s->d;
    if (s->B <= 0 || s->n_windows <= 0 || GD <= 0) return;
    const BdEntries en = bd_entries(ctx, s);
    CU_KERNEL(bd_scale_bwd_kernel, cu_blocks((size_t)s->B * s->n_windows, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        dprob, (bf16 *)dx, (const bf16 *)x, prob, prob_sg, en, s->B, s->T, s->n_windows, GD);
    CU_LAUNCH();
}

/* ---------------- the score's backward ---------------- */
__global__ void bd_dq_kernel(float *dprob, const float *prob, long N, float dprob_all) {
    for (long n = blockIdx.x * (long)blockDim.x + threadIdx.x; n < N; n += (long)gridDim.x * blockDim.x)
        dprob[n] = (dprob[n] + dprob_all) * prob[n] * (1.0f - prob[n]);
}
/* dw_bd[k] += sum_n dq_n a[n, k] (tokens in order) */
__global__ void bd_dw_bd_kernel(float *dw_bd, const float *dq, const bf16 *a, long N, int D) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= D) return;
    float acc = 0.0f;
    for (long n = 0; n < N; n++) acc += dq[n] * bf(a[n * D + k]);
    dw_bd[k] += acc;
}
/* da[n, k] += dq_n w_bd[k] */
__global__ void bd_da_score_kernel(bf16 *da, const float *dq, const bf16 *w, long N, int D) {
    for (long x = blockIdx.x * (long)blockDim.x + threadIdx.x; x < N * D; x += (long)gridDim.x * blockDim.x)
        da[x] = tobf(bf(da[x]) + dq[x / D] * bf(w[x % D]));
}

void cu_boundary_bwd(BackendCtx *ctx, const CompShape *s, act_t *da, float *dw_bd, float *dc_bd, float *dprob, const float *prob,
                     const act_t *a, const act_t *w_bd, float dprob_all) {
    const long N = (long)s->B * s->T;
    const int D = s->D;
    if (N <= 0) return;
    CU_KERNEL(bd_dq_kernel, cu_blocks((size_t)N, BD_THREADS), BD_THREADS, 0, ctx->stream)(dprob, prob, N, dprob_all);
    CU_LAUNCH();
    cu_colsum_add(ctx, dc_bd, dprob, (int)N, 1);     /* dc_bd += sum dq (the fixed-order column sum) */
    CU_KERNEL(bd_dw_bd_kernel, cu_blocks((size_t)D, 64), 64, 0, ctx->stream)(dw_bd, dprob, (const bf16 *)a, N, D);
    CU_LAUNCH();
    CU_KERNEL(bd_da_score_kernel, cu_blocks((size_t)N * D, BD_THREADS), BD_THREADS, 0, ctx->stream)(
        (bf16 *)da, dprob, (const bf16 *)w_bd, N, D);
    CU_LAUNCH();
}
