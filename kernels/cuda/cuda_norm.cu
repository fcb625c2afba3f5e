/* RMSNorm over the last dim C of [rows, C] on the CUDA backend (docs/spec.md §1), fp32 math:
 *   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w
 * Backward, with gy = dy * w:
 *   dx = rstd * (gy - x * rstd^2 * mean(gy * x)),   dw += sum_rows dy * x * rstd
 * Parallelisation: one warp per row (rows are D = 1024 wide for block norms, d = 128 for the
 * per-head q/k norms), lanes stride over the row with bf16x2 accesses when C is even.
 * Backward, fused (C % 8 == 0 and C / 8 a multiple of 32 up to 128, or a power of two up to 32:
 * C = 1024 block norms, C = 128 per-head norms): a block owns a fixed chunk of rows; a group of
 * LPR lanes takes one row at a time, loads dy and x once with 16-byte accesses, writes dx and
 * keeps dy * x * rstd for its 8 V columns in registers over the rows it takes; the block adds
 * its groups' sums in group order into part[chunk, :]. The first H200 profile (tests/gpu/
 * check.sh, 2026-12-04) had the unfused pair below at 434 GB/s, 16.7% of a full-attention step:
 * scalar 2-byte loads, each tensor read twice, and a 32-column dw block that reads 64 bytes per
 * row. The unfused pair stays for the other shapes.
 * dw is deterministic either way: fixed chunks of rows (a chunk count from the shape alone), a
 * fixed order inside each chunk, then cu_colsum_add adds the chunk sums in chunk order.
 * The residual norms' backward (rmsnorm_bwd_residual, docs/spec.md §1.1, residual gradient): the
 * same kernels with dx in fp32 (read when accumulating, written, 16-byte accesses in the fused
 * one) and a bf16 copy of the updated dx written beside it for the next GEMM:
 *   dres = (accumulate ? dres : 0) + dx_row,  round_act: dres = bf16(dres),  dres_act = bf16(dres)
 * With round_act the bits are those of the bf16 residual gradient before (round(old + v) from an
 * old value that was bf16 already). */
#include <string.h>
#include "kernels/cuda/cuda_common.h"

template <bool V2>
__global__ void rmsnorm_fwd_kernel(bf16 *out, float *rstd, const bf16 *in, const bf16 *w, int rows, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bf16 *x = in + (size_t)row * C;
    bf16 *y = out + (size_t)row * C;
    float ss = 0.0f;
    if (V2) {
        for (int c = 2 * lane; c < C; c += 64) {
            float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)(x + c));
            ss += v.x * v.x + v.y * v.y;
        }
    } else {
        for (int c = lane; c < C; c += 32) { float v = bf(x[c]); ss += v * v; }
    }
    ss = warp_sum(ss);
    float rs = 1.0f / sqrtf(ss / C + eps);
    if (rstd && lane == 0) rstd[row] = rs;
    if (V2) {
        for (int c = 2 * lane; c < C; c += 64) {
            float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)(x + c));
            float2 ww = __bfloat1622float2(*(const __nv_bfloat162 *)(w + c));
            *(__nv_bfloat162 *)(y + c) = __floats2bfloat162_rn(v.x * rs * ww.x, v.y * rs * ww.y);
        }
    } else {
        for (int c = lane; c < C; c += 32) y[c] = tobf(bf(x[c]) * rs * bf(w[c]));
    }
}

/* The residual gradient's outputs (rmsnorm_bwd_residual): dres fp32 [rows, C], its bf16 copy
 * (NULL: not wanted), round: dres is rounded to bf16 as well. */
struct ResOut { float *dres; bf16 *copy; int round; };

