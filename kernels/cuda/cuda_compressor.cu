/* The chunked KV compressor on the CUDA backend, one branch (key or value) per call
 * (docs/spec.md §2; the CPU version in kernels/cpu/cpu_compressor.c is the reference).
 *
 * Window j of KV head g covers positions o_g + jS .. o_g + jS+W-1 (j < nW_g; grid = aligned:
 * o_g = 0, nW_g = nW; staggered: o_g = floor(g S / G), kernels/visibility.h). For offset i, map m = map(i):
 *   gate logit  s_{j,i} = Z_{g,m} a_{o_g+jS+i} + b_{g,i}   [c]      alpha = softmax_i s (per channel)
 *   payload     p_{j,i} = C_{g,m} a_{o_g+jS+i}             [d]      (+ optional post RMSNorm)
 *   entry       E_j     = sum_i alpha_{j,i} * p'_{j,i}
 * Rows j >= nW_g of a head (staggered only) do not exist: entry, payload, alpha, pn_rstd are 0.
 * In general the offset is o_base + o_g + u_b (docs/spec.md §6.1: a per-sequence shift u_b with
 * phase jitter), so slices and window counts are per sequence (comp_slices(q, b), head_windows).
 * Partial windows (o < 0: a negative o_base, docs/spec.md §6.1): window j's slots i < f_j =
 * max(0, -(o + jS)) lie before the sequence and are masked as in the CPU reference (alpha = 0,
 * p = 0, pn_rstd = 0, softmax over the present slots; their dcat rows are 0). The GEMMs never read
 * a masked row: a slice's windows j >= j_full (= the first window with every slot present) are the
 * batched calls below, and windows j < j_full are issued for their present rows j0(i) <= j < j_full
 * (j0 = vis_first_window_of_slot) in runs of offsets with one j0 (partial_run): a few small GEMMs
 * (V4's CSA: window 0, offsets S..W-1, one call each for the projections and da).
 *
 * Projections. The gate and payload maps of every KV head are packed, per map m, into one
 * bf16 matrix Wcat_m [NP, D] (rows g*(c+d) + [0,c): Z_{g,m}; g*(c+d) + c + [0,d): C_{g,m};
 * NP = G(c+d) rounded up to 8 with zero rows). For a fixed sequence b and offset i, the rows
 * a_{jS+i}, j = 0..nW-1, are a strided matrix (leading dimension S*D), so
 *   cat[b, i] [nW, NP] = A_i @ Wcat_{m(i)}^T
 * is one GEMM, and all offsets of a sequence are ONE strided-batched cuBLASLt call (deepseek:
 * one per half, the weight stride is 0). The output is fp32 so that the gate logits are exact.
 * cat is laid out [W, B, nW, NP] (one offset's rows of every sequence in a row): where the
 * windows tile the sequences exactly (comp_merges: the paper's W8/S8 and W4/S4 at T = 4096) the
 * B sequences are one slice, and each offset's GEMM has M = B nW.
 * Staggered grids (G > 1): the heads read different rows, so every GEMM is issued once per head
 * g over its own column block [g(c+d), (g+1)(c+d)) of Wcat and cat, its rows a_{o_g+jS+i} and
 * its nW_g windows (a "slice"); the aligned grid is one slice of all NP columns.
 * Multi-rate strides (CompShape.head_stride, docs/spec.md §6.4): head g reads rows a_{o_g+jS_g+i},
 * so every GEMM is issued per head as on a staggered grid, each slice with its own row step S_g
 * (CompSlice.S: lda S_g*D); the kernels read S_g from the device copy of the G strides
 * (comp_device_dims). With head_stride NULL every slice has S and nothing below changes.
 * Pooling (softmax over offsets, post-norm, weighted sum) runs one warp per (b, j, g).
 *
 * Backward, from dE_j (one warp per (b, j, g)):
 *   dp'_{j,i} = alpha dE;  dalpha = dE . p' (per channel for vector gates);
 *   ds = alpha (dalpha - sum_k alpha_k dalpha_k);  post-norm backward dp' -> dp;
 * written as bf16 dcat [W, B, nW, NP] in the same packed column order. Then
 *   dWcat_m += dcat[b,i]^T A_i   (fp32 GEMMs with beta = 1, issued in a fixed order; batched
 *                                 over offsets when every offset has its own map)
 *   da_{jS+i} += dcat[b,i] Wcat_m (batched over offsets i in [kS, kS+S): their rows are
 *                                 disjoint; groups k run one after the other, so overlapping
 *                                 windows accumulate in a fixed order into an fp32 buffer)
 * and dWcat is scattered (added) into dgate_w / dpayload_w. Bias and post-norm gradients are
 * per-(b,j,g) partials reduced by cu_colsum_add. Everything is deterministic. */
#include "kernels/cuda/cuda_common.h"

#define POOL_MAXK 8   /* d <= 256: lanes hold channels lane + 32k, k < 8 */

typedef struct {               /* CompShape plus the layout of the packed gate|payload rows */
    int B, T, D, G, d, window, stride, n_windows, channels, n_maps;
    int gate_channels;         /* cg: channels (0 for uniform gates: no gate rows) */
    int head_cols;             /* Rg = cg + d: gate then payload columns of one KV head */
    int cat_cols;              /* NP = G * Rg rounded up to 8: a row of Wcat / cat */
    long long cat_istride;     /* B nW NP: cat / dcat [W, B, nW, NP], one offset's plane */
    int merged;                /* 1: the B sequences are one GEMM slice of B nW windows (comp_merges) */
    int grid;                  /* GRID_ALIGNED | GRID_STAGGERED (G = 1: aligned) */
    int grid_base;             /* o_base (docs/spec.md §6.1) */
    const int32_t *shift;      /* [B] u_b or NULL: the shape's host array in host code, its device
                                  copy in what a kernel gets (comp_device_dims) */
    const int *hstride;        /* [G] S_g or NULL (docs/spec.md §6.4): host array / device copy, as shift */
} CompDims;

