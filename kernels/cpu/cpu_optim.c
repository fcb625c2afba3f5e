/* The owned AdamW step and reductions over fp32 buffers on the CPU.
 * adamw_cast, with gs = g * gscale (gscale = the clip factor):
 *   m = b1 m + (1 - b1) gs;   v = b2 v + (1 - b2) gs^2
 *   p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)        (decoupled weight decay)
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t are passed in by the caller; the working copy is written in the
 * same pass (an alias of p here).
 * loss_accumulate: acc += (mean of the counted losses) * rows * cols, the sum in double in order.
 * sumsq sums fixed blocks in double and adds the block sums in order: deterministic.
 * A call over at most CPU_SERIAL_WORK elements (a norm weight) runs on the calling thread; each
 * element is computed the same way either way. */
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_internal.h"

/* The owned step: gs = g * gscale in the same pass (the clip factor; gscale = 1 reads g as is,
 * bit for bit the former scale-then-AdamW). The working copy is the fp32 master itself on the
 * CPU (act_t = fp32, w aliases p), so nothing is cast; a distinct w receives a copy. */
void cpu_adamw_cast(BackendCtx *ctx, float *p, act_t *w, const float *g, float *m, float *v, size_t n, float gscale,
                    float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    float *wf = (float *)w == p ? NULL : (float *)w;
    #pragma omp parallel for simd schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) {
        float gi = gscale == 1.0f ? g[i] : g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
        if (wf) wf[i] = p[i];
    }
}

/* The host's former arithmetic exactly: the sum in double in index order, divided by the count,
 * times rows, times cols. */
void cpu_loss_accumulate(BackendCtx *ctx, double *acc, const float *losses, const int32_t *targets, int rows, int cols) {
    (void)ctx;
    double sum = 0.0;
    long count = 0;
    for (long i = 0; i < (long)rows * cols; i++)
        if (targets[i] >= 0) { sum += losses[i]; count++; }
    if (count) acc[0] += sum / count * rows * cols;
}

#define SUMSQ_BLOCK 65536

double cpu_sumsq(BackendCtx *ctx, const float *x, size_t n) {
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    if (nb == 0) return 0.0;
    double *part = cpu_scratch(sizeof(double) * nb, "sum-of-squares blocks");
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