/* din [rows, C] bf16, or (RES) res.dres fp32 + res.copy */
template <bool RES>
__global__ void rmsnorm_bwd_dx_kernel(bf16 *din, ResOut res, const bf16 *dout, const bf16 *in, const bf16 *w,
                                      const float *rstd, int rows, int C, int accumulate) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bf16 *x = in + (size_t)row * C, *dy = dout + (size_t)row * C;
    const size_t r0 = (size_t)row * C;
    float rs = rstd[row], dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += bf(dy[c]) * bf(w[c]) * bf(x[c]);
    dot = warp_sum(dot) * rs / C;   /* mean(gy * xhat) = rs * mean(gy * x) */
    for (int c = lane; c < C; c += 32) {
        float v = rs * (bf(dy[c]) * bf(w[c]) - bf(x[c]) * rs * dot);
        if (RES) {
            if (accumulate) v += res.dres[r0 + c];
            if (res.round) v = bf(tobf(v));
            res.dres[r0 + c] = v;
            if (res.copy) res.copy[r0 + c] = tobf(v);
        } else {
            if (accumulate) v += bf(din[r0 + c]);
            din[r0 + c] = tobf(v);
        }
    }
}

/* part[chunk, c] = sum over the chunk's rows of dy * x * rstd (block: 32 columns x 8 row lanes) */
__global__ void rmsnorm_bwd_dw_kernel(float *part, const bf16 *dout, const bf16 *in, const float *rstd,
                                      int rows, int C, int rows_per_chunk) {
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float acc = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8)
            acc += bf(dout[(size_t)r * C + c]) * bf(in[(size_t)r * C + c]) * rstd[r];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
        part[(size_t)blockIdx.y * C + c] = s;
    }
}


/* 8 bf16 <-> 8 floats through one 16-byte access (the bytes move with memcpy: reading a uint4
 * through a bf16x2 pointer breaks strict aliasing, and g++ (the emulator) then reads zeros) */
__device__ __forceinline__ void load8(float *f, const bf16 *p) {
    uint4 u = *(const uint4 *)p;
    __nv_bfloat162 h[4];
    memcpy(h, &u, sizeof u);
    for (int i = 0; i < 4; i++) { float2 v = __bfloat1622float2(h[i]); f[2 * i] = v.x; f[2 * i + 1] = v.y; }
}
__device__ __forceinline__ void store8(bf16 *p, const float *f) {
    __nv_bfloat162 h[4];
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    uint4 u;
    memcpy(&u, h, sizeof u);
    *(uint4 *)p = u;
}
/* 8 floats through two 16-byte accesses (p 16-byte aligned) */
__device__ __forceinline__ void load8f(float *f, const float *p) {
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void store8f(float *p, const float *f) {
    *(float4 *)p = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)(p + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

/* din [rows, C] (NULL: not wanted) or (RES) res.dres fp32 + res.copy, part [gridDim.x, C] chunk sums
 * of dy * x * rstd (NULL: not wanted); C = LPR * 8 * V; block 256 threads = 256 / LPR row groups;
 * dynamic smem (256 / LPR) * C floats. Lane l of a group owns the columns 8 (k LPR + l) .. + 7, k < V. */
template <int LPR, int V, bool RES>
__global__ void __launch_bounds__(256) rmsnorm_bwd_fused_kernel(bf16 *din, ResOut res, float *part, const bf16 *dout,
                                                                const bf16 *in, const bf16 *w, const float *rstd, int rows,
                                                                int C, int rows_per_chunk, int accumulate) {
    CU_DYNAMIC_SMEM(smem);
    float *red = (float *)smem;                            /* [n_groups, C] */
    const int lane = threadIdx.x % LPR, group = threadIdx.x / LPR, n_groups = blockDim.x / LPR;
    const int r0 = blockIdx.x * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float wv[V][8], acc[V][8];
    for (int k = 0; k < V; k++) {
        load8(wv[k], w + 8 * (k * LPR + lane));
        for (int i = 0; i < 8; i++) acc[k][i] = 0.0f;
    }
    /* every lane runs every round (the group shuffles take the whole warp); rows past r1 add 0 */
    for (int base = r0; base < r1; base += n_groups) {
        const int r = base + group;
        const bool live = r < r1;
        const bf16 *x = in + (size_t)(live ? r : r0) * C, *dy = dout + (size_t)(live ? r : r0) * C;
        float xv[V][8], gv[V][8], dot = 0.0f;
        for (int k = 0; k < V; k++) {
            load8(xv[k], x + 8 * (k * LPR + lane));
            load8(gv[k], dy + 8 * (k * LPR + lane));
            for (int i = 0; i < 8; i++) dot += gv[k][i] * wv[k][i] * xv[k][i];
        }
        for (int o = LPR / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o, LPR);
        if (!live) continue;
        const float rs = rstd[r], m = dot * rs / C;        /* mean(gy * xhat) */
        if (RES || din) {
            for (int k = 0; k < V; k++) {
                const size_t at = (size_t)r * C + 8 * (k * LPR + lane);
                float v[8], old[8];
                if (accumulate) {
                    if (RES) load8f(old, res.dres + at);
                    else load8(old, din + at);
                }
                for (int i = 0; i < 8; i++) {
                    v[i] = rs * (gv[k][i] * wv[k][i] - xv[k][i] * rs * m);
                    if (accumulate) v[i] += old[i];
                }
                if (RES) {
                    if (res.round)
                        for (int i = 0; i < 8; i++) v[i] = bf(tobf(v[i]));
                    store8f(res.dres + at, v);
                    if (res.copy) store8(res.copy + at, v);
                } else {
                    store8(din + at, v);
                }
            }
        }
        for (int k = 0; k < V; k++)
            for (int i = 0; i < 8; i++) acc[k][i] += gv[k][i] * xv[k][i] * rs;
    }
    if (!part) return;
    for (int k = 0; k < V; k++)
        for (int i = 0; i < 8; i++) red[(size_t)group * C + 8 * (k * LPR + lane) + i] = acc[k][i];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int g = 0; g < n_groups; g++) sum += red[(size_t)g * C + c];
        part[(size_t)blockIdx.x * C + c] = sum;
    }
}

