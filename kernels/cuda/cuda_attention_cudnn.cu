/* cuDNN fused scaled-dot-product attention (forward and backward) for the full causal case of
 * the CUDA backend, through the cuDNN backend (graph) C API. The caller (cu_attention_fwd/bwd in
 * cuda_attention.cu) tries these first and runs the custom kernels when they return 0.
 *
 * ---- math (docs/spec.md §1; one (b, h) at a time, KV head g = h / (H/G)) ----
 *   S = Q K^T / sqrt(d)                              [T, T]
 *   S_ts = -inf for s > t                            (causal: query t sees keys s <= t)
 *   lse_t = log sum_s exp(S_ts)                      (natural log, scale included)
 *   P = exp(S - lse)                                 (row softmax)
 *   O = P V
 * backward, with dO given:
 *   D_t  = rowsum(dO o O)_t = sum_x dO_tx O_tx
 *   dP   = dO V^T
 *   dS   = P o (dP - D)                              (D broadcast along the row)
 *   dQ   = dS K / sqrt(d),   dK = dS^T Q / sqrt(d),  dV = P^T dO
 * With GQA the H/G query heads of a group add their dK, dV into their shared KV head.
 *
 * ---- our tensors (row-major, bf16 unless said) ----
 *   q, out, dout, dq  [B,T,H,d]      k, v, dk, dv  [B,T,G,d]      lse [B,T,H] fp32
 * lse is exactly what the custom forward stores (max + log of the sum, natural log, of the scaled
 * scores), so either backward can consume either forward's lse.
 * Outputs: forward writes out and lse; backward OVERWRITES dq, dk, dv (as the custom kernels do;
 * nothing is accumulated).
 *
 * ---- cuDNN's view: 4-D [batch, head, row, col] tensors with explicit strides ----
 *   Q, O, dO, dQ   dims [B,H,T,d]  strides [T*H*d, d, H*d, 1]   (our [B,T,H,d] memory, no copy)
 *   K as K^T       dims [B,G,d,T]  strides [T*G*d, d, 1, G*d]
 *   V (forward)    dims [B,G,T,d]  strides [T*G*d, d, G*d, 1]
 *   V^T (backward) dims [B,G,d,T]  strides [T*G*d, d, 1, G*d]
 *   dK, dV         dims [B,G,T,d]  strides [T*G*d, d, G*d, 1]
 *   Stats          dims [B,H,T,1]  packed, fp32 (cuDNN's "softmax stats" = lse; before 9.26 the
 *                  fused engines only accept a packed BHS layout, so we keep our own [B,H,T]
 *                  copy in the workspace and transpose to / from lse [B,T,H] with tiny kernels)
 *   G < H is expressed natively: the K/V operands of the matmuls have G heads where Q has H;
 *   cuDNN broadcasts each KV head over its group of consecutive query heads, which is our
 *   h / (H/G) mapping.
 *
 * ---- tensor UIDs (variant pack) ----
 *   1 Q   2 K(^T)   3 V / V^T   4 O   5 Stats   6 dO   7 dQ   8 dK   9 dV
 *   10 attention scale (fp32 by value, 1/sqrt(d))   11 mask value (fp32 by value, -inf)
 *   12 one (fp32 by value, 1.0)   13 softmax_sum D [B,H,T,1] fp32 (backward, our workspace)
 *   100...  virtual (intermediate) tensors, numbered in creation order
 *
 * ---- the graphs (the pattern the fused flash-attention engines of cuDNN 9 recognise; the same
 *      node sequence cudnn-frontend 1.x lowers its composite SDPA node to for cuDNN < 9.21) ----
 * forward (14 nodes):
 *   S   = matmul(Q, K^T)                 fp32 virtual [B,H,T,T]
 *   S1  = S * scale                      pointwise MUL (scale by value)
 *   row = gen_index(S1, axis 2), col = gen_index(S1, axis 3)         int32
 *   keep = row >= col                    pointwise CMP_GE -> boolean
 *   S2  = keep ? S1 : -inf               pointwise BINARY_SELECT
 *   M   = reduce_max(S2) [B,H,T,1];  E = exp(S2 - M);  Z = reduce_add(E)
 *   Stats = M + log(Z)                   (output, fp32 [B,H,T,1])
 *   P   = E / Z                          bf16 virtual (the second matmul's A type is the I/O type)
 *   O   = matmul(P, V)
 * backward (21 nodes, 23 with GQA):
 *   D   = reduce_add(dO * O) * 1.0       -> softmax_sum (non-virtual, our workspace; the "* 1.0"
 *                                           is the dropout-scale slot the engine expects)
 *   S   = matmul(Q, K^T) * scale - Stats, causal mask as above, P = exp(.)
 *   dV  = matmul(reshape(P) = P^T as bf16, dO)                 (GQA: [B,H,T,d] then reduce_add
 *                                                               over each head group into dV)
 *   dS  = (matmul(dO, V^T) - D) * P * scale
 *   dK  = matmul(reshape(dS) = dS^T as bf16, Q)                (GQA: reduce_add as for dV)
 *   dQ  = matmul(dS, reshape(K^T) = K)                         (written straight to dQ, bf16)
 * Checked without a GPU (tests/gpu/cudnn_graph_check.cu --offline, cuDNN 9.19 with device properties of
 * sm_80 / sm_90 / sm_100 and the driver stub): every descriptor finalizes, and heuristics mode A
 * offers the fused flash-attention engines for both graphs (forward: engines 1, 2 (sm_90), 3
 * (sm_100); backward: engine 6 (sm_90), 7), which pass their support checks and get as far as
 * loading the compiled kernels, for MHA and GQA, T = 1 ... 4096, T not a multiple of 64, d = 32 ...
 * 128. The backward engines report a workspace of B*H*T*T*2 bytes (+ B*H*T*d*4 with GQA): the
 * materialised dP of the deterministic variant (with a dQ_accum tensor the same engines ask for
 * almost none).
 *
 * ---- choices ----
 * - Built once per (direction, B, T, H, G, d): the finalized execution plan, its workspace size
 *   and every descriptor it references live in a fixed cache of 32 entries for the life of the
 *   process. A shape that failed is cached too (one stderr line, then silently 0).
 * - Engines: heuristics mode A, then FALLBACK; the first engine config that finalizes and whose
 *   numerical notes do not include CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC is used. (The fused
 *   attention engines report only TENSOR_CORE, with or without dQ_accum, so this is a guard,
 *   not the determinism mechanism.)
 * - Determinism. Forward: flash-attention forward has no cross-block reduction. Backward: the
 *   graph writes dQ straight from the dS K matmul, WITHOUT the fp32 "dQ_accum" workspace tensor
 *   cuDNN uses for its atomic (run-to-run varying) dQ accumulation; this is the form
 *   cudnn-frontend builds when a deterministic backward is requested on Hopper (the engine then
 *   materialises dP in its workspace, B*H*T^2*2 bytes, and reduces in a fixed order). cuDNN
 *   exposes no "deterministic" attribute for this fused engine (CUDNN_ATTR_REDUCTION_
 *   IS_DETERMINISTIC is for stand-alone reductions) and on Blackwell cudnn-frontend pins specific
 *   engine knobs for determinism, which we do not. So we cannot guarantee it from the API alone:
 *     * the backward is ON unless bitwise reruns are requested (run.deterministic = true, the
 *       backend's set_deterministic) or PHASELAB_CUDNN_ATTN_BWD=0; then the custom backward runs,
 *       fed by the cuDNN forward's lse, which has the same meaning;
 *     * every plan (forward and backward) is run twice on its first call and its outputs compared
 *       bit for bit; a difference disables cuDNN for that shape (one stderr line). Two equal runs
 *       make a nondeterministic engine unlikely, not impossible.
 * - PHASELAB_ATTN=custom disables this path (checked on every call). PHASELAB_CUDNN_ATTN_VERBOSE=1
 *   prints the chosen engine and workspace per plan.
 * - Failures while building (unsupported shape, finalize error, no engine, workspace allocation)
 *   print "phaselab: cuDNN fused attention unavailable for this shape (<reason>); using the custom
 *   kernels" once per shape and direction and return 0. So do failures at execution (a cuDNN
 *   status other than success): the custom kernels then compute the call's outputs.
 * - Requirements checked up front: cuDNN >= 9.0 at run time (not 9.10.0/9.10.1, whose fused
 *   forward cudnn-frontend blocks), sm >= 80, H % G == 0, d % 8 == 0, d <= 128 (256 on sm90),
 *   backward with cuDNN <= 9.15 only for T % 128 == 0 (older backends need a padding-mask
 *   workaround we do not build), 16-byte aligned q, k, v, out (dout, dq, dk, dv).
 * - Workspace: one cudaMalloc'd buffer of our own, grown on demand (stream synchronised first,
 *   cu_account bookkeeping) and kept at its largest size: [cuDNN plan workspace | Stats B*H*T fp32
 *   | softmax_sum B*H*T fp32]. With the backward on, the plan workspace is the dP above (e.g.
 *   B=4, T=4096, H=16: 2 GiB); when it cannot be allocated the shape falls back, as above.
 * - Host side is single-threaded, like the rest of the backend.
 *
 * Under PHASELAB_CUEMU (the CPU emulation build, no cudnn.h), and in a CUDA build without cuDNN
 * (tools/configure found none: no PHASELAB_CUDNN), both functions are stubs that return 0, so
 * full attention runs on the custom kernels. */
