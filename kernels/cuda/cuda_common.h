/* Internal declarations shared by the CUDA backend's files (kernels/cuda/*.cu).
 *
 * Types: activations and working weights are bf16 (__nv_bfloat16), everything that is summed
 * (master weights, gradients, optimizer state, softmax statistics, losses) is fp32.
 * Every op is enqueued on one stream (cu_stream()); ops never synchronize with the host except
 * where they must return a host value (sumsq) or copy to/from host memory.
 * Determinism: no float atomics anywhere; every reduction has a fixed order (per-block trees
 * with a fixed shape, partial sums reduced by a second kernel in index order, sequential GEMM
 * accumulation with beta = 1).
 *
 * Errors: a failing CUDA/cuBLAS call inside an op (whose API returns void) prints one line
 * "phaselab: cuda: FILE:LINE: what" and aborts; backend_cuda itself returns NULL with err. */
#ifndef PHASELAB_CUDA_COMMON_H
#define PHASELAB_CUDA_COMMON_H
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stddef.h>
extern "C" {
#include "kernels/kernels.h"
}

typedef __nv_bfloat16 bf16;

/* ---- kernel launches ----
 * Written CU_KERNEL(kernel, grid, block, dynamic_smem_bytes, stream)(args...) and, inside a
 * kernel, CU_DYNAMIC_SMEM(name) for the dynamic shared memory (128-byte aligned). With nvcc
 * these are the <<<...>>> launch and the extern __shared__ array; in the CPU emulation build
 * (tests/cuemu, PHASELAB_CUEMU) they run the same kernel code on the host. */
#ifdef PHASELAB_CUEMU
#define CU_KERNEL(k, grid, block, smem, stream) cuemu::launcher(k, #k, grid, block, smem)
#define CU_DYNAMIC_SMEM(name) char *name = (char *)cuemu::dynamic_smem()
#else
#define CU_KERNEL(k, grid, block, smem, stream) k<<<grid, block, smem, stream>>>
#define CU_DYNAMIC_SMEM(name) extern __shared__ __align__(128) char name[]
#endif

/* ---- errors ---- */
void cu_fail(const char *file, int line, const char *what, const char *detail);
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) cu_fail(__FILE__, __LINE__, #x, cudaGetErrorString(e_)); } while (0)
#define CU_LAUNCH() CU(cudaGetLastError())

/* ---- stream, scratch memory ---- */
cudaStream_t cu_stream(void);
/* the largest dynamic shared memory a block may opt in to on this device (bytes) */
int cu_smem_optin(void);
/* Scratch buffers that grow on demand and live until exit. Each op family uses its own slots so
 * that no two live uses overlap; growing synchronizes the stream first. */
enum { WS_IO = 0, WS_RED, WS_RED2, WS_NORM, WS_EMB, WS_EMB2, WS_CLS_LOGITS, WS_CLS_DLOGITS, WS_CLS_ARG,
       WS_COMP_W, WS_COMP_CAT, WS_COMP_DCAT, WS_COMP_DS, WS_COMP_DPOST, WS_COMP_DW, WS_COMP_DA,
       WS_ATT_D, WS_ATT_SINK, WS_ATT_DC, WS_DEC, WS_COV, WS_N };
void *cu_workspace(int slot, size_t bytes);
/* bookkeeping of device memory for benchmarks */
void cu_account(long long delta_bytes);

/* ---- GEMM (cuBLASLt): bf16 inputs, fp32 compute, bf16 or fp32 output ----
 * Row-major: C[M,N] = alpha * op(A) @ op(B) + beta * C, where op(A) is A [M,K] (ta = 0, lda >= K)
 * or A^T with A stored [K,M] (ta = 1, lda >= M); op(B) is B [K,N] (tb = 0, ldb >= N) or B^T with
 * B stored [N,K] (tb = 1, ldb >= K). c_f32: C is fp32 (else bf16). Strided batches: batch > 1
 * with element strides sA, sB, sC. Descriptors and the chosen algorithm are cached per shape. */
void cu_gemm(int ta, int tb, int M, int N, int K, const bf16 *A, int lda, long long sA,
             const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
             float alpha, float beta, int batch);

/* ---- deterministic reductions ---- */
/* out[c] += sum_r in[r * cols + c] (fixed order), in fp32 [rows, cols] in device memory */
void cu_colsum_add(float *out, const float *in, int rows, int cols);

/* ---- ops implemented in the .cu files (pointers of struct Backend) ---- */
void cu_add(act_t *y, const act_t *x, size_t n);
void cu_swiglu_fwd(act_t *h, const act_t *g, const act_t *u, size_t n);
void cu_swiglu_bwd(act_t *dg, act_t *du, const act_t *dh, const act_t *g, const act_t *u, size_t n);
void cu_f32_to_bf16(bf16 *dst, const float *src, size_t n);
void cu_bf16_to_f32(float *dst, const bf16 *src, size_t n);
void cu_embedding_fwd(act_t *out, const int32_t *tokens, const act_t *table, int N, int D);
void cu_embedding_bwd(float *dtable, const int32_t *tokens, const act_t *dout, int N, int D);
void cu_rmsnorm_fwd(act_t *out, float *rstd, const act_t *in, const act_t *w, int rows, int C, float eps);
void cu_rmsnorm_bwd(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                    const float *rstd, int rows, int C, int accumulate);
void cu_matmul_fwd(act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate);
void cu_matmul_bwd(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                   int M, int N, int K, int accumulate);
void cu_rope(act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse);
void cu_attention_fwd(const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                      const act_t *v, const act_t *ck, const act_t *cv, const float *sink);
void cu_attention_bwd(const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, act_t *dck, act_t *dcv,
                      float *dsink, const act_t *dout, const act_t *out, const float *lse,
                      const act_t *q, const act_t *k, const act_t *v, const act_t *ck,
                      const act_t *cv, const float *sink);
void cu_attention_decode(const DecodeAttnShape *s, act_t *out, const act_t *q, const act_t *ck,
                         const act_t *cv, const act_t *k, const act_t *v, const float *sink);
void cu_compressor_fwd(const CompShape *s, act_t *entry, float *alpha, act_t *payload, float *pn_rstd,
                       const act_t *a, const act_t *gate_w, const act_t *gate_b,
                       const act_t *payload_w, const act_t *post_w);
void cu_gate_coverage(const CompShape *s, const float *alpha, float *dalpha, float *per_seq, float grad_scale);
void cu_compressor_bwd(const CompShape *s, act_t *da, float *dgate_w, float *dgate_b, float *dpayload_w,
                       float *dpost_w, const act_t *dentry, const float *alpha, const act_t *payload,
                       const float *pn_rstd, const act_t *a, const act_t *gate_w,
                       const act_t *payload_w, const act_t *post_w, const float *dalpha_extra);
void cu_classifier(const act_t *x, const act_t *emb, const int32_t *targets, int N, int D, int V,
                   float *losses, act_t *dx, float *demb, float grad_scale);
void cu_logits_argmax(const act_t *x, const act_t *emb, int N, int D, int V, int32_t *out);
void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2);
double cu_sumsq(const float *x, size_t n);
void cu_scale(float *x, size_t n, float s);

/* ---- device helpers ---- */
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 1048576u ? 1048576u : (b ? b : 1));
}
__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 tobf(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif
