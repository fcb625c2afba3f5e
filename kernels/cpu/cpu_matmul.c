/* Dense matmuls on the CPU through OpenBLAS sgemm (row-major).
 *   forward   out [M,N] = in [M,K] @ w[N,K]^T        (y = W x per row, PyTorch Linear)
 *   backward  din [M,K] = dout [M,N] @ w [N,K]
 *             dw  [N,K] += dout^T [N,M] @ in [M,K]
 * sgemm is called outside any OpenMP region; OpenBLAS threads it itself and its result does not
 * depend on timing for a fixed thread count. */
#include <cblas.h>
#include "kernels/cpu/cpu_internal.h"

void cpu_matmul_fwd(BackendCtx *ctx, act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate) {
    cpu_blas_threads(ctx);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, (const float *)in, K,
                (const float *)w, K, accumulate ? 1.0f : 0.0f, (float *)out, N);
}

void cpu_matmul_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                    int M, int N, int K, int accumulate) {
    cpu_blas_threads(ctx);
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, (const float *)dout, N,
                    (const float *)w, K, accumulate ? 1.0f : 0.0f, (float *)din, K);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, (const float *)dout, N,
                    (const float *)in, K, 1.0f, dw, K);
}