#include "kernels/cuda/cuda_attention_cudnn.h"

#if defined(PHASELAB_CUEMU) || !defined(PHASELAB_CUDNN)

int cu_cudnn_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                           const act_t *v) {
    (void)s; (void)out; (void)lse; (void)q; (void)k; (void)v;
    return 0;
}

int cu_cudnn_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, const act_t *dout,
                           const act_t *out, const float *lse, const act_t *q, const act_t *k,
                           const act_t *v) {
    (void)s; (void)dq; (void)dk; (void)dv; (void)dout; (void)out; (void)lse; (void)q; (void)k; (void)v;
    return 0;
}

#else /* real implementation */

#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    UID_Q = 1, UID_K = 2, UID_V = 3, UID_O = 4, UID_STATS = 5, UID_DO = 6, UID_DQ = 7, UID_DK = 8,
    UID_DV = 9, UID_SCALE = 10, UID_MASK = 11, UID_ONE = 12, UID_SOFTMAX_SUM = 13, UID_VIRTUAL0 = 100
};
enum { KIND_FWD = 0, KIND_BWD = 1 };

#define CDNN(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) cu_fail(__FILE__, __LINE__, #x, cudnnGetErrorString(s_)); } while (0)

/* ======================= the backend's cuDNN state (ctx->cudnn) ======================= */
struct Entry;
struct CudnnState {
    int state;                   /* 0 not initialised, 1 ready, -1 unavailable on this backend */
    cudnnHandle_t handle;
    size_t version;              /* cudnnGetVersion(), e.g. 91900 */
    int sm;                      /* compute capability, major * 10 + minor */
    void *ws;                    /* our workspace */
    size_t ws_cap;
    Entry *cache;                /* [MAX_ENTRIES] plans */
};
static CudnnState *state_of(BackendCtx *ctx);

