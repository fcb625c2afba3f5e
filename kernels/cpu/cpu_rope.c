/* Rotary position embedding, "rotate-half" layout (docs/spec.md §1), in place on the LAST r
 * dims of each head of x [rows, nh, d]: with o = d - r and pairs (o+i, o+i+r/2), i < r/2,
 *   y1 = x1 cos(p w_i) - x2 sin(p w_i),   y2 = x2 cos(p w_i) + x1 sin(p w_i),   w_i = theta^(-2i/r)
 * The position of row k is (k % period) * mult: tokens use (T, 1), compressed entries use
 * (n_windows, S) since entry j sits at its window start jS. The inverse rotation (sin -> -sin)
 * is the backward pass, as the rotation is orthogonal. The cos_sin table: rope_table
 * (kernels/rope_table.c, shared by every backend). */
#include "kernels/cpu/cpu_internal.h"

void cpu_rope(BackendCtx *ctx, act_t *x_, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse) {
    if (r == 0) return;
    float *x = F(x_);
    int half = r / 2, o = d - r;
    float sgn = inverse ? -1.0f : 1.0f;
    #pragma omp parallel for schedule(static) if ((size_t)rows * nh * r > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int k = 0; k < rows; k++) {
        int pos = (k % period) * mult;
        const float *cs = cos_sin + (size_t)pos * half * 2;
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)k * nh + h) * d + o;
            for (int i = 0; i < half; i++) {
                float c = cs[2 * i], s = sgn * cs[2 * i + 1];
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c - x2 * s;
                v[i + half] = x2 * c + x1 * s;
            }
        }
    }
}
