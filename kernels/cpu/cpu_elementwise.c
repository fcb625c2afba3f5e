/* Elementwise ops and the token embedding on the CPU.
 *   add:        y += x
 *   swiglu:     h = silu(g) * u,  silu(z) = z sigma(z)
 *               dg = dh u sigma(g) (1 + g (1 - sigma(g))),  du = dh silu(g)
 *               (e^-z by cpu_expf, kernels/cpu/cpu_expf.h: the loops vectorize)
 *   embedding:  out_n = E[tok_n];  backward dE[tok_n] += dout_n, parallel over column blocks so
 *               that each element of dE is summed by one thread in token order (deterministic). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

void cpu_add(BackendCtx *ctx, act_t *y_, const act_t *x_, size_t n) {
    float *y = F(y_);
    const float *x = CF(x_);
    #pragma omp parallel for simd schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_swiglu_fwd(BackendCtx *ctx, act_t *h_, const act_t *g_, const act_t *u_, size_t n) {
    float *h = F(h_);
    const float *g = CF(g_), *u = CF(u_);
    const long nv = (long)((n + 7) / 8);              /* 8-lane blocks; the last may be partial */
    #pragma omp parallel for schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (long v = 0; v < nv; v++) {
        size_t i = (size_t)v * 8, k = n - i;
        cpu_v8f gv = cpu_v8_load(g + i, k), uv = cpu_v8_load(u + i, k);
        cpu_v8_store(h + i, gv / (1.0f + cpu_expf8(-gv)) * uv, k);
    }
}

void cpu_swiglu_bwd(BackendCtx *ctx, act_t *dg_, act_t *du_, const act_t *dh_, const act_t *g_, const act_t *u_, size_t n) {
    float *dg = F(dg_), *du = F(du_);
    const float *dh = CF(dh_), *g = CF(g_), *u = CF(u_);
    const long nv = (long)((n + 7) / 8);
    #pragma omp parallel for schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (long v = 0; v < nv; v++) {
        size_t i = (size_t)v * 8, k = n - i;
        cpu_v8f gv = cpu_v8_load(g + i, k), uv = cpu_v8_load(u + i, k), dhv = cpu_v8_load(dh + i, k);
        cpu_v8f sig = 1.0f / (1.0f + cpu_expf8(-gv));
        cpu_v8_store(du + i, dhv * gv * sig, k);
        cpu_v8_store(dg + i, dhv * uv * sig * (1.0f + gv * (1.0f - sig)), k);
    }
}

void cpu_embedding_fwd(BackendCtx *ctx, act_t *out_, const int32_t *tokens, const act_t *table_, int N, int D) {
    float *out = F(out_);
    const float *table = CF(table_);
    #pragma omp parallel for schedule(static) if ((size_t)N * D > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * D);
}

void cpu_embedding_bwd(BackendCtx *ctx, float *dtable, const int32_t *tokens, const float *dout, int N, int D) {
    #pragma omp parallel num_threads(ctx->threads)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = (int)((long)D * tid / nt), c1 = (int)((long)D * (tid + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)tokens[n] * D;
            const float *src = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