/* The fused kernel's lanes per row for C (0: C does not fit it) and its V = C / (8 LPR). */
static int fused_lanes(int C) {
    if (C % 8) return 0;
    const int nvec = C / 8;
    if (nvec % 32 == 0) return nvec / 32 <= 4 ? 32 : 0;
    return nvec <= 32 && (nvec & (nvec - 1)) == 0 ? nvec : 0;
}

template <int LPR, int V, bool RES>
static void rmsnorm_bwd_fused(BackendCtx *ctx, bf16 *din, ResOut res, float *part, const bf16 *dout, const bf16 *in,
                              const bf16 *w, const float *rstd, int rows, int C, int n_chunks, int rpc, int accumulate) {
    const size_t smem = (size_t)(256 / LPR) * C * sizeof(float);   /* at most 8 x 1024 x 4 = 32 KiB */
    void (*rmsnorm_bwd_fused_kernel_lv)(bf16 *, ResOut, float *, const bf16 *, const bf16 *, const bf16 *, const float *, int,
                                        int, int, int) = rmsnorm_bwd_fused_kernel<LPR, V, RES>;
    CU_KERNEL(rmsnorm_bwd_fused_kernel_lv, (unsigned)n_chunks, 256, smem, ctx->stream)(
        din, res, part, dout, in, w, rstd, rows, C, rpc, accumulate);
    CU_LAUNCH();
}

