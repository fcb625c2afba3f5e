/* RMSNorm over the last dimension of [rows, C] (docs/spec.md §1), fp32:
 *   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w
 * Backward, with xhat = x * rstd and gy = dy * w:
 *   dx = rstd * (gy - xhat * mean(gy * xhat)),   dw += sum_rows dy * xhat
 * Used for the block norms (C = D), the per-head q/k norms (rows = tokens x heads, C = d) and
 * the compressor's ck-norm and post-norm. rmsnorm_bwd_residual is the same backward for the
 * residual stream's norms: its dx is fp32 here as everywhere (act_t is fp32 on the CPU, so the
 * two ops share one loop, and the act_t copy is a memcpy, skipped where it aliases dx).
 * The weight gradient is reduced per thread over a fixed row partition, then summed in thread
 * order: deterministic for a fixed thread count.
 * The per-thread rows are sized by the region's team (at most ctx->threads; formerly by
 * omp_get_max_threads(), which OpenBLAS caps at 64 while the team was run.threads: a heap
 * overflow in every backward above 64 threads). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/cpu_internal.h"

void cpu_rmsnorm_fwd(BackendCtx *ctx, act_t *out_, float *rstd, const act_t *in_, const act_t *w_, int rows, int C, float eps) {
    float *out = F(out_);
    const float *in = CF(in_), *w = CF(w_);
    #pragma omp parallel for schedule(static) if ((size_t)rows * C > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * C;
        float *y = out + (size_t)r * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float rs = 1.0f / sqrtf(ss / C + eps);
        if (rstd) rstd[r] = rs;
        #pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * rs * w[c];
    }
}

/* din [rows, C] (accumulate ? += : =), dw [C] += (NULL: not wanted) */
static void rmsnorm_bwd_f32(BackendCtx *ctx, float *din, float *dw, const float *dout, const float *in, const float *w,
                            const float *rstd, int rows, int C, int accumulate) {
    const int max_team = ctx->threads > 1 ? ctx->threads : 1;   /* bounds the team of num_threads() */
    float *dw_part = dw ? cpu_scratch_zeroed(sizeof(float) * (size_t)max_team * C, "the norm weight gradient's per-thread sums")
                        : NULL;                                   /* [team, C] */
    int team = 1;
    #pragma omp parallel num_threads(max_team)
    {
        int tid = omp_get_thread_num();
        #pragma omp single
        team = omp_get_num_threads();
        float *dwp = dw_part ? dw_part + (size_t)tid * C : NULL;
        #pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *x = in + (size_t)r * C, *dy = dout + (size_t)r * C;
            float *dx = din + (size_t)r * C;
            float rs = rstd[r], dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (int c = 0; c < C; c++) dot += dy[c] * w[c] * x[c] * rs;
            float mean_dot = dot / C;
            if (accumulate) {
                #pragma omp simd
                for (int c = 0; c < C; c++) dx[c] += rs * (dy[c] * w[c] - x[c] * rs * mean_dot);
            } else {
                #pragma omp simd
                for (int c = 0; c < C; c++) dx[c] = rs * (dy[c] * w[c] - x[c] * rs * mean_dot);
            }
            if (dwp) {
                #pragma omp simd
                for (int c = 0; c < C; c++) dwp[c] += dy[c] * x[c] * rs;
            }
        }
    }
    if (dw) {
        for (int t = 0; t < team; t++)
            for (int c = 0; c < C; c++) dw[c] += dw_part[(size_t)t * C + c];
        free(dw_part);
    }
}

void cpu_rmsnorm_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                     const float *rstd, int rows, int C, int accumulate) {
    rmsnorm_bwd_f32(ctx, F(din), dw, CF(dout), CF(in), CF(w), rstd, rows, C, accumulate);
}

/* round_act: act_t is fp32, nothing to round */
void cpu_rmsnorm_bwd_residual(BackendCtx *ctx, float *dres, act_t *dres_act, float *dw, const act_t *dout, const act_t *in,
                              const act_t *w, const float *rstd, int rows, int C, int accumulate, int round_act) {
    rmsnorm_bwd_f32(ctx, dres, dw, CF(dout), CF(in), CF(w), rstd, rows, C, accumulate);
    if (dres_act && F(dres_act) != dres) memcpy(F(dres_act), dres, sizeof(float) * (size_t)rows * C);
}
