/* Optimizer and reductions on fp32 buffers (CUDA backend).
 *   adamw_cast: the owned step, one pass per element (one thread each): with gs = g * gscale
 *           (the clip factor), m = b1 m + (1 - b1) gs;  v = b2 v + (1 - b2) gs^2;
 *           p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p) on the fp32 master, and the bf16
 *           working copy written from the updated master
 *   sumsq:  sum of x^2 in double, deterministic: pass 1 has a fixed grid of SUMSQ_BLOCKS blocks,
 *           each summing a fixed grid-stride subset per thread and reducing its threads with a
 *           fixed-shape shared-memory tree; pass 2 (one block) adds the block sums the same way.
 *           The grid never depends on the device, so the result is the same bits everywhere.
 *   loss_accumulate: acc += mean of the counted losses * rows * cols, one block, in double */
#include "kernels/cuda/cuda_common.h"

/* One pass per element (llm.c's adamw.cuh): read g, m, v, p; write m, v, p and, when w is not
 * NULL, the bf16 working copy from the updated master (round to nearest even, as cast_params). */
__global__ void adamw_cast_kernel(float *p, bf16 *w, const float *g, float *m, float *v, size_t n, float gscale,
                                  float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = gscale == 1.0f ? g[i] : g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        pi = pi - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pi);
        p[i] = pi;
        if (w) w[i] = tobf(pi);
    }
}

void cu_adamw_cast(BackendCtx *ctx, float *p, act_t *w, const float *g, float *m, float *v, size_t n, float gscale,
                   float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    if (!n) return;
    bf16 *wb = (void *)w == (void *)p ? NULL : (bf16 *)w;
    CU_KERNEL(adamw_cast_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(p, wb, g, m, v, n, gscale, lr, b1, b2, eps, wd,
                                                                         bc1, bc2);
    CU_LAUNCH();
}

/* acc[0] += mean * rows * cols: one block; each thread sums a fixed strided subset in double, a
 * fixed-shape tree adds the threads (deterministic, not the CPU's order). */
#define LOSS_THREADS 256
__global__ void loss_accumulate_kernel(double *acc, const float *losses, const int32_t *targets, long N, int rows,
                                       int cols) {
    __shared__ double sh_sum[LOSS_THREADS];
    __shared__ double sh_cnt[LOSS_THREADS];
    double s = 0.0, c = 0.0;
    for (long i = threadIdx.x; i < N; i += LOSS_THREADS)
        if (targets[i] >= 0) { s += losses[i]; c += 1.0; }
    sh_sum[threadIdx.x] = s;
    sh_cnt[threadIdx.x] = c;
    __syncthreads();
    for (int k = LOSS_THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            sh_sum[threadIdx.x] += sh_sum[threadIdx.x + k];
            sh_cnt[threadIdx.x] += sh_cnt[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && sh_cnt[0] > 0) acc[0] += sh_sum[0] / sh_cnt[0] * rows * cols;
}

void cu_loss_accumulate(BackendCtx *ctx, double *acc, const float *losses, const int32_t *targets, int rows, int cols) {
    CU_KERNEL(loss_accumulate_kernel, 1, LOSS_THREADS, 0, ctx->stream)(acc, losses, targets, (long)rows * cols, rows,
                                                                       cols);
    CU_LAUNCH();
}

#define SUMSQ_BLOCKS 1024
#define SUMSQ_THREADS 256

__device__ __forceinline__ double block_sum_double(double acc, double *sh) {
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__global__ void sumsq_partial_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[SUMSQ_THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)SUMSQ_THREADS + threadIdx.x; i < n; i += (size_t)SUMSQ_BLOCKS * SUMSQ_THREADS) {
        double xi = x[i];
        acc += xi * xi;
    }
    double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(double *out, const double *part) {
    __shared__ double sh[SUMSQ_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < SUMSQ_BLOCKS; i += SUMSQ_THREADS) acc += part[i];
    double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) *out = s;
}

double cu_sumsq(BackendCtx *ctx, const float *x, size_t n) {
    if (!n) return 0.0;
    double *part = (double *)cu_workspace(ctx, WS_RED2, (SUMSQ_BLOCKS + 1) * sizeof(double));
    CU_KERNEL(sumsq_partial_kernel, SUMSQ_BLOCKS, SUMSQ_THREADS, 0, ctx->stream)(part, x, n);
    CU_LAUNCH();
    CU_KERNEL(sumsq_final_kernel, 1, SUMSQ_THREADS, 0, ctx->stream)(part + SUMSQ_BLOCKS, part);
    CU_LAUNCH();
    double r = 0.0;
    CU(cudaMemcpyAsync(&r, part + SUMSQ_BLOCKS, sizeof r, cudaMemcpyDeviceToHost, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
    return r;
}