/* Both backward ops: din bf16 (rmsnorm_bwd) or (RES) res (rmsnorm_bwd_residual). */
template <bool RES>
static void rmsnorm_bwd_any(BackendCtx *ctx, bf16 *din, ResOut res, float *dw, const bf16 *dout, const bf16 *in, const bf16 *w,
                            const float *rstd, int rows, int C, int accumulate) {
    const bool want_dx = RES || din;
    if (rows <= 0 || (!want_dx && !dw)) return;
    const int lpr = fused_lanes(C);
    const bool aligned = !((uintptr_t)din & 15) && !((uintptr_t)res.dres & 15) && !((uintptr_t)res.copy & 15) &&
                         !((uintptr_t)dout & 15) && !((uintptr_t)in & 15) && !((uintptr_t)w & 15);
    if (lpr && aligned) {
        /* chunks of at least 32 rows, at most 1024 chunks (the count depends on the shape alone) */
        int n_chunks = (rows + 31) / 32;
        if (n_chunks > 1024) n_chunks = 1024;
        const int rpc = (rows + n_chunks - 1) / n_chunks;
        n_chunks = (rows + rpc - 1) / rpc;
        float *part = dw ? (float *)cu_workspace(ctx, WS_NORM, (size_t)n_chunks * C * sizeof(float)) : NULL;
        switch (lpr == 32 ? C / 256 : -lpr) {
        case 1: rmsnorm_bwd_fused<32, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case 2: rmsnorm_bwd_fused<32, 2, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case 3: rmsnorm_bwd_fused<32, 3, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case 4: rmsnorm_bwd_fused<32, 4, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case -16: rmsnorm_bwd_fused<16, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case -8: rmsnorm_bwd_fused<8, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case -4: rmsnorm_bwd_fused<4, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        case -2: rmsnorm_bwd_fused<2, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        default: rmsnorm_bwd_fused<1, 1, RES>(ctx, din, res, part, dout, in, w, rstd, rows, C, n_chunks, rpc, accumulate); break;
        }
        if (dw) cu_colsum_add(ctx, dw, part, n_chunks, C);
        return;
    }
    if (want_dx) {
        CU_KERNEL(rmsnorm_bwd_dx_kernel<RES>, (unsigned)((rows + 7) / 8), 256, 0, ctx->stream)(
            din, res, dout, in, w, rstd, rows, C, accumulate);
        CU_LAUNCH();
    }
    if (dw) {
        int nchunk = (rows + 127) / 128;
        if (nchunk > 512) nchunk = 512;
        int rpc = (rows + nchunk - 1) / nchunk;
        nchunk = (rows + rpc - 1) / rpc;
        float *part = (float *)cu_workspace(ctx, WS_NORM, (size_t)nchunk * C * sizeof(float));
        CU_KERNEL(rmsnorm_bwd_dw_kernel, dim3((C + 31) / 32, nchunk), dim3(32, 8), 0, ctx->stream)(
            part, dout, in, rstd, rows, C, rpc);
        CU_LAUNCH();
        cu_colsum_add(ctx, dw, part, nchunk, C);
    }
}

void cu_rmsnorm_fwd(BackendCtx *ctx, act_t *out, float *rstd, const act_t *in, const act_t *w, int rows, int C, float eps) {
    if (rows <= 0) return;
    bool v2 = (C % 2 == 0) && !((uintptr_t)in & 3) && !((uintptr_t)out & 3) && !((uintptr_t)w & 3);
    unsigned grid = (unsigned)((rows + 7) / 8);
    if (v2) CU_KERNEL(rmsnorm_fwd_kernel<true>, grid, 256, 0, ctx->stream)((bf16 *)out, rstd, (const bf16 *)in, (const bf16 *)w, rows, C, eps);
    else CU_KERNEL(rmsnorm_fwd_kernel<false>, grid, 256, 0, ctx->stream)((bf16 *)out, rstd, (const bf16 *)in, (const bf16 *)w, rows, C, eps);
    CU_LAUNCH();
}

void cu_rmsnorm_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                    const float *rstd, int rows, int C, int accumulate) {
    const ResOut none = {NULL, NULL, 0};
    rmsnorm_bwd_any<false>(ctx, (bf16 *)din, none, dw, (const bf16 *)dout, (const bf16 *)in, (const bf16 *)w, rstd, rows, C,
                           accumulate);
}

void cu_rmsnorm_bwd_residual(BackendCtx *ctx, float *dres, act_t *dres_act, float *dw, const act_t *dout, const act_t *in,
                             const act_t *w, const float *rstd, int rows, int C, int accumulate, int round_act) {
    const ResOut res = {dres, (bf16 *)dres_act, round_act != 0};
    rmsnorm_bwd_any<true>(ctx, NULL, res, dw, (const bf16 *)dout, (const bf16 *)in, (const bf16 *)w, rstd, rows, C, accumulate);
}
