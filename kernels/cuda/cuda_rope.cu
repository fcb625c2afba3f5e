/* Rotary position embedding on the CUDA backend, "rotate-half" layout (docs/spec.md §1), in
 * place on the LAST r dims of each head of x [rows, nh, d]: with o = d - r, pairs (o+i, o+i+r/2):
 *   y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin    (inverse: sin -> -sin, the backward)
 * Row k has position (k % period) * mult; cos_sin [positions, r/2, 2] (fp32, device memory).
 * One thread per rotated pair. */
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

void cu_rope(BackendCtx *ctx, act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse) {
    if (r <= 0 || rows <= 0 || nh <= 0) return;
    size_t total = (size_t)rows * nh * (r / 2);
    CU_KERNEL(rope_kernel, cu_blocks(total, 256), 256, 0, ctx->stream)((bf16 *)x, cos_sin, rows, nh, d, r, period, mult,
                                                                 inverse ? -1.0f : 1.0f, total);
    CU_LAUNCH();
}
