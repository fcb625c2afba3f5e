/* Fused classifier + cross-entropy on the CPU, chunked over rows so that only CHUNK x V logits
 * exist at a time (the Qwen3 vocabulary is 151,936 wide).
 *   logits_n = x_n E^T,  loss_n = logsumexp(logits_n) - logits_n[target_n]   (0 if target < 0)
 * With gradients requested, for g = grad_scale:
 *   dlogits_n = g (softmax(logits_n) - onehot(target_n)),  dx_n = dlogits_n E,  dE += dlogits^T x
 * One pass of exps per row (row_exp_sum): e_v = exp(l_v - max) in 8 float lanes (cpu_expf8,
 * within 2 ulp), kept in place, their sum accumulated in double (lse = max + log sum); the
 * softmax is then e_v * (g / sum). Until 2026-12-03 each logit took two libm double exps (one
 * for the sum, one for the gradient), about half of this op's time on the bench model.
 *
 * Large vocabularies (V > CLASSIFIER_ROW_PATH_MAX_V): chunks of the VOCABULARY, not of rows. A row
 * chunk of a 151,936-wide vocabulary is ~6 rows, so each chunk's dE += dlogits^T x streamed the
 * whole V x D gradient through memory for 6 rows (the step ran at ~5% of the sgemm rate). Here,
 * for column chunks c = [v0, v0 + Vc) with N x Vc logits in cache (CLASSIFIER_THREAD_ELEMS a thread):
 *   pass 1  L = x E_c^T [N, Vc]; per row the online logsumexp: m' = max(m, max_c L),
 *           s' = s e^(m - m') + sum_c e^(L - m')  (chunk sum in 8 lanes as above, s in double);
 *           the target's logit picked up in its chunk; loss_n = m + log s - L[target]
 *   pass 2  (gradients) L recomputed, dlogits = g (e^(L - lse_n) - onehot) in place, then
 *           dx += dlogits E_c and dE_c += dlogits^T x: each row of dE written once per call.
 * The recomputed logits cost one more N x V x D GEMM (4 instead of 3), all of them at shapes the
 * BLAS runs near its peak (M = N, K = D or Vc), with nothing vocabulary-sized leaving the cache.
 * Kept exps instead (when the gradients are wanted and N V floats fit the budget
 * PHASELAB_CLASSIFIER_KEEP_MB, default 1024 MiB, 0 = never): pass 1 leaves each chunk's
 * e^(L - m_c) in a buffer of N x V floats (BackendCtx.cls_keep, kept for the next call) with
 * the chunk's row maxima m_c, and pass 2 scales them, dlogits = g e^(L - m_c) e^(m_c - lse),
 * instead of recomputing L: 3 GEMMs, the fourth's time traded for one write and one read of
 * N V floats (at the 152k vocabulary with N = 1,024: 622 MB, ~0.7 s of GEMM against ~0.1 s of
 * memory traffic on the 2-core machine; PyTorch, which materialises the logits, was 1.5-2.3x
 * faster there with 4 GEMMs on our side). The two routes round differently (within float
 * accuracy); each is deterministic at a given thread count.
 * Threads take whole chunks (classifier_vocab_chunks).
 * Vocabularies up to the limit keep the row path and its exact bits (every existing small-vocab
 * run); above it the rounding differs from the row path within float accuracy. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_expf.h"

#define CLASSIFIER_CHUNK_ELEMS (1 << 20)   /* logits held at once: 4 MiB */
#define CLASSIFIER_ROW_PATH_MAX_V 4096      /* above: vocabulary chunks (row chunks under 256 rows) */

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

/* Columns per vocabulary chunk: one thread's N x Vc logits within CLASSIFIER_THREAD_ELEMS (its
 * share of the L2), a multiple of 64 in [256, 8192]. */
#define CLASSIFIER_THREAD_ELEMS (1 << 18)   /* 1 MiB of logits per thread */
static int vocab_chunk(int N, int V) {
    int c = CLASSIFIER_THREAD_ELEMS / (N > 0 ? N : 1) / 64 * 64;
    c = c < 256 ? 256 : c > 8192 ? 8192 : c;
    return c > V ? V : c;
}