/* Sequences that their windows tile exactly (one aligned grid: G = 1 or aligned, no per-sequence
 * shift, no per-head strides, o_base = 0, and T = nW S) continue one another's row pattern:
 * row b T + j S + i of a = (b nW + j) S + i, and cat's rows for offset i are [B, nW] in a row.
 * Their projection GEMMs are then one slice of B nW windows (the paper's W8/S8 at T = 4096: one
 * call with M = 4096 instead of B calls with M = 512; the weight gradient dW is read and written
 * once instead of B times). Anything else keeps a slice per sequence. */
static int comp_merges(const CompDims &q) {
    return q.grid == GRID_ALIGNED && !q.shift && !q.hstride && q.grid_base == 0 && q.n_windows > 0 &&
           (long long)q.n_windows * q.stride == q.T;
}

static CompDims comp_dims_of(const CompShape *s) {
    CompDims q;
    q.B = s->B; q.T = s->T; q.D = s->D; q.G = s->G; q.d = s->d; q.window = s->window; q.stride = s->stride;
    q.n_windows = s->n_windows; q.channels = s->channels; q.n_maps = s->n_maps;
    q.gate_channels = s->gate == GATE_UNIFORM ? 0 : s->channels;
    q.head_cols = q.gate_channels + q.d;
    q.cat_cols = (q.G * q.head_cols + 7) / 8 * 8;
    q.grid = q.G > 1 ? s->grid : GRID_ALIGNED;   /* G = 1: o_0 = 0, the aligned grid exactly */
    q.grid_base = s->grid_base;
    q.shift = s->grid_shift;
    q.hstride = s->head_stride;
    q.cat_istride = (long long)q.B * q.n_windows * q.cat_cols;
    q.merged = comp_merges(q);
    return q;
}
/* q for the kernels: the shifts copied to the device (workspace slot WS_COMP_SHIFT) */
static CompDims comp_device_dims(BackendCtx *ctx, const CompDims &q) {
    CompDims k = q;
    k.shift = cu_device_ints(ctx, WS_COMP_SHIFT, q.shift, q.B);
    k.hstride = (const int *)cu_device_ints(ctx, WS_COMP_HSTRIDE, (const int32_t *)q.hstride, q.G);
    return k;
}

/* the element offset of row (b, i, j) of cat / dcat [W, B, nW, NP] (offset planes outermost, so
 * that one offset's rows of all sequences are one matrix; see comp_merges) */
__host__ __device__ static inline size_t cat_row(const CompDims &q, int b, int i, int j) {
    return (size_t)i * q.cat_istride + ((size_t)b * q.n_windows + j) * q.cat_cols;
}

/* S_g: KV head g's stride (vis_head_stride; S when hstride is NULL) */
__host__ __device__ static inline int head_stride(const CompDims &q, int g) { return vis_head_stride(q.hstride, g, q.stride); }

/* grid offset o_base + o_g + u_b of KV head g in sequence b (kernels/visibility.h) */
__host__ __device__ static inline int head_offset(const CompDims &q, int b, int g) {
    return vis_entry_offset(q.grid, g, head_stride(q, g), q.G, q.grid_base, q.shift ? q.shift[b] : 0);
}
/* window count nW_{b,g} of KV head g in sequence b (nW for the aligned grid without shifts) */
__host__ __device__ static inline int head_windows(const CompDims &q, int b, int g) {
    if (q.grid == GRID_ALIGNED && !q.shift && !q.hstride) return q.n_windows;
    int n = vis_n_windows(q.T, q.window, head_stride(q, g), head_offset(q, b, g));
    return n < q.n_windows ? n : q.n_windows;
}

/* A slice of the projection GEMMs of sequence b: rows a_{o + jS + i} for j < nw (S: the slice's
 * stride, S_g with multi-rate strides), packed columns [col0, col0 + ncol). */
typedef struct { int o, nw, col0, ncol, S; } CompSlice;
static int comp_slices(const CompDims &q, int b, CompSlice *sl) {   /* sl has room for G entries */
    if (q.grid == GRID_ALIGNED && !q.hstride) {
        sl[0].o = head_offset(q, b, 0); sl[0].nw = head_windows(q, b, 0); sl[0].col0 = 0; sl[0].ncol = q.cat_cols;
        if (q.merged) sl[0].nw = q.B * q.n_windows;           /* sequence 0's slice runs on through all B */
        sl[0].S = q.stride;
        return sl[0].nw > 0 ? 1 : 0;
    }
    int n = 0;
    for (int g = 0; g < q.G; g++) {
        CompSlice x;
        x.o = head_offset(q, b, g); x.nw = head_windows(q, b, g); x.col0 = g * q.head_cols; x.ncol = q.head_cols;
        x.S = head_stride(q, g);
        if (x.nw > 0) sl[n++] = x;
    }
    return n;
}

/* the sequences the projection GEMMs loop over: 1 when they merge (comp_merges), else B */
static int gemm_sequences(const CompDims &q) { return q.merged ? 1 : q.B; }

