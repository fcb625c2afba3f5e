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

void cpu_add(act_t *y_, const act_t *x_, size_t n) {
    float *y = y_;
    const float *x = x_;
    #pragma omp parallel for simd schedule(static) if (n > CPU_SERIAL_WORK)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_swiglu_fwd(act_t *h_, const act_t *g_, const act_t *u_, size_t n) {
    float *h = h_;
    const float *g = g_, *u = u_;
    const long nv = (long)((n + 7) / 8);              /* 8-lane blocks; the last may be partial */
    #pragma omp parallel for schedule(static) if (n > CPU_SERIAL_WORK)
    for (long v = 0; v < nv; v++) {
        size_t i = (size_t)v * 8, k = n - i;
        cpu_v8f gv = cpu_v8_load(g + i, k), uv = cpu_v8_load(u + i, k);
        cpu_v8_store(h + i, gv / (1.0f + cpu_expf8(-gv)) * uv, k);
    }
}

void cpu_swiglu_bwd(act_t *dg_, act_t *du_, const act_t *dh_, const act_t *g_, const act_t *u_, size_t n) {
    float *dg = dg_, *du = du_;
    const float *dh = dh_, *g = g_, *u = u_;
    const long nv = (long)((n + 7) / 8);
    #pragma omp parallel for schedule(static) if (n > CPU_SERIAL_WORK)
    for (long v = 0; v < nv; v++) {
        size_t i = (size_t)v * 8, k = n - i;
        cpu_v8f gv = cpu_v8_load(g + i, k), uv = cpu_v8_load(u + i, k), dhv = cpu_v8_load(dh + i, k);
        cpu_v8f sig = 1.0f / (1.0f + cpu_expf8(-gv));
        cpu_v8_store(du + i, dhv * gv * sig, k);
        cpu_v8_store(dg + i, dhv * uv * sig * (1.0f + gv * (1.0f - sig)), k);
    }
}

void cpu_embedding_fwd(act_t *out_, const int32_t *tokens, const act_t *table_, int N, int D) {
    float *out = out_;
    const float *table = table_;
    #pragma omp parallel for schedule(static) if ((size_t)N * D > CPU_SERIAL_WORK)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * D);
}

void cpu_embedding_bwd(float *dtable, const int32_t *tokens, const act_t *dout_, int N, int D) {
    const float *dout = dout_;
    #pragma omp parallel
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
