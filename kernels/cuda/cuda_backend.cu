/* The CUDA backend: registration (backend_cuda), device memory, host transfers, the cuBLASLt
 * GEMM used by every matmul, and the dense matmul ops.
 *
 * Matmuls (row-major, PyTorch Linear):
 *   forward   out [M,N] = in [M,K] @ w[N,K]^T        bf16 out (beta = 1 when accumulating)
 *   backward  din [M,K] = dout [M,N] @ w [N,K]        bf16 out
 *             dw  [N,K] += dout^T @ in                fp32 out, beta = 1 into the fp32 gradient
 * cuBLASLt is column-major, so a row-major C = op(A) op(B) is issued as C^T = op(B)^T op(A)^T,
 * i.e. with A and B swapped. Descriptors, layouts and the heuristic's algorithm are cached per
 * (shape, transposes, strides, output type, pointer alignments); the same call always runs the
 * same algorithm, so results are bitwise reproducible.
 *
 * Memory: every buffer is cudaMalloc'd and zero-filled; transfers are on the backend's stream
 * and synchronous to the caller. Scratch buffers (cu_workspace) grow on demand.
 * peak_flops: dense bf16 tensor-core rate by device name (H100/H200/GH200 989e12, A100 312e12),
 * otherwise SMs x clock x 1024 FLOP/cycle/SM (the Ampere dense bf16 rate per SM). */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cuda_common.h"
extern "C" {
#include "common/errors.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/gpu_peaks.h"
}

static const size_t LT_WS_BYTES = 64u << 20;

void cu_fail(const char *file, int line, const char *what, const char *detail) {
    fprintf(stderr, "phaselab: cuda: %s:%d: %s failed: %s\n", file, line, what, detail);
    fflush(stderr);
    abort();
}

#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { char b_[32]; snprintf(b_, sizeof b_, "cublas status %d", (int)s_); cu_fail(__FILE__, __LINE__, #x, b_); } } while (0)

void cu_account(BackendCtx *ctx, long long delta) {
    ctx->mem_now += delta;
    if (ctx->mem_now > ctx->mem_peak) ctx->mem_peak = ctx->mem_now;
}

/* Peak and current device bytes allocated through the backend (buffers + scratch). */
extern "C" size_t cuda_backend_peak_bytes(const Backend *be) { return (size_t)be->ctx->mem_peak; }
extern "C" size_t cuda_backend_current_bytes(const Backend *be) { return (size_t)be->ctx->mem_now; }
extern "C" void cuda_backend_reset_peak(const Backend *be) { be->ctx->mem_peak = be->ctx->mem_now; }

void *cu_workspace(BackendCtx *ctx, int slot, size_t bytes) {
    if (bytes == 0) bytes = 256;
    if (bytes > ctx->ws_cap[slot]) {
        CU(cudaStreamSynchronize(ctx->stream));
        if (ctx->ws[slot]) { CU(cudaFree(ctx->ws[slot])); cu_account(ctx, -(long long)ctx->ws_cap[slot]); }
        size_t cap = bytes + bytes / 4;
        cap = (cap + 4095) & ~(size_t)4095;
        CU(cudaMalloc(&ctx->ws[slot], cap));
        ctx->ws_cap[slot] = cap;
        cu_account(ctx, (long long)cap);
    }
    return ctx->ws[slot];
}

const int32_t *cu_device_ints(BackendCtx *ctx, int slot, const int32_t *host, int n) {
    if (!host || n <= 0) return NULL;
    int32_t *dev = (int32_t *)cu_workspace(ctx, slot, (size_t)n * sizeof(int32_t));
    CU(cudaMemcpyAsync(dev, host, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));   /* the host array may change after the op returns */
    return dev;
}

/* ---------------- memory ---------------- */
/* sizes of live allocations, for the accounting (small open-addressed table) */
#define ALLOC_SLOTS 65536
struct AllocTable {
    void *ptr[ALLOC_SLOTS];
    size_t size[ALLOC_SLOTS];
};
static size_t hash_ptr(const void *p) { return ((uintptr_t)p >> 8) * 2654435761u % ALLOC_SLOTS; }