static bool env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && strcmp(e, value) == 0;
}

static bool ready(BackendCtx *ctx) {
    if (state_of(ctx)->state) return state_of(ctx)->state > 0;
    state_of(ctx)->state = -1;
    char why[160] = "";
    int dev = 0, major = 0, minor = 0;
    state_of(ctx)->version = cudnnGetVersion();
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, sizeof why, "cannot query the device");
    } else if (state_of(ctx)->version < 90000) {
        snprintf(why, sizeof why, "cuDNN %zu is older than 9.0", state_of(ctx)->version);
    } else if (major < 8) {
        snprintf(why, sizeof why, "sm_%d%d is older than sm_80", major, minor);
    } else {
        cudnnStatus_t st = cudnnCreate(&state_of(ctx)->handle);
        if (st != CUDNN_STATUS_SUCCESS) snprintf(why, sizeof why, "cudnnCreate: %s", cudnnGetErrorString(st));
    }
    if (why[0]) {
        fprintf(stderr, "phaselab: cuDNN fused attention unavailable (%s); using the custom kernels\n", why);
        fflush(stderr);
        return false;
    }
    state_of(ctx)->sm = major * 10 + minor;
    state_of(ctx)->state = 1;
    return true;
}

/* Our workspace, grown on demand; NULL (and the CUDA error cleared) when it cannot grow. */
static void *workspace(BackendCtx *ctx, size_t bytes) {
    if (bytes == 0) bytes = 256;
    if (bytes <= state_of(ctx)->ws_cap) return state_of(ctx)->ws;
    CU(cudaStreamSynchronize(ctx->stream));
    if (state_of(ctx)->ws) {
        CU(cudaFree(state_of(ctx)->ws));
        cu_account(ctx, -(long long)state_of(ctx)->ws_cap);
        state_of(ctx)->ws = NULL;
        state_of(ctx)->ws_cap = 0;
    }
    size_t cap = (bytes + bytes / 4 + 4095) & ~(size_t)4095;
    if (cudaMalloc(&state_of(ctx)->ws, cap) != cudaSuccess) {
        (void)cudaGetLastError();
        cap = (bytes + 4095) & ~(size_t)4095;
        if (cudaMalloc(&state_of(ctx)->ws, cap) != cudaSuccess) {
            (void)cudaGetLastError();
            state_of(ctx)->ws = NULL;
            return NULL;
        }
    }
    state_of(ctx)->ws_cap = cap;
    cu_account(ctx, (long long)cap);
    return state_of(ctx)->ws;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ======================= graph building ======================= */
#define MAX_DESCS 640
#define MAX_OPS 32

/* Every descriptor created for one graph (destroyed together on failure, kept with the plan on
 * success), the operation nodes in topological order, and the first failure. */
struct Graph {
    cudnnBackendDescriptor_t all[MAX_DESCS];
    int n_all;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int n_ops;
    int64_t next_uid;
    cudnnStatus_t st;
    char what[112];
};

struct Shape4 {
    int64_t dim[4], stride[4];
};

static Shape4 strided(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2,
                      int64_t s3) {
    Shape4 s = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return s;
}

static Shape4 packed(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return strided(d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3, 1);
}

static bool g_ok(const Graph *g) { return g->st == CUDNN_STATUS_SUCCESS; }

static void g_fail(Graph *g, cudnnStatus_t st, const char *what) {
    if (!g_ok(g)) return;
    g->st = st;
    snprintf(g->what, sizeof g->what, "%s", what);
}

static cudnnBackendDescriptor_t g_new(Graph *g, cudnnBackendDescriptorType_t type, const char *what) {
    if (!g_ok(g)) return NULL;
    if (g->n_all == MAX_DESCS) {
        g_fail(g, CUDNN_STATUS_NOT_SUPPORTED, "too many descriptors");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        g_fail(g, st, what);
        return NULL;
    }
    g->all[g->n_all++] = d;
    return d;
}

static void g_set(Graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count, const void *value, const char *what) {
    if (!g_ok(g)) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) g_fail(g, st, what);
}
#define SET(g, d, name, type, count, value) g_set(g, d, name, type, count, value, #name)

static void g_finalize(Graph *g, cudnnBackendDescriptor_t d, const char *what) {
    if (!g_ok(g)) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) g_fail(g, st, what);
}

static void g_add_op(Graph *g, cudnnBackendDescriptor_t op) {
    if (!g_ok(g)) return;
    if (g->n_ops == MAX_OPS) {
        g_fail(g, CUDNN_STATUS_NOT_SUPPORTED, "too many operations");
        return;
    }
    g->ops[g->n_ops++] = op;
}

