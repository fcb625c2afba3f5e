/* The lightning indexer of a csa layer on the CUDA backend (kernels/ops.def indexer_*, docs/spec.md
 * §5.4; kernels/indexer.c is the reference, the CPU backend's implementation). For sequence b,
 * query t (position t0 + t) and entry j, visible iff j < n_t = vis_n_entries(t0 + t, W, S, o, nW):
 *   I(t, j)  = sum_h (w_{t,h} ws) ReLU(q^I_{t,h} . k^I_j),  ws = 1/sqrt(dI HI)        (-inf if not visible)
 *   sel(t)   = the min(k, n_t) visible j of largest I, ties to the lower j
 *   P_j      = sum_h exp(q_{t,h} . ck_{j,g(h)} / sqrt(d) - lse_{t,h}),  p = P / sum_S P,  r = softmax_S(I)
 *   KL_t     = sum_S p (ln p - ln r),  dscore = r - p on S (0 elsewhere)
 *   with g = dscore * scale:  diw_{t,h} = sum_j g ws [dot > 0] dot,
 *   diq_{t,h} = sum_j (g w_{t,h}) ws [dot > 0] k_j,   dik_j = sum_t sum_h (g w_{t,h}) ws [dot > 0] q_{t,h}
 *
 * Kernels (inputs bf16, every product and sum fp32 except the KL's, which are fp64 like the CPU's;
 * each sum has one fixed order, no atomics: the same bits on every run):
 *   idx_scores_kernel   block per (32 entries, 32 queries, b), 256 threads, 4 (t, j) pairs each; q and
 *                       k tiles of 64 dims in shared memory; the dot of a pair runs over x in order,
 *                       the heads are added in order. Tiles no query of the block sees are -inf.
 *   idx_select_kernel   block per query row: the k-th largest score as a 32-bit key (the float's
 *                       order-preserving bits) by a binary search on the bits, 32 passes that each
 *                       count the keys >= a candidate (a fixed tree in shared memory); then every
 *                       key above it, and the lowest-j keys equal to it up to k (an ordered scan of
 *                       per-thread counts): exactly the CPU's rule, in O(32 n) per row, for any k
 *                       and n (k 512 of n 1024 at T = 4096, S = 4).
 *   idx_kl_kernel       block per query row: P_j per entry of the set (one thread each, dots in
 *                       fp64, P kept in dscore as fp32), fixed-tree sums of P, max and sum of
 *                       exp(I - max), then KL_t (fp64) to a per-row slot (NaN: no set); the host
 *                       adds the rows in order.
 *   idx_bwd_q_kernel    block per (query row, chunk of HC heads, HC dI <= 4096): for each j of the
 *                       row with g != 0 (in order) the chunk's dots, then diq += c_h k_j in shared
 *                       fp32 [HC dI] (16 KiB: any HI, dI up to ~8000).
 *   idx_bwd_k_kernel    block per entry row: for each t that sees j with g != 0 (in order), the HI
 *                       dots, then dik += sum_h c_h q_{t,h} in shared fp32 [dI].
 * Work (counted at kernels/backend_profile.c): scores 2 B T nW_vis HI dI FLOP (nW_vis: the visible
 * pairs), the backward twice that per pair with g != 0 (k pairs a query, every visible one in the
 * dense warm-up) plus the same dots again, the KL 2 H d FLOP per pair of the set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_common.h"

#define IDX_TILE 32
#define IDX_CHUNK 64
#define IDX_THREADS 256
#define IDX_ROW_THREADS 128

__device__ __forceinline__ int idx_n_visible(const IndexerShape &s, int t) {
    return vis_n_entries(s.t0 + t, s.W, s.S, s.o, s.nW);
}
__device__ __forceinline__ float idx_wscale(const IndexerShape &s) { return (float)(1.0 / sqrt((double)s.dI * s.HI)); }

/* ---- block reductions over IDX_ROW_THREADS threads (a fixed tree: deterministic) ---- */
template <typename T, typename Op>
__device__ T idx_block_reduce(T v, T *sh, Op op) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int o = IDX_ROW_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + o]);
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}
struct IdxAdd { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct IdxMax { __device__ float operator()(float a, float b) const { return a > b ? a : b; } };

/* ======================= scores ======================= */
__global__ void __launch_bounds__(IDX_THREADS) idx_scores_kernel(IndexerShape s, float *score, const bf16 *iq,
                                                                 const bf16 *iw, const bf16 *ik) {
    __shared__ float Qs[IDX_TILE][IDX_CHUNK + 1], Ks[IDX_TILE][IDX_CHUNK + 1];
    const int b = blockIdx.z, t0 = blockIdx.y * IDX_TILE, j0 = blockIdx.x * IDX_TILE;
    const int T = s.T, nW = s.nW, HI = s.HI, dI = s.dI;
    const int tx = threadIdx.x % IDX_TILE, ty = threadIdx.x / IDX_TILE;     /* entry j0 + tx; queries t0 + ty + 8 i */
    const int j = j0 + tx;
    const int t_last = min(t0 + IDX_TILE - 1, T - 1);
    const float ws = idx_wscale(s);
    if (j0 >= idx_n_visible(s, t_last)) {          /* no query of the tile sees these entries */
        for (int i = 0; i < IDX_TILE / 8; i++) {
            const int t = t0 + ty + 8 * i;
            if (t < T && j < nW) score[((size_t)b * T + t) * nW + j] = -INFINITY;
        }
        return;
    }
    float acc[IDX_TILE / 8] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int h = 0; h < HI; h++) {
        float dot[IDX_TILE / 8] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int x0 = 0; x0 < dI; x0 += IDX_CHUNK) {
            const int nx = min(IDX_CHUNK, dI - x0);
            __syncthreads();
            for (int e = threadIdx.x; e < IDX_TILE * IDX_CHUNK; e += IDX_THREADS) {
                const int r = e / IDX_CHUNK, c = e % IDX_CHUNK, t = t0 + r, jj = j0 + r;
                Qs[r][c] = (c < nx && t < T) ? bf(iq[(((size_t)b * T + t) * HI + h) * dI + x0 + c]) : 0.0f;
                Ks[r][c] = (c < nx && jj < nW) ? bf(ik[((size_t)b * nW + jj) * dI + x0 + c]) : 0.0f;
            }
            __syncthreads();
            for (int i = 0; i < IDX_TILE / 8; i++)
                for (int c = 0; c < nx; c++) dot[i] += Qs[ty + 8 * i][c] * Ks[tx][c];
        }
        for (int i = 0; i < IDX_TILE / 8; i++) {
            const int t = t0 + ty + 8 * i;
            if (t < T && dot[i] > 0.0f) acc[i] += bf(iw[((size_t)b * T + t) * HI + h]) * ws * dot[i];
        }
    }
    for (int i = 0; i < IDX_TILE / 8; i++) {
        const int t = t0 + ty + 8 * i;
        if (t < T && j < nW) score[((size_t)b * T + t) * nW + j] = j < idx_n_visible(s, t) ? acc[i] : -INFINITY;
    }
}

