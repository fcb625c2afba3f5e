/* Attention on the CUDA backend: full causal, or the paper's compressed attention over
 * compressed entries plus raw tokens (docs/spec.md §2; kernels/cpu/cpu_attention.c is the
 * reference). A query at position t (head h, KV head g = h / (H/G), grid offset o_g: 0 for
 * grid = aligned, floor(g S / G) for staggered, docs/spec.md §2b) sees
 *   compressed entries j < nvis(t), nvis(t) = #{ j < nW : o_g + jS + W - 1 <= t }
 *   raw tokens s in [lo(t), t]:  full: lo = 0;  window: lo = t - n_local + 1;
 *                                tail: lo = e_t + 1, e_t = o_g + (nvis-1)S + W - 1 (or -1)
 * with one softmax over the union, scale 1/sqrt(d), and optionally a sink logit per head in the
 * denominator: lse = log(exp(sink_h) + sum_x exp(z_x)).
 *
 * Flash-style tiling, never materialising T x T: a block owns 64 queries of one (b, h) (forward,
 * dq) or 64 keys of one (b, g) (dk/dv); 4 warps, each owning 16 rows. Products run on bf16
 * tensor cores through WMMA 16x16x16 fragments with fp32 accumulation; head dims are padded with
 * zeros to DP in {16, 32, 64, 128} in shared memory, so any d <= 128 works. The key space of a
 * query tile is walked as tiles of 64: first the compressed entries visible to its last query,
 * then the raw range [lo(first query), last query]; every score is masked per (query, key).
 *
 * Forward: online softmax (a reference max m and sum l per row, O in the warps' WMMA fragments,
 *   rescaled only when m moves by more than ATT_RESCALE_TH: see "forward" below),
 *   out = O / l (with the sink folded into l), lse = m + log l saved for the backward.
 * Backward (deterministic: no atomics, every sum in a fixed order):
 *   Dv[t,h] = dout . out  and the sink term -exp(sink_h - lse) Dv (reduced by cu_colsum_add);
 *   dq kernel   (block per 64 queries):  p = exp(z - lse), ds = p (dout.v - Dv),
 *                                        dq = sum ds k / sqrt(d)
 *   dkv kernel  (64 keys of one KV head, split below): dv = sum p dout, dk = sum ds q / sqrt(d)
 *   Compressed entries are keys like the raw ones: key tiles [0, ceil(nW/64)) are entries,
 *   the rest raw tokens, so dck/dcv come out of the same kernel.
 *   With AttnShape.entry_select (the lightning indexer's top-k, docs/spec.md §5.4) a visible entry
 *   the query's top-k did not choose scores -inf in all three kernels (att_sel), as on the CPU.
 *
 * The dK/dV split. Key tile k of KV head g (dkv_tile) is seen by the queries [q_lo, q_hi]: its
 * work is items(k, g) = (H/G) * nq (query head hh, query tile qt) pairs, one iteration each (S^T,
 * dP^T, dV += P^T dO, dK += dS^T Q: 4 products of 64 x 64 x DP, 8 * 64 * 64 * DP FLOP),
 * numbered i = hh * nq + (qt - qt0) / 64. With many query heads per KV head and long sequences
 * one tile has far more items than others (the first entry tile sees every later query of every
 * head), so a block per tile serialises the step on a few SMs. Instead:
 *   chunk length  L = max(DKV_MIN_CHUNK = 16, ceil(N / DKV_TARGET_BLOCKS)), DKV_TARGET_BLOCKS =
 *                 1024, N = the sum of items over (b, g, k) of the launch (dkv_plan): a
 *                 function of the shape only (the same decomposition, hence the same bits, on
 *                 every GPU); 1024 blocks is ~4 waves of 132 SMs at two blocks per SM (the
 *                 104 KiB of shared memory at d = 128), and 16 items keep a chunk's fixed cost
 *                 (K/V tile in, 2 x 64 x DP fp32 partial out and back) small against its loads of
 *                 16 Q and dO tiles;
 *   blocks        tile k of head g gets n_chunks = ceil(items / L) blocks (1 when items <= L),
 *                 chunk c taking items [cL, min((c+1)L, items)); grid (max_g sum_k n_chunks, G, B),
 *                 dkv_locate maps blockIdx.x to (k, c) by a scan over the tiles (a head with
 *                 fewer blocks, staggered grids, returns at once from the rest);
 *   single pass   a tile of one chunk (the only case at small shapes: no workspace, no second
 *                 kernel) writes its bf16 rows itself, in the same item order as before the split;
 *   partials      a chunk of a split tile writes fp32 [dv: 64 x DP][dk: 64 x DP] (dk without the
 *                 1/sqrt(d)) to its slot of workspace WS_ATT_PART:
 *                     bytes = B * G * P * 2 * 64 * DP * 4,  P = max_g sum_{k : n_chunks > 1} n_chunks
 *                 slot (b, g, slot0(k) + c), slot0(k) = the split tiles' chunks before k;
 *   reduction     attn_bwd_dkv_reduce_kernel, block per (k, g, b), returns for unsplit tiles;
 *                 thread per (key, column) adds the slots in chunk order c = 0, 1, ..., n-1
 *                 from 0.0f in fp32 and writes dv = sum, dk = sum / sqrt(d) as bf16. Fixed
 *                 decomposition + fixed order = the same bits run to run, whatever the schedule.
 *   The math per (key, query) pair is unchanged (visibility from kernels/visibility.h through
 *   att_view, the sink only through lse and its own term above).
 *
 * Prediction (a model: it cannot be measured here). The paper's shape B=8, T=4096, H=16, G=1,
 * d=128, W8/S8, window 16: nW = 512 -> 8 entry tiles with 16 * (64 - 8j) = 1024 .. 128 items,
 * 64 raw tiles with 32 (the last 16): N = 8 * 6640 = 53120 items, 222.8 GFLOP a layer (masked
 * pairs included). L = 52: the entry tiles get 20 18 15 13 10 8 5 3 chunks (92 slots per
 * sequence, 48 MB of partials: ~20 us to write and read back at 4.8 TB/s), raw tiles one block each:
 * 1248 blocks of at most 52 items = 218 MFLOP (before: 576 blocks, the largest 1024 items =
 * 4.3 GFLOP). At the H200's 990 TFLOP/s the op is 0.23 ms a layer; at the per-SM rate implied by
 * the review's estimate for the old kernel (4.3 GFLOP in ~5.7 ms a layer: ~0.75 TFLOP/s per
 * block, 10% of an SM's peak, one 4-warp block per SM) a greedy schedule of the blocks in launch
 * order on 132 SMs gives
 *     before 5.7-6.4 ms a layer (the 1024-item blocks)  ->  after 2.3 ms (53120 items / 132 SMs)
 * i.e. ~160-180 -> ~65 ms over 28 layers of a micro-batch of 8. The remaining time is the
 * per-SM rate, not the schedule: 31% of the items are raw tiles of which 1/8 of the pairs are
 * visible (window 16 of 64 keys x 2 query tiles), and the kernel ran one block of 4 warps per
 * SM at 255 registers (two blocks since 2026-12-05: DkvLayout; the live 16-query blocks skip the
 * invisible pairs' products, not their Q / dO tile loads). At G=8 (2 heads per KV head) the split changes little (2.75 -> 2.4 ms);
 * the full-attention controls (custom backward when deterministic) stay unsplit (L = 260 > the
 * largest tile's 128 items: 4096 blocks already balance).
 * Full causal attention without a sink (the full-attention controls) goes to cuDNN's fused
 * attention first (cuda_attention_cudnn.cu: forward, and backward unless bitwise reruns are
 * requested or PHASELAB_CUDNN_ATTN_BWD=0; none with PHASELAB_ATTN=custom); these kernels run
 * whenever cuDNN does not take the call. */
#include <mma.h>
#include <math.h>
#include <stdio.h>
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/cuda_attention_cudnn.h"

using namespace nvcuda;

#define ATT_BQ 64
#define ATT_BK 64
#define ATT_THREADS 128
#define LDS_F 68     /* fp32 score tiles [64][68] */
#define LDP_B 72     /* bf16 probability tiles [64][72] */
#define DKV_MIN_CHUNK 16        /* dK/dV split: the fewest (head, query tile) items of a split chunk */
#define DKV_TARGET_BLOCKS 1024  /* dK/dV split: the blocks a large launch aims at (chunk length) */
/* The largest shared-memory carveout (percent of the SM's unified L1/shared storage): the forward
 * takes 68 KiB at d = 128 (3 blocks an H100/H200 SM of 228 KiB), the dq kernel 111 KiB (2 blocks) and the
 * dk/dv kernel 104 KiB (2 blocks) only with the carveout at its maximum; the first H200
 * profile (2026-12-04) had these kernels at ~5% of the bf16 peak with 4 warps per SM. */