/* map of offset i: paper i; deepseek 0 for i < S else 1; shared (docs/spec.md §2b) 0 (comp_map_index) */
static int map_of(const CompDims &q, int i) { return map_index(q.n_maps, q.window, q.stride, i); }   /* kernels/kernels.h: the rule */

/* The first window of a slice with every slot a real position (0 unless o < 0). */
static int slice_full_from(const CompDims &q, const CompSlice &z) {
    const int j = vis_first_window_of_slot(0, z.S, z.o);
    return j < z.nw ? j : z.nw;
}
/* The first window of a slice whose slot i is a real position. */
static int slice_slot_from(const CompDims &q, const CompSlice &z, int i) {
    const int j = vis_first_window_of_slot(i, z.S, z.o);
    return j < z.nw ? j : z.nw;
}

/* The offsets of a slice's partial windows in runs [i, *i_end) with one first present window
 * j0 = slice_slot_from(i) < jf, at most S offsets (their rows o + jS + i are then disjoint) and one
 * map unless every offset has its own: one GEMM call per run (V4's CSA: offsets S..W-1, one run).
 * Returns j0, or -1 when offset i has no partial rows. */
static int partial_run(const CompDims &q, const CompSlice &z, int jf, int i, int *i_end) {
    const int j0 = slice_slot_from(q, z, i);
    if (j0 >= jf) { *i_end = i + 1; return -1; }
    int e = i + 1;
    while (e < q.window && e - i < z.S && slice_slot_from(q, z, e) == j0 &&
           (q.n_maps == q.window || map_of(q, e) == map_of(q, i)))
        e++;
    *i_end = e;
    return j0;
}

/* Forward projections of slice z in sequence b (a_b = a + b*T*D, cat_b = cat + b*nW*NP: its rows in each offset plane):
 *   cat[b, i, j, cols] = a_{o+jS+i} Wcat_{m(i)}^T   for windows j in [j0, j1), offsets i in [i0, i1)
 * (every row o + jS + i >= 0): one batched GEMM over the offsets when each has its own map, else
 * one per run of offsets with one map (weight stride 0). */
static void proj_fwd_gemm(BackendCtx *ctx, const CompDims &q, const bf16 *wcat, const bf16 *a_b, float *cat_b,
                          const CompSlice &z, int j0, int j1, int i0, int i1) {
    if (j1 <= j0 || i1 <= i0) return;
    const int nj = j1 - j0;
    const bf16 *A = a_b + ((long long)z.o + (long long)j0 * z.S + i0) * q.D;   /* lda S*D, offset i: +D */
    float *C = cat_b + (size_t)i0 * q.cat_istride + (size_t)j0 * q.cat_cols + z.col0;
    if (q.n_maps == q.window) {
        cu_gemm(ctx, 0, 1, nj, z.ncol, q.D, A, z.S * q.D, q.D, wcat + ((size_t)i0 * q.cat_cols + z.col0) * q.D, q.D,
                (long long)q.cat_cols * q.D, C, q.cat_cols, (long long)q.cat_istride, 1, 1.0f, 0.0f, i1 - i0);
        return;
    }
    for (int ia = i0; ia < i1;) {             /* runs of offsets with one map (shared: one; deepseek: two halves) */
        const int m = map_of(q, ia);
        int ib = ia + 1;
        while (ib < i1 && map_of(q, ib) == m) ib++;
        cu_gemm(ctx, 0, 1, nj, z.ncol, q.D, A + (size_t)(ia - i0) * q.D, z.S * q.D, q.D,
                wcat + ((size_t)m * q.cat_cols + z.col0) * q.D, q.D, 0,
                C + (size_t)(ia - i0) * q.cat_istride, q.cat_cols, (long long)q.cat_istride, 1, 1.0f, 0.0f,
                ib - ia);
        ia = ib;
    }
}

/* Weight gradients of slice z in sequence b over windows [j0, j1) and offsets [i0, i1):
 *   dWcat_{m(i)} [cols, D] += dcat[b, i, j0..j1)^T A_i   (fp32, beta = 1; batched over the offsets
 *                                                         when each has its own map) */
static void proj_dw_gemm(BackendCtx *ctx, const CompDims &q, float *dw, const bf16 *a_b, const bf16 *dcat_b,
                         const CompSlice &z, int j0, int j1, int i0, int i1) {
    if (j1 <= j0 || i1 <= i0) return;
    const int nj = j1 - j0;
    const bf16 *A = a_b + ((long long)z.o + (long long)j0 * z.S + i0) * q.D;
    const bf16 *dC = dcat_b + (size_t)i0 * q.cat_istride + (size_t)j0 * q.cat_cols + z.col0;
    if (q.n_maps == q.window) {
        cu_gemm(ctx, 1, 0, z.ncol, q.D, nj, dC, q.cat_cols, (long long)q.cat_istride, A, z.S * q.D, q.D,
                dw + ((size_t)i0 * q.cat_cols + z.col0) * q.D, q.D, (long long)q.cat_cols * q.D, 1, 1.0f, 1.0f, i1 - i0);
        return;
    }
    for (int i = i0; i < i1; i++)
        cu_gemm(ctx, 1, 0, z.ncol, q.D, nj, dC + (size_t)(i - i0) * q.cat_istride, q.cat_cols, 0,
                A + (size_t)(i - i0) * q.D, z.S * q.D, 0, dw + ((size_t)map_of(q, i) * q.cat_cols + z.col0) * q.D, q.D, 0,
                1, 1.0f, 1.0f, 1);
}

