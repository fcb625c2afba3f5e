/* cuemu: cuBLASLt on the host (see include/cublasLt.h).
 * Column-major: element (i, j) of a rows x cols matrix with leading dimension ld is at i + j ld.
 *   op(A)[i, p] = transA ? A[p + i lda] : A[i + p lda]     (i < m, p < k)
 *   op(B)[p, j] = transB ? B[j + p ldb] : B[p + j ldb]     (p < k, j < n)
 *   D[i, j] = alpha sum_p op(A)[i, p] op(B)[p, j] + beta C[i, j]
 * The fp32 product is OpenBLAS's sgemm on the operands widened to fp32; beta C is added after it
 * and D rounded to its type, as cuBLASLt does with fp32 compute. */
#include <stdlib.h>
#include <cblas.h>
#include "cublasLt.h"
#include "cuda_bf16.h"

struct cuemu_lt { int dummy; };
struct cuemu_lt_desc { int ta, tb; };
struct cuemu_lt_layout { cudaDataType_t t; long long rows, cols, ld, batch, stride; };
struct cuemu_lt_pref { size_t ws; };

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new cuemu_lt(); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t scale) {
    if (ct != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new cuemu_lt_desc{0, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
    cublasOperation_t op = *(const cublasOperation_t *)v;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) d->ta = op == CUBLAS_OP_T;
    else if (a == CUBLASLT_MATMUL_DESC_TRANSB) d->tb = op == CUBLAS_OP_T;
    else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows || rows == 0 || cols == 0) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new cuemu_lt_layout{t, (long long)rows, (long long)cols, (long long)ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *v, size_t n) {
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == sizeof(int32_t)) l->batch = *(const int32_t *)v;
    else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == sizeof(int64_t)) l->stride = *(const int64_t *)v;
    else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new cuemu_lt_pref{0}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (n != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        p->ws = *(const uint64_t *)v;
    } else if (n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* shape check shared by the heuristic and the matmul: m, n, k from the layouts */
static bool shape(const cuemu_lt_desc *op, const cuemu_lt_layout *a, const cuemu_lt_layout *b,
                  const cuemu_lt_layout *c, const cuemu_lt_layout *d, long long *m, long long *n, long long *k) {
    long long am = op->ta ? a->cols : a->rows, ak = op->ta ? a->rows : a->cols;
    long long bk = op->tb ? b->cols : b->rows, bn = op->tb ? b->rows : b->cols;
    if (ak != bk || c->rows != am || c->cols != bn || d->rows != c->rows || d->cols != c->cols) return false;
    if (a->batch != c->batch || b->batch != c->batch || d->batch != c->batch) return false;
    if (a->t != b->t || (a->t != CUDA_R_16BF) || (c->t != CUDA_R_16BF && c->t != CUDA_R_32F) || d->t != c->t) return false;
    *m = am; *n = bn; *k = ak;
    return true;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *returned) {
    long long m, n, k;
    *returned = 0;
    if (!shape(op, a, b, c, d, &m, &n, &k)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    /* Like cuBLASLt, up to `requested` candidates ranked best first (3 here, all the same sgemm);
     * candidate i carries its rank in data[0] so that a test can make some fail at launch. */
    int n_cand = requested < 3 ? requested : 3;
    for (int i = 0; i < n_cand; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].algo.data[0] = (uint64_t)i;
        res[i].workspaceSize = 0;
    }
    *returned = n_cand;
    return CUBLAS_STATUS_SUCCESS;
}

/* matrix (rows x cols, leading dimension ld, column-major) of type t -> dense fp32 column-major */
static float *to_f32(const void *p, cudaDataType_t t, long long rows, long long cols, long long ld) {
    float *f = (float *)malloc(sizeof(float) * (size_t)(rows * cols));
    for (long long j = 0; j < cols; j++)
        for (long long i = 0; i < rows; i++)
            f[i + j * rows] = t == CUDA_R_32F ? ((const float *)p)[i + j * ld] : (float)((const __nv_bfloat16 *)p)[i + j * ld];
    return f;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s) {
    long long m, n, k;
    if (!shape(op, a, b, c, d, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
    /* test knob: CUEMU_LT_FAILING_ALGOS=k makes the candidates of rank < k fail at launch, as an
     * algorithm the heuristic offered can fail on real hardware (the backend must fall back) */
    const char *failing = getenv("CUEMU_LT_FAILING_ALGOS");
    if (failing && algo && algo->data[0] < (uint64_t)atoll(failing)) return CUBLAS_STATUS_NOT_SUPPORTED;
    cuemu::DeviceAccess dev;   /* A, B, C, D are device memory */
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t esz = c->t == CUDA_R_32F ? 4 : 2;
    float *out = (float *)malloc(sizeof(float) * (size_t)(m * n));
    for (long long bi = 0; bi < c->batch; bi++) {
        float *fa = to_f32((const char *)A + bi * a->stride * 2, a->t, a->rows, a->cols, a->ld);
        float *fb = to_f32((const char *)B + bi * b->stride * 2, b->t, b->rows, b->cols, b->ld);
        /* OpenBLAS sgemm computes the fp32 product (column-major, dense) */
        cblas_sgemm(CblasColMajor, op->ta ? CblasTrans : CblasNoTrans, op->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, al, fa, (int)a->rows, fb, (int)b->rows, 0.0f, out, (int)m);
        const char *Cb = (const char *)C + bi * c->stride * esz;
        char *Db = (char *)D + bi * d->stride * esz;
        for (long long j = 0; j < n; j++)
            for (long long i = 0; i < m; i++) {
                float r = out[i + j * m];
                if (be != 0.0f) r += be * (c->t == CUDA_R_32F ? ((const float *)Cb)[i + j * c->ld]
                                                             : (float)((const __nv_bfloat16 *)Cb)[i + j * c->ld]);
                if (d->t == CUDA_R_32F) ((float *)Db)[i + j * d->ld] = r;
                else ((__nv_bfloat16 *)Db)[i + j * d->ld] = __nv_bfloat16(r);
            }
        free(fa);
        free(fb);
    }
    free(out);
    return CUBLAS_STATUS_SUCCESS;
}