#define ATT_CARVEOUT 100

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> FragBc;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragBr;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/* ---- visibility ---- */
/* The rule itself lives in kernels/visibility.h; every call names the KV head g, whose grid
 * offset o_g (0 aligned; staggered floor(g S / G)) shifts its windows. Rows j >= nW_g of a
 * staggered head's entries are never visible (their windows would end past T - 1). */
/* In general the offset is per sequence b as well (o_base + o_g + u_b, docs/spec.md §6.1): inside a
 * kernel s.grid_shift is the device copy of the shifts (att_device_shape). With multi-rate strides
 * (docs/spec.md §6.4) head g's rule reads its own stride S_g (attn_head_stride), s.head_stride
 * being the device copy of the G strides likewise (NULL: every head s.stride). */
__device__ __forceinline__ int att_off(const AttnShape &s, int b, int g) { return attn_head_offset(&s, b, g); }
/* With learned chunk boundaries (docs/spec.md §6.5) s.entry_ends / s.entry_count are the device copies of the
 * sequences' entry ends and attn_query_view (kernels/kernels.h) applies vis_query_view_ends instead of the grid. */
__device__ __forceinline__ VisQueryView att_view(const AttnShape &s, int b, int g, int t) { return attn_query_view(&s, b, g, t); }
__device__ __forceinline__ int att_nvis(const AttnShape &s, int b, int g, int t) { return att_view(s, b, g, t).n_entries; }
/* Entry j of query t is scored only where the lightning indexer's top-k chose it (s.entry_select
 * [B, T, n_windows], device memory; NULL: every visible entry; docs/spec.md §5.4); the caller has
 * checked j < nvis(t) and t < T. */
__device__ __forceinline__ bool att_sel(const AttnShape &s, int b, int t, int j) {
    return !s.entry_select || s.entry_select[((size_t)b * s.T + t) * s.n_windows + j] != 0;
}

/* ---- shared-memory carving ---- */
__device__ __forceinline__ char *carve(char *&p, size_t bytes) {
    char *r = p;
    p += (bytes + 127) & ~(size_t)127;
    return r;
}
static size_t carve_size(size_t bytes) { return (bytes + 127) & ~(size_t)127; }

/* Loads rows [0, 64) of a tile into dst [64][DP+8] bf16: row r from src + r * stride, zero for
 * rows >= nvalid and for columns >= d. */
template <int DP>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, long long stride, int nvalid, int d, bool vec) {
    const int LDB = DP + 8;
    if (vec) {
        const int C8 = DP / 8;
        for (int idx = threadIdx.x; idx < 64 * C8; idx += ATT_THREADS) {
            int r = idx / C8, c = (idx % C8) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < nvalid && c < d) v = *(const uint4 *)(src + r * stride + c);
            *(uint4 *)(dst + r * LDB + c) = v;
        }
    } else {
        for (int idx = threadIdx.x; idx < 64 * DP; idx += ATT_THREADS) {
            int r = idx / DP, c = idx % DP;
            bf16 v = __float2bfloat16(0.0f);
            if (r < nvalid && c < d) v = src[r * stride + c];
            dst[r * LDB + c] = v;
        }
    }
}

/* ---- the key tiles of a query tile ----
 * A tile of queries [t0, t_last] walks, 64 keys at a time, first the compressed entries visible
 * to its last query, then the raw range [lo(t0), t_last]. */
struct KeyTiles {
    int ncomp, raw_lo, n_ctiles, n_rtiles, t_last;
    __device__ KeyTiles(const AttnShape &s, int b, int g, int t0, int t_last_) : t_last(t_last_) {
        ncomp = att_nvis(s, b, g, t_last);
        raw_lo = att_view(s, b, g, t0).raw_lo;
        n_ctiles = (ncomp + ATT_BK - 1) / ATT_BK;
        n_rtiles = t_last >= raw_lo ? (t_last - raw_lo) / ATT_BK + 1 : 0;
    }
    __device__ int count() const { return n_ctiles + n_rtiles; }
    __device__ bool comp(int tile) const { return tile < n_ctiles; }
    __device__ int k0(int tile) const { return comp(tile) ? tile * ATT_BK : raw_lo + (tile - n_ctiles) * ATT_BK; }
};

/* Loads key tile `tile` of kt (KV head g of sequence b) into Ks and Vs [64][DP+8]. */
template <int DP>
__device__ __forceinline__ void load_key_tile(bf16 *Ks, bf16 *Vs, const AttnShape &s, const KeyTiles &kt, int tile,
                                              int b, int g, const bf16 *k, const bf16 *v, const bf16 *ck,
                                              const bf16 *cv, bool vec) {
    const int k0 = kt.k0(tile), G = s.G, d = s.d;
    if (kt.comp(tile)) {
        size_t base = (((size_t)b * s.n_windows + k0) * G + g) * d;
        load_tile<DP>(Ks, ck + base, (long long)G * d, kt.ncomp - k0, d, vec);
        load_tile<DP>(Vs, cv + base, (long long)G * d, kt.ncomp - k0, d, vec);
    } else {
        size_t base = (((size_t)b * s.T + k0) * G + g) * d;
        load_tile<DP>(Ks, k + base, (long long)G * d, kt.t_last + 1 - k0, d, vec);
        load_tile<DP>(Vs, v + base, (long long)G * d, kt.t_last + 1 - k0, d, vec);
    }
}

/* ---- warp-level tile products (each warp owns 16 rows; bf16 inputs, fp32 accumulation) ----
 * `live` (warp-uniform, bits 0..3) names the 16-column blocks of the 64-wide side (the key tile's
 * keys, or the dK/dV kernel's query tile) in which some (row, column) pair of the warp's 16 rows
 * is visible (warp_live_*): a product skips the others. Their score columns are never read (every
 * read is behind the per-pair visibility test) and their P / dS columns are zero, whose products
 * would add exact zeros to the accumulators: the same bits with fewer products. At the paper's
 * W8/S8 with a 16-token window a warp's 16 queries see at most 2 of the 8 raw 16-key blocks its
 * tile walks (docs/gpu.md: ~23% of the attention products). */
/* Column block n (16 columns) of a [16, DP] @ b [64, DP]^T into out [16, 16] (row stride LDS_F): a
 * points at the warp's 16 rows, b at a 64-row tile, both row-major with row stride LDB. */
template <int DP, int LDB>
__device__ __forceinline__ void warp_mm_nt_block(float *out, const bf16 *a, const bf16 *b, int n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    #pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        FragA fa;
        FragBc fb;
        wmma::load_matrix_sync(fa, a + kk * 16, LDB);
        wmma::load_matrix_sync(fb, b + n * 16 * LDB + kk * 16, LDB);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out, acc, LDS_F, wmma::mem_row_major);
}

/* out [16, 64] = a [16, DP] @ b [64, DP]^T, the column blocks in `live` only (others not written). */
template <int DP, int LDB>
__device__ __forceinline__ void warp_mm_nt(float *out, const bf16 *a, const bf16 *b, unsigned live) {
    #pragma unroll
    for (int n = 0; n < 4; n++)
        if (live >> n & 1u) warp_mm_nt_block<DP, LDB>(out + n * 16, a, b, n);
}

/* Columns [32 half, 32 half + 32) of warp_mm_nt's product (its blocks n = 2 half, 2 half + 1
 * where `live`), written to out's columns [0, 32): the dK/dV kernel's S^T and dP^T share one fp32
 * tile this way. The same products in the same k order: the same bits. */
template <int DP, int LDB>
__device__ __forceinline__ void warp_mm_nt_half(float *out, const bf16 *a, const bf16 *b, int half, unsigned live) {
    #pragma unroll
    for (int i = 0; i < 2; i++)
        if (live >> (2 * half + i) & 1u) warp_mm_nt_block<DP, LDB>(out + i * 16, a, b, 2 * half + i);
}

/* The same product with the k loop outside: each A fragment (the warp's 16 rows of a) is loaded
 * once instead of 4 times, at the cost of 4 live accumulators (32 registers); the forward's
 * choice, where O's fragments leave the registers for it (the backward kernels are at their
 * register limit and keep warp_mm_nt). The same sums in the same k order: the same bits. */