void *cu_alloc(BackendCtx *ctx, size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    if (cudaMalloc(&p, bytes) != cudaSuccess) { cudaGetLastError(); return NULL; }
    CU(cudaMemsetAsync(p, 0, bytes, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
    AllocTable *t = ctx->allocs;
    size_t h = hash_ptr(p);
    for (int i = 0; i < ALLOC_SLOTS; i++, h = (h + 1) % ALLOC_SLOTS)
        if (!t->ptr[h] || t->ptr[h] == (void *)1) { t->ptr[h] = p; t->size[h] = bytes; break; }
    cu_account(ctx, (long long)bytes);
    return p;
}

void cu_free(BackendCtx *ctx, void *p) {
    if (!p) return;
    AllocTable *t = ctx->allocs;
    size_t h = hash_ptr(p);
    for (int i = 0; i < ALLOC_SLOTS; i++, h = (h + 1) % ALLOC_SLOTS)
        if (t->ptr[h] == p) {
            cu_account(ctx, -(long long)t->size[h]);
            /* keep the probe chain intact: mark as a tombstone that never matches */
            t->ptr[h] = (void *)1;
            t->size[h] = 0;
            break;
        }
    CU(cudaStreamSynchronize(ctx->stream));
    CU(cudaFree(p));
}

void cu_upload(BackendCtx *ctx, void *dst, const void *src, size_t bytes) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
}
void cu_download(BackendCtx *ctx, void *dst, const void *src, size_t bytes) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
}
void cu_copy(BackendCtx *ctx, void *dst, const void *src, size_t bytes) {
    if (dst != src) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
}
/* dst[r, c] = src[r, c] for r < rows, c < cols (leading dimensions ld_dst, ld_src): the q/k/v split
 * of the fused projection's [N, (H + 2G) d] output and its gather in the backward.
 * Grid: x over column groups, y over rows (a grid-stride loop past 65,535 rows); 32-bit index math
 * but the row offset. E is uint4 (8 bf16, 16-byte accesses) where cols, both leading dimensions and
 * both pointers allow it, else bf16 (2-byte accesses). The first H200 run measured the old
 * one-element-per-thread kernel (64-bit div/mod per element) at 1.0 TB/s: 30 ms a micro-batch at
 * full attention 8 KV heads, 7.7% of the step. */
