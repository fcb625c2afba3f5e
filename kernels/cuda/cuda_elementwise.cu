/* Elementwise ops on the CUDA backend (bf16 storage, fp32 math):
 *   add:      y += x
 *   swiglu:   h = silu(g) * u, silu(z) = z sigma(z)
 *             dg = dh u sigma(g) (1 + g (1 - sigma(g))),  du = dh silu(g)
 *   casts:    fp32 <-> bf16 (round to nearest even), used by cast_params and host transfers
 * Parallelisation: grid-stride loops; when every pointer is 16-byte aligned each thread moves
 * 8 bf16 (one 16-byte access) at a time, the remainder is done element by element. */
#include "kernels/cuda/cuda_common.h"

struct alignas(16) bf16x8 { __nv_bfloat162 v[4]; };

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <int OP>
__device__ __forceinline__ void ew_apply(float *o0, float *o1, float a, float b, float c) {
    if (OP == 0) { *o0 = a + b; }                                    /* add: a = y, b = x */
    else if (OP == 1) { float s = 1.0f / (1.0f + __expf(-a)); *o0 = a * s * b; }  /* swiglu: a=g b=u */
    else { /* swiglu bwd: a = g, b = u, c = dh -> o0 = dg, o1 = du */
        float s = 1.0f / (1.0f + __expf(-a));
        *o1 = c * a * s;
        *o0 = c * b * s * (1.0f + a * (1.0f - s));
    }
}

/* OP 0: y = y + x (out0 = y, in a = y, b = x); OP 1: h = swiglu(g, u); OP 2: (dg, du) from (g, u, dh) */
template <int OP>
__global__ void ew_vec_kernel(bf16 *out0, bf16 *out1, const bf16 *a, const bf16 *b, const bf16 *c, size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        bf16x8 va = ((const bf16x8 *)a)[i], vb = ((const bf16x8 *)b)[i], vc;
        if (OP == 2) vc = ((const bf16x8 *)c)[i];
        bf16x8 r0, r1;
        #pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 fa = __bfloat1622float2(va.v[k]), fb = __bfloat1622float2(vb.v[k]);
            float2 fc = make_float2(0.f, 0.f);
            if (OP == 2) fc = __bfloat1622float2(vc.v[k]);
            float x0, x1, y0 = 0.f, y1 = 0.f;
            ew_apply<OP>(&x0, &y0, fa.x, fb.x, fc.x);
            ew_apply<OP>(&x1, &y1, fa.y, fb.y, fc.y);
            r0.v[k] = __floats2bfloat162_rn(x0, x1);
            r1.v[k] = __floats2bfloat162_rn(y0, y1);
        }
        ((bf16x8 *)out0)[i] = r0;
        if (OP == 2) ((bf16x8 *)out1)[i] = r1;
    }
}

template <int OP>
__global__ void ew_scalar_kernel(bf16 *out0, bf16 *out1, const bf16 *a, const bf16 *b, const bf16 *c, size_t start, size_t n) {
    for (size_t i = start + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x0, y0 = 0.f;
        ew_apply<OP>(&x0, &y0, bf(a[i]), bf(b[i]), OP == 2 ? bf(c[i]) : 0.f);
        out0[i] = tobf(x0);
        if (OP == 2) out1[i] = tobf(y0);
    }
}

template <int OP>
static void ew_launch(BackendCtx *ctx, bf16 *out0, bf16 *out1, const bf16 *a, const bf16 *b, const bf16 *c, size_t n) {
    if (n == 0) return;
    size_t start = 0;
    bool al = aligned16(out0) && aligned16(a) && aligned16(b) && (OP != 2 || (aligned16(out1) && aligned16(c)));
    if (al && n >= 8) {
        size_t n8 = n / 8;
        CU_KERNEL(ew_vec_kernel<OP>, cu_blocks(n8, 256), 256, 0, ctx->stream)(out0, out1, a, b, c, n8);
        CU_LAUNCH();
        start = n8 * 8;
    }
    if (start < n) {
        CU_KERNEL(ew_scalar_kernel<OP>, cu_blocks(n - start, 256), 256, 0, ctx->stream)(out0, out1, a, b, c, start, n);
        CU_LAUNCH();
    }
}

void cu_add(BackendCtx *ctx, act_t *y, const act_t *x, size_t n) {
    ew_launch<0>(ctx, (bf16 *)y, NULL, (const bf16 *)y, (const bf16 *)x, NULL, n);
}
void cu_swiglu_fwd(BackendCtx *ctx, act_t *h, const act_t *g, const act_t *u, size_t n) {
    ew_launch<1>(ctx, (bf16 *)h, NULL, (const bf16 *)g, (const bf16 *)u, NULL, n);
}
void cu_swiglu_bwd(BackendCtx *ctx, act_t *dg, act_t *du, const act_t *dh, const act_t *g, const act_t *u, size_t n) {
    ew_launch<2>(ctx, (bf16 *)dg, (bf16 *)du, (const bf16 *)g, (const bf16 *)u, (const bf16 *)dh, n);
}

__global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = tobf(src[i]);
}
__global__ void bf16_to_f32_kernel(float *dst, const bf16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = bf(src[i]);
}
void cu_f32_to_bf16(BackendCtx *ctx, bf16 *dst, const float *src, size_t n) {
    if (!n) return;
    CU_KERNEL(f32_to_bf16_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(dst, src, n);
    CU_LAUNCH();
}
void cu_bf16_to_f32(BackendCtx *ctx, float *dst, const bf16 *src, size_t n) {
    if (!n) return;
    CU_KERNEL(bf16_to_f32_kernel, cu_blocks(n, 256), 256, 0, ctx->stream)(dst, src, n);
    CU_LAUNCH();
}