static cudnnBackendDescriptor_t g_tensor(Graph *g, int64_t uid, cudnnDataType_t type, Shape4 s, bool is_virtual,
                                         bool by_value) {
    cudnnBackendDescriptor_t t = g_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    int64_t alignment = 16;
    SET(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    SET(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim);
    SET(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.stride);
    SET(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    SET(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) SET(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    g_finalize(g, t, "tensor finalize");
    return t;
}

static cudnnBackendDescriptor_t g_virtual(Graph *g, cudnnDataType_t type, Shape4 s) {
    return g_tensor(g, g->next_uid++, type, s, true, false);
}

/* y = mode(x[, b[, t]]) with math precision prec; axis only for GEN_INDEX. */
static void g_pointwise(Graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                        int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = g_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    SET(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) SET(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    g_finalize(g, pw, "pointwise descriptor finalize");

    cudnnBackendDescriptor_t op = g_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    float alpha = 1.0f;
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    g_finalize(g, op, "pointwise operation finalize");
    g_add_op(g, op);
}

/* c = a @ b over the last two dims, batch dims broadcast (GQA), fp32 accumulation. */
static void g_matmul(Graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = g_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    SET(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    g_finalize(g, mm, "matmul descriptor finalize");

    cudnnBackendDescriptor_t op = g_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    g_finalize(g, op, "matmul operation finalize");
    g_add_op(g, op);
}

/* y = reduce(x) over the dims where y has extent 1 (or a group of heads: [B,H,..] -> [B,G,..]). */
static void g_reduction(Graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = g_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    SET(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    SET(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    g_finalize(g, rd, "reduction descriptor finalize");

    cudnnBackendDescriptor_t op = g_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    g_finalize(g, op, "reduction operation finalize");
    g_add_op(g, op);
}

/* y = x seen through y's dims and strides (used for transposes). */
static void g_reshape(Graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = g_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    g_finalize(g, op, "reshape operation finalize");
    g_add_op(g, op);
}

/* Causal mask on scores x [B,H,T,T]: keep (row >= col), else mask_value (-inf). */
static cudnnBackendDescriptor_t g_causal_mask(Graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t mask_value,
                                              Shape4 s) {
    cudnnBackendDescriptor_t row = g_virtual(g, CUDNN_DATA_INT32, s);
    g_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    cudnnBackendDescriptor_t col = g_virtual(g, CUDNN_DATA_INT32, s);
    g_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = g_virtual(g, CUDNN_DATA_BOOLEAN, s);
    g_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep);
    cudnnBackendDescriptor_t y = g_virtual(g, CUDNN_DATA_FLOAT, s);
    g_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, mask_value, keep, y);
    return y;
}

static void g_destroy(Graph *g) {
    for (int i = g->n_all - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->all[i]);
    g->n_all = 0;
}

/* The cuDNN error detail of the last failing call, on one line. */
static void last_error(char *buf, size_t n) {
    buf[0] = 0;
    cudnnGetLastErrorString(buf, n);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

/* ======================= plan cache ======================= */
#define MAX_ENTRIES 32

struct Entry {
    int used, kind, B, T, H, G, d;
    int state;                        /* 1 ready, -1 unsupported */
    int checked;                      /* run-to-run self check done */
    cudnnBackendDescriptor_t plan;
    int64_t plan_ws;                  /* bytes of cuDNN workspace the plan needs */
    cudnnBackendDescriptor_t *descs;  /* everything the plan references, kept alive */
    int n_descs;
    float scale, mask_value, one;     /* by-value scalars (their addresses go in the variant pack) */
};

/* The state, made on first use (zero: not initialised). Aborts when host memory is out. */
static CudnnState *state_of(BackendCtx *ctx) {
    if (!ctx->cudnn) {
        CudnnState *state = (CudnnState *)calloc(1, sizeof *state);
        Entry *cache = (Entry *)calloc(MAX_ENTRIES, sizeof *cache);
        if (!state || !cache) cu_fail(__FILE__, __LINE__, "calloc", "out of host memory for the cuDNN state");
        state->cache = cache;
        ctx->cudnn = state;
    }
    return ctx->cudnn;
}

static void describe(const Entry *e, char *buf, size_t n) {
    snprintf(buf, n, "%s B=%d T=%d H=%d G=%d d=%d", e->kind == KIND_FWD ? "forward" : "backward", e->B, e->T, e->H,
             e->G, e->d);
}

static void unavailable(Entry *e, const char *reason) {
    char shape[96];
    describe(e, shape, sizeof shape);
    fprintf(stderr, "phaselab: cuDNN fused attention unavailable for this shape (%s: %s); using the custom kernels\n",
            shape, reason);
    fflush(stderr);
    e->state = -1;
}

/* Heuristics (mode A, then FALLBACK) -> first engine config that is not marked nondeterministic and
 * whose execution plan finalizes. NULL with why filled when there is none. */
static cudnnBackendDescriptor_t make_plan(BackendCtx *ctx, Graph *g, int64_t *plan_ws, int64_t *engine_index, char *why, size_t why_n) {
    cudnnBackendDescriptor_t op_graph = g_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    SET(g, op_graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    SET(g, op_graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &state_of(ctx)->handle);
    g_finalize(g, op_graph, "operation graph finalize");
    if (!g_ok(g)) {
        char detail[160];
        last_error(detail, sizeof detail);
        snprintf(why, why_n, "%s: %s %s", g->what, cudnnGetErrorString(g->st), detail);
        return NULL;
    }

    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int n_configs = 0, n_nondeterministic = 0;
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    char last_what[64] = "heuristics returned no engine config", detail[160] = "";
    for (int m = 0; m < 2 && g_ok(g); m++) {
        cudnnBackendDescriptor_t heur = g_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        if (!heur) break;
        cudnnStatus_t st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op_graph);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(heur);
        int64_t count = 0;
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                          NULL);
        if (st != CUDNN_STATUS_SUCCESS) {
            last = st;
            snprintf(last_what, sizeof last_what, "heuristics");
            last_error(detail, sizeof detail);
            continue;
        }
        if (count > 24) count = 24;
        cudnnBackendDescriptor_t cfgs[24];
        for (int64_t i = 0; i < count; i++) cfgs[i] = g_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (!g_ok(g) || count == 0) continue;
        int64_t got = 0;
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                      cfgs);
        if (st != CUDNN_STATUS_SUCCESS) {
            last = st;
            snprintf(last_what, sizeof last_what, "heuristics results");
            last_error(detail, sizeof detail);
            continue;
        }
        for (int64_t i = 0; i < got && g_ok(g); i++) {
            n_configs++;
            /* skip engines that say they are nondeterministic */
            cudnnBackendDescriptor_t engine = g_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
            if (!engine) break;
            int64_t n = 0, index = -1;
            st = cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                          &engine);
            if (st != CUDNN_STATUS_SUCCESS) {
                last = st;
                snprintf(last_what, sizeof last_what, "engine of a config");
                last_error(detail, sizeof detail);
                continue;
            }
            cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
            int64_t n_notes = 0;
            bool nondeterministic = false;
            if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes, notes) == CUDNN_STATUS_SUCCESS)
                for (int64_t j = 0; j < n_notes && j < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; j++)
                    if (notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) nondeterministic = true;
            if (nondeterministic) {
                n_nondeterministic++;
                continue;
            }
            (void)cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);

            cudnnBackendDescriptor_t plan = g_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
            if (!plan) break;
            st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &state_of(ctx)->handle);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan);
            int64_t ws = 0;
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                              &ws);
            if (st != CUDNN_STATUS_SUCCESS) {
                last = st;
                snprintf(last_what, sizeof last_what, "execution plan of engine %lld", (long long)index);
                last_error(detail, sizeof detail);
                continue;
            }
            *plan_ws = ws < 0 ? 0 : ws;
            *engine_index = index;
            return plan;
        }
    }
    if (!g_ok(g))
        snprintf(why, why_n, "%s: %s", g->what, cudnnGetErrorString(g->st));
    else if (n_configs > 0 && n_nondeterministic == n_configs)
        snprintf(why, why_n, "only engines marked nondeterministic (%d)", n_nondeterministic);
    else
        snprintf(why, why_n, "no engine: %d configs, %d nondeterministic; %s: %s %s", n_configs, n_nondeterministic,
                 last_what, last == CUDNN_STATUS_SUCCESS ? "-" : cudnnGetErrorString(last), detail);
    return NULL;
}

