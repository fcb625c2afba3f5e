/* Fused classifier + cross-entropy on the CPU, chunked over rows so that only CHUNK x V logits
 * exist at a time (the Qwen3 vocabulary is 151,936 wide).
 *   logits_n = x_n E^T,  loss_n = logsumexp(logits_n) - logits_n[target_n]   (0 if target < 0)
 * With gradients requested, for g = grad_scale:
 *   dlogits_n = g (softmax(logits_n) - onehot(target_n)),  dx_n = dlogits_n E,  dE += dlogits^T x
 * logsumexp is accumulated in double; everything else fp32. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"

#define CLASSIFIER_CHUNK_ELEMS (1 << 20)   /* logits held at once: 4 MiB */

/* Rows per chunk so that chunk x V logits fit the budget. */
static int chunk_rows(int N, int V) {
    int chunk = CLASSIFIER_CHUNK_ELEMS / V;
    if (chunk < 1) chunk = 1;
    return chunk > N ? N : chunk;
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
    float *logits = malloc(sizeof(float) * (size_t)chunk * V);
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        chunk_logits(logits, x, emb, r0, rows, D, V);
        #pragma omp parallel for schedule(static) num_threads(ctx->threads)
        for (int r = 0; r < rows; r++) {
            float *l = logits + (size_t)r * V;
            int tgt = targets[r0 + r];
            float mx = -FLT_MAX;
            for (int v = 0; v < V; v++) if (l[v] > mx) mx = l[v];
            double sum = 0.0;
            for (int v = 0; v < V; v++) sum += exp((double)(l[v] - mx));
            double lse = mx + log(sum);
            losses[r0 + r] = tgt >= 0 ? (float)(lse - l[tgt]) : 0.0f;
            if (dx) {
                if (tgt < 0) { memset(l, 0, sizeof(float) * V); continue; }
                for (int v = 0; v < V; v++) l[v] = grad_scale * (float)exp(l[v] - lse);
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
    float *logits = malloc(sizeof(float) * (size_t)chunk * V);
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