template <typename E>
__global__ void copy_2d_kernel(E *dst, int ld_dst, const E *src, int ld_src, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) dst[(size_t)r * ld_dst + c] = src[(size_t)r * ld_src + c];
}
template <typename E>
static void copy_2d_launch(BackendCtx *ctx, E *dst, int ld_dst, const E *src, int ld_src, int rows, int cols) {
    const unsigned threads = 128;
    dim3 grid((unsigned)((cols + threads - 1) / threads), (unsigned)(rows < 8192 ? rows : 8192));
    CU_KERNEL(copy_2d_kernel<E>, grid, threads, 0, ctx->stream)(dst, ld_dst, src, ld_src, rows, cols);
    CU_LAUNCH();
}
void cu_copy_2d(BackendCtx *ctx, act_t *dst, int ld_dst, const act_t *src, int ld_src, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const bool vec = cols % 8 == 0 && ld_dst % 8 == 0 && ld_src % 8 == 0 && ((uintptr_t)dst & 15) == 0 &&
                     ((uintptr_t)src & 15) == 0;
    if (vec) copy_2d_launch(ctx, (uint4 *)dst, ld_dst / 8, (const uint4 *)src, ld_src / 8, rows, cols / 8);
    else copy_2d_launch(ctx, (bf16 *)dst, ld_dst, (const bf16 *)src, ld_src, rows, cols);
}
void cu_zero(BackendCtx *ctx, void *dst, size_t bytes) { CU(cudaMemsetAsync(dst, 0, bytes, ctx->stream)); }
void cu_synchronize(BackendCtx *ctx) {
    CU(cudaStreamSynchronize(ctx->stream));
    CU(cudaGetLastError());
}
void cu_upload_act(BackendCtx *ctx, act_t *dst, const float *src, size_t n) {
    float *tmp = (float *)cu_workspace(ctx, WS_IO, n * sizeof(float));
    CU(cudaMemcpyAsync(tmp, src, n * sizeof(float), cudaMemcpyHostToDevice, ctx->stream));
    cu_f32_to_bf16(ctx, (bf16 *)dst, tmp, n);
    CU(cudaStreamSynchronize(ctx->stream));
}
void cu_download_act(BackendCtx *ctx, float *dst, const act_t *src, size_t n) {
    float *tmp = (float *)cu_workspace(ctx, WS_IO, n * sizeof(float));
    cu_bf16_to_f32(ctx, tmp, (const bf16 *)src, n);
    CU(cudaMemcpyAsync(dst, tmp, n * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
    CU(cudaStreamSynchronize(ctx->stream));
}
void cu_cast_params(BackendCtx *ctx, act_t *dst, const float *src, size_t n) { cu_f32_to_bf16(ctx, (bf16 *)dst, src, n); }

/* ---------------- cuBLASLt GEMM with a descriptor cache ---------------- */
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, c_f32, batch;
    long long sA, sB, sC;
    unsigned alA, alB, alC;
} GemmKey;

/* The GEMM plan cache: one cuBLASLt plan per shape (descriptors, layouts and the candidate
 * algorithms the heuristic ranked), looked up by the full key. Capacity GEMM_PLAN_CAP (env
 * PHASELAB_GEMM_PLAN_CAP overrides it, for tests): when full, the least recently used plan is
 * destroyed and its slot reused (a filler sweep at T = 4096 can meet more than 1024 shapes), with
 * one log line the first time. Algorithms: the heuristic is asked for up to GEMM_ALGOS candidates
 * in its order; a launch that fails with the first falls back to the next (one warning a plan),
 * and only when every candidate fails is it an error. */
#define GEMM_PLAN_CAP 1024
#define GEMM_ALGOS 4
typedef struct {
    GemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo[GEMM_ALGOS];   /* the heuristic's candidates, best first */
    size_t ws[GEMM_ALGOS];
    int n_algos, use;                        /* candidates; the one in use (after fallbacks) */
    unsigned long long last_used;            /* the cache's clock at the last lookup (LRU) */
} GemmPlan;

struct GemmCache {
    GemmPlan *plans;                          /* [cap] */
    int n_plans, cap;
    unsigned long long clock;
    long long evictions;
};

static unsigned ptr_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    unsigned a = 256;
    while (a > 2 && (v % a)) a >>= 1;
    return a;
}

static cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t l;
    LT(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (batch > 1) {
        int32_t bc = batch;
        int64_t st = stride;
        LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
    }
    return l;
}

static void plan_destroy(GemmPlan *pl) {
    cublasLtMatrixLayoutDestroy(pl->a);
    cublasLtMatrixLayoutDestroy(pl->b);
    cublasLtMatrixLayoutDestroy(pl->c);
    cublasLtMatmulDescDestroy(pl->op);
    memset(pl, 0, sizeof *pl);
}

/* The slot for a new plan: the next free one, or the least recently used one (destroyed). */
static GemmPlan *plan_slot(GemmCache *cache) {
    if (cache->n_plans < cache->cap) return &cache->plans[cache->n_plans++];
    int lru = 0;
    for (int i = 1; i < cache->n_plans; i++)
        if (cache->plans[i].last_used < cache->plans[lru].last_used) lru = i;
    if (cache->evictions++ == 0)
        fprintf(stderr, "phaselab: cuda: the GEMM plan cache is full (%d shapes): least recently used plans are "
                        "replaced from now on\n", cache->cap);
    plan_destroy(&cache->plans[lru]);
    return &cache->plans[lru];
}