/* Input gradient of slice z in sequence b over windows [j0, j1) and offsets [i0, i1) (within one
 * group of at most S offsets with one map, or each its own: their rows are disjoint):
 *   da rows o+jS+i (+)= dcat[b, i, j] Wcat_{m(i)}   (bf16 da directly, or the fp32 buffer da32) */
static void proj_da_gemm(BackendCtx *ctx, const CompDims &q, const bf16 *wcat, void *da_b, int da_f32, const bf16 *dcat_b,
                         const CompSlice &z, int j0, int j1, int i0, int i1) {
    if (j1 <= j0 || i1 <= i0) return;
    const int m0 = map_of(q, i0);
    if (q.n_maps != q.window && map_of(q, i1 - 1) != m0) cu_fail(__FILE__, __LINE__, "compressor", "map changes inside an offset group");
    const long long sB = q.n_maps == q.window ? (long long)q.cat_cols * q.D : 0;
    const bf16 *A = dcat_b + (size_t)i0 * q.cat_istride + (size_t)j0 * q.cat_cols + z.col0;
    const bf16 *Bm = wcat + ((size_t)m0 * q.cat_cols + z.col0) * q.D;
    const size_t row0 = (size_t)((long long)z.o + (long long)j0 * z.S + i0);
    void *C = da_f32 ? (void *)((float *)da_b + row0 * q.D) : (void *)((bf16 *)da_b + row0 * q.D);
    cu_gemm(ctx, 0, 0, j1 - j0, q.D, z.ncol, A, q.cat_cols, (long long)q.cat_istride, Bm, q.D, sB,
            C, z.S * q.D, q.D, da_f32, 1.0f, 1.0f, i1 - i0);
}

/* Wcat [M, NP, D] from gate_w [G, M, c, D] (may be NULL) and payload_w [G, M, d, D] */
__global__ void comp_pack_kernel(bf16 *wcat, const bf16 *gate_w, const bf16 *payload_w, CompDims q) {
    size_t total = (size_t)q.n_maps * q.cat_cols * q.D;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        int k = (int)(idx % q.D);
        size_t rowi = idx / q.D;
        int row = (int)(rowi % q.cat_cols), m = (int)(rowi / q.cat_cols);
        bf16 v = __float2bfloat16(0.0f);
        if (row < q.G * q.head_cols) {
            int g = row / q.head_cols, x = row % q.head_cols;
            if (x < q.gate_channels) v = gate_w[(((size_t)g * q.n_maps + m) * q.channels + x) * q.D + k];
            else v = payload_w[(((size_t)g * q.n_maps + m) * q.d + (x - q.gate_channels)) * q.D + k];
        }
        wcat[idx] = v;
    }
}