/* forward graph, see the header comment */
static void build_fwd_graph(Graph *g, const Entry *e) {
    const int64_t B = e->B, T = e->T, H = e->H, G = e->G, d = e->d;
    const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT;
    const Shape4 s_q = strided(B, H, T, d, T * H * d, d, H * d, 1);
    const Shape4 s_kt = strided(B, G, d, T, T * G * d, d, 1, G * d);
    const Shape4 s_kv = strided(B, G, T, d, T * G * d, d, G * d, 1);
    const Shape4 s_row = packed(B, H, T, 1), s_tt = packed(B, H, T, T), s_1 = packed(1, 1, 1, 1);

    cudnnBackendDescriptor_t Q = g_tensor(g, UID_Q, BF, s_q, false, false);
    cudnnBackendDescriptor_t KT = g_tensor(g, UID_K, BF, s_kt, false, false);
    cudnnBackendDescriptor_t V = g_tensor(g, UID_V, BF, s_kv, false, false);
    cudnnBackendDescriptor_t O = g_tensor(g, UID_O, BF, s_q, false, false);
    cudnnBackendDescriptor_t STATS = g_tensor(g, UID_STATS, F, s_row, false, false);
    cudnnBackendDescriptor_t SCALE = g_tensor(g, UID_SCALE, F, s_1, false, true);
    cudnnBackendDescriptor_t MASK = g_tensor(g, UID_MASK, F, s_1, false, true);

    cudnnBackendDescriptor_t S = g_virtual(g, F, s_tt);
    g_matmul(g, Q, KT, S);
    cudnnBackendDescriptor_t S1 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, S, SCALE, NULL, S1);
    cudnnBackendDescriptor_t S2 = g_causal_mask(g, S1, MASK, s_tt);
    /* softmax with stats */
    cudnnBackendDescriptor_t M = g_virtual(g, F, s_row);
    g_reduction(g, CUDNN_REDUCE_TENSOR_MAX, S2, M);
    cudnnBackendDescriptor_t S3 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_SUB, F, S2, M, NULL, S3);
    cudnnBackendDescriptor_t E = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_EXP, F, S3, NULL, NULL, E);
    cudnnBackendDescriptor_t Z = g_virtual(g, F, s_row);
    g_reduction(g, CUDNN_REDUCE_TENSOR_ADD, E, Z);
    cudnnBackendDescriptor_t LZ = g_virtual(g, F, s_row);
    g_pointwise(g, CUDNN_POINTWISE_LOG, F, Z, NULL, NULL, LZ);
    g_pointwise(g, CUDNN_POINTWISE_ADD, F, M, LZ, NULL, STATS);
    cudnnBackendDescriptor_t P = g_virtual(g, BF, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_DIV, F, E, Z, NULL, P);
    g_matmul(g, P, V, O);
}