template <int DP, int LDB>
__device__ __forceinline__ void warp_mm_nt_a_once(float *out, const bf16 *a, const bf16 *b, unsigned live) {
    FragC acc[4];
    #pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
    #pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        FragA fa;
        wmma::load_matrix_sync(fa, a + kk * 16, LDB);
        #pragma unroll
        for (int n = 0; n < 4; n++) {
            if (!(live >> n & 1u)) continue;
            FragBc fb;
            wmma::load_matrix_sync(fb, b + n * 16 * LDB + kk * 16, LDB);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
    #pragma unroll
    for (int n = 0; n < 4; n++)
        if (live >> n & 1u) wmma::store_matrix_sync(out + n * 16, acc[n], LDS_F, wmma::mem_row_major);
}

/* acc [16, DP] += p [16, 64] @ b [64, DP]: p points at the warp's 16 rows (row stride LDP_B),
 * b is row-major with row stride LDB; the k blocks outside `live` (p's columns there are zero)
 * are skipped. */
template <int DP, int LDB>
__device__ __forceinline__ void warp_mm_nn_acc(FragC *acc, const bf16 *p, const bf16 *b, unsigned live) {
    /* k outside: each of the 4 A fragments is loaded once (not DP/16 times); every acc[n] still
     * adds its k terms in the order 0..3, so the bits are those of the n-outer loop */
    #pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        if (!(live >> kk & 1u)) continue;
        FragA fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LDP_B);
        #pragma unroll
        for (int n = 0; n < DP / 16; n++) {
            FragBr fb;
            wmma::load_matrix_sync(fb, b + kk * 16 * LDB + n * 16, LDB);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* Writes the warp's accumulators acc [16, DP] * factor as bf16: lane (row r, half hf) writes
 * columns [hf DP/2, (hf+1) DP/2) below d of its row to dst (when valid), staged through the
 * warp's 16 rows of ob (fp32, row stride LDO). */
template <int DP, int LDO>
__device__ __forceinline__ void warp_store_rows(bf16 *dst, float *ob, const FragC *acc, int r, int hf, int d,
                                                bool valid, float factor) {
    const int warp = threadIdx.x / 32;
    #pragma unroll
    for (int n = 0; n < DP / 16; n++)
        wmma::store_matrix_sync(ob + warp * 16 * LDO + n * 16, acc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    if (valid)
        for (int x = hf * (DP / 2); x < (hf + 1) * (DP / 2); x++)
            if (x < d) dst[x] = tobf(ob[r * LDO + x] * factor);
    __syncwarp();
}

/* ======================= forward ======================= */
/* Shared memory: Q, K, V tiles [64][DP+8] bf16 and one fp32 [64][LDS_F] tile of which each warp
 * owns its 16 rows (Sw). The output accumulator O [16, DP] of a warp stays in its WMMA fragments
 * for the whole key walk (the first H200 profile, 2026-12-04: the old kernel kept O in shared
 * memory, loaded and stored it for every key tile and rescaled it there, 112.6 KiB a block, 2
 * blocks an SM, the L1/shared pipe 72% busy at 20% issue). Sw holds in turn, per key tile:
 *   S = Q K^T (fp32)  ->  read into registers  ->  [O staged 64 columns at a time when rescaled]
 *   ->  P = exp(z - m) as bf16 [16][LDP_B] (2304 of its 4352 bytes)  ->  O += P V.
 * Lazy rescaling: the reference max m of a row (exp(z - m) for every key) moves only when a tile's
 * max exceeds it by more than ATT_RESCALE_TH = 8 (natural log: P <= e^8 ~ 2981, far inside
 * fp32 and bf16 range; P rounds to bf16 with the same relative error at any scale), and then to
 * that max; O is rescaled (staged through Sw) only when some row of the warp moved with mass
 * already accumulated (l > 0; a row with l = 0 has O = 0). The result is the same softmax:
 * out = O / l with both O and l referred to the same m; lse = m + log l. 69,632 bytes a block at
 * d = 128 (3 blocks an SM on an H100/H200) instead of 112,640. Lanes: row rr = lane / 2 of the
 * warp's 16, half hf = lane & 1; lane (rr, hf) visits columns att_col(rr, hf, i), i = 0..31, so
 * that the 32 lanes of one step hit 32 distinct banks of an fp32 row stride of 68 (4 rr + col
 * mod 32, the rows rr and rr + 8 offset by 2 columns) and 16 distinct words of the bf16 P rows.
 * __launch_bounds__(128, 3) on sm_90 and later: at most 170 registers, so the 3 blocks the shared
 * memory allows also fit the register file (ptxas, sm_90, d = 128: 168 registers, no spills).
 * Earlier GPUs (A100: 164 KiB of shared memory, 2 blocks of 68 KiB) ask for 2: 3 would only make
 * ptxas spill (sm_80: 92 bytes of spill stores) for a block the SM cannot hold anyway. */
#define ATT_RESCALE_TH 8.0f
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define ATT_FWD_MIN_BLOCKS 2
#else
#define ATT_FWD_MIN_BLOCKS 3
#endif

template <int DP>
struct FwdLayout {
    static constexpr int LDB = DP + 8;
    static size_t bytes() { return 3 * carve_size(64 * LDB * 2) + carve_size(64 * LDS_F * 4); }
};

/* column i (0..31) of lane (rr, hf) of a 64-column tile: every column once per lane pair */
__device__ __forceinline__ int att_col(int rr, int hf, int i) { return (2 * i + hf + (rr >= 8 ? 2 : 0)) & 63; }


/* the OR of v over the warp's lanes (every lane calls it) */
__device__ __forceinline__ unsigned warp_or(unsigned v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v |= __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The live blocks (warp_mm_nt) of key tile [k0, k0 + 64) for the warp's 16 query rows: bit n when
 * some row sees a key of k0 + 16n .. k0 + 16n + 15: an entry j < nv, or a raw token in [lo, t]
 * (the lane's row t, its view's nv and lo; invalid rows see none). The lightning indexer's
 * selection (att_sel) only removes keys from these: the bits are a superset of the visible pairs. */
__device__ __forceinline__ unsigned warp_live_keys(bool tvalid, bool comp, int k0, int nv, int lo, int t) {
    unsigned live = 0;
    if (tvalid)
        #pragma unroll
        for (int n = 0; n < 4; n++) {
            const int a = k0 + 16 * n, z = a + 15;
            if (comp ? a < nv : (a <= t && lo <= z && lo <= t)) live |= 1u << n;
        }
    return warp_or(live);
}

/* The warp's O fragments [16, DP] through its fp32 rows Sw [16][LDS_F], 64 columns at a time:
 * each lane multiplies its row's columns by `factor`, then either loads them back into the
 * fragments (dst == NULL) or writes the columns below d as bf16 to dst (a row of out; valid). */
template <int DP>
__device__ __forceinline__ void warp_scale_o(FragC *oacc, float *Sw, int rr, int hf, float factor, bf16 *dst, int d,
                                             bool valid) {
    #pragma unroll
    for (int half = 0; half < DP / 64 + (DP % 64 != 0); half++) {
        const int nf = DP / 16 - half * 4 < 4 ? DP / 16 - half * 4 : 4;   /* fragments in this chunk */
        for (int n = 0; n < nf; n++)
            wmma::store_matrix_sync(Sw + n * 16, oacc[half * 4 + n], LDS_F, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < 32; i++) {
            const int c = att_col(rr, hf, i);
            if (c < nf * 16) {
                if (dst) {
                    if (valid && half * 64 + c < d) dst[half * 64 + c] = tobf(Sw[rr * LDS_F + c] * factor);
                } else {
                    Sw[rr * LDS_F + c] *= factor;
                }
            }
        }
        __syncwarp();
        if (!dst)
            for (int n = 0; n < nf; n++)
                wmma::load_matrix_sync(oacc[half * 4 + n], Sw + n * 16, LDS_F, wmma::mem_row_major);
        __syncwarp();
    }
}

template <int DP>
__global__ void __launch_bounds__(ATT_THREADS, ATT_FWD_MIN_BLOCKS) attn_fwd_kernel(AttnShape s, bf16 *out, float *lse, const bf16 *q,
                                                               const bf16 *k, const bf16 *v, const bf16 *ck,
                                                               const bf16 *cv, const float *sink, bool vec) {
    typedef FwdLayout<DP> L;
    CU_DYNAMIC_SMEM(smem);
    char *p = smem;
    bf16 *Qs = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Ks = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Vs = (bf16 *)carve(p, 64 * L::LDB * 2);
    float *Ss = (float *)carve(p, 64 * LDS_F * 4);

    const int T = s.T, H = s.H, G = s.G, d = s.d;
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_BQ;
    const int g = h / (H / G);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float scale = rsqrtf((float)d);
    const int t_last = min(t0 + ATT_BQ - 1, T - 1);
    float *Sw = Ss + warp * 16 * LDS_F;        /* this warp's 16 rows: S, O staging, P */
    bf16 *Pw = (bf16 *)Sw;                     /* P [16][LDP_B] bf16 inside them */

    load_tile<DP>(Qs, q + (((size_t)b * T + t0) * H + h) * d, (long long)H * d, T - t0, d, vec);

    /* this lane's row and half */
    const int rr = lane >> 1, hf = lane & 1;
    const int r = warp * 16 + rr, t = t0 + r;
    const bool tvalid = t < T;
    const VisQueryView view = att_view(s, b, g, t);
    const int nv = view.n_entries, lo = view.raw_lo;
    float m = -INFINITY, l = 0.0f;     /* the row's reference max and sum of exp(z - m) */
    FragC oacc[DP / 16];
    #pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(oacc[n], 0.0f);

    const KeyTiles kt(s, b, g, t0, t_last);

    for (int tile = 0; tile < kt.count(); tile++) {
        const bool comp = kt.comp(tile);
        const int k0 = kt.k0(tile);
        const unsigned live = warp_live_keys(tvalid, comp, k0, nv, lo, t);
        __syncthreads();
        load_key_tile<DP>(Ks, Vs, s, kt, tile, b, g, k, v, ck, cv, vec);
        __syncthreads();
        /* S = Q K^T for this warp's 16 rows */
        warp_mm_nt_a_once<DP, L::LDB>(Sw, Qs + warp * 16 * L::LDB, Ks, live);
        __syncwarp();
        float sv[32];
        float mx = -INFINITY;
        #pragma unroll
        for (int i = 0; i < 32; i++) {
            const int c = att_col(rr, hf, i), key = k0 + c;
            const bool vis = tvalid && (comp ? key < nv && att_sel(s, b, t, key) : (key >= lo && key <= t));
            sv[i] = vis ? Sw[rr * LDS_F + c] * scale : -INFINITY;
            mx = fmaxf(mx, sv[i]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        /* a new reference max only past the threshold (or for the first visible key) */
        const bool move = mx > m + ATT_RESCALE_TH || (m == -INFINITY && mx != -INFINITY);
        const float m_new = move ? mx : m;
        const float corr = move && l > 0.0f ? __expf(m - m_new) : 1.0f;
        __syncwarp();                               /* S is in registers: Sw is free */
        if (warp_or(corr != 1.0f)) warp_scale_o<DP>(oacc, Sw, rr, hf, corr, NULL, d, false);
        m = m_new;
        float psum = 0.0f;
        #pragma unroll
        for (int i = 0; i < 32; i++) {
            const int c = att_col(rr, hf, i);
            if (!(live >> (c >> 4) & 1u)) continue;   /* a dead block's P is never read (its sv is -inf) */
            const float pv = m == -INFINITY ? 0.0f : __expf(sv[i] - m);
            psum += pv;
            Pw[rr * LDP_B + c] = tobf(pv);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        __syncwarp();
        /* O += P V */
        warp_mm_nn_acc<DP, L::LDB>(oacc, Pw, Vs, live);
    }
    __syncwarp();
    float mf = m, lf = l;
    if (sink) {
        float sk = sink[h];
        mf = fmaxf(m, sk);
        lf = l * __expf(m - mf) + __expf(sk - mf);
    }
    const float factor = (lf > 0.0f ? __expf(m - mf) / lf : 0.0f);
    warp_scale_o<DP>(oacc, Sw, rr, hf, factor, out + (((size_t)b * T + (tvalid ? t : 0)) * H + h) * d, d, tvalid);
    if (tvalid && hf == 0) lse[((size_t)b * T + t) * H + h] = mf + logf(lf);
}

/* ======================= backward ======================= */
/* Dv[row] = dout . out;  sinkterm[row] = -exp(sink_h - lse) Dv  (rows = (b, t, h)) */
__global__ void attn_bwd_pre_kernel(float *Dv, float *sinkterm, const bf16 *dout, const bf16 *out, const float *lse,
                                    const float *sink, int rows, int H, int d) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    float acc = 0.0f;
    for (int x = lane; x < d; x += 32) acc += bf(dout[(size_t)row * d + x]) * bf(out[(size_t)row * d + x]);
    acc = warp_sum(acc);
    if (lane == 0) {
        Dv[row] = acc;
        if (sinkterm) sinkterm[row] = -__expf(sink[row % H] - lse[row]) * acc;
    }
}

/* The dq kernel's output staging Ob [64][LDO] fp32 lies on its S and dP tiles (2 x [64][LDS_F],
 * contiguous: 34,816 >= 33,792 bytes at d = 128), free once the key walk has ended (a barrier
 * first): 111 KiB a block at d = 128 instead of 144, so two blocks fit an H100/H200 SM. */
template <int DP>
struct DqLayout {
    static constexpr int LDB = DP + 8, LDO = DP + 4;
    static_assert(64 * LDO * 4 <= 2 * 64 * LDS_F * 4, "the dq output staging must fit the S and dP tiles");
    static size_t bytes() {
        return 4 * carve_size(64 * LDB * 2) + 2 * carve_size(64 * LDS_F * 4) + carve_size(64 * LDP_B * 2);
    }
};

template <int DP>
__global__ void __launch_bounds__(ATT_THREADS, 2) attn_bwd_dq_kernel(AttnShape s, bf16 *dq, const bf16 *dout,
                                                                  const float *lse, const float *Dv, const bf16 *q,
                                                                  const bf16 *k, const bf16 *v, const bf16 *ck,
                                                                  const bf16 *cv, bool vec) {
    typedef DqLayout<DP> L;
    CU_DYNAMIC_SMEM(smem);
    char *p = smem;
    bf16 *Qs = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *dOs = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Ks = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Vs = (bf16 *)carve(p, 64 * L::LDB * 2);
    float *Ss = (float *)carve(p, 64 * LDS_F * 4);
    float *dPs = (float *)carve(p, 64 * LDS_F * 4);
    bf16 *dSs = (bf16 *)carve(p, 64 * LDP_B * 2);
    float *Ob = Ss;                            /* over Ss and dPs, after the key walk (DqLayout) */

    const int T = s.T, H = s.H, G = s.G, d = s.d;
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_BQ;
    const int g = h / (H / G);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float scale = rsqrtf((float)d);
    const int t_last = min(t0 + ATT_BQ - 1, T - 1);

    load_tile<DP>(Qs, q + (((size_t)b * T + t0) * H + h) * d, (long long)H * d, T - t0, d, vec);
    load_tile<DP>(dOs, dout + (((size_t)b * T + t0) * H + h) * d, (long long)H * d, T - t0, d, vec);

    const int r = warp * 16 + (lane >> 1), hf = lane & 1;
    const int t = t0 + r;
    const bool tvalid = t < T;
    const VisQueryView view = att_view(s, b, g, t);
    const int nv = view.n_entries, lo = view.raw_lo;
    const float L_t = tvalid ? lse[((size_t)b * T + t) * H + h] : 0.0f;
    const float D_t = tvalid ? Dv[((size_t)b * T + t) * H + h] : 0.0f;

    const KeyTiles kt(s, b, g, t0, t_last);

    FragC dqacc[DP / 16];
    #pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(dqacc[n], 0.0f);

    for (int tile = 0; tile < kt.count(); tile++) {
        const bool comp = kt.comp(tile);
        const int k0 = kt.k0(tile);
        const unsigned live = warp_live_keys(tvalid, comp, k0, nv, lo, t);
        __syncthreads();
        load_key_tile<DP>(Ks, Vs, s, kt, tile, b, g, k, v, ck, cv, vec);
        __syncthreads();
        /* S = Q K^T and dP = dO V^T for this warp's 16 queries */
        warp_mm_nt<DP, L::LDB>(Ss + warp * 16 * LDS_F, Qs + warp * 16 * L::LDB, Ks, live);
        warp_mm_nt<DP, L::LDB>(dPs + warp * 16 * LDS_F, dOs + warp * 16 * L::LDB, Vs, live);
        __syncwarp();
        /* (columns of blocks outside `live` are never read: neither computed nor written) */
        #pragma unroll 8
        for (int cc = 0; cc < 32; cc++) {
            int col = hf * 32 + cc, key = k0 + col;
            if (!(live >> (col >> 4) & 1u)) continue;
            bool vis = tvalid && (comp ? key < nv && att_sel(s, b, t, key) : (key >= lo && key <= t));
            float ds = 0.0f;
            if (vis) {
                float pv = __expf(Ss[r * LDS_F + col] * scale - L_t);
                ds = pv * (dPs[r * LDS_F + col] - D_t);
            }
            dSs[r * LDP_B + col] = tobf(ds);
        }
        __syncwarp();
        /* dq += dS K */
        warp_mm_nn_acc<DP, L::LDB>(dqacc, dSs + warp * 16 * LDP_B, Ks, live);
    }
    __syncthreads();   /* every warp is done with Ss and dPs: Ob lies on them */
    warp_store_rows<DP, L::LDO>(dq + (((size_t)b * T + (tvalid ? t : 0)) * H + h) * d, Ob, dqacc, r, hf, d, tvalid, scale);
}

/* ---- the dK/dV decomposition (one definition for the host, the dkv kernel and its reduction) ----
 * Key tile `tile` of KV head g ([0, n_ctiles) compressed entries, then raw tokens) is seen by the
 * queries [q_lo, q_hi]; its work is items = (H/G) * nq (head hh, query tile qt) pairs, numbered
 * i = hh * nq + (qt - qt0) / 64 (heads outer, query tiles inner: the single-pass order). With a
 * chunk length L the tile gets n_chunks = ceil(items / L) blocks (1 when items <= L, also for
 * items = 0: that block writes the zero gradient), chunk c taking items [cL, min((c+1)L, items)). */
struct DkvTile {
    int comp, k0, nkeys;   /* compressed entries or raw tokens; first key; keys in the tile (<= 64) */
    int q_lo, q_hi;        /* queries that can see some key of the tile (q_lo > q_hi: none) */
    int qt0, nq, items;    /* first query tile, query tiles, (head, query tile) items */
};
__host__ __device__ static inline int dkv_n_ctiles(const AttnShape &s) {
    return s.n_windows > 0 ? (s.n_windows + ATT_BK - 1) / ATT_BK : 0;
}
__host__ __device__ static inline int dkv_n_tiles(const AttnShape &s) { return dkv_n_ctiles(s) + (s.T + ATT_BK - 1) / ATT_BK; }
__host__ __device__ static inline DkvTile dkv_tile(const AttnShape &s, int b, int g, int tile) {
    const int T = s.T, nW = s.n_windows, W = s.window, S = attn_head_stride(&s, g), n_ct = dkv_n_ctiles(s);
    DkvTile kt;
    kt.comp = tile < n_ct;
    kt.k0 = kt.comp ? tile * ATT_BK : (tile - n_ct) * ATT_BK;
    const int left = (kt.comp ? nW : T) - kt.k0;
    kt.nkeys = left < ATT_BK ? left : ATT_BK;
    /* (KV head g's grid offset o in sequence b and window count nWg; entries j >= nWg: q_lo > T - 1,
     * no query) */
    const int o = attn_head_offset(&s, b, g), nWo = vis_n_windows(T, W, S, o);
    const int nWg = nW < nWo ? nW : nWo;
    if (s.entry_ends) {     /* learned chunk boundaries (docs/spec.md §6.5): the inverse forms with the ends */
        const int32_t *ends = s.entry_ends + (size_t)b * nW;
        const int n = s.entry_count[b];
        if (kt.comp) {
            kt.q_lo = kt.k0 < n ? vis_first_query_of_entry_ends(kt.k0, ends) : T;   /* rows j >= n_b: no query */
            kt.q_hi = T - 1;
        } else {
            kt.q_lo = kt.k0;
            kt.q_hi = vis_last_query_of_raw_ends(s.visibility, kt.k0 + kt.nkeys - 1, T, ends, n, s.n_local);
        }
    } else if (kt.comp) {
        kt.q_lo = vis_first_query_of_entry(kt.k0, W, S, o);
        kt.q_hi = T - 1;
    } else {
        kt.q_lo = kt.k0;
        kt.q_hi = vis_last_query_of_raw(s.visibility, kt.k0 + kt.nkeys - 1, T, W, S, o, s.n_local, nWg);
    }
    kt.qt0 = (kt.q_lo / ATT_BQ) * ATT_BQ;
    kt.nq = kt.q_lo <= kt.q_hi ? kt.q_hi / ATT_BQ - kt.q_lo / ATT_BQ + 1 : 0;
    kt.items = (s.H / s.G) * kt.nq;
    return kt;
}
__host__ __device__ static inline int dkv_chunks(int items, int chunk_len) {
    return items > chunk_len ? (items + chunk_len - 1) / chunk_len : 1;
}
/* Block x of KV head g: its tile, chunk, the tile's chunk count and its first partial slot (the
 * slots of head g: the split tiles' chunks, tile by tile). false past the head's last block. */
struct DkvBlock { int tile, chunk, n_chunks, slot0; };
__host__ __device__ static inline bool dkv_locate(const AttnShape &s, int b, int g, int chunk_len, int x, DkvBlock *blk) {
    const int n_tiles = dkv_n_tiles(s);
    int first = 0, slot = 0;
    for (int tile = 0; tile < n_tiles; tile++) {
        const int c = dkv_chunks(dkv_tile(s, b, g, tile).items, chunk_len);
        if (x < first + c) {
            blk->tile = tile; blk->chunk = x - first; blk->n_chunks = c; blk->slot0 = slot;
            return true;
        }
        first += c;
        if (c > 1) slot += c;
    }
    return false;
}

/* Shared memory of the dK/dV kernel: K, V, Q, dO tiles [64][DP+8] bf16, one fp32 tile [64][LDS_F]
 * St whose 64 columns hold, per half of the query tile (32 queries), S^T in columns 0..31 and dP^T
 * in 32..63 (each warp its own 16 rows), P^T and dS^T [64][LDP_B] bf16, and the per-query and
 * per-16-query-block values. 106,624 bytes at d = 128: two blocks an H100/H200 SM (228 KiB; ptxas
 * sm_90: 255 registers, no spills: 2 x 4 warps x 32 x 256 fill the 64K register file exactly). Before 2026-12-05 S^T
 * and dP^T were two whole tiles (124,032 bytes, one block of 4 warps an SM). The output staging
 * Ob [64][LDO] lies on dO and St (contiguous), free after the item loop (a barrier first). */
template <int DP>
struct DkvLayout {
    static constexpr int LDB = DP + 8, LDO = DP + 4;
    static size_t bytes() {
        return 4 * carve_size(64 * LDB * 2) + carve_size(64 * LDS_F * 4) + 2 * carve_size(64 * LDP_B * 2) +
               4 * carve_size(64 * 4) + carve_size(3 * 4 * 4);
    }
    static_assert(64 * LDO * 4 <= (64 * LDB * 2 + 127) / 128 * 128 + 64 * LDS_F * 4,
                  "the dk/dv output staging must fit the dO and S tiles");
};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define ATT_DKV_MIN_BLOCKS 1   /* A100: 164 KiB of shared memory, one block of 104 KiB */
#else
#define ATT_DKV_MIN_BLOCKS 2
#endif

/* Block (x, g, b): chunk `chunk` of key tile `tile` of KV head g (dkv_locate). A tile of one
 * chunk writes its bf16 dk/dv (or dck/dcv) rows itself; a chunk of a split tile writes its fp32
 * partial sums [dv: 64 x DP][dk: 64 x DP] (dk unscaled) to slot (b, g, slot0 + chunk) of part
 * (slots_per_head slots per (b, g)), and attn_bwd_dkv_reduce_kernel adds them up. */
template <int DP>
__global__ void __launch_bounds__(ATT_THREADS, ATT_DKV_MIN_BLOCKS) attn_bwd_dkv_kernel(AttnShape s, int chunk_len, float *part,
                                                                   int slots_per_head, bf16 *dk, bf16 *dv, bf16 *dck,
                                                                   bf16 *dcv, const bf16 *dout, const float *lse,
                                                                   const float *Dv, const bf16 *q, const bf16 *k,
                                                                   const bf16 *v, const bf16 *ck, const bf16 *cv,
                                                                   bool vec) {
    typedef DkvLayout<DP> L;
    const int T = s.T, H = s.H, G = s.G, d = s.d, nW = s.n_windows;
    const int b = blockIdx.z, g = blockIdx.y;
    DkvBlock blk;
    if (!dkv_locate(s, b, g, chunk_len, blockIdx.x, &blk)) return;   /* (block-uniform: no barrier skipped) */
    const DkvTile kt = dkv_tile(s, b, g, blk.tile);

    CU_DYNAMIC_SMEM(smem);
    char *p = smem;
    bf16 *Ks = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Vs = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *Qs = (bf16 *)carve(p, 64 * L::LDB * 2);
    bf16 *dOs = (bf16 *)carve(p, 64 * L::LDB * 2);
    float *St = (float *)carve(p, 64 * LDS_F * 4);     /* right after dOs: Ob lies on both */
    bf16 *Pt = (bf16 *)carve(p, 64 * LDP_B * 2);
    bf16 *dSt = (bf16 *)carve(p, 64 * LDP_B * 2);
    float *lse_s = (float *)carve(p, 64 * 4);
    float *D_s = (float *)carve(p, 64 * 4);
    int *nv_s = (int *)carve(p, 64 * 4);
    int *lo_s = (int *)carve(p, 64 * 4);
    /* per 16-query block of the item's query tile: the largest n_entries, the smallest raw_lo and
     * the last valid query (the live blocks below) */
    int *blk_nv = (int *)carve(p, 3 * 4 * 4), *blk_lo = blk_nv + 4, *blk_t = blk_nv + 8;
    float *Ob = (float *)dOs;                  /* over dOs and St, after the item loop (DkvLayout) */

    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const float scale = rsqrtf((float)d);
    const bool comp = kt.comp;
    const int k0 = kt.k0, nkeys = kt.nkeys;

    const bf16 *ksrc = comp ? ck + (((size_t)b * nW + k0) * G + g) * d : k + (((size_t)b * T + k0) * G + g) * d;
    const bf16 *vsrc = comp ? cv + (((size_t)b * nW + k0) * G + g) * d : v + (((size_t)b * T + k0) * G + g) * d;
    load_tile<DP>(Ks, ksrc, (long long)G * d, nkeys, d, vec);
    load_tile<DP>(Vs, vsrc, (long long)G * d, nkeys, d, vec);

    const int r = warp * 16 + (lane >> 1), hf = lane & 1;
    const int key = k0 + r;
    const bool kvalid = r < nkeys;

    FragC dkacc[DP / 16], dvacc[DP / 16];
    #pragma unroll
    for (int n = 0; n < DP / 16; n++) { wmma::fill_fragment(dkacc[n], 0.0f); wmma::fill_fragment(dvacc[n], 0.0f); }

    /* this chunk's (head, query tile) items */
    const int group = H / G;
    const int i_end = min(kt.items, (blk.chunk + 1) * chunk_len);
    for (int i = blk.chunk * chunk_len; i < i_end; i++) {
        const int h = g * group + i / kt.nq;
        const int qt = kt.qt0 + (i % kt.nq) * ATT_BQ;
        __syncthreads();
        load_tile<DP>(Qs, q + (((size_t)b * T + qt) * H + h) * d, (long long)H * d, T - qt, d, vec);
        load_tile<DP>(dOs, dout + (((size_t)b * T + qt) * H + h) * d, (long long)H * d, T - qt, d, vec);
        if (threadIdx.x < 64) {
            int tq = qt + threadIdx.x;
            bool ok = tq < T;
            size_t row = ((size_t)b * T + (ok ? tq : 0)) * H + h;
            lse_s[threadIdx.x] = ok ? lse[row] : 0.0f;
            D_s[threadIdx.x] = ok ? Dv[row] : 0.0f;
            const VisQueryView vq = att_view(s, b, g, tq);
            int nvq = ok ? vq.n_entries : 0, loq = ok ? vq.raw_lo : 0x7fffffff, tmq = ok ? tq : -1;
            nv_s[threadIdx.x] = nvq;
            lo_s[threadIdx.x] = loq;
            /* (warps 0 and 1 whole: the 16 lanes of each query block reduce among themselves) */
            #pragma unroll
            for (int o = 8; o > 0; o >>= 1) {
                nvq = max(nvq, __shfl_xor_sync(0xffffffffu, nvq, o));
                loq = min(loq, __shfl_xor_sync(0xffffffffu, loq, o));
                tmq = max(tmq, __shfl_xor_sync(0xffffffffu, tmq, o));
            }
            if ((threadIdx.x & 15) == 0) {
                blk_nv[threadIdx.x / 16] = nvq;
                blk_lo[threadIdx.x / 16] = loq;
                blk_t[threadIdx.x / 16] = tmq;
            }
        }
        __syncthreads();
        /* the 16-query blocks in which some key of this warp's 16 is visible: an entry key < n_entries
         * of some query of the block, or a raw key in [the block's smallest raw_lo, its last query] */
        unsigned live = 0;
        if (kvalid)
            #pragma unroll
            for (int n = 0; n < 4; n++)
                if (comp ? key < blk_nv[n] : (key >= blk_lo[n] && key <= blk_t[n])) live |= 1u << n;
        live = warp_or(live);
        /* per half of the query tile: S^T = K Q^T (St columns 0..31) and dP^T = V dO^T (32..63) for
         * this warp's 16 keys, then P^T and dS^T of those 32 queries */
        float *Sw = St + warp * 16 * LDS_F;
        for (int half = 0; half < 2; half++) {
            warp_mm_nt_half<DP, L::LDB>(Sw, Ks + warp * 16 * L::LDB, Qs, half, live);
            warp_mm_nt_half<DP, L::LDB>(Sw + 32, Vs + warp * 16 * L::LDB, dOs, half, live);
            __syncwarp();
            /* this lane's 16 columns are block 2 half + hf: outside `live` they are never read. Lane
             * (row r, hf) starts at column (lane / 8) of its 16 (a rotation): the 32 lanes' fp32 reads
             * of a step hit 32 distinct banks of the row stride 68 (without it 4 lanes a bank), the
             * bf16 stores 2 a word-bank (4) */
            #pragma unroll 8
            for (int cc = 0; cc < 16 && (live >> (2 * half + hf) & 1u); cc++) {
                const int c = hf * 16 + ((cc + (lane >> 3)) & 15), col = 32 * half + c, tq = qt + col;
                bool vis = kvalid && (comp ? key < nv_s[col] && att_sel(s, b, tq, key) : (key >= lo_s[col] && key <= tq));
                float pv = 0.0f, ds = 0.0f;
                if (vis) {
                    pv = __expf(St[r * LDS_F + c] * scale - lse_s[col]);
                    ds = pv * (St[r * LDS_F + 32 + c] - D_s[col]);
                }
                Pt[r * LDP_B + col] = tobf(pv);
                dSt[r * LDP_B + col] = tobf(ds);
            }
            __syncwarp();
        }
        /* dV += P^T dO,  dK += dS^T Q */
        warp_mm_nn_acc<DP, L::LDB>(dvacc, Pt + warp * 16 * LDP_B, dOs, live);
        warp_mm_nn_acc<DP, L::LDB>(dkacc, dSt + warp * 16 * LDP_B, Qs, live);
    }
    if (blk.n_chunks > 1) {
        /* a split tile: this chunk's fp32 partial sums, this warp's 16 rows of each (rows past
         * nkeys hold zeros and are never read) */
        float *slot = part + (((size_t)b * G + g) * slots_per_head + blk.slot0 + blk.chunk) * (2 * ATT_BK * DP);
        #pragma unroll
        for (int n = 0; n < DP / 16; n++) {
            wmma::store_matrix_sync(slot + warp * 16 * DP + n * 16, dvacc[n], DP, wmma::mem_row_major);
            wmma::store_matrix_sync(slot + ATT_BK * DP + warp * 16 * DP + n * 16, dkacc[n], DP, wmma::mem_row_major);
        }
        return;
    }
    __syncthreads();   /* (block-uniform branch above) every warp is done with dOs and St: Ob lies on them */
    /* write dV then dK through this warp's rows of the staging buffer */
    bf16 *dvdst = comp ? dcv + (((size_t)b * nW + key) * G + g) * d : dv + (((size_t)b * T + key) * G + g) * d;
    bf16 *dkdst = comp ? dck + (((size_t)b * nW + key) * G + g) * d : dk + (((size_t)b * T + key) * G + g) * d;
    warp_store_rows<DP, L::LDO>(dvdst, Ob, dvacc, r, hf, d, kvalid, 1.0f);
    warp_store_rows<DP, L::LDO>(dkdst, Ob, dkacc, r, hf, d, kvalid, scale);
}

/* Block (tile, g, b): when key tile `tile` of KV head g was split, its n_chunks partial slots
 * (fp32 [dv: 64 x dp][dk: 64 x dp] each) are added in chunk order c = 0, 1, ..., n_chunks - 1,
 * one thread per (key, column), and written as bf16: dv = sum, dk = sum / sqrt(d). Tiles of one
 * chunk were written by the dkv kernel; their blocks return at once. */
__global__ void attn_bwd_dkv_reduce_kernel(AttnShape s, int chunk_len, const float *part, int slots_per_head, int dp,
                                           bf16 *dk, bf16 *dv, bf16 *dck, bf16 *dcv) {
    const int tile = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    const int T = s.T, G = s.G, d = s.d, nW = s.n_windows;
    int slot0 = 0;
    for (int t = 0; t < tile; t++) {
        const int c = dkv_chunks(dkv_tile(s, b, g, t).items, chunk_len);
        if (c > 1) slot0 += c;
    }
    const DkvTile kt = dkv_tile(s, b, g, tile);
    const int n_chunks = dkv_chunks(kt.items, chunk_len);
    if (n_chunks == 1) return;
    const float scale = rsqrtf((float)d);
    const size_t slot_elems = (size_t)2 * ATT_BK * dp;
    const float *src = part + (((size_t)b * G + g) * slots_per_head + slot0) * slot_elems;
    for (int e = threadIdx.x; e < kt.nkeys * d; e += blockDim.x) {
        const int rr = e / d, x = e % d, key = kt.k0 + rr;
        const float *pv = src + rr * dp + x, *pk = pv + ATT_BK * dp;
        float sv = 0.0f, sk = 0.0f;
        for (int c = 0; c < n_chunks; c++) {
            sv += pv[c * slot_elems];
            sk += pk[c * slot_elems];
        }
        bf16 *dvdst = kt.comp ? dcv + (((size_t)b * nW + key) * G + g) * d : dv + (((size_t)b * T + key) * G + g) * d;
        bf16 *dkdst = kt.comp ? dck + (((size_t)b * nW + key) * G + g) * d : dk + (((size_t)b * T + key) * G + g) * d;
        dvdst[x] = tobf(sv);
        dkdst[x] = tobf(sk * scale);
    }
}

/* ======================= host side ======================= */
static bool vec_ok(const AttnShape *s, const void *const *ptrs, int n) {
    if (s->d % 8) return false;
    for (int i = 0; i < n; i++)
        if (ptrs[i] && ((uintptr_t)ptrs[i] & 15)) return false;
    return true;
}

/* The attention kernels keep their tiles in shared memory: at head_dim 128 the backward needs
 * 111 KiB per block (dq), which A100 (164 KiB) and H100/H200 (227 KiB) have and sm_86/89/120 GPUs
 * (99 KiB) do not. Say so instead of failing the launch. */
static void check_smem(BackendCtx *ctx, size_t need, const char *kernel, int d) {
    if ((long long)need <= (long long)ctx->smem_optin) return;
    char msg[256];
    snprintf(msg, sizeof msg, "%s with head_dim %d needs %zu bytes of shared memory per block; this GPU allows %d "
             "(A100, H100 and H200 have enough)", kernel, d, need, ctx->smem_optin);
    cu_fail(__FILE__, __LINE__, "attention", msg);
}

/* The split of the dK/dV backward (see the header): the chunk length L = max(DKV_MIN_CHUNK,
 * ceil(items of the launch / DKV_TARGET_BLOCKS)), a function of the shape only (not of the
 * device: the same bits on every GPU); blocks: the most any (sequence, KV head) needs (grid x; one with
 * fewer has idle blocks that return at once); slots: the most partial slots any head needs. */
struct DkvPlan { int chunk_len, blocks, slots; };
static DkvPlan dkv_plan(const AttnShape *s) {
    const int n_tiles = dkv_n_tiles(*s);
    /* every sequence has the same tiles (sequence 0's, B times) unless its grid is shifted (phase
     * jitter) or its entries end where its own learned boundaries put them (entry_ends) */
    const int n_seq = s->grid_shift || s->entry_ends ? s->B : 1;
    long long items = 0;
    for (int b = 0; b < n_seq; b++)
        for (int g = 0; g < s->G; g++)
            for (int tile = 0; tile < n_tiles; tile++) items += dkv_tile(*s, b, g, tile).items;
    if (n_seq == 1) items *= s->B;
    long long len = (items + DKV_TARGET_BLOCKS - 1) / DKV_TARGET_BLOCKS;
    if (len < DKV_MIN_CHUNK) len = DKV_MIN_CHUNK;
    if (len > (1 << 30)) len = 1 << 30;
    DkvPlan plan = {(int)len, 0, 0};
    for (int b = 0; b < n_seq; b++)
        for (int g = 0; g < s->G; g++) {
            int blocks = 0, slots = 0;
            for (int tile = 0; tile < n_tiles; tile++) {
                const int c = dkv_chunks(dkv_tile(*s, b, g, tile).items, plan.chunk_len);
                blocks += c;
                if (c > 1) slots += c;
            }
            if (blocks > plan.blocks) plan.blocks = blocks;
            if (slots > plan.slots) plan.slots = slots;
        }
    return plan;
}

/* The shape the kernels get: s with grid_shift, head_stride and the entry ends copied to the device (workspace
 * slots WS_ATT_SHIFT, WS_ATT_HSTRIDE, WS_ATT_ENDS, WS_ATT_COUNT; each call copies its own, none when NULL);
 * the host-side planning (dkv_plan) reads s itself. */
static AttnShape att_device_shape(BackendCtx *ctx, const AttnShape *s) {
    AttnShape k = *s;
    k.grid_shift = cu_device_ints(ctx, WS_ATT_SHIFT, s->grid_shift, s->B);
    k.head_stride = (const int *)cu_device_ints(ctx, WS_ATT_HSTRIDE, (const int32_t *)s->head_stride, s->G);
    if (s->entry_ends) {    /* learned chunk boundaries (docs/spec.md §6.5): [B, n_windows] ends and [B] counts */
        k.entry_ends = cu_device_ints(ctx, WS_ATT_ENDS, s->entry_ends, s->B * s->n_windows);
        k.entry_count = cu_device_ints(ctx, WS_ATT_COUNT, s->entry_count, s->B);
    }
    return k;
}

/* Kernel attributes (the shared-memory opt-in) hold per device: a launcher sets them once per
 * device (its flags, indexed by device; a device past the table sets them on every call). */
#define ATT_MAX_DEVICES 64
static bool att_attrs_needed(const BackendCtx *ctx, bool *done) {
    if (ctx->device < 0 || ctx->device >= ATT_MAX_DEVICES) return true;
    if (done[ctx->device]) return false;
    done[ctx->device] = true;   /* (set by the caller right after this returns) */
    return true;
}

template <int DP>
static void attn_fwd_launch(BackendCtx *ctx, const AttnShape *s, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                            const bf16 *ck, const bf16 *cv, const float *sink, bool vec) {
    static bool attr_set[ATT_MAX_DEVICES];   /* cudaFuncSetAttribute holds per device */
    size_t smem = FwdLayout<DP>::bytes();
    check_smem(ctx, smem, "attention forward", s->d);
    if (att_attrs_needed(ctx, attr_set)) {
        CU(cudaFuncSetAttribute(attn_fwd_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CU(cudaFuncSetAttribute(attn_fwd_kernel<DP>, cudaFuncAttributePreferredSharedMemoryCarveout, ATT_CARVEOUT));
    }
    dim3 grid((s->T + ATT_BQ - 1) / ATT_BQ, s->H, s->B);
    const AttnShape ks = att_device_shape(ctx, s);
    CU_KERNEL(attn_fwd_kernel<DP>, grid, ATT_THREADS, smem, ctx->stream)(ks, out, lse, q, k, v, ck, cv, sink, vec);
    CU_LAUNCH();
}

template <int DP>
static void attn_bwd_launch(BackendCtx *ctx, const AttnShape *s, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dck, bf16 *dcv, const bf16 *dout,
                            const float *lse, const float *Dv, const bf16 *q, const bf16 *k, const bf16 *v,
                            const bf16 *ck, const bf16 *cv, bool vec) {
    static bool attr_set[ATT_MAX_DEVICES];   /* cudaFuncSetAttribute holds per device */
    size_t smem_dq = DqLayout<DP>::bytes(), smem_dkv = DkvLayout<DP>::bytes();
    check_smem(ctx, smem_dq > smem_dkv ? smem_dq : smem_dkv, "attention backward", s->d);
    if (att_attrs_needed(ctx, attr_set)) {
        CU(cudaFuncSetAttribute(attn_bwd_dq_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq));
        CU(cudaFuncSetAttribute(attn_bwd_dkv_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkv));
        CU(cudaFuncSetAttribute(attn_bwd_dq_kernel<DP>, cudaFuncAttributePreferredSharedMemoryCarveout, ATT_CARVEOUT));
        CU(cudaFuncSetAttribute(attn_bwd_dkv_kernel<DP>, cudaFuncAttributePreferredSharedMemoryCarveout, ATT_CARVEOUT));
    }
    dim3 grid_q((s->T + ATT_BQ - 1) / ATT_BQ, s->H, s->B);
    const AttnShape ks = att_device_shape(ctx, s);
    CU_KERNEL(attn_bwd_dq_kernel<DP>, grid_q, ATT_THREADS, smem_dq, ctx->stream)(ks, dq, dout, lse, Dv, q, k, v, ck, cv, vec);
    CU_LAUNCH();
    cu_substep(ctx, "attention_bwd.dq");
    /* dK/dV: chunks of (head, query tile) items per key tile, then the fixed-order sum of the
     * split tiles' partials (the header's decomposition; one pass when no tile is split) */
    const DkvPlan plan = dkv_plan(s);
    float *part = NULL;
    if (plan.slots > 0)
        part = (float *)cu_workspace(ctx, WS_ATT_PART, (size_t)s->B * s->G * plan.slots * 2 * ATT_BK * DP * sizeof(float));
    dim3 grid_kv(plan.blocks, s->G, s->B);
    CU_KERNEL(attn_bwd_dkv_kernel<DP>, grid_kv, ATT_THREADS, smem_dkv, ctx->stream)(ks, plan.chunk_len, part, plan.slots,
                                                                             dk, dv, dck, dcv, dout, lse, Dv, q, k,
                                                                             v, ck, cv, vec);
    CU_LAUNCH();
    cu_substep(ctx, "attention_bwd.dkv");
    if (plan.slots > 0) {
        dim3 grid_red(dkv_n_tiles(*s), s->G, s->B);
        CU_KERNEL(attn_bwd_dkv_reduce_kernel, grid_red, 256, 0, ctx->stream)(ks, plan.chunk_len, part, plan.slots, DP, dk, dv,
                                                                           dck, dcv);
        CU_LAUNCH();
        cu_substep(ctx, "attention_bwd.dkv_reduce");
    }
}

static int padded_dim(int d) {
    if (d <= 16) return 16;
    if (d <= 32) return 32;
    if (d <= 64) return 64;
    if (d <= 128) return 128;
    cu_fail(__FILE__, __LINE__, "attention", "head_dim > 128 is not supported by the CUDA attention kernels");
    return 0;
}

void cu_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                      const act_t *v, const act_t *ck, const act_t *cv, const float *sink) {
    if (s->B <= 0 || s->T <= 0) return;
    AttnShape sh = *s;
    if (!ck || !cv) { sh.n_windows = 0; sh.entry_ends = NULL; sh.entry_count = NULL; }
    /* full causal attention without a sink: cuDNN's fused attention when it takes the shape. A
     * call with entries (and so any entry_select: cuDNN takes no per-(t, j) mask, nor entry ends) stays here. */
    cu_substep_begin(ctx);
    if (sh.visibility == VIS_FULL && sh.n_windows == 0 && !sh.entry_ends && !sink &&
        cu_cudnn_attention_fwd(ctx, &sh, out, lse, q, k, v)) {
        cu_substep(ctx, "attention_fwd.cudnn");
        return;
    }
    const void *ptrs[] = {out, q, k, v, ck, cv};
    bool vec = vec_ok(&sh, ptrs, 6);
    bf16 *o = (bf16 *)out;
    const bf16 *Q = (const bf16 *)q, *K = (const bf16 *)k, *V = (const bf16 *)v, *CK = (const bf16 *)ck, *CV = (const bf16 *)cv;
    switch (padded_dim(s->d)) {
    case 16: attn_fwd_launch<16>(ctx, &sh, o, lse, Q, K, V, CK, CV, sink, vec); break;
    case 32: attn_fwd_launch<32>(ctx, &sh, o, lse, Q, K, V, CK, CV, sink, vec); break;
    case 64: attn_fwd_launch<64>(ctx, &sh, o, lse, Q, K, V, CK, CV, sink, vec); break;
    default: attn_fwd_launch<128>(ctx, &sh, o, lse, Q, K, V, CK, CV, sink, vec); break;
    }
    cu_substep(ctx, "attention_fwd.custom");
}

void cu_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, act_t *dck, act_t *dcv,
                      float *dsink, const act_t *dout, const act_t *out, const float *lse,
                      const act_t *q, const act_t *k, const act_t *v, const act_t *ck,
                      const act_t *cv, const float *sink) {
    if (s->B <= 0 || s->T <= 0) return;
    AttnShape sh = *s;
    if (!ck || !cv) { sh.n_windows = 0; sh.entry_ends = NULL; sh.entry_count = NULL; }
    if (sh.n_windows > 0 && (!dck || !dcv)) {   /* entries are visible but their gradient is not wanted */
        size_t nc = (size_t)s->B * s->n_windows * s->G * s->d;
        bf16 *scratch = (bf16 *)cu_workspace(ctx, WS_ATT_DC, 2 * nc * sizeof(bf16));
        if (!dck) dck = (act_t *)scratch;
        if (!dcv) dcv = (act_t *)(scratch + nc);
    }
    cu_substep_begin(ctx);
    if (sh.visibility == VIS_FULL && sh.n_windows == 0 && !sh.entry_ends && !sink &&
        cu_cudnn_attention_bwd(ctx, &sh, dq, dk, dv, dout, out, lse, q, k, v)) {
        cu_substep(ctx, "attention_bwd.cudnn");
        return;
    }
    int rows = s->B * s->T * s->H;
    float *Dv = (float *)cu_workspace(ctx, WS_ATT_D, (size_t)rows * sizeof(float));
    float *sinkterm = (sink && dsink) ? (float *)cu_workspace(ctx, WS_ATT_SINK, (size_t)rows * sizeof(float)) : NULL;
    CU_KERNEL(attn_bwd_pre_kernel, (rows + 7) / 8, 256, 0, ctx->stream)(Dv, sinkterm, (const bf16 *)dout, (const bf16 *)out,
                                                                 lse, sink, rows, s->H, s->d);
    CU_LAUNCH();
    if (sinkterm) cu_colsum_add(ctx, dsink, sinkterm, s->B * s->T, s->H);
    cu_substep(ctx, "attention_bwd.pre");
    const void *ptrs[] = {dq, dk, dv, dck, dcv, dout, q, k, v, ck, cv};
    bool vec = vec_ok(&sh, ptrs, 11);
    bf16 *DQ = (bf16 *)dq, *DK = (bf16 *)dk, *DV = (bf16 *)dv, *DCK = (bf16 *)dck, *DCV = (bf16 *)dcv;
    const bf16 *DO = (const bf16 *)dout, *Q = (const bf16 *)q, *K = (const bf16 *)k, *V = (const bf16 *)v,
               *CK = (const bf16 *)ck, *CV = (const bf16 *)cv;
    switch (padded_dim(s->d)) {
    case 16: attn_bwd_launch<16>(ctx, &sh, DQ, DK, DV, DCK, DCV, DO, lse, Dv, Q, K, V, CK, CV, vec); break;
    case 32: attn_bwd_launch<32>(ctx, &sh, DQ, DK, DV, DCK, DCV, DO, lse, Dv, Q, K, V, CK, CV, vec); break;
    case 64: attn_bwd_launch<64>(ctx, &sh, DQ, DK, DV, DCK, DCV, DO, lse, Dv, Q, K, V, CK, CV, vec); break;
    default: attn_bwd_launch<128>(ctx, &sh, DQ, DK, DV, DCK, DCV, DO, lse, Dv, Q, K, V, CK, CV, vec); break;
    }
}