static bf16 *pack_weights(BackendCtx *ctx, const CompDims &q, const bf16 *gate_w, const bf16 *payload_w) {
    size_t n = (size_t)q.n_maps * q.cat_cols * q.D;
    bf16 *wcat = (bf16 *)cu_workspace(ctx, WS_COMP_W, n * sizeof(bf16));
    CU_KERNEL(comp_pack_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(wcat, q.gate_channels ? gate_w : NULL, payload_w, q);
    CU_LAUNCH();
    return wcat;
}

/* ---------------- forward ---------------- */
__global__ void comp_pool_fwd_kernel(bf16 *entry, float *alpha, bf16 *payload, float *pn_rstd, const float *cat,
                                     const bf16 *gate_b, const bf16 *post_w, int uniform, float eps, CompDims q) {
    int wid = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    int n_items = q.B * q.n_windows * q.G;
    if (wid >= n_items) return;
    int g = wid % q.G, j = (wid / q.G) % q.n_windows, b = wid / (q.G * q.n_windows);
    size_t slot0 = (size_t)wid * q.window;                   /* ((b*nW + j)*G + g) * W */
    const int W = q.window, c = q.channels, d = q.d;
    /* gate weights alpha [W, c] */
    float *al = alpha + slot0 * c;
    if (j >= head_windows(q, b, g)) {                   /* no such window for this head: zeros */
        for (int x = lane; x < W * c; x += 32) al[x] = 0.0f;
        for (int x = lane; x < W * d; x += 32) payload[slot0 * d + x] = __float2bfloat16(0.0f);
        for (int x = lane; x < d; x += 32) entry[(size_t)wid * d + x] = __float2bfloat16(0.0f);
        if (pn_rstd) for (int x = lane; x < W; x += 32) pn_rstd[slot0 + x] = 0.0f;
        return;
    }
    /* slots i < f before the sequence (a partial window): masked, alpha = 0, p = 0 */
    const int f = vis_window_first_slot(j, head_stride(q, g), head_offset(q, b, g));
    for (int x = lane; x < f * c; x += 32) al[x] = 0.0f;
    for (int x = lane; x < f * d; x += 32) payload[slot0 * d + x] = __float2bfloat16(0.0f);
    if (pn_rstd) for (int x = lane; x < f; x += 32) pn_rstd[slot0 + x] = 0.0f;
    if (uniform) {
        for (int x = f * c + lane; x < W * c; x += 32) al[x] = 1.0f / (W - f);
    } else {
        for (int ch = lane; ch < c; ch += 32) {
            float mx = -INFINITY;
            for (int i = f; i < W; i++) {
                float sv = cat[cat_row(q, b, i, j) + g * q.head_cols + ch];
                if (gate_b) sv += bf(gate_b[((size_t)g * W + i) * c + ch]);
                al[i * c + ch] = sv;
                mx = fmaxf(mx, sv);
            }
            float sum = 0.0f;
            for (int i = f; i < W; i++) { float e = __expf(al[i * c + ch] - mx); al[i * c + ch] = e; sum += e; }
            float inv = 1.0f / sum;
            for (int i = f; i < W; i++) al[i * c + ch] *= inv;
        }
    }
    __syncwarp();   /* alpha written by one lane is read by all below */
    float acc[POOL_MAXK];
    #pragma unroll
    for (int k = 0; k < POOL_MAXK; k++) acc[k] = 0.0f;
    for (int i = f; i < W; i++) {
        const float *src = cat + cat_row(q, b, i, j) + g * q.head_cols + q.gate_channels;
        bf16 *pdst = payload + (slot0 + i) * d;
        float pv[POOL_MAXK];
        float ss = 0.0f;
        #pragma unroll
        for (int k = 0; k < POOL_MAXK; k++) {
            int x = lane + 32 * k;
            pv[k] = 0.0f;
            if (x < d) {
                bf16 pb = tobf(src[x]);
                pdst[x] = pb;
                pv[k] = bf(pb);
                ss += pv[k] * pv[k];
            }
        }
        float rs = 1.0f;
        if (post_w) {
            ss = warp_sum(ss);
            rs = 1.0f / sqrtf(ss / d + eps);
            if (lane == 0) pn_rstd[slot0 + i] = rs;
        }
        float a_scalar = al[i * c];
        #pragma unroll
        for (int k = 0; k < POOL_MAXK; k++) {
            int x = lane + 32 * k;
            if (x < d) {
                float qv = pv[k] * rs * (post_w ? bf(post_w[x]) : 1.0f);
                float av = c == 1 ? a_scalar : al[i * c + x];
                acc[k] += av * qv;
            }
        }
    }
    bf16 *e = entry + (size_t)wid * d;
    #pragma unroll
    for (int k = 0; k < POOL_MAXK; k++) {
        int x = lane + 32 * k;
        if (x < d) e[x] = tobf(acc[k]);
    }
}

void cu_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry, float *alpha, act_t *payload, float *pn_rstd,
                       const act_t *a_, const act_t *gate_w, const act_t *gate_b,
                       const act_t *payload_w, const act_t *post_w) {
    CompDims q = comp_dims_of(s);
    if (q.n_windows <= 0) return;
    if (q.d > 32 * POOL_MAXK) cu_fail(__FILE__, __LINE__, "compressor", "head_dim > 256 is not supported");
    const bf16 *a = (const bf16 *)a_;
    cu_substep_begin(ctx);
    bf16 *wcat = pack_weights(ctx, q, (const bf16 *)gate_w, (const bf16 *)payload_w);
    cu_substep(ctx, "compressor_fwd.pack");
    float *cat = (float *)cu_workspace(ctx, WS_COMP_CAT, (size_t)q.B * q.window * q.n_windows * q.cat_cols * sizeof(float));
    CompSlice sl[64];
    if (q.G > 64) cu_fail(__FILE__, __LINE__, "compressor", "more than 64 KV heads");
    for (int b = 0; b < gemm_sequences(q); b++) {
        const int ns = comp_slices(q, b, sl);
        const bf16 *a_b = a + (size_t)b * q.T * q.D;
        float *cat_b = cat + (size_t)b * q.n_windows * q.cat_cols;
        for (int x = 0; x < ns; x++) {
            const CompSlice &z = sl[x];
            const int jf = slice_full_from(q, z);
            proj_fwd_gemm(ctx, q, wcat, a_b, cat_b, z, jf, z.nw, 0, q.window);          /* whole windows, all offsets */
            for (int i = 0, e; i < q.window; i = e) {                                   /* partial windows: present rows */
                const int j0 = partial_run(q, z, jf, i, &e);
                if (j0 >= 0) proj_fwd_gemm(ctx, q, wcat, a_b, cat_b, z, j0, jf, i, e);
            }
        }
    }
    cu_substep(ctx, "compressor_fwd.gemm");
    int items = q.B * q.n_windows * q.G;
    CU_KERNEL(comp_pool_fwd_kernel, (items + 7) / 8, 256, 0, ctx->stream)(
        (bf16 *)entry, alpha, (bf16 *)payload, pn_rstd, cat, q.gate_channels ? (const bf16 *)gate_b : NULL,
        (const bf16 *)post_w, q.gate_channels == 0, s->eps, comp_device_dims(ctx, q));
    CU_LAUNCH();
    cu_substep(ctx, "compressor_fwd.pool");
}

/* ---------------- backward ---------------- */
/* dcat [W, B, nW, NP] bf16; ds32 [B, nW, G, W, c] fp32 (also scratch for dalpha);
 * dpost [B*nW*G, d] fp32 partials */