void cu_indexer_scores(BackendCtx *ctx, const IndexerShape *s, float *score, const act_t *iq, const act_t *iw,
                       const act_t *ik) {
    if (s->B <= 0 || s->T <= 0 || s->nW <= 0) return;
    dim3 grid((s->nW + IDX_TILE - 1) / IDX_TILE, (s->T + IDX_TILE - 1) / IDX_TILE, s->B);
    CU_KERNEL(idx_scores_kernel, grid, IDX_THREADS, 0, ctx->stream)(*s, score, (const bf16 *)iq, (const bf16 *)iw,
                                                                    (const bf16 *)ik);
    CU_LAUNCH();
}

/* ======================= top-k ======================= */
/* The float's bits as an unsigned key in the same order (-0 and +0 the same key, as they compare). */
__device__ __forceinline__ unsigned idx_key(float f) {
    if (f == 0.0f) f = 0.0f;
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(IDX_ROW_THREADS) idx_select_kernel(IndexerShape s, uint8_t *sel, const float *score) {
    __shared__ int shi[IDX_ROW_THREADS];
    const int row = blockIdx.x, t = row % s.T, nW = s.nW, tid = threadIdx.x;
    const float *sc = score + (size_t)row * nW;
    uint8_t *se = sel + (size_t)row * nW;
    const int n = idx_n_visible(s, t), k = s.topk;
    if (n <= k) {
        for (int j = tid; j < nW; j += IDX_ROW_THREADS) se[j] = j < n;
        return;
    }
    /* thr = the largest key with #{j < n : key_j >= thr} >= k: the k-th largest key */
    unsigned thr = 0;
    for (int bit = 31; bit >= 0; bit--) {
        const unsigned cand = thr | (1u << bit);
        int c = 0;
        for (int j = tid; j < n; j += IDX_ROW_THREADS) c += idx_key(sc[j]) >= cand;
        if (idx_block_reduce(c, shi, IdxAdd()) >= k) thr = cand;
    }
    int c = 0;
    for (int j = tid; j < n; j += IDX_ROW_THREADS) c += idx_key(sc[j]) > thr;
    const int ties = k - idx_block_reduce(c, shi, IdxAdd());     /* keys equal to thr that are taken, lowest j first */
    /* thread tid owns the contiguous j in [tid m, (tid+1) m); its ties before it: an ordered scan */
    const int m = (n + IDX_ROW_THREADS - 1) / IDX_ROW_THREADS, lo = tid * m, hi = min(lo + m, n);
    int eq = 0;
    for (int j = lo; j < hi; j++) eq += idx_key(sc[j]) == thr;
    shi[tid] = eq;
    __syncthreads();
    if (tid == 0) {
        int run = 0;
        for (int i = 0; i < IDX_ROW_THREADS; i++) { const int v = shi[i]; shi[i] = run; run += v; }
    }
    __syncthreads();
    int before = shi[tid];
    for (int j = lo; j < hi; j++) {
        const unsigned key = idx_key(sc[j]);
        uint8_t on = key > thr;
        if (key == thr) on = before++ < ties;
        se[j] = on;
    }
    for (int j = n + tid; j < nW; j += IDX_ROW_THREADS) se[j] = 0;
}

void cu_indexer_select(BackendCtx *ctx, const IndexerShape *s, uint8_t *sel, const float *score) {
    if (s->B <= 0 || s->T <= 0 || s->nW <= 0) return;
    CU_KERNEL(idx_select_kernel, s->B * s->T, IDX_ROW_THREADS, 0, ctx->stream)(*s, sel, score);
    CU_LAUNCH();
}

/* ======================= the KL term ======================= */
__global__ void __launch_bounds__(IDX_ROW_THREADS) idx_kl_kernel(IndexerShape s, double *kl_row, float *dscore,
                                                                 const bf16 *q, const bf16 *ck, const float *lse,
                                                                 const float *score, const uint8_t *sel) {
    __shared__ double shd[IDX_ROW_THREADS];
    __shared__ float shf[IDX_ROW_THREADS];
    __shared__ int shi[IDX_ROW_THREADS];
    const int row = blockIdx.x, b = row / s.T, t = row % s.T, nW = s.nW, tid = threadIdx.x;
    const int H = s.H, G = s.G, d = s.d, group = H / G;
    const double inv_sqrt_d = 1.0 / sqrt((double)d);
    const float *sc = score + (size_t)row * nW;
    const uint8_t *se = sel ? sel + (size_t)row * nW : NULL;
    float *ds = dscore + (size_t)row * nW;
    const int n = idx_n_visible(s, t);
    double sumP = 0.0;
    float mx = -INFINITY;
    int m = 0;
    for (int j = tid; j < nW; j += IDX_ROW_THREADS) {
        float P = 0.0f;
        if (j < n && (!se || se[j])) {
            double Pj = 0.0;
            for (int h = 0; h < H; h++) {
                const bf16 *qh = q + ((size_t)row * H + h) * d, *kj = ck + (((size_t)b * nW + j) * G + h / group) * d;
                double dot = 0.0;
                for (int x = 0; x < d; x++) dot += (double)bf(qh[x]) * (double)bf(kj[x]);
                Pj += exp(dot * inv_sqrt_d - (double)lse[(size_t)row * H + h]);
            }
            P = (float)Pj;
            sumP += Pj;
            mx = fmaxf(mx, sc[j]);
            m++;
        }
        ds[j] = P;                 /* P_j, kept here until the last pass */
    }
    sumP = idx_block_reduce(sumP, shd, IdxAdd());
    mx = idx_block_reduce(mx, shf, IdxMax());
    m = idx_block_reduce(m, shi, IdxAdd());
    if (m == 0 || !(sumP > 0.0)) {
        for (int j = tid; j < nW; j += IDX_ROW_THREADS) ds[j] = 0.0f;
        if (tid == 0) kl_row[row] = NAN;
        return;
    }
    double sumR = 0.0;
    for (int j = tid; j < n; j += IDX_ROW_THREADS)
        if (!se || se[j]) sumR += exp((double)sc[j] - (double)mx);
    sumR = idx_block_reduce(sumR, shd, IdxAdd());
    const double lnR = log(sumR) + (double)mx;
    double kl = 0.0;
    for (int j = tid; j < nW; j += IDX_ROW_THREADS) {
        float g = 0.0f;
        if (j < n && (!se || se[j])) {
            const double p = (double)ds[j] / sumP, lr = (double)sc[j] - lnR;
            if (p > 0.0) kl += p * (log(p) - lr);
            g = (float)(exp(lr) - p);
        }
        ds[j] = g;
    }
    kl = idx_block_reduce(kl, shd, IdxAdd());
    if (tid == 0) kl_row[row] = kl;
}

double cu_indexer_kl(BackendCtx *ctx, const IndexerShape *s, float *dscore, const act_t *q, const act_t *ck,
                     const float *lse, const float *score, const uint8_t *sel, long *count) {
    *count = 0;
    const size_t rows = (size_t)s->B * s->T;
    if (!rows || s->nW <= 0) return 0.0;
    double *kl_row = (double *)cu_workspace(ctx, WS_IDX_KL, rows * sizeof(double));
    CU_KERNEL(idx_kl_kernel, (unsigned)rows, IDX_ROW_THREADS, 0, ctx->stream)(*s, kl_row, dscore, (const bf16 *)q,
                                                                              (const bf16 *)ck, lse, score, sel);
    CU_LAUNCH();
    double *host = (double *)malloc(rows * sizeof(double));
    if (!host) cu_fail(__FILE__, __LINE__, "indexer_kl", "out of host memory for the per-query KL values");
    CU(cudaMemcpyAsync(host, kl_row, rows * sizeof(double), cudaMemcpyDeviceToHost, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
    double total = 0.0;
    long c = 0;
    for (size_t r = 0; r < rows; r++)          /* in row order: the same sum on every run */
        if (!isnan(host[r])) { total += host[r]; c++; }
    free(host);
    *count = c;
    return total;
}

/* ======================= backward of the scores ======================= */
/* The heads of one idx_bwd_q_kernel block: HC dI fp32 accumulators fit 16 KiB. */
static int idx_bwd_heads(const IndexerShape *s) {
    int hc = 4096 / (s->dI > 0 ? s->dI : 1);
    return hc < 1 ? 1 : hc > s->HI ? s->HI : hc;
}

/* diq, diw of query row (b, t), heads [h0, h0 + HC): shared fp32 accumulators [HC dI] and [HC],
 * c [HC], k_j [dI] */
__global__ void __launch_bounds__(IDX_ROW_THREADS) idx_bwd_q_kernel(IndexerShape s, int HC, float scale, bf16 *diq,
                                                                    bf16 *diw, const float *dscore, const bf16 *iq,
                                                                    const bf16 *iw, const bf16 *ik) {
    CU_DYNAMIC_SMEM(smem);
    const int dI = s.dI, nW = s.nW, tid = threadIdx.x;
    const int row = blockIdx.x, b = row / s.T, t = row % s.T, h0 = blockIdx.y * HC, HI = min(HC, s.HI - h0);
    float *aq = (float *)smem, *aw = aq + (size_t)HC * dI, *c = aw + HC, *kj = c + HC;
    const float ws = idx_wscale(s);
    const bf16 *qt = iq + ((size_t)row * s.HI + h0) * dI, *wt = iw + (size_t)row * s.HI + h0;
    const float *ds = dscore + (size_t)row * nW;
    for (int e = tid; e < HI * dI; e += IDX_ROW_THREADS) aq[e] = 0.0f;
    for (int h = tid; h < HI; h += IDX_ROW_THREADS) aw[h] = 0.0f;
    const int n = idx_n_visible(s, t);
    for (int j = 0; j < n; j++) {
        const float g = ds[j] * scale;
        if (g == 0.0f) continue;
        __syncthreads();
        for (int x = tid; x < dI; x += IDX_ROW_THREADS) kj[x] = bf(ik[((size_t)b * nW + j) * dI + x]);
        __syncthreads();
        for (int h = tid; h < HI; h += IDX_ROW_THREADS) {
            float dot = 0.0f;
            for (int x = 0; x < dI; x++) dot += bf(qt[h * dI + x]) * kj[x];
            c[h] = dot > 0.0f ? g * bf(wt[h]) * ws : 0.0f;
            if (dot > 0.0f) aw[h] += g * ws * dot;
        }
        __syncthreads();
        for (int e = tid; e < HI * dI; e += IDX_ROW_THREADS) aq[e] += c[e / dI] * kj[e % dI];
    }
    __syncthreads();
    for (int e = tid; e < HI * dI; e += IDX_ROW_THREADS) diq[((size_t)row * s.HI + h0) * dI + e] = tobf(aq[e]);
    for (int h = tid; h < HI; h += IDX_ROW_THREADS) diw[(size_t)row * s.HI + h0 + h] = tobf(aw[h]);
}

/* dik of entry row (b, j): shared fp32 k_j [dI], accumulator [dI], c [HI] */
__global__ void __launch_bounds__(IDX_ROW_THREADS) idx_bwd_k_kernel(IndexerShape s, float scale, bf16 *dik,
                                                                    const float *dscore, const bf16 *iq, const bf16 *iw,
                                                                    const bf16 *ik) {
    CU_DYNAMIC_SMEM(smem);
    const int HI = s.HI, dI = s.dI, nW = s.nW, T = s.T, tid = threadIdx.x;
    float *kj = (float *)smem, *ak = kj + dI, *c = ak + dI;
    const int b = blockIdx.x / nW, j = blockIdx.x % nW;
    const float ws = idx_wscale(s);
    for (int x = tid; x < dI; x += IDX_ROW_THREADS) { kj[x] = bf(ik[((size_t)b * nW + j) * dI + x]); ak[x] = 0.0f; }
    for (int t = 0; t < T; t++) {
        if (j >= idx_n_visible(s, t)) continue;
        const size_t row = (size_t)b * T + t;
        const float g = dscore[row * nW + j] * scale;
        if (g == 0.0f) continue;
        const bf16 *qt = iq + row * HI * dI, *wt = iw + row * HI;
        __syncthreads();
        for (int h = tid; h < HI; h += IDX_ROW_THREADS) {
            float dot = 0.0f;
            for (int x = 0; x < dI; x++) dot += bf(qt[h * dI + x]) * kj[x];
            c[h] = dot > 0.0f ? g * bf(wt[h]) * ws : 0.0f;
        }
        __syncthreads();
        for (int x = tid; x < dI; x += IDX_ROW_THREADS) {
            float a = ak[x];
            for (int h = 0; h < HI; h++) a += c[h] * bf(qt[h * dI + x]);
            ak[x] = a;
        }
    }
    __syncthreads();
    for (int x = tid; x < dI; x += IDX_ROW_THREADS) dik[((size_t)b * nW + j) * dI + x] = tobf(ak[x]);
}

/* shared bytes of the two backward kernels */
static size_t idx_bwd_q_smem(const IndexerShape *s) {
    const size_t hc = (size_t)idx_bwd_heads(s);
    return (hc * s->dI + 2 * hc + s->dI) * 4;
}
static size_t idx_bwd_k_smem(const IndexerShape *s) { return (2 * (size_t)s->dI + s->HI) * 4; }

void cu_indexer_scores_bwd(BackendCtx *ctx, const IndexerShape *s, act_t *diq, act_t *diw, act_t *dik,
                           const float *dscore, const act_t *iq, const act_t *iw, const act_t *ik, float scale) {
    if (s->B <= 0 || s->T <= 0) return;
    const size_t smem_q = idx_bwd_q_smem(s), smem_k = idx_bwd_k_smem(s);
    if (smem_q > 48 * 1024 || smem_k > 48 * 1024)
        cu_fail(__FILE__, __LINE__, "indexer_scores_bwd", "indexer_dim > ~4000 or indexer_heads > ~6000: the backward's "
                "shared accumulators exceed 48 KiB (kernels/cuda/cuda_indexer.cu)");
    const bf16 *Q = (const bf16 *)iq, *Wt = (const bf16 *)iw, *K = (const bf16 *)ik;
    const int hc = idx_bwd_heads(s);
    dim3 grid_q(s->B * s->T, (s->HI + hc - 1) / hc);
    CU_KERNEL(idx_bwd_q_kernel, grid_q, IDX_ROW_THREADS, smem_q, ctx->stream)(*s, hc, scale, (bf16 *)diq, (bf16 *)diw,
                                                                             dscore, Q, Wt, K);
    CU_LAUNCH();
    if (s->nW > 0) {
        CU_KERNEL(idx_bwd_k_kernel, s->B * s->nW, IDX_ROW_THREADS, smem_k, ctx->stream)(*s, scale, (bf16 *)dik, dscore, Q,
                                                                                       Wt, K);
        CU_LAUNCH();
    }
}
