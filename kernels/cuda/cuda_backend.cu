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
}

static cudaStream_t g_stream;
static cublasLtHandle_t g_lt;
static void *g_lt_ws;
static const size_t LT_WS_BYTES = 64u << 20;
static int g_ready;
static int g_smem_optin;   /* shared memory a block may opt in to (bytes) */
static Backend g_backend;

static void *g_ws[WS_N];
static size_t g_ws_cap[WS_N];
static long long g_mem_now, g_mem_peak;

void cu_fail(const char *file, int line, const char *what, const char *detail) {
    fprintf(stderr, "phaselab: cuda: %s:%d: %s failed: %s\n", file, line, what, detail);
    fflush(stderr);
    abort();
}

#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { char b_[32]; snprintf(b_, sizeof b_, "cublas status %d", (int)s_); cu_fail(__FILE__, __LINE__, #x, b_); } } while (0)

cudaStream_t cu_stream(void) { return g_stream; }

int cu_smem_optin(void) { return g_smem_optin; }

void cu_account(long long delta) {
    g_mem_now += delta;
    if (g_mem_now > g_mem_peak) g_mem_peak = g_mem_now;
}

/* Peak and current device bytes allocated through the backend (buffers + scratch). */
extern "C" size_t cuda_backend_peak_bytes(void) { return (size_t)g_mem_peak; }
extern "C" size_t cuda_backend_current_bytes(void) { return (size_t)g_mem_now; }
extern "C" void cuda_backend_reset_peak(void) { g_mem_peak = g_mem_now; }
/* The backend's stream, for communication libraries (NCCL) that must run in order with it. */
extern "C" void *cuda_backend_stream(void) { return (void *)g_stream; }

void *cu_workspace(int slot, size_t bytes) {
    if (bytes == 0) bytes = 256;
    if (bytes > g_ws_cap[slot]) {
        CU(cudaStreamSynchronize(g_stream));
        if (g_ws[slot]) { CU(cudaFree(g_ws[slot])); cu_account(-(long long)g_ws_cap[slot]); }
        size_t cap = bytes + bytes / 4;
        cap = (cap + 4095) & ~(size_t)4095;
        CU(cudaMalloc(&g_ws[slot], cap));
        g_ws_cap[slot] = cap;
        cu_account((long long)cap);
    }
    return g_ws[slot];
}

/* ---------------- memory ---------------- */
/* sizes of live allocations, for the accounting (small open-addressed table) */
#define ALLOC_SLOTS 65536
static void *g_alloc_ptr[ALLOC_SLOTS];
static size_t g_alloc_size[ALLOC_SLOTS];
static size_t hash_ptr(const void *p) { return ((uintptr_t)p >> 8) * 2654435761u % ALLOC_SLOTS; }

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    if (cudaMalloc(&p, bytes) != cudaSuccess) { cudaGetLastError(); return NULL; }
    CU(cudaMemsetAsync(p, 0, bytes, g_stream));
    CU(cudaStreamSynchronize(g_stream));
    size_t h = hash_ptr(p);
    for (int i = 0; i < ALLOC_SLOTS; i++, h = (h + 1) % ALLOC_SLOTS)
        if (!g_alloc_ptr[h] || g_alloc_ptr[h] == (void *)1) { g_alloc_ptr[h] = p; g_alloc_size[h] = bytes; break; }
    cu_account((long long)bytes);
    return p;
}

static void cuda_free(void *p) {
    if (!p) return;
    size_t h = hash_ptr(p);
    for (int i = 0; i < ALLOC_SLOTS; i++, h = (h + 1) % ALLOC_SLOTS)
        if (g_alloc_ptr[h] == p) {
            cu_account(-(long long)g_alloc_size[h]);
            /* keep the probe chain intact: mark as a tombstone that never matches */
            g_alloc_ptr[h] = (void *)1;
            g_alloc_size[h] = 0;
            break;
        }
    CU(cudaStreamSynchronize(g_stream));
    CU(cudaFree(p));
}