static void plan_make(BackendCtx *ctx, GemmPlan *pl, const GemmKey *key, int ta, int tb, int m, int n, int k, int lda,
                      int ldb, int ldc, long long sA, long long sB, long long sC, int c_f32, int batch) {
    pl->key = *key;
    LT(cublasLtMatmulDescCreate(&pl->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    pl->a = make_layout(CUDA_R_16BF, ta ? k : m, ta ? m : k, lda, batch, sA);
    pl->b = make_layout(CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb, batch, sB);
    pl->c = make_layout(c_f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, ldc, batch, sC);
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = LT_WS_BYTES;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    uint32_t al;
    al = key->alA; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    al = key->alB; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
    al = key->alC; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
    cublasLtMatmulHeuristicResult_t res[GEMM_ALGOS];
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, pl->op, pl->a, pl->b, pl->c, pl->c, pref,
                                                       GEMM_ALGOS, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
        char msg[256];
        snprintf(msg, sizeof msg, "no cuBLASLt algorithm for m=%d n=%d k=%d lda=%d ldb=%d ldc=%d ta=%d tb=%d batch=%d (status %d)",
                 m, n, k, lda, ldb, ldc, ta, tb, batch, (int)st);
        cu_fail(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", msg);
    }
    pl->n_algos = nres < GEMM_ALGOS ? nres : GEMM_ALGOS;
    for (int i = 0; i < pl->n_algos; i++) {
        pl->algo[i] = res[i].algo;
        pl->ws[i] = res[i].workspaceSize;
    }
    pl->use = 0;
}

/* column-major: C[m,n] (ldc) = alpha op(A)[m,k] op(B)[k,n] + beta C */
static void gemm_cm(BackendCtx *ctx, int ta, int tb, int m, int n, int k, const bf16 *A, int lda, long long sA,
                    const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
                    float alpha, float beta, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* C = beta C */
        if (beta == 0.0f) {
            size_t esz = c_f32 ? 4 : 2;
            for (int bi = 0; bi < batch; bi++)
                CU(cudaMemset2DAsync((char *)C + (size_t)bi * sC * esz, (size_t)ldc * esz, 0, (size_t)m * esz, n, ctx->stream));
        }
        return;
    }
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.ta = ta; key.tb = tb; key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldc = ldc;
    key.c_f32 = c_f32; key.batch = batch; key.sA = batch > 1 ? sA : 0; key.sB = batch > 1 ? sB : 0;
    key.sC = batch > 1 ? sC : 0;
    key.alA = ptr_align(A); key.alB = ptr_align(B); key.alC = ptr_align(C);
    GemmCache *cache = ctx->gemm;
    GemmPlan *pl = NULL;
    for (int i = cache->n_plans - 1; i >= 0; i--)
        if (!memcmp(&cache->plans[i].key, &key, sizeof key)) { pl = &cache->plans[i]; break; }
    if (!pl) {
        pl = plan_slot(cache);
        plan_make(ctx, pl, &key, ta, tb, m, n, k, lda, ldb, ldc, sA, sB, sC, c_f32, batch);
    }
    pl->last_used = ++cache->clock;
    for (;;) {
        cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)ctx->lt, pl->op, &alpha, A, pl->a, B, pl->b, &beta, C, pl->c,
                                           C, pl->c, &pl->algo[pl->use], ctx->lt_ws, LT_WS_BYTES, ctx->stream);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        if (pl->use + 1 >= pl->n_algos) {
            char msg[256];
            snprintf(msg, sizeof msg, "every one of %d cuBLASLt algorithms failed for m=%d n=%d k=%d (last status %d)",
                     pl->n_algos, m, n, k, (int)st);
            cu_fail(__FILE__, __LINE__, "cublasLtMatmul", msg);
        }
        fprintf(stderr, "phaselab: cuda: cuBLASLt algorithm %d of %d failed for m=%d n=%d k=%d (status %d): using the next\n",
                pl->use + 1, pl->n_algos, m, n, k, (int)st);
        pl->use++;
    }
}

void cu_gemm(BackendCtx *ctx, int ta, int tb, int M, int N, int K, const bf16 *A, int lda, long long sA,
             const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
             float alpha, float beta, int batch) {
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: swap the operands */
    gemm_cm(ctx, tb, ta, N, M, K, B, ldb, sB, A, lda, sA, C, ldc, sC, c_f32, alpha, beta, batch);
}

