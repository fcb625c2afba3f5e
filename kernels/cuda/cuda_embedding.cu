/* Token embedding on the CUDA backend.
 *   forward   out[n, :] = table[tok_n, :]           one thread per element (16-byte rows when D % 8 == 0)
 *   backward  dtable[tok_n, :] += dout[n, :]       dout fp32 (the residual gradient, kept in fp32:
 *             docs/spec.md §1.1), deterministic, no atomics:
 *     1. a stable radix sort (CUB) of (token, n) pairs groups equal tokens with n ascending;
 *     2. one block per sorted position that starts a run of equal tokens sums the run's rows
 *        column by column in position order and adds the sum to the fp32 row of dtable.
 *   Each dtable row is written by exactly one block, in a fixed order. Tokens < 0 are skipped. */
#include <cub/cub.cuh>
#include "kernels/cuda/cuda_common.h"

/* out[n, c] = table[tokens[n], c] for rows of `cols` elements of type E: bf16, or uint4 (8 bf16,
 * one 16-byte access) when rows and pointers allow */
template <typename E>
__global__ void embedding_fwd_kernel(E *out, const int32_t *tokens, const E *table, int N, int cols) {
    size_t total = (size_t)N * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / cols;
        int c = (int)(i % cols);
        out[i] = table[(size_t)tokens[n] * cols + c];
    }
}

void cu_embedding_fwd(BackendCtx *ctx, act_t *out, const int32_t *tokens, const act_t *table, int N, int D) {
    if (N <= 0) return;
    if (D % 8 == 0 && !((uintptr_t)out & 15) && !((uintptr_t)table & 15)) {
        size_t total = (size_t)N * (D / 8);
        CU_KERNEL(embedding_fwd_kernel<uint4>, cu_blocks(total, 256), 256, 0, ctx->stream)((uint4 *)out, tokens, (const uint4 *)table, N, D / 8);
    } else {
        CU_KERNEL(embedding_fwd_kernel<bf16>, cu_blocks((size_t)N * D, 256), 256, 0, ctx->stream)((bf16 *)out, tokens, (const bf16 *)table, N, D);
    }
    CU_LAUNCH();
}

__global__ void iota_kernel(int32_t *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
}

__global__ void embedding_bwd_runs_kernel(float *dtable, const int32_t *skeys, const int32_t *sidx, const float *dout,
                                          int N, int D) {
    int i = blockIdx.x;
    int tok = skeys[i];
    if (tok < 0 || (i > 0 && skeys[i - 1] == tok)) return;
    int end = i + 1;
    while (end < N && skeys[end] == tok) end++;
    float *dst = dtable + (size_t)tok * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = i; j < end; j++) acc += dout[(size_t)sidx[j] * D + c];
        dst[c] += acc;
    }
}

void cu_embedding_bwd(BackendCtx *ctx, float *dtable, const int32_t *tokens, const float *dout, int N, int D) {
    if (N <= 0) return;
    int32_t *buf = (int32_t *)cu_workspace(ctx, WS_EMB, (size_t)3 * N * sizeof(int32_t));
    int32_t *idx_in = buf, *keys_out = buf + N, *idx_out = buf + 2 * (size_t)N;
    CU_KERNEL(iota_kernel, (N + 255) / 256, 256, 0, ctx->stream)(idx_in, N);
    CU_LAUNCH();
    size_t temp_bytes = 0;
    CU(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, tokens, keys_out, idx_in, idx_out, N, 0, 32, ctx->stream));
    void *temp = cu_workspace(ctx, WS_EMB2, temp_bytes);
    CU(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys_out, idx_in, idx_out, N, 0, 32, ctx->stream));
    CU_KERNEL(embedding_bwd_runs_kernel, N, 256, 0, ctx->stream)(dtable, keys_out, idx_out, dout, N, D);
    CU_LAUNCH();
}