static void cuda_upload(void *dst, const void *src, size_t bytes) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));
    CU(cudaStreamSynchronize(g_stream));
}
static void cuda_download(void *dst, const void *src, size_t bytes) {
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
}
static void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream));
}
static void cuda_zero(void *dst, size_t bytes) { CU(cudaMemsetAsync(dst, 0, bytes, g_stream)); }
static void cuda_synchronize(void) {
    CU(cudaStreamSynchronize(g_stream));
    CU(cudaGetLastError());
}
static void cuda_upload_act(act_t *dst, const float *src, size_t n) {
    float *tmp = (float *)cu_workspace(WS_IO, n * sizeof(float));
    CU(cudaMemcpyAsync(tmp, src, n * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    cu_f32_to_bf16((bf16 *)dst, tmp, n);
    CU(cudaStreamSynchronize(g_stream));
}
static void cuda_download_act(float *dst, const act_t *src, size_t n) {
    float *tmp = (float *)cu_workspace(WS_IO, n * sizeof(float));
    cu_bf16_to_f32(tmp, (const bf16 *)src, n);
    CU(cudaMemcpyAsync(dst, tmp, n * sizeof(float), cudaMemcpyDeviceToHost, g_stream));
    CU(cudaStreamSynchronize(g_stream));
}
static void cuda_cast_params(act_t *dst, const float *src, size_t n) { cu_f32_to_bf16((bf16 *)dst, src, n); }

/* ---------------- cuBLASLt GEMM with a descriptor cache ---------------- */
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, c_f32, batch;
    long long sA, sB, sC;
    unsigned alA, alB, alC;
} GemmKey;

typedef struct {
    GemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} GemmPlan;

#define MAX_PLANS 1024
static GemmPlan g_plans[MAX_PLANS];
static int g_n_plans;

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

/* column-major: C[m,n] (ldc) = alpha op(A)[m,k] op(B)[k,n] + beta C */
static void gemm_cm(int ta, int tb, int m, int n, int k, const bf16 *A, int lda, long long sA,
                    const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
                    float alpha, float beta, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0) { /* C = beta C */
        if (beta == 0.0f) {
            size_t esz = c_f32 ? 4 : 2;
            for (int bi = 0; bi < batch; bi++)
                CU(cudaMemset2DAsync((char *)C + (size_t)bi * sC * esz, (size_t)ldc * esz, 0, (size_t)m * esz, n, g_stream));
        }
        return;
    }
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.ta = ta; key.tb = tb; key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldc = ldc;
    key.c_f32 = c_f32; key.batch = batch; key.sA = batch > 1 ? sA : 0; key.sB = batch > 1 ? sB : 0;
    key.sC = batch > 1 ? sC : 0;
    key.alA = ptr_align(A); key.alB = ptr_align(B); key.alC = ptr_align(C);
    GemmPlan *pl = NULL;
    for (int i = g_n_plans - 1; i >= 0; i--)
        if (!memcmp(&g_plans[i].key, &key, sizeof key)) { pl = &g_plans[i]; break; }
    if (!pl) {
        if (g_n_plans == MAX_PLANS) cu_fail(__FILE__, __LINE__, "gemm plan cache", "more than 1024 GEMM shapes");
        pl = &g_plans[g_n_plans];
        pl->key = key;
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
        al = key.alA; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
        al = key.alB; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
        al = key.alC; LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, pl->op, pl->a, pl->b, pl->c, pl->c, pref, 1, &res, &nres);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || nres < 1) {
            char msg[256];
            snprintf(msg, sizeof msg, "no cuBLASLt algorithm for m=%d n=%d k=%d lda=%d ldb=%d ldc=%d ta=%d tb=%d batch=%d (status %d)",
                     m, n, k, lda, ldb, ldc, ta, tb, batch, (int)st);
            cu_fail(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", msg);
        }
        pl->algo = res.algo;
        pl->ws = res.workspaceSize;
        g_n_plans++;
    }
    LT(cublasLtMatmul(g_lt, pl->op, &alpha, A, pl->a, B, pl->b, &beta, C, pl->c, C, pl->c, &pl->algo,
                      g_lt_ws, LT_WS_BYTES, g_stream));
}

void cu_gemm(int ta, int tb, int M, int N, int K, const bf16 *A, int lda, long long sA,
             const bf16 *B, int ldb, long long sB, void *C, int ldc, long long sC, int c_f32,
             float alpha, float beta, int batch) {
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: swap the operands */
    gemm_cm(tb, ta, N, M, K, B, ldb, sB, A, lda, sA, C, ldc, sC, c_f32, alpha, beta, batch);
}

void cu_matmul_fwd(act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate) {
    cu_gemm(0, 1, M, N, K, (const bf16 *)in, K, 0, (const bf16 *)w, K, 0, out, N, 0, 0, 1.0f,
            accumulate ? 1.0f : 0.0f, 1);
}

