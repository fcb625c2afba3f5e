/* Fused classifier + cross-entropy on the CPU, chunked over rows so that only CHUNK x V logits
 * exist at a time (the Qwen3 vocabulary is 151,936 wide).
 *   logits_n = x_n E^T,  loss_n = logsumexp(logits_n) - logits_n[target_n]   (0 if target < 0)
 * With gradients requested, for g = grad_scale:
 *   dlogits_n = g (softmax(logits_n) - onehot(target_n)),  dx_n = dlogits_n E,  dE += dlogits^T x
 * One pass of exps per row (row_exp_sum): e_v = exp(l_v - max) in 8 float lanes (cpu_expf8,
 * within 2 ulp), kept in place, their sum accumulated in double (lse = max + log sum); the
 * softmax is then e_v * (g / sum). Until 2026-12-03 each logit took two libm double exps (one
 * for the sum, one for the gradient), about half of this op's time on the bench model. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

#define CLASSIFIER_CHUNK_ELEMS (1 << 20)   /* logits held at once: 4 MiB */

/* Rows per chunk so that chunk x V logits fit the budget. */
static int chunk_rows(int N, int V) {
    int chunk = CLASSIFIER_CHUNK_ELEMS / V;
    if (chunk < 1) chunk = 1;
    return chunk > N ? N : chunk;
}

/* One row of V logits in place: l_v <- exp(l_v - mx), mx = max_v l_v (returned); *sum = sum_v of
 * those exps. The exps run in 8 lanes (the last vector's missing lanes are exp(-inf) = 0); each
 * lane's float partial sum is folded into a double after at most FOLD vectors (a float sum of
 * <= 64 terms in (0, 1] keeps ~1e-7 relative error), the lanes added in lane order: a fixed
 * order, so the same bits on every run and thread count. */
#define FOLD 64
/* logits 8b..8b+7 of the row; lanes past V are -inf */
static cpu_v8f row_vector(const float *l, int b, int V) {
    const cpu_v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    const int left = V - 8 * b;
    cpu_v8f x = cpu_v8_load(l + 8 * b, left);
    return left < 8 ? cpu_v8_select(lane < left, x, x - INFINITY) : x;
}
static float row_exp_sum(float *l, int V, double *sum) {
    const int nv = (V + 7) / 8;
    cpu_v8f vm = {0};
    vm -= INFINITY;
    for (int b = 0; b < nv; b++) {
        cpu_v8f x = row_vector(l, b, V);
        vm = cpu_v8_select(x > vm, x, vm);
    }
    float mx = vm[0];
    for (int k = 1; k < 8; k++) if (vm[k] > mx) mx = vm[k];
    double lanes[8] = {0};
    for (int b0 = 0; b0 < nv; b0 += FOLD) {
        cpu_v8f part = {0};
        for (int b = b0; b < nv && b < b0 + FOLD; b++) {
            cpu_v8f e = cpu_expf8(row_vector(l, b, V) - mx);
            cpu_v8_store(l + 8 * b, e, V - 8 * b);
            part += e;
        }
        for (int k = 0; k < 8; k++) lanes[k] += part[k];
    }
    double s = 0.0;
    for (int k = 0; k < 8; k++) s += lanes[k];
    *sum = s;
    return mx;
}

/* logits [rows, V] = x rows [r0, r0 + rows) @ emb^T */
static void chunk_logits(float *logits, const float *x, const float *emb, int r0, int rows, int D, int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, V, D, 1.0f, x + (size_t)r0 * D, D, emb, D, 0.0f,
                logits, V);
}

void cpu_classifier(BackendCtx *ctx, const act_t *x_, const act_t *emb_, const int32_t *targets, int N, int D, int V,
                    float *losses, act_t *dx_, float *demb, float grad_scale) {
    const float *x = CF(x_), *emb = CF(emb_);
    float *dx = F(dx_);
    const int chunk = chunk_rows(N, V);
    float *logits = cpu_scratch(sizeof(float) * (size_t)chunk * V, "classifier logits");
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        chunk_logits(logits, x, emb, r0, rows, D, V);
        #pragma omp parallel for schedule(static) num_threads(ctx->threads)
        for (int r = 0; r < rows; r++) {
            float *l = logits + (size_t)r * V;     /* [V] logits, then exps, then dlogits */
            const int tgt = targets[r0 + r];
            const float l_tgt = tgt >= 0 ? l[tgt] : 0.0f;
            double sum;
            const float mx = row_exp_sum(l, V, &sum);
            losses[r0 + r] = tgt >= 0 ? (float)(mx + log(sum) - l_tgt) : 0.0f;
            if (dx) {
                if (tgt < 0) { memset(l, 0, sizeof(float) * V); continue; }
                const float p_scale = (float)(grad_scale / sum);
                for (int v = 0; v < V; v++) l[v] *= p_scale;
                l[tgt] -= grad_scale;
            }
        }
        if (dx) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, V, 1.0f, logits, V, emb, D,
                        0.0f, dx + (size_t)r0 * D, D);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, D, rows, 1.0f, logits, V,
                        x + (size_t)r0 * D, D, 1.0f, demb, D);
        }
    }
    free(logits);
}

void cpu_logits_argmax(BackendCtx *ctx, const act_t *x_, const act_t *emb_, int N, int D, int V, int32_t *out) {
    const float *x = CF(x_), *emb = CF(emb_);
    const int chunk = chunk_rows(N, V);
    float *logits = cpu_scratch(sizeof(float) * (size_t)chunk * V, "argmax logits");
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        chunk_logits(logits, x, emb, r0, rows, D, V);
        for (int r = 0; r < rows; r++) {
            const float *l = logits + (size_t)r * V;
            int best = 0;
            for (int v = 1; v < V; v++) if (l[v] > l[best]) best = v;
            out[r0 + r] = best;
        }
    }
    free(logits);
}
