/* AdamW and reductions over fp32 buffers on the CPU.
 *   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
 *   p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)        (decoupled weight decay)
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t are passed in by the caller.
 * sumsq sums fixed blocks in double and adds the block sums in order: deterministic. */
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_internal.h"

void cpu_adamw(BackendCtx *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, float bc1, float bc2) {
    #pragma omp parallel for simd schedule(static) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) {
        float mi = b1 * m[i] + (1.0f - b1) * g[i];
        float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}

#define SUMSQ_BLOCK 65536

double cpu_sumsq(BackendCtx *ctx, const float *x, size_t n) {
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    if (nb == 0) return 0.0;
    double *part = malloc(sizeof(double) * nb);
    #pragma omp parallel for schedule(static) num_threads(ctx->threads)
    for (size_t b = 0; b < nb; b++) {
        size_t e = (b + 1) * SUMSQ_BLOCK < n ? (b + 1) * SUMSQ_BLOCK : n;
        double acc = 0.0;
        for (size_t i = b * SUMSQ_BLOCK; i < e; i++) acc += (double)x[i] * x[i];
        part[b] = acc;
    }
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) total += part[b];
    free(part);
    return total;
}

void cpu_scale(BackendCtx *ctx, float *x, size_t n, float s) {
    #pragma omp parallel for simd schedule(static) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
