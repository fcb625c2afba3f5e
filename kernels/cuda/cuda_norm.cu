/* RMSNorm over the last dim C of [rows, C] on the CUDA backend (docs/spec.md §1), fp32 math:
 *   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w
 * Backward, with gy = dy * w:
 *   dx = rstd * (gy - x * rstd^2 * mean(gy * x)),   dw += sum_rows dy * x * rstd
 * Parallelisation: one warp per row (rows are D = 1024 wide for block norms, d = 128 for the
 * per-head q/k norms), lanes stride over the row with bf16x2 accesses when C is even.
 * dw is deterministic: a kernel sums fixed chunks of rows per column block (fixed-shape tree),
 * then cu_colsum_add adds the chunk sums in chunk order. */
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

__global__ void rmsnorm_bwd_dx_kernel(bf16 *din, const bf16 *dout, const bf16 *in, const bf16 *w, const float *rstd,
                                      int rows, int C, int accumulate) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bf16 *x = in + (size_t)row * C, *dy = dout + (size_t)row * C;
    bf16 *dx = din + (size_t)row * C;
    float rs = rstd[row], dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += bf(dy[c]) * bf(w[c]) * bf(x[c]);
    dot = warp_sum(dot) * rs / C;   /* mean(gy * xhat) = rs * mean(gy * x) */
    for (int c = lane; c < C; c += 32) {
        float v = rs * (bf(dy[c]) * bf(w[c]) - bf(x[c]) * rs * dot);
        if (accumulate) v += bf(dx[c]);
        dx[c] = tobf(v);
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
    if (rows <= 0) return;
    if (din) {
        CU_KERNEL(rmsnorm_bwd_dx_kernel, (unsigned)((rows + 7) / 8), 256, 0, ctx->stream)(
            (bf16 *)din, (const bf16 *)dout, (const bf16 *)in, (const bf16 *)w, rstd, rows, C, accumulate);
        CU_LAUNCH();
    }
    if (dw) {
        int nchunk = (rows + 127) / 128;
        if (nchunk > 512) nchunk = 512;
        int rpc = (rows + nchunk - 1) / nchunk;
        nchunk = (rows + rpc - 1) / rpc;
        float *part = (float *)cu_workspace(ctx, WS_NORM, (size_t)nchunk * C * sizeof(float));
        CU_KERNEL(rmsnorm_bwd_dw_kernel, dim3((C + 31) / 32, nchunk), dim3(32, 8), 0, ctx->stream)(
            part, (const bf16 *)dout, (const bf16 *)in, rstd, rows, C, rpc);
        CU_LAUNCH();
        cu_colsum_add(ctx, dw, part, nchunk, C);
    }
}