/* l [n] <- g e^(l - lse) (the softmax scaled by g) */
static void row_softmax_scaled(float *l, int n, float lse, float g) {
    for (int i = 0; i < n; i += 8) cpu_v8_store(l + i, cpu_expf8(cpu_v8_load(l + i, n - i) - lse) * g, n - i);
}

/* The online logsumexp state of a row, (m, s) <- (m, s) (+) (cm, cs) */
static void lse_merge(float *m, double *s, float cm, double cs) {
    if (cm > *m) {
        *s = *s * exp((double)*m - cm) + cs;
        *m = cm;
    } else if (cs > 0) {
        *s += cs * exp((double)cm - *m);
    }
}

/* Threads split the vocabulary chunks (chunk k to thread k mod nt), each with its own logits
 * buffer, row state and dx partial, and single-threaded GEMMs (OpenBLAS's OpenMP build runs one
 * thread inside a parallel region): two parallel regions a call, no barrier per chunk, which a
 * shared machine's descheduled thread would stall. The partials are merged in thread order: the
 * same bits on every run at a given thread count. */
/* The kept-exps buffer of N x V floats when the gradients are wanted and it fits the budget
 * (PHASELAB_CLASSIFIER_KEEP_MB, default 1024; 0: never), else NULL (pass 2 recomputes). */
static float *keep_buffer(BackendCtx *ctx, size_t n_floats) {
    const char *env = getenv("PHASELAB_CLASSIFIER_KEEP_MB");
    const double limit_mb = env && *env ? atof(env) : 1024.0;
    const size_t bytes = n_floats * sizeof(float);
    if (!(limit_mb > 0) || (double)bytes > limit_mb * 1048576.0) return NULL;
    if (ctx->cls_keep_bytes < bytes) {
        free(ctx->cls_keep);
        ctx->cls_keep = cpu_scratch(bytes, "classifier kept exps");
        ctx->cls_keep_bytes = bytes;
    }
    return ctx->cls_keep;
}