/* backward graph, see the header comment */
static void build_bwd_graph(Graph *g, const Entry *e) {
    const int64_t B = e->B, T = e->T, H = e->H, G = e->G, d = e->d;
    const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT;
    const Shape4 s_q = strided(B, H, T, d, T * H * d, d, H * d, 1);
    const Shape4 s_kt = strided(B, G, d, T, T * G * d, d, 1, G * d);   /* K^T and V^T */
    const Shape4 s_kv = strided(B, G, T, d, T * G * d, d, G * d, 1);   /* dK, dV, K */
    const Shape4 s_row = packed(B, H, T, 1), s_tt = packed(B, H, T, T), s_1 = packed(1, 1, 1, 1);
    const Shape4 s_tt_t = strided(B, H, T, T, H * T * T, T * T, 1, T);   /* [.., s, t] view of [.., t, s] */
    const Shape4 s_hd = packed(B, H, T, d);

    cudnnBackendDescriptor_t Q = g_tensor(g, UID_Q, BF, s_q, false, false);
    cudnnBackendDescriptor_t KT = g_tensor(g, UID_K, BF, s_kt, false, false);
    cudnnBackendDescriptor_t VT = g_tensor(g, UID_V, BF, s_kt, false, false);
    cudnnBackendDescriptor_t O = g_tensor(g, UID_O, BF, s_q, false, false);
    cudnnBackendDescriptor_t STATS = g_tensor(g, UID_STATS, F, s_row, false, false);
    cudnnBackendDescriptor_t DO = g_tensor(g, UID_DO, BF, s_q, false, false);
    cudnnBackendDescriptor_t DQ = g_tensor(g, UID_DQ, BF, s_q, false, false);
    cudnnBackendDescriptor_t DK = g_tensor(g, UID_DK, BF, s_kv, false, false);
    cudnnBackendDescriptor_t DV = g_tensor(g, UID_DV, BF, s_kv, false, false);
    cudnnBackendDescriptor_t SCALE = g_tensor(g, UID_SCALE, F, s_1, false, true);
    cudnnBackendDescriptor_t MASK = g_tensor(g, UID_MASK, F, s_1, false, true);
    cudnnBackendDescriptor_t ONE = g_tensor(g, UID_ONE, F, s_1, false, true);
    cudnnBackendDescriptor_t SSUM = g_tensor(g, UID_SOFTMAX_SUM, F, s_row, false, false);

    /* D = rowsum(dO o O) */
    cudnnBackendDescriptor_t DOO = g_virtual(g, F, s_hd);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, DO, O, NULL, DOO);
    cudnnBackendDescriptor_t D_ROWSUM = g_virtual(g, F, s_row);
    g_reduction(g, CUDNN_REDUCE_TENSOR_ADD, DOO, D_ROWSUM);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, D_ROWSUM, ONE, NULL, SSUM);

    /* P = exp(Q K^T * scale - lse), causal */
    cudnnBackendDescriptor_t S = g_virtual(g, F, s_tt);
    g_matmul(g, Q, KT, S);
    cudnnBackendDescriptor_t S1 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, S, SCALE, NULL, S1);
    cudnnBackendDescriptor_t S2 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_SUB, F, S1, STATS, NULL, S2);
    cudnnBackendDescriptor_t S3 = g_causal_mask(g, S2, MASK, s_tt);
    cudnnBackendDescriptor_t P = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_EXP, F, S3, NULL, NULL, P);

    /* dV = P^T dO */
    cudnnBackendDescriptor_t PT = g_virtual(g, BF, s_tt_t);
    g_reshape(g, P, PT);
    if (H == G) {
        g_matmul(g, PT, DO, DV);
    } else {
        cudnnBackendDescriptor_t DVF = g_virtual(g, BF, s_hd);
        g_matmul(g, PT, DO, DVF);
        g_reduction(g, CUDNN_REDUCE_TENSOR_ADD, DVF, DV);
    }

    /* dS = P o (dO V^T - D) * scale */
    cudnnBackendDescriptor_t DP = g_virtual(g, F, s_tt);
    g_matmul(g, DO, VT, DP);
    cudnnBackendDescriptor_t DP1 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_SUB, F, DP, SSUM, NULL, DP1);
    cudnnBackendDescriptor_t DS0 = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, DP1, P, NULL, DS0);
    cudnnBackendDescriptor_t DS = g_virtual(g, F, s_tt);
    g_pointwise(g, CUDNN_POINTWISE_MUL, F, DS0, SCALE, NULL, DS);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t DST = g_virtual(g, BF, s_tt_t);
    g_reshape(g, DS, DST);
    if (H == G) {
        g_matmul(g, DST, Q, DK);
    } else {
        cudnnBackendDescriptor_t DKF = g_virtual(g, BF, s_hd);
        g_matmul(g, DST, Q, DKF);
        g_reduction(g, CUDNN_REDUCE_TENSOR_ADD, DKF, DK);
    }

    /* dQ = dS K, straight into dQ (no fp32 dQ_accum tensor: the deterministic form) */
    cudnnBackendDescriptor_t K = g_virtual(g, F, s_kv);
    g_reshape(g, KT, K);
    g_matmul(g, DS, K, DQ);
}

/* The cache entry of this direction and shape, building its plan on first use; NULL when cuDNN
 * cannot run it (the reason was printed once). */