void cu_matmul_fwd(BackendCtx *ctx, act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate) {
    cu_gemm(ctx, 0, 1, M, N, K, (const bf16 *)in, K, 0, (const bf16 *)w, K, 0, out, N, 0, 0, 1.0f,
            accumulate ? 1.0f : 0.0f, 1);
}

void cu_matmul_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                   int M, int N, int K, int accumulate) {
    if (din)
        cu_gemm(ctx, 0, 0, M, K, N, (const bf16 *)dout, N, 0, (const bf16 *)w, K, 0, din, K, 0, 0, 1.0f,
                accumulate ? 1.0f : 0.0f, 1);
    if (dw)
        cu_gemm(ctx, 1, 0, N, K, M, (const bf16 *)dout, N, 0, (const bf16 *)in, K, 0, dw, K, 0, 1, 1.0f, 1.0f, 1);
}

/* ---------------- deterministic column sums ---------------- */
/* pass 1: block (32 x 8) owns 32 columns and one chunk of rows; fixed-shape tree over ty */
__global__ void colsum_partial_kernel(float *part, const float *in, int rows, int cols, int rows_per_chunk) {
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk;
    int r1 = min(rows, r0 + rows_per_chunk);
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += in[(size_t)r * cols + c];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float s = 0.0f;
        for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
        part[(size_t)blockIdx.y * cols + c] = s;
    }
}

__global__ void colsum_final_kernel(float *out, const float *part, int nchunk, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int i = 0; i < nchunk; i++) s += part[(size_t)i * cols + c];
    out[c] += s;
}

void cu_colsum_add(BackendCtx *ctx, float *out, const float *in, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    int nchunk = (rows + 63) / 64;
    if (nchunk > 256) nchunk = 256;
    int rpc = (rows + nchunk - 1) / nchunk;
    nchunk = (rows + rpc - 1) / rpc;
    float *part = (float *)cu_workspace(ctx, WS_RED, (size_t)nchunk * cols * sizeof(float));
    dim3 grid((cols + 31) / 32, nchunk);
    CU_KERNEL(colsum_partial_kernel, grid, dim3(32, 8), 0, ctx->stream)(part, in, rows, cols, rpc);
    CU_LAUNCH();
    CU_KERNEL(colsum_final_kernel, (cols + 255) / 256, 256, 0, ctx->stream)(out, part, nchunk, cols);
    CU_LAUNCH();
}

/* ---------------- options ---------------- */
void cu_set_deterministic(BackendCtx *ctx, int on) {
    ctx->deterministic = on;
    /* NCCL reads its environment when a communicator is made (after this call, in the trainer):
     * NVLS reduces inside the NVSwitch, in an order we cannot pin */
    if (on) setenv("NCCL_NVLS_ENABLE", "0", 1);
}

/* ---------------- registration ---------------- */
static double peak_for(const cudaDeviceProp *p, int dev) {
    int clock_khz = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev) != cudaSuccess || clock_khz <= 0) {
        cudaGetLastError();
        clock_khz = 1500000;
    }
    int estimated = 0;
    double peak = gpu_peak_bf16_flops(p->name, p->major, p->multiProcessorCount, clock_khz * 1e3, &estimated);
    if (estimated)
        fprintf(stderr, "phaselab: cuda: %s is not in the peak table (kernels/gpu_peaks.c): MFU uses an estimate of "
                        "%.0f TFLOP/s (SMs x clock)\n", p->name, peak / 1e12);
    return peak;
}

/* One backend per device, made on the first call for it (backends live until exit). */
#define MAX_DEVICES 64
typedef struct CudaBackend {
    Backend be;
    BackendCtx ctx;
} CudaBackend;
static CudaBackend *g_made[MAX_DEVICES];   /* a registry: no op reads it */