void cu_matmul_bwd(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                   int M, int N, int K, int accumulate) {
    if (din)
        cu_gemm(0, 0, M, K, N, (const bf16 *)dout, N, 0, (const bf16 *)w, K, 0, din, K, 0, 0, 1.0f,
                accumulate ? 1.0f : 0.0f, 1);
    if (dw)
        cu_gemm(1, 0, N, K, M, (const bf16 *)dout, N, 0, (const bf16 *)in, K, 0, dw, K, 0, 1, 1.0f, 1.0f, 1);
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

void cu_colsum_add(float *out, const float *in, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    int nchunk = (rows + 63) / 64;
    if (nchunk > 256) nchunk = 256;
    int rpc = (rows + nchunk - 1) / nchunk;
    nchunk = (rows + rpc - 1) / rpc;
    float *part = (float *)cu_workspace(WS_RED, (size_t)nchunk * cols * sizeof(float));
    dim3 grid((cols + 31) / 32, nchunk);
    CU_KERNEL(colsum_partial_kernel, grid, dim3(32, 8), 0, g_stream)(part, in, rows, cols, rpc);
    CU_LAUNCH();
    CU_KERNEL(colsum_final_kernel, (cols + 255) / 256, 256, 0, g_stream)(out, part, nchunk, cols);
    CU_LAUNCH();
}

/* ---------------- registration ---------------- */
static double peak_for(const cudaDeviceProp *p) {
    const char *n = p->name;
    if (strstr(n, "H100") || strstr(n, "H200") || strstr(n, "GH200") || strstr(n, "H800")) return 989e12;
    if (strstr(n, "A100") || strstr(n, "A800")) return 312e12;
    int clock_khz = 0;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev) != cudaSuccess || clock_khz <= 0) {
        cudaGetLastError();
        clock_khz = 1500000;
    }
    double per_sm = p->major >= 9 ? 2048.0 : 1024.0; /* dense bf16 FLOP per cycle per SM */
    return (double)p->multiProcessorCount * clock_khz * 1e3 * per_sm;
}

extern "C" const Backend *backend_cuda(int device, char *err) {
    if (g_ready) return &g_backend;
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
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        set_err(err, "cuda: cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        set_err(err, "cuda: cudaGetDeviceProperties: %s", cudaGetErrorString(e));
        return NULL;
    }
    if (cudaDeviceGetAttribute(&g_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
        cudaGetLastError();
        g_smem_optin = (int)prop.sharedMemPerBlock;
    }
    if (prop.major < 8) {
        set_err(err, "cuda: %s has compute capability %d.%d; bf16 tensor cores need 8.0 or newer",
                prop.name, prop.major, prop.minor);
        return NULL;
    }
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        set_err(err, "cuda: cudaStreamCreate: %s", cudaGetErrorString(e));
        return NULL;
    }
    if (cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS) { set_err(err, "cuda: cublasLtCreate failed"); return NULL; }
    if ((e = cudaMalloc(&g_lt_ws, LT_WS_BYTES)) != cudaSuccess) {
        set_err(err, "cuda: cannot allocate the cuBLASLt workspace: %s", cudaGetErrorString(e));
        return NULL;
    }
    cu_account((long long)LT_WS_BYTES);

    Backend *b = &g_backend;
    memset(b, 0, sizeof *b);
    b->name = "cuda";
    b->act_bytes = sizeof(bf16);
    b->peak_flops = peak_for(&prop);
    b->alloc = cuda_alloc;
    b->free = cuda_free;
    b->upload = cuda_upload;
    b->download = cuda_download;
    b->zero = cuda_zero;
    b->copy = cuda_copy;
    b->synchronize = cuda_synchronize;
    b->upload_act = cuda_upload_act;
    b->download_act = cuda_download_act;
    b->cast_params = cuda_cast_params;
    b->add = cu_add;
    b->swiglu_fwd = cu_swiglu_fwd;
    b->swiglu_bwd = cu_swiglu_bwd;
    b->embedding_fwd = cu_embedding_fwd;
    b->embedding_bwd = cu_embedding_bwd;
    b->rmsnorm_fwd = cu_rmsnorm_fwd;
    b->rmsnorm_bwd = cu_rmsnorm_bwd;
    b->matmul_fwd = cu_matmul_fwd;
    b->matmul_bwd = cu_matmul_bwd;
    b->rope = cu_rope;
    b->attention_fwd = cu_attention_fwd;
    b->attention_bwd = cu_attention_bwd;
    b->attention_decode = cu_attention_decode;
    b->compressor_fwd = cu_compressor_fwd;
    b->compressor_bwd = cu_compressor_bwd;
    b->gate_coverage = cu_gate_coverage;   /* SPEC.md 2b penalty (aligned grids) */
    b->classifier = cu_classifier;
    b->logits_argmax = cu_logits_argmax;
    b->adamw = cu_adamw;
    b->sumsq = cu_sumsq;
    b->scale = cu_scale;
    g_ready = 1;
    return b;
}