static Entry *get_entry(BackendCtx *ctx, int kind, const AttnShape *s) {
    Entry *e = NULL;
    for (int i = 0; i < MAX_ENTRIES && state_of(ctx)->cache[i].used; i++) {
        Entry *c = &state_of(ctx)->cache[i];
        if (c->kind == kind && c->B == s->B && c->T == s->T && c->H == s->H && c->G == s->G && c->d == s->d) {
            e = c;
            break;
        }
    }
    if (e) return e->state > 0 ? e : NULL;
    for (int i = 0; i < MAX_ENTRIES; i++)
        if (!state_of(ctx)->cache[i].used) { e = &state_of(ctx)->cache[i]; break; }
    if (!e) {
        static bool said;
        if (!said) {
            fprintf(stderr, "phaselab: cuDNN fused attention: more than %d attention shapes; using the custom kernels "
                            "for the others\n", MAX_ENTRIES);
            fflush(stderr);
            said = true;
        }
        return NULL;
    }
    memset(e, 0, sizeof *e);
    e->used = 1;
    e->kind = kind;
    e->B = s->B; e->T = s->T; e->H = s->H; e->G = s->G; e->d = s->d;
    e->scale = (float)(1.0 / sqrt((double)s->d));
    /* cudnn-frontend masks with the lowest float before cuDNN 9.10, with -inf from 9.10 on */
    e->mask_value = state_of(ctx)->version < 91000 ? -3.402823466e38f : -INFINITY;
    e->one = 1.0f;

    /* what the fused engines support (cudnn-frontend's support surface for bf16 SDPA) */
    const int max_d = (state_of(ctx)->sm / 10 == 9) ? 256 : 128;
    char why[400];
    if (s->G <= 0 || s->H % s->G != 0) {
        unavailable(e, "H is not a multiple of G");
        return NULL;
    }
    if (s->d % 8 != 0 || s->d > max_d) {
        snprintf(why, sizeof why, "head dim must be a multiple of 8 and at most %d on sm_%d", max_d, state_of(ctx)->sm);
        unavailable(e, why);
        return NULL;
    }
    if (state_of(ctx)->version == 91000 || state_of(ctx)->version == 91001) {
        unavailable(e, "cuDNN 9.10.0/9.10.1 have known fused-attention bugs");
        return NULL;
    }
    if (kind == KIND_BWD && state_of(ctx)->version <= 91500 && s->T % 128 != 0) {
        unavailable(e, "backward with T not a multiple of 128 needs cuDNN > 9.15");
        return NULL;
    }

    Graph *g = (Graph *)calloc(1, sizeof(Graph));
    if (!g) {
        unavailable(e, "out of host memory");
        return NULL;
    }
    g->next_uid = UID_VIRTUAL0;
    if (kind == KIND_FWD) build_fwd_graph(g, e);
    else build_bwd_graph(g, e);

    int64_t plan_ws = 0, engine_index = -1;
    cudnnBackendDescriptor_t plan = NULL;
    if (!g_ok(g)) {
        char detail[160];
        last_error(detail, sizeof detail);
        snprintf(why, sizeof why, "graph: %s: %s %s", g->what, cudnnGetErrorString(g->st), detail);
    } else {
        plan = make_plan(ctx, g, &plan_ws, &engine_index, why, sizeof why);
    }
    if (!plan) {
        g_destroy(g);
        free(g);
        unavailable(e, why);
        return NULL;
    }
    e->descs = (cudnnBackendDescriptor_t *)malloc(sizeof(cudnnBackendDescriptor_t) * (size_t)g->n_all);
    if (!e->descs) {
        g_destroy(g);
        free(g);
        unavailable(e, "out of host memory");
        return NULL;
    }
    memcpy(e->descs, g->all, sizeof(cudnnBackendDescriptor_t) * (size_t)g->n_all);
    e->n_descs = g->n_all;
    free(g);
    e->plan = plan;
    e->plan_ws = plan_ws;
    e->state = 1;
    if (env_is("PHASELAB_CUDNN_ATTN_VERBOSE", "1")) {
        char shape[96];
        describe(e, shape, sizeof shape);
        fprintf(stderr, "phaselab: cuDNN fused attention %s: engine %lld, workspace %lld bytes\n", shape,
                (long long)engine_index, (long long)plan_ws);
        fflush(stderr);
    }
    return e;
}

/* ======================= execution ======================= */
/* Runs the plan once. A cuDNN error is returned (with what failed in why), not fatal: the caller
 * disables the shape and the custom kernels compute the same outputs from the same inputs
 * (cuDNN writes only its outputs and its own workspace). */
static cudnnStatus_t execute(BackendCtx *ctx, const Entry *e, int n, const int64_t *uids, void **ptrs, void *ws,
                             char *why, size_t why_n) {
    cudnnBackendDescriptor_t vp = NULL;
    const char *step = "cudnnSetStream";
    cudnnStatus_t st = cudnnSetStream(state_of(ctx)->handle, ctx->stream);
    if (st == CUDNN_STATUS_SUCCESS) { step = "variant pack"; st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp); }
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) { step = "cudnnBackendExecute"; st = cudnnBackendExecute(state_of(ctx)->handle, e->plan, vp); }
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (st != CUDNN_STATUS_SUCCESS) snprintf(why, why_n, "%s failed at execution: %s", step, cudnnGetErrorString(st));
    return st;
}

struct Output {
    const void *p;
    size_t bytes;
};

/* Runs the plan; on an entry's first call runs it a second time and compares the outputs bit for
 * bit. 0 (entry disabled, reason printed) when they differ. */
static int run(BackendCtx *ctx, Entry *e, int n, const int64_t *uids, void **ptrs, void *ws, const Output *outs, int n_outs) {
    char why[160];
    if (execute(ctx, e, n, uids, ptrs, ws, why, sizeof why) != CUDNN_STATUS_SUCCESS) { unavailable(e, why); return 0; }
    if (e->checked) return 1;
    e->checked = 1;
    size_t total = 0;
    for (int i = 0; i < n_outs; i++) total += outs[i].bytes;
    char *h1 = (char *)malloc(total), *h2 = (char *)malloc(total);
    int same = 1;
    if (h1 && h2) {
        size_t off = 0;
        for (int i = 0; i < n_outs; off += outs[i].bytes, i++)
            CU(cudaMemcpyAsync(h1 + off, outs[i].p, outs[i].bytes, cudaMemcpyDeviceToHost, ctx->stream));
        CU(cudaStreamSynchronize(ctx->stream));
        if (execute(ctx, e, n, uids, ptrs, ws, why, sizeof why) != CUDNN_STATUS_SUCCESS) {
            free(h1);
            free(h2);
            unavailable(e, why);
            return 0;
        }
        off = 0;
        for (int i = 0; i < n_outs; off += outs[i].bytes, i++)
            CU(cudaMemcpyAsync(h2 + off, outs[i].p, outs[i].bytes, cudaMemcpyDeviceToHost, ctx->stream));
        CU(cudaStreamSynchronize(ctx->stream));
        same = memcmp(h1, h2, total) == 0;
    }
    free(h1);
    free(h2);
    if (!same) {
        unavailable(e, "two runs on the same inputs gave different bits (nondeterministic engine)");
        return 0;
    }
    return 1;
}

