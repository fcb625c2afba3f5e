/* Internal declarations shared by the CUDA backend's files (kernels/cuda/*.cu).
 *
 * Types: activations and working weights are bf16 (__nv_bfloat16), everything that is summed
 * (master weights, gradients, optimizer state, softmax statistics, losses) is fp32.
 * Every op is enqueued on its backend's stream (ctx->stream); ops never synchronize with the host except
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

/* ---- the backend's context: everything an op needs besides its arguments ----
 * Scratch buffers (workspace) grow on demand and live as long as the backend. Each op family
 * uses its own slots so that no two live uses overlap; growing synchronizes the stream first. */
enum { WS_IO = 0, WS_RED, WS_RED2, WS_NORM, WS_EMB, WS_EMB2, WS_CLS_LOGITS, WS_CLS_DLOGITS, WS_CLS_ARG,
       WS_COMP_W, WS_COMP_CAT, WS_COMP_DCAT, WS_COMP_DS, WS_COMP_DPOST, WS_COMP_DW, WS_COMP_DA,
       WS_ATT_D, WS_ATT_SINK, WS_ATT_DC, WS_ATT_PART, WS_DEC, WS_COV, WS_ATT_SHIFT, WS_COMP_SHIFT, WS_IDX_KL,
       WS_ATT_HSTRIDE, WS_COMP_HSTRIDE, WS_DEC_HSTRIDE,
       WS_BD_ENDS, WS_BD_COUNT, WS_BD_SLOT, WS_BD_P32, WS_BD_DP, WS_BD_DPP, WS_BD_DZ, WS_ATT_ENDS, WS_ATT_COUNT, WS_DEC_ENDS,
       WS_N };   /* *_HSTRIDE: model.head_strides' S_g (§6.4); WS_BD_*, *_ENDS, *_COUNT: learned boundaries (§6.5) */
struct GemmCache;     /* cuBLASLt descriptors + algorithm per GEMM shape (cuda_backend.cu) */
struct AllocTable;    /* sizes of live allocations, for the accounting (cuda_backend.cu) */
struct CudnnState;    /* cuDNN handle, plan cache, workspace (cuda_attention_cudnn.cu) */
struct BackendCtx {
    int device;                    /* the CUDA device; the calling thread's current device */
    cudaStream_t stream;           /* every op is enqueued here */
    int smem_optin;                /* the largest dynamic shared memory a block may opt in to (bytes) */
    void *lt;                      /* cublasLtHandle_t */
    void *lt_ws;                   /* cuBLASLt workspace */
    struct GemmCache *gemm;
    struct AllocTable *allocs;
    struct CudnnState *cudnn;      /* NULL until the first cuDNN attention call */
    void *ws[WS_N];
    size_t ws_cap[WS_N];
    long long mem_now, mem_peak;   /* device bytes through this backend (benchmarks) */
    void *nccl;                    /* ncclComm_t once collectives->init ran */
    const volatile int *nccl_abort; /* the watchdog's flag (collectives->init): non-zero = abort */
    int deterministic;             /* run.deterministic (set_deterministic): bitwise reruns requested */
    struct SubstepTable *substeps; /* sub-step timing (cuda_substeps.cu); NULL until asked for */
};
void *cu_workspace(BackendCtx *ctx, int slot, size_t bytes);
/* n ints of host memory (a shape's grid_shift) in workspace slot `slot` on the device, copied in
 * stream order; NULL for NULL (no shifts). */
const int32_t *cu_device_ints(BackendCtx *ctx, int slot, const int32_t *host, int n);
void cu_account(BackendCtx *ctx, long long delta_bytes);
/* Sub-step timing (kernels/cuda/cuda_substeps.cu): an op calls cu_substep_begin, then
 * cu_substep(ctx, "op.part") after each part; both do nothing unless cuda_backend_substeps
 * turned timing on (then each synchronizes the stream). */
void cu_substep_begin(BackendCtx *ctx);
void cu_substep(BackendCtx *ctx, const char *name);

/* ---- GEMM (cuBLASLt): bf16 inputs, fp32 compute, bf16 or fp32 output ----
 * Row-major: C[M,N] = alpha * op(A) @ op(B) + beta * C, where op(A) is A [M,K] (ta = 0, lda >= K)
 * or A^T with A stored [K,M] (ta = 1, lda >= M); op(B) is B [K,N] (tb = 0, ldb >= N) or B^T with
 * B stored [N,K] (tb = 1, ldb >= K). c_f32: C is fp32 (else bf16). Strided batches: batch > 1
 * with element strides sA, sB, sC. Descriptors and the chosen algorithm are cached per shape. */
void cu_gemm(BackendCtx *ctx, int ta, int tb, int M, int N, int K, const bf16 *A, int lda, long long sA,
             const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
             float alpha, float beta, int batch);

/* ---- deterministic reductions ---- */
/* out[c] += sum_r in[r * cols + c] (fixed order), in fp32 [rows, cols] in device memory */
void cu_colsum_add(BackendCtx *ctx, float *out, const float *in, int rows, int cols);

/* ---- the ops of kernels/ops.def (cu_NAME), and helpers of the .cu files ---- */
extern "C" {
#define OP(ret, op, params, args) ret cu_##op params;
#include "kernels/ops.def"
#undef OP
}
void cu_f32_to_bf16(BackendCtx *ctx, bf16 *dst, const float *src, size_t n);
void cu_bf16_to_f32(BackendCtx *ctx, float *dst, const bf16 *src, size_t n);
/* the device collectives (cuda_comm.cu); NULL without NCCL */
extern const BackendCollectives *cu_collectives;

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