__global__ void comp_pool_bwd_kernel(bf16 *dcat, float *ds32, float *dpost, const bf16 *dentry, const float *alpha,
                                     const bf16 *payload, const float *pn_rstd, const bf16 *post_w,
                                     const float *dalpha_extra, CompDims q) {
    int wid = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    int n_items = q.B * q.n_windows * q.G;
    if (wid >= n_items) return;
    int g = wid % q.G, j = (wid / q.G) % q.n_windows, b = wid / (q.G * q.n_windows);
    size_t slot0 = (size_t)wid * q.window;
    const int W = q.window, c = q.channels, d = q.d;
    const bool gated = q.gate_channels > 0;
    if (j >= head_windows(q, b, g)) {   /* no such window (staggered, shifted): zero partials, never read in dcat */
        if (gated) for (int x = lane; x < W * c; x += 32) ds32[slot0 * c + x] = 0.0f;
        if (dpost) for (int x = lane; x < d; x += 32) dpost[(size_t)wid * d + x] = 0.0f;
        return;
    }
    const float *al = alpha + slot0 * c;
    const int f = vis_window_first_slot(j, head_stride(q, g), head_offset(q, b, g));   /* masked slots i < f: no gradient */
    for (int i = 0; i < f; i++) {
        bf16 *dst = dcat + cat_row(q, b, i, j) + g * q.head_cols;
        for (int x = lane; x < q.head_cols; x += 32) dst[x] = __float2bfloat16(0.0f);
        if (gated) for (int x = lane; x < c; x += 32) ds32[(slot0 + i) * c + x] = 0.0f;
    }
    float de[POOL_MAXK], pw[POOL_MAXK], dpw[POOL_MAXK], sumad[POOL_MAXK];
    #pragma unroll
    for (int k = 0; k < POOL_MAXK; k++) {
        int x = lane + 32 * k;
        de[k] = x < d ? bf(dentry[(size_t)wid * d + x]) : 0.0f;
        pw[k] = (x < d && post_w) ? bf(post_w[x]) : 1.0f;
        dpw[k] = 0.0f;
        sumad[k] = 0.0f;
    }
    float sumad_scalar = 0.0f;
    for (int i = f; i < W; i++) {
        const bf16 *p = payload + (slot0 + i) * d;
        float rs = post_w ? pn_rstd[slot0 + i] : 1.0f;
        bf16 *dst = dcat + cat_row(q, b, i, j) + g * q.head_cols;
        float pv[POOL_MAXK], dq[POOL_MAXK];
        float dal_s = 0.0f, dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < POOL_MAXK; k++) {
            int x = lane + 32 * k;
            pv[k] = 0.0f; dq[k] = 0.0f;
            if (x < d) {
                pv[k] = bf(p[x]);
                float qv = pv[k] * rs * pw[k];
                float av = c == 1 ? al[i * c] : al[i * c + x];
                dq[k] = av * de[k];
                if (gated) {
                    if (c == 1) dal_s += de[k] * qv;
                    else {
                        float da_ = de[k] * qv;
                        if (dalpha_extra) da_ += dalpha_extra[(slot0 + i) * c + x];   /* gate-coverage penalty */
                        ds32[(slot0 + i) * c + x] = da_;
                        sumad[k] += av * da_;
                    }
                }
                dot += dq[k] * pw[k] * pv[k] * rs;
            }
        }
        if (gated && c == 1) {
            dal_s = warp_sum(dal_s);
            if (dalpha_extra) dal_s += dalpha_extra[slot0 + i];                       /* gate-coverage penalty */
            if (lane == 0) ds32[slot0 + i] = dal_s;
            sumad_scalar += al[i] * dal_s;
        }
        if (post_w) dot = warp_sum(dot) / d;
        #pragma unroll
        for (int k = 0; k < POOL_MAXK; k++) {
            int x = lane + 32 * k;
            if (x < d) {
                float dp = dq[k];
                if (post_w) {
                    dpw[k] += dq[k] * pv[k] * rs;
                    dp = rs * (dq[k] * pw[k] - pv[k] * rs * dot);
                }
                dst[q.gate_channels + x] = tobf(dp);
            }
        }
    }
    if (gated) {
        __syncwarp();
        for (int i = f; i < W; i++) {
            bf16 *dst = dcat + cat_row(q, b, i, j) + g * q.head_cols;
            if (c == 1) {
                if (lane == 0) {
                    float dsv = al[i] * (ds32[slot0 + i] - sumad_scalar);
                    ds32[slot0 + i] = dsv;
                    dst[0] = tobf(dsv);
                }
            } else {
                #pragma unroll
                for (int k = 0; k < POOL_MAXK; k++) {
                    int x = lane + 32 * k;
                    if (x < d) {
                        float dsv = al[i * c + x] * (ds32[(slot0 + i) * c + x] - sumad[k]);
                        ds32[(slot0 + i) * c + x] = dsv;
                        dst[x] = tobf(dsv);
                    }
                }
            }
        }
    }
    if (post_w) {
        #pragma unroll
        for (int k = 0; k < POOL_MAXK; k++) {
            int x = lane + 32 * k;
            if (x < d) dpost[(size_t)wid * d + x] = dpw[k];
        }
    }
}

/* dgate_w [G,M,c,D] += dW rows g*Rg + [0,c); dpayload_w [G,M,d,D] += rows g*Rg + c + [0,d) */
__global__ void comp_unpack_kernel(float *dgate_w, float *dpayload_w, const float *dw, CompDims q) {
    size_t total = (size_t)q.n_maps * q.G * q.head_cols * q.D;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        int k = (int)(idx % q.D);
        size_t rowi = idx / q.D;
        int row = (int)(rowi % (q.G * q.head_cols)), m = (int)(rowi / (q.G * q.head_cols));
        int g = row / q.head_cols, x = row % q.head_cols;
        float v = dw[((size_t)m * q.cat_cols + row) * q.D + k];
        if (x < q.gate_channels) { if (dgate_w) dgate_w[(((size_t)g * q.n_maps + m) * q.channels + x) * q.D + k] += v; }
        else if (dpayload_w) dpayload_w[(((size_t)g * q.n_maps + m) * q.d + (x - q.gate_channels)) * q.D + k] += v;
    }
}

__global__ void add_f32_to_bf16_kernel(bf16 *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = tobf(bf(y[i]) + x[i]);
}

void cu_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da_, float *dgate_w, float *dgate_b, float *dpayload_w,
                       float *dpost_w, const act_t *dentry, const float *alpha, const act_t *payload,
                       const float *pn_rstd, const act_t *a_, const act_t *gate_w,
                       const act_t *payload_w, const act_t *post_w, const float *dalpha_extra) {
    CompDims q = comp_dims_of(s);
    if (q.n_windows <= 0) return;
    if (q.d > 32 * POOL_MAXK) cu_fail(__FILE__, __LINE__, "compressor", "head_dim > 256 is not supported");
    const bf16 *a = (const bf16 *)a_;
    bf16 *da = (bf16 *)da_;
    cu_substep_begin(ctx);
    bf16 *wcat = pack_weights(ctx, q, (const bf16 *)gate_w, (const bf16 *)payload_w);
    cu_substep(ctx, "compressor_bwd.pack");
    size_t n_cat = (size_t)q.B * q.window * q.n_windows * q.cat_cols;
    bf16 *dcat = (bf16 *)cu_workspace(ctx, WS_COMP_DCAT, n_cat * sizeof(bf16));
    if (q.cat_cols != q.G * q.head_cols) CU(cudaMemsetAsync(dcat, 0, n_cat * sizeof(bf16), ctx->stream));
    size_t n_slots = (size_t)q.B * q.n_windows * q.G * q.window;
    float *ds32 = q.gate_channels ? (float *)cu_workspace(ctx, WS_COMP_DS, n_slots * q.channels * sizeof(float)) : NULL;
    float *dpost = post_w ? (float *)cu_workspace(ctx, WS_COMP_DPOST, (size_t)q.B * q.n_windows * q.G * q.d * sizeof(float)) : NULL;
    int items = q.B * q.n_windows * q.G;
    CU_KERNEL(comp_pool_bwd_kernel, (items + 7) / 8, 256, 0, ctx->stream)(dcat, ds32, dpost, (const bf16 *)dentry, alpha,
                                                                   (const bf16 *)payload, pn_rstd, (const bf16 *)post_w,
                                                                   q.gate_channels ? dalpha_extra : NULL, comp_device_dims(ctx, q));
    CU_LAUNCH();
    cu_substep(ctx, "compressor_bwd.pool");
    if (dgate_b && ds32) cu_colsum_add(ctx, dgate_b, ds32, q.B * q.n_windows, q.G * q.window * q.channels);
    CompSlice sl[64];
    if (q.G > 64) cu_fail(__FILE__, __LINE__, "compressor", "more than 64 KV heads");
    if (dpost_w && dpost) cu_colsum_add(ctx, dpost_w, dpost, q.B * q.n_windows * q.G, q.d);
    cu_substep(ctx, "compressor_bwd.colsums");

    /* weight gradients: dWcat_m [NP, D] += dcat[b,i]^T [NP, nW] @ A_i [nW, D] */
    if (dpayload_w || dgate_w) {
        size_t n_dw = (size_t)q.n_maps * q.cat_cols * q.D;
        float *dw = (float *)cu_workspace(ctx, WS_COMP_DW, n_dw * sizeof(float));
        CU(cudaMemsetAsync(dw, 0, n_dw * sizeof(float), ctx->stream));
        for (int b = 0; b < gemm_sequences(q); b++) {
            const int ns = comp_slices(q, b, sl);
            const bf16 *a_b = a + (size_t)b * q.T * q.D, *dcat_b = dcat + (size_t)b * q.n_windows * q.cat_cols;
            for (int x = 0; x < ns; x++) {
                const CompSlice &z = sl[x];
                const int jf = slice_full_from(q, z);
                proj_dw_gemm(ctx, q, dw, a_b, dcat_b, z, jf, z.nw, 0, q.window);
                for (int i = 0, e; i < q.window; i = e) {
                    const int j0 = partial_run(q, z, jf, i, &e);
                    if (j0 >= 0) proj_dw_gemm(ctx, q, dw, a_b, dcat_b, z, j0, jf, i, e);
                }
            }
        }
        cu_substep(ctx, "compressor_bwd.dw_gemm");
        size_t n_un = (size_t)q.n_maps * q.G * q.head_cols * q.D;
        CU_KERNEL(comp_unpack_kernel, cu_blocks(n_un, 256), 256, 0, ctx->stream)(dgate_w, dpayload_w, dw, q);
        CU_LAUNCH();
        cu_substep(ctx, "compressor_bwd.dw_unpack");
    }

    /* input gradient: da rows o+jS+i += dcat[b,i] [nW, cols] @ Wcat_m [cols, D]; offsets in [kS, kS+S)
     * touch disjoint rows and go in one batched call; groups (and slices) run in order. */
    if (da) {
        /* no overlap: every row gets at most one contribution (staggered heads overlap each other;
         * shifted sequences do not: each has its own rows) */
        bool direct = q.window <= q.stride && q.grid == GRID_ALIGNED && !q.hstride;
        float *da32 = NULL;
        size_t n_da = (size_t)q.B * q.T * q.D;
        if (!direct) {
            da32 = (float *)cu_workspace(ctx, WS_COMP_DA, n_da * sizeof(float));
            CU(cudaMemsetAsync(da32, 0, n_da * sizeof(float), ctx->stream));
        }
        for (int b = 0; b < gemm_sequences(q); b++) {
            const int ns = comp_slices(q, b, sl);
            const bf16 *dcat_b = dcat + (size_t)b * q.n_windows * q.cat_cols;
            void *da_b = direct ? (void *)(da + (size_t)b * q.T * q.D) : (void *)(da32 + (size_t)b * q.T * q.D);
            for (int x = 0; x < ns; x++) {
                const CompSlice &z = sl[x];
                const int jf = slice_full_from(q, z);
                for (int i0 = 0; i0 < q.window; i0 += z.S) {   /* (z.S: S_g with multi-rate strides) */
                    int ni = q.window - i0 < z.S ? q.window - i0 : z.S;
                    proj_da_gemm(ctx, q, wcat, da_b, !direct, dcat_b, z, jf, z.nw, i0, i0 + ni);
                }
                for (int i = 0, e; i < q.window; i = e) {
                    const int j0 = partial_run(q, z, jf, i, &e);
                    if (j0 >= 0) proj_da_gemm(ctx, q, wcat, da_b, !direct, dcat_b, z, j0, jf, i, e);
                }
            }
        }
        cu_substep(ctx, "compressor_bwd.da_gemm");
        if (!direct) {
            CU_KERNEL(add_f32_to_bf16_kernel, cu_blocks(n_da, 256), 256, 0, ctx->stream)(da, da32, n_da);
            CU_LAUNCH();
            cu_substep(ctx, "compressor_bwd.da_add");
        }
    }
}