/* lse [B,T,H] <-> Stats [B,H,T] */
static __global__ void cudnn_stats_to_lse(float *lse, const float *stats, int B, int T, int H) {
    size_t n = (size_t)B * T * H;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t h = i % H, bt = i / H, t = bt % T, b = bt / T;
        lse[i] = stats[(b * H + h) * T + t];
    }
}

static __global__ void cudnn_lse_to_stats(float *stats, const float *lse, int B, int T, int H) {
    size_t n = (size_t)B * T * H;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i % T, bh = i / T, h = bh % H, b = bh / H;
        stats[i] = lse[(b * T + t) * H + h];
    }
}

/* The cases this file is for, before anything is built. */
static bool wanted(BackendCtx *ctx, const AttnShape *s) {
    if (s->visibility != VIS_FULL || s->n_windows != 0) return false;
    if (s->head_stride) return false;   /* multi-rate strides (docs/spec.md §6.4): the custom kernels' rule */
    if (s->B <= 0 || s->T <= 0 || s->H <= 0 || s->G <= 0 || s->d <= 0) return false;
    if (env_is("PHASELAB_ATTN", "custom")) return false;
    return ready(ctx);
}

static bool aligned16(const void *const *ptrs, int n) {
    for (int i = 0; i < n; i++)
        if (!ptrs[i] || ((uintptr_t)ptrs[i] & 15)) {
            static bool said;
            if (!said) {
                fprintf(stderr, "phaselab: cuDNN fused attention skipped: a tensor is not 16-byte aligned; using the "
                                "custom kernels\n");
                fflush(stderr);
                said = true;
            }
            return false;
        }
    return true;
}

int cu_cudnn_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                           const act_t *v) {
    if (!wanted(ctx, s)) return 0;
    const void *ptrs_check[] = {out, q, k, v};
    if (!aligned16(ptrs_check, 4)) return 0;
    Entry *e = get_entry(ctx, KIND_FWD, s);
    if (!e) return 0;

    const size_t rows = (size_t)s->B * s->T * s->H;
    const size_t off_stats = align256((size_t)e->plan_ws);
    char *ws = (char *)workspace(ctx, off_stats + rows * sizeof(float));
    if (!ws) {
        char why[96];
        snprintf(why, sizeof why, "cannot allocate %.1f MiB of workspace",
                 (double)(off_stats + rows * sizeof(float)) / 1048576.0);
        unavailable(e, why);
        return 0;
    }
    float *stats = (float *)(ws + off_stats);

    int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_MASK};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, out, stats, &e->scale, &e->mask_value};
    Output outs[] = {{out, rows * s->d * sizeof(bf16)}, {stats, rows * sizeof(float)}};
    if (!run(ctx, e, 7, uids, ptrs, ws, outs, 2)) return 0;
    if (lse) {
        CU_KERNEL(cudnn_stats_to_lse, cu_blocks(rows, 256), 256, 0, ctx->stream)(lse, stats, s->B, s->T, s->H);
        CU_LAUNCH();
    }
    return 1;
}

int cu_cudnn_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, const act_t *dout,
                           const act_t *out, const float *lse, const act_t *q, const act_t *k,
                           const act_t *v) {
    /* on unless bitwise reruns are requested (run.deterministic) or PHASELAB_CUDNN_ATTN_BWD=0 */
    if (ctx->deterministic || env_is("PHASELAB_CUDNN_ATTN_BWD", "0")) return 0;
    if (!wanted(ctx, s) || !lse) return 0;
    const void *ptrs_check[] = {dq, dk, dv, dout, out, q, k, v};
    if (!aligned16(ptrs_check, 8)) return 0;
    Entry *e = get_entry(ctx, KIND_BWD, s);
    if (!e) return 0;

    const size_t rows = (size_t)s->B * s->T * s->H;
    const size_t off_stats = align256((size_t)e->plan_ws);
    const size_t off_sum = off_stats + align256(rows * sizeof(float));
    char *ws = (char *)workspace(ctx, off_sum + rows * sizeof(float));
    if (!ws) {
        char why[96];
        snprintf(why, sizeof why, "cannot allocate %.1f MiB of workspace",
                 (double)(off_sum + rows * sizeof(float)) / 1048576.0);
        unavailable(e, why);
        return 0;
    }
    float *stats = (float *)(ws + off_stats), *softmax_sum = (float *)(ws + off_sum);
    CU_KERNEL(cudnn_lse_to_stats, cu_blocks(rows, 256), 256, 0, ctx->stream)(stats, lse, s->B, s->T, s->H);
    CU_LAUNCH();

    int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
                      UID_SCALE, UID_MASK, UID_ONE, UID_SOFTMAX_SUM};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)out, stats, (void *)dout, dq, dk, dv,
                    &e->scale, &e->mask_value, &e->one, softmax_sum};
    const size_t kv_bytes = (size_t)s->B * s->T * s->G * s->d * sizeof(bf16);
    Output outs[] = {{dq, rows * s->d * sizeof(bf16)}, {dk, kv_bytes}, {dv, kv_bytes}};
    return run(ctx, e, 13, uids, ptrs, ws, outs, 3);
}

#endif /* PHASELAB_CUEMU || !PHASELAB_CUDNN */