static void classifier_vocab_chunks(BackendCtx *ctx, const float *x, const float *emb, const int32_t *targets, int N,
                                    int D, int V, float *losses, float *dx, float *demb, float grad_scale) {
    const int Vc = vocab_chunk(N, V), n_chunks = (V + Vc - 1) / Vc;
    const int nt = ctx->threads < n_chunks ? ctx->threads : n_chunks;
    float *keep = dx ? keep_buffer(ctx, (size_t)N * V) : NULL;                                   /* chunk k at v0 N: [N, vc] */
    float *logits = keep ? NULL : cpu_scratch(sizeof(float) * (size_t)nt * N * Vc, "classifier logits");   /* [nt, N, Vc] */
    float *chunk_max = keep ? cpu_scratch(sizeof(float) * (size_t)n_chunks * N, "classifier chunk maxima") : NULL;  /* [n_chunks, N] */
    float *row_max = cpu_scratch(sizeof(float) * ((size_t)nt + 1) * N, "classifier row state");   /* [nt, N] + [N] */
    float *tgt_logit = row_max + (size_t)nt * N;
    double *row_sum = cpu_scratch(sizeof(double) * (size_t)nt * N, "classifier row sums");         /* [nt, N] */
    float *dx_part = dx && nt > 1 ? cpu_scratch(sizeof(float) * (size_t)(nt - 1) * N * D, "classifier dx partials") : NULL;
    for (size_t i = 0; i < (size_t)nt * N; i++) row_max[i] = -INFINITY, row_sum[i] = 0.0;
    for (int r = 0; r < N; r++) tgt_logit[r] = 0.0f;
    #pragma omp parallel num_threads(nt)
    {                                                    /* pass 1: the online logsumexp */
        const int tid = omp_get_thread_num();
        float *m = row_max + (size_t)tid * N;
        double *s = row_sum + (size_t)tid * N;
        for (int k = tid; k < n_chunks; k += nt) {
            const int v0 = k * Vc, vc = V - v0 < Vc ? V - v0 : Vc;
            float *L = keep ? keep + (size_t)v0 * N : logits + (size_t)tid * N * Vc;
            chunk_logits(L, x, emb + (size_t)v0 * D, 0, N, D, vc);
            for (int r = 0; r < N; r++) {
                float *l = L + (size_t)r * vc;
                const int t = targets[r] - v0;
                if (t >= 0 && t < vc) tgt_logit[r] = l[t];      /* one chunk holds it: one writer */
                double cs;
                const float cm = row_exp_sum(l, vc, &cs);      /* l <- e^(l - cm) */
                if (chunk_max) chunk_max[(size_t)k * N + r] = cm;
                lse_merge(m + r, s + r, cm, cs);
            }
        }
    }
    for (int r = 0; r < N; r++) {
        for (int t = 1; t < nt; t++) lse_merge(row_max + r, row_sum + r, row_max[(size_t)t * N + r], row_sum[(size_t)t * N + r]);
        row_max[r] = (float)(row_max[r] + log(row_sum[r]));   /* now lse */
        losses[r] = targets[r] >= 0 ? row_max[r] - tgt_logit[r] : 0.0f;
    }
    if (dx) {                                            /* pass 2: the gradients, chunk by chunk */
        #pragma omp parallel num_threads(nt)
        {
            const int tid = omp_get_thread_num();
            float *dxt = tid ? dx_part + (size_t)(tid - 1) * N * D : dx;
            for (int k = tid; k < n_chunks; k += nt) {
                const int v0 = k * Vc, vc = V - v0 < Vc ? V - v0 : Vc;
                const float *e_c = emb + (size_t)v0 * D;    /* [vc, D] */
                float *L = keep ? keep + (size_t)v0 * N : logits + (size_t)tid * N * Vc;
                if (!keep) chunk_logits(L, x, e_c, 0, N, D, vc);
                for (int r = 0; r < N; r++) {
                    float *l = L + (size_t)r * vc;
                    if (targets[r] < 0) { memset(l, 0, sizeof(float) * vc); continue; }
                    if (keep) {                          /* g e^(l - cm) e^(cm - lse) */
                        const float f = (float)(grad_scale * exp((double)chunk_max[(size_t)k * N + r] - row_max[r]));
                        for (int i = 0; i < vc; i += 8) cpu_v8_store(l + i, cpu_v8_load(l + i, vc - i) * f, vc - i);
                    } else {
                        row_softmax_scaled(l, vc, row_max[r], grad_scale);
                    }
                    const int t = targets[r] - v0;
                    if (t >= 0 && t < vc) l[t] -= grad_scale;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, D, vc, 1.0f, L, vc, e_c, D, k == tid ? 0.0f : 1.0f,
                            dxt, D);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vc, D, N, 1.0f, L, vc, x, D, 1.0f,
                            demb + (size_t)v0 * D, D);
            }
        }
        for (int t = 1; t < nt; t++) {                   /* dx = sum of the partials, in thread order */
            const float *p = dx_part + (size_t)(t - 1) * N * D;
            for (size_t i = 0; i < (size_t)N * D; i++) dx[i] += p[i];
        }
    }
    free(logits);
    free(chunk_max);
    free(row_max);
    free(row_sum);
    free(dx_part);
}

void cpu_classifier(BackendCtx *ctx, const act_t *x_, const act_t *emb_, const int32_t *targets, int N, int D, int V,
                    float *losses, act_t *dx_, float *demb, float grad_scale) {
    const float *x = CF(x_), *emb = CF(emb_);
    float *dx = F(dx_);
    if (V > CLASSIFIER_ROW_PATH_MAX_V) {
        classifier_vocab_chunks(ctx, x, emb, targets, N, D, V, losses, dx, demb, grad_scale);
        return;
    }
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
    if (V > CLASSIFIER_ROW_PATH_MAX_V) {                 /* vocabulary chunks: the first maximum over all of them */
        const int Vc = vocab_chunk(N, V);
        float *logits = cpu_scratch(sizeof(float) * (size_t)N * Vc, "argmax logits"), *best = cpu_scratch(sizeof(float) * (size_t)N, "argmax best");
        for (int v0 = 0; v0 < V; v0 += Vc) {
            const int vc = V - v0 < Vc ? V - v0 : Vc;
            chunk_logits(logits, x, emb + (size_t)v0 * D, 0, N, D, vc);
            for (int r = 0; r < N; r++) {
                const float *l = logits + (size_t)r * vc;
                for (int v = 0; v < vc; v++)
                    if ((v0 == 0 && v == 0) || l[v] > best[r]) best[r] = l[v], out[r] = v0 + v;
            }
        }
        free(logits);
        free(best);
        return;
    }
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