extern "C" const Backend *backend_cuda(int device, char *err) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        set_err(err, "cuda: no usable GPU: %s", cudaGetErrorString(e));
        return NULL;
    }
    if (count == 0) { set_err(err, "cuda: no usable GPU: no CUDA device found"); return NULL; }
    if (device < 0) {
        set_err(err, "cuda: device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
        return NULL;
    }
    /* device is the rank's local rank: with fewer visible GPUs than ranks on the node (one GPU
     * per task under Slurm --gpus-per-task=1, or CUDA_VISIBLE_DEVICES per rank) ranks take the
     * visible GPUs round-robin */
    device %= count;
    if (device >= MAX_DEVICES) { set_err(err, "cuda: device %d: at most %d devices", device, MAX_DEVICES); return NULL; }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        set_err(err, "cuda: cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (g_made[device]) return &g_made[device]->be;
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        set_err(err, "cuda: cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return NULL;
    }
    CudaBackend *cb = (CudaBackend *)calloc(1, sizeof *cb);
    GemmCache *gemm = (GemmCache *)calloc(1, sizeof *gemm);
    AllocTable *allocs = (AllocTable *)calloc(1, sizeof *allocs);
    if (gemm) {
        const char *cap = getenv("PHASELAB_GEMM_PLAN_CAP");   /* tests: a small cache that must evict */
        gemm->cap = cap && atoi(cap) > 0 ? atoi(cap) : GEMM_PLAN_CAP;
        gemm->plans = (GemmPlan *)calloc((size_t)gemm->cap, sizeof *gemm->plans);
    }
    if (!cb || !gemm || !gemm->plans || !allocs) {
        if (gemm) free(gemm->plans);
        free(cb); free(gemm); free(allocs);
        set_err(err, "cuda: out of host memory for the backend");
        return NULL;
    }
    BackendCtx *ctx = &cb->ctx;
    ctx->device = device;
    ctx->gemm = gemm;
    ctx->allocs = allocs;
    if (cudaDeviceGetAttribute(&ctx->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
        cudaGetLastError();
        ctx->smem_optin = (int)prop.sharedMemPerBlock;
    }
    const char *fail = NULL;
    char why[ERR_LEN] = "";
    cublasLtHandle_t lt;
    if (prop.major < 8) {
        snprintf(why, sizeof why, "cuda: %s has compute capability %d.%d; bf16 tensor cores need 8.0 or newer",
                 prop.name, prop.major, prop.minor);
        fail = why;
    } else if ((e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(why, sizeof why, "cuda: cudaStreamCreate: %s", cudaGetErrorString(e));
        fail = why;
    } else if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fail = "cuda: cublasLtCreate failed";
    } else if ((ctx->lt = (void *)lt, e = cudaMalloc(&ctx->lt_ws, LT_WS_BYTES)) != cudaSuccess) {
        snprintf(why, sizeof why, "cuda: cannot allocate the cuBLASLt workspace: %s", cudaGetErrorString(e));
        fail = why;
    }
    if (fail) {
        set_err(err, "%s", fail);
        free(cb); free(gemm); free(allocs);
        return NULL;
    }
    cu_account(ctx, (long long)LT_WS_BYTES);

    Backend *b = &cb->be;
    b->name = "cuda";
    b->act_bytes = sizeof(bf16);
    b->peak_flops = peak_for(&prop, device);
    b->device = device;
    memcpy(b->device_uuid, prop.uuid.bytes, sizeof b->device_uuid);
    b->ctx = ctx;
    b->collectives = cu_collectives;
    b->max_head_dim = 128;           /* padded_dim (cuda_attention.cu); the compressor takes 256 */
    b->max_comp_kv_heads = 64;       /* CompSlice sl[64] (cuda_compressor.cu) */
    b->entry_select = 1;             /* attention_fwd/bwd/decode honour the indexer's top-k (docs/spec.md §5.4) */
    b->head_stride = 1;              /* ... and the shapes' head_stride: multi-rate strides (docs/spec.md §6.4) */
    b->boundaries = 1;               /* ... and the shapes' entry ends, with the chunk ops: learned boundaries (§6.5) */
#define OP(ret, op, params, args) b->op = cu_##op;
/* the learned-boundary ops (OPX, docs/spec.md §6.5) are bound too (cuda_boundaries.cu) */
#include "kernels/ops.def"
#undef OP
    g_made[device] = cb;
    return b;
}
