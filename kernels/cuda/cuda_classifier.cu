/* Fused classifier + cross-entropy on the CUDA backend, chunked over rows so that at most
 * CLS_CHUNK_ELEMS logits exist at once (the Qwen3 vocabulary is 151,936 wide):
 *   logits_n = x_n E^T  (fp32 output of a bf16 cuBLASLt GEMM)
 *   loss_n   = logsumexp(logits_n) - logits_n[target_n]          (0 where target < 0)
 * With gradients (g = grad_scale):
 *   dlogits_n = g (softmax(logits_n) - onehot(target_n))   (bf16, 0 for ignored rows)
 *   dx_chunk  = dlogits @ E          (bf16 GEMM output, overwritten)
 *   dE       += dlogits^T @ x_chunk  (fp32 GEMM output, beta = 1: chunks accumulate in order)
 * Row statistics: one 256-thread block per row; each thread scans a fixed strided subset, then
 * a fixed-shape shared-memory tree: deterministic. logits_argmax picks the first maximal index. */
#include <float.h>
#include "kernels/cuda/cuda_common.h"

#define CLS_CHUNK_ELEMS (64u << 20)   /* 64 Mi logits: 256 MiB fp32 + 128 MiB bf16 gradient */
#define CLS_THREADS 256

__device__ __forceinline__ float block_reduce(float v, float *sh, bool is_max) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CLS_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = is_max ? fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]) : sh[threadIdx.x] + sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(CLS_THREADS) ce_rows_kernel(const float *logits, bf16 *dlogits, const int32_t *targets,
                                                              float *losses, int V, float g) {
    __shared__ float sh[CLS_THREADS];
    int r = blockIdx.x;
    const float *l = logits + (size_t)r * V;
    float mx = -FLT_MAX;
    for (int v = threadIdx.x; v < V; v += CLS_THREADS) mx = fmaxf(mx, l[v]);
    mx = block_reduce(mx, sh, true);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += CLS_THREADS) sum += __expf(l[v] - mx);
    sum = block_reduce(sum, sh, false);
    float lse = mx + logf(sum);
    int tgt = targets[r];
    if (threadIdx.x == 0) losses[r] = tgt >= 0 ? lse - l[tgt] : 0.0f;
    if (dlogits) {
        bf16 *dl = dlogits + (size_t)r * V;
        for (int v = threadIdx.x; v < V; v += CLS_THREADS) {
            float p = tgt >= 0 ? g * (__expf(l[v] - lse) - (v == tgt ? 1.0f : 0.0f)) : 0.0f;
            dl[v] = tobf(p);
        }
    }
}

static int chunk_rows(int N, int V) {
    long c = (long)(CLS_CHUNK_ELEMS / (unsigned)(V > 0 ? V : 1));
    if (c < 1) c = 1;
    if (c > N) c = N;
    return (int)c;
}

void cu_classifier(BackendCtx *ctx, const act_t *x_, const act_t *emb_, const int32_t *targets, int N, int D, int V,
                   float *losses, act_t *dx_, float *demb, float grad_scale) {
    if (N <= 0) return;
    const bf16 *x = (const bf16 *)x_, *emb = (const bf16 *)emb_;
    bf16 *dx = (bf16 *)dx_;
    int chunk = chunk_rows(N, V);
    float *logits = (float *)cu_workspace(ctx, WS_CLS_LOGITS, (size_t)chunk * V * sizeof(float));
    bf16 *dlogits = dx ? (bf16 *)cu_workspace(ctx, WS_CLS_DLOGITS, (size_t)chunk * V * sizeof(bf16)) : NULL;
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        const bf16 *xc = x + (size_t)r0 * D;
        cu_gemm(ctx, 0, 1, rows, V, D, xc, D, 0, emb, D, 0, logits, V, 0, 1, 1.0f, 0.0f, 1);
        CU_KERNEL(ce_rows_kernel, rows, CLS_THREADS, 0, ctx->stream)(logits, dlogits, targets + r0, losses + r0, V, grad_scale);
        CU_LAUNCH();
        if (dx) {
            cu_gemm(ctx, 0, 0, rows, D, V, dlogits, V, 0, emb, D, 0, dx + (size_t)r0 * D, D, 0, 0, 1.0f, 0.0f, 1);
            if (demb) cu_gemm(ctx, 1, 0, V, D, rows, dlogits, V, 0, xc, D, 0, demb, D, 0, 1, 1.0f, 1.0f, 1);
        }
    }
}

__global__ void __launch_bounds__(CLS_THREADS) argmax_rows_kernel(const float *logits, int V, int32_t *out) {
    __shared__ float shv[CLS_THREADS];
    __shared__ int shi[CLS_THREADS];
    const float *l = logits + (size_t)blockIdx.x * V;
    float best = -FLT_MAX;
    int bi = 0x7fffffff;
    for (int v = threadIdx.x; v < V; v += CLS_THREADS)
        if (l[v] > best) { best = l[v]; bi = v; }
    shv[threadIdx.x] = best;
    shi[threadIdx.x] = bi;
    __syncthreads();
    for (int s = CLS_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = shv[threadIdx.x + s];
            int oi = shi[threadIdx.x + s];
            if (ov > shv[threadIdx.x] || (ov == shv[threadIdx.x] && oi < shi[threadIdx.x])) {
                shv[threadIdx.x] = ov;
                shi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = shi[0] == 0x7fffffff ? 0 : shi[0];
}

void cu_logits_argmax(BackendCtx *ctx, const act_t *x_, const act_t *emb_, int N, int D, int V, int32_t *out) {
    if (N <= 0) return;
    const bf16 *x = (const bf16 *)x_, *emb = (const bf16 *)emb_;
    int chunk = chunk_rows(N, V);
    float *logits = (float *)cu_workspace(ctx, WS_CLS_LOGITS, (size_t)chunk * V * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        cu_gemm(ctx, 0, 1, rows, V, D, x + (size_t)r0 * D, D, 0, emb, D, 0, logits, V, 0, 1, 1.0f, 0.0f, 1);
        CU_KERNEL(argmax_rows_kernel, rows, CLS_THREADS, 0, ctx->stream)(logits, V, out + r0);
        CU_LAUNCH();
    }
}
