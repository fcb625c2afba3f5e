/* Rotary position embedding on the CUDA backend, "rotate-half" layout (docs/spec.md §1), in
 * place on the LAST r dims of each head of x [rows, nh, d]: with o = d - r, pairs (o+i, o+i+r/2):
 *   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin    (inverse: sin -> -sin, the backward)
 * Row k has position (k % period) * mult; cos_sin [positions, r/2, 2] (fp32, device memory).
 * One thread per rotated pair, or per 4 consecutive pairs where the sizes allow (rope4_kernel). */
#include <limits.h>
#include "kernels/cuda/cuda_common.h"

__global__ void rope_kernel(bf16 *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult,
                            float sgn, size_t total) {
    int half = r / 2;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t rh = idx / half;            /* row * nh + head */
        int k = (int)(rh / nh);
        int pos = (k % period) * mult;
        float c = cos_sin[((size_t)pos * half + i) * 2], s = sgn * cos_sin[((size_t)pos * half + i) * 2 + 1];
        bf16 *v = x + rh * d + (d - r);
        float x1 = bf(v[i]), x2 = bf(v[i + half]);
        v[i] = tobf(x1 * c - x2 * s);
        v[i + half] = tobf(x2 * c + x1 * s);
    }
}

/* The same rotation, 4 consecutive pairs a thread: 8-byte bf16 accesses and two 16-byte reads of
 * the table, 32-bit index math (the caller checks that the count fits). Where r/2, d - r and d are
 * multiples of 4 and the pointers aligned (Qwen3: d = r = 128). The per-element arithmetic is the
 * scalar kernel's, term for term. */
__device__ __forceinline__ void rope_pair(float &x1, float &x2, float c, float s) {
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    x1 = y1;
    x2 = y2;
}
struct alignas(8) bf16x4 { __nv_bfloat162 lo, hi; };   /* 4 bf16: one 8-byte access */
__global__ void rope4_kernel(bf16 *x, const float *cos_sin, int nh, int d, int r, int period, int mult, float sgn,
                             int total4) {
    const int half = r / 2, q4 = half / 4;
    /* (the counter is 64-bit: a grid-stride step past INT_MAX - stride must not wrap; the index math is
     * 32-bit, total4 < INT_MAX) */
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total4; e += (long long)gridDim.x * blockDim.x) {
        const int idx = (int)e;
        const int i = (idx % q4) * 4, rh = idx / q4, k = rh / nh, pos = (k % period) * mult;
        const float4 *cs = (const float4 *)(cos_sin + ((size_t)pos * half + i) * 2);   /* c0 s0 c1 s1, c2 s2 c3 s3 */
        const float4 cs01 = cs[0], cs23 = cs[1];
        bf16 *v = x + (size_t)rh * d + (d - r);
        bf16x4 *p1 = (bf16x4 *)(v + i), *p2 = (bf16x4 *)(v + i + half);
        const bf16x4 u1 = *p1, u2 = *p2;
        float2 a01 = __bfloat1622float2(u1.lo), a23 = __bfloat1622float2(u1.hi);
        float2 b01 = __bfloat1622float2(u2.lo), b23 = __bfloat1622float2(u2.hi);
        rope_pair(a01.x, b01.x, cs01.x, sgn * cs01.y);
        rope_pair(a01.y, b01.y, cs01.z, sgn * cs01.w);
        rope_pair(a23.x, b23.x, cs23.x, sgn * cs23.y);
        rope_pair(a23.y, b23.y, cs23.z, sgn * cs23.w);
        *p1 = bf16x4{__floats2bfloat162_rn(a01.x, a01.y), __floats2bfloat162_rn(a23.x, a23.y)};
        *p2 = bf16x4{__floats2bfloat162_rn(b01.x, b01.y), __floats2bfloat162_rn(b23.x, b23.y)};
    }
}

void cu_rope(BackendCtx *ctx, act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse) {
    if (r <= 0 || rows <= 0 || nh <= 0) return;
    size_t total = (size_t)rows * nh * (r / 2);
    const float sgn = inverse ? -1.0f : 1.0f;
    const bool vec4 = (r / 2) % 4 == 0 && (d - r) % 4 == 0 && d % 4 == 0 && ((uintptr_t)x & 7) == 0 &&
                      ((uintptr_t)cos_sin & 15) == 0 && total / 4 < (size_t)INT_MAX;
    if (vec4) {
        CU_KERNEL(rope4_kernel, cu_blocks(total / 4, 256), 256, 0, ctx->stream)((bf16 *)x, cos_sin, nh, d, r, period, mult,
                                                                           sgn, (int)(total / 4));
    } else {
        CU_KERNEL(rope_kernel, cu_blocks(total, 256), 256, 0, ctx->stream)((bf16 *)x, cos_sin, rows, nh, d, r, period,
                                                                     mult, sgn, total);
    }
    CU_LAUNCH();
}
