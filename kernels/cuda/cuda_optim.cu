/* Optimizer and reductions on fp32 buffers (CUDA backend).
 *   AdamW:  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *           p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)      one thread per element
 *   sumsq:  sum of x^2 in double, deterministic: pass 1 has a fixed grid of SUMSQ_BLOCKS blocks,
 *           each summing a fixed grid-stride subset per thread and reducing its threads with a
 *           fixed-shape shared-memory tree; pass 2 (one block) adds the block sums the same way.
 *           The grid never depends on the device, so the result is the same bits everywhere.
 *   scale:  x *= s */
#include "kernels/cuda/cuda_common.h"

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                             float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        p[i] = pi - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pi);
    }
}

void cu_adamw(BackendCtx *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2) {
    if (!n) return;
    CU_KERNEL(adamw_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
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

__global__ void scale_kernel(float *x, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] *= s;
}

void cu_scale(BackendCtx *ctx, float *x, size_t n, float s) {
    if (!n) return;
    CU_KERNEL(scale_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(x, n, s);
    CU_LAUNCH();
}
