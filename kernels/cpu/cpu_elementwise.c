/* Elementwise ops and the token embedding on the CPU.
 *   add:        y += x
 *   swiglu:     h = silu(g) * u,  silu(z) = z sigma(z)
 *               dg = dh u sigma(g) (1 + g (1 - sigma(g))),  du = dh silu(g)
 *   embedding:  out_n = E[tok_n];  backward dE[tok_n] += dout_n, parallel over column blocks so
 *               that each element of dE is summed by one thread in token order (deterministic). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"

void cpu_add(BackendCtx *ctx, act_t *y_, const act_t *x_, size_t n) {
    float *y = F(y_);
    const float *x = CF(x_);
    #pragma omp parallel for simd schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_swiglu_fwd(BackendCtx *ctx, act_t *h_, const act_t *g_, const act_t *u_, size_t n) {
    float *h = F(h_);
    const float *g = CF(g_), *u = CF(u_);
    #pragma omp parallel for simd schedule(static) if (n > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cpu_swiglu_bwd(BackendCtx *ctx, act_t *dg_, act_t *du_, const act_t *dh_, const act_t *g_, const act_t *u_, size_t n) {
    float *dg = F(dg_), *du = F(du_);
    const float *dh = CF(dh_), *g = CF(g_), *u = CF(u_);
    #pragma omp parallel for simd schedule(static) num_threads(ctx->threads)
    for (size_t i = 0; i < n; i++) {
        float sig = 1.0f / (1.0f + expf(-g[i]));
        du[i] = dh[i] * g[i] * sig;
        dg[i] = dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    }
}

void cpu_embedding_fwd(BackendCtx *ctx, act_t *out_, const int32_t *tokens, const act_t *table_, int N, int D) {
    float *out = F(out_);
    const float *table = CF(table_);
    #pragma omp parallel for schedule(static) if ((size_t)N * D > CPU_SERIAL_WORK) num_threads(ctx->threads)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * D);
}

void cpu_embedding_bwd(BackendCtx *ctx, float *dtable, const int32_t *tokens, const act_t *dout_, int N, int D) {
    const float *dout = CF(dout_);
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