/* ---------------- gate-coverage penalty (docs/spec.md §2b; kernels/cpu/cpu_coverage.c is the reference) ----------------
 * Only the (window, head) pairs that exist count: n_b = c * sum_g nW_{b,g} rows in sequence b
 * (aligned, unshifted: nW * G * c). Absent windows (j >= nW_g, staggered grids) have alpha = 0 (the forward writes
 * zeros), so they add nothing to the sums, and their dalpha is 0. A masked slot of a partial window
 * (o < 0) likewise has alpha = 0 and dalpha = 0; its window counts whole in n_b.
 *   sums[b, i] = sum over j, g, ch of alpha[b, j, g, i, ch]   (one block per (b, i), fixed-order tree)
 *   gbar = sums / n;  per_seq[b] = ln W - H(gbar) (double);  coef[b, i] = grad_scale (ln gbar_i + 1) / n
 *   dalpha[b, j, g, i, ch] = coef[b, i]  (j < nW_g), else 0 */
#define COV_THREADS 256
__global__ void __launch_bounds__(COV_THREADS) cov_sum_kernel(float *sums, const float *alpha, int rows, int W, int c) {
    __shared__ float sh[COV_THREADS];
    const int b = blockIdx.x / W, i = blockIdx.x % W;
    float acc = 0.0f;
    for (long r = threadIdx.x; r < (long)rows * c; r += COV_THREADS) {
        long row = r / c;
        int ch = (int)(r % c);
        acc += alpha[(((size_t)b * rows + row) * W + i) * c + ch];
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int h = COV_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = sh[0];
}

__global__ void cov_finish_kernel(float *coef, float *per_seq, const float *sums, int B, int W, float grad_scale, CompDims q) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    long n = 0;                                       /* rows that exist in sequence b: c * sum_g nW_{b,g} */
    for (int g = 0; g < q.G; g++) n += q.n_windows > 0 ? head_windows(q, b, g) : 0;
    n *= q.channels;
    double h = 0.0;
    for (int i = 0; i < W; i++) {
        double g = n ? (double)sums[b * W + i] / n : 1.0 / W;
        if (g > 0) h -= g * log(g);
        if (coef) coef[b * W + i] = n ? (float)(grad_scale * (log(g > 1e-30 ? g : 1e-30) + 1.0) / n) : 0.0f;
    }
    per_seq[b] = (float)(log((double)W) - h);
}

__global__ void cov_fill_kernel(float *dalpha, const float *coef, size_t total, int W, int c, size_t per_b, CompDims q) {
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        size_t b = idx / per_b;
        int i = (int)((idx / c) % W);
        size_t jg = (idx % per_b) / ((size_t)W * c);      /* j * G + g */
        int g = (int)(jg % q.G), j = (int)(jg / q.G);
        const bool present = j < head_windows(q, (int)b, g) && i >= vis_window_first_slot(j, head_stride(q, g), head_offset(q, (int)b, g));
        dalpha[idx] = present ? coef[b * W + i] : 0.0f;   /* absent windows and masked slots: 0 */
    }
}

void cu_gate_coverage(BackendCtx *ctx, const CompShape *s, const float *alpha, float *dalpha, float *per_seq, float grad_scale) {
    const int B = s->B, W = s->window, c = s->channels, rows = s->n_windows * s->G;
    if (B <= 0 || W <= 0) return;
    const CompDims q = comp_device_dims(ctx, comp_dims_of(s));
    float *sums = (float *)cu_workspace(ctx, WS_COV, (size_t)B * W * 2 * sizeof(float)), *coef = sums + (size_t)B * W;
    CU_KERNEL(cov_sum_kernel, B * W, COV_THREADS, 0, ctx->stream)(sums, alpha, rows, W, c);
    CU_LAUNCH();
    CU_KERNEL(cov_finish_kernel, (B + 63) / 64, 64, 0, ctx->stream)(dalpha ? coef : NULL, per_seq, sums, B, W,
                                                                   grad_scale, q);
    CU_LAUNCH();
    if (dalpha) {
        size_t per_b = (size_t)rows * W * c, total = (size_t)B * per_b;
        CU_KERNEL(cov_fill_kernel, cu_blocks(total, 256), 256, 0, ctx->stream)(dalpha, coef, total, W, c, per_b, q);
        CU_LAUNCH();
    }
}
