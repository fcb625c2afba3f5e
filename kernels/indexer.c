/* The lightning indexer (kernels/indexer.h, docs/spec.md §5.4) on host fp32 arrays: the CPU backend's ops indexer_* (kernels/cpu/cpu_indexer.c). */
#include "kernels/indexer.h"
#include "kernels/visibility.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_visible(const IndexerShape *s, int t) { return vis_n_entries(s->t0 + t, s->W, s->S, s->o, s->nW); }
static float w_scale(const IndexerShape *s) { return (float)(1.0 / sqrt((double)s->dI * s->HI)); }

void indexer_scores(const IndexerShape *s, const float *iq, const float *iw, const float *ik, float *score) {
    const int HI = s->HI, dI = s->dI, nW = s->nW;
    const float ws = w_scale(s);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            const size_t row = (size_t)b * s->T + t;
            const float *qt = iq + row * HI * dI, *wt = iw + row * HI;
            float *sc = score + row * nW;
            const int n = n_visible(s, t);
            for (int j = 0; j < nW; j++) {
                if (j >= n) { sc[j] = -INFINITY; continue; }
                const float *kj = ik + ((size_t)b * nW + j) * dI;
                float acc = 0.0f;
                for (int h = 0; h < HI; h++) {
                    float dot = 0.0f;
                    for (int x = 0; x < dI; x++) dot += qt[h * dI + x] * kj[x];
                    if (dot > 0.0f) acc += wt[h] * ws * dot;
                }
                sc[j] = acc;
            }
        }
}

/* top-k by (score descending, index ascending): a selection of k by repeated scans keeps the rule
 * exact without a comparator on floats that might be equal */
void indexer_select(const IndexerShape *s, const float *score, uint8_t *sel) {
    const int nW = s->nW;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            const size_t row = (size_t)b * s->T + t;
            const float *sc = score + row * nW;
            uint8_t *se = sel + row * nW;
            const int n = n_visible(s, t);
            memset(se, 0, (size_t)nW);
            if (n <= s->topk) { memset(se, 1, (size_t)n); continue; }
            for (int k = 0; k < s->topk; k++) {
                int best = -1;
                for (int j = 0; j < n; j++)
                    if (!se[j] && (best < 0 || sc[j] > sc[best])) best = j;   /* strict >: the lower j wins ties */
                se[best] = 1;
            }
        }
}

double indexer_kl(const IndexerShape *s, const float *q, const float *ck, const float *lse, const float *score,
                  const uint8_t *sel, float *dscore, long *count) {
    const int nW = s->nW, H = s->H, G = s->G, d = s->d, group = H / G;
    const double inv_sqrt_d = 1.0 / sqrt((double)d);
    /* KL_t per query, NaN where the set is empty; added in query order below (an OpenMP reduction
     * would add the threads' partial sums in whatever order they finish: other bits run to run) */
    double *kl_row = malloc(sizeof(double) * ((size_t)s->B * s->T > 0 ? (size_t)s->B * s->T : 1));
    if (!kl_row) {
        fprintf(stderr, "phaselab: out of memory: %zu bytes for the indexer's KL values\n", sizeof(double) * (size_t)s->B * s->T);
        exit(1);
    }
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->B; b++)
        for (int t = 0; t < s->T; t++) {
            const size_t row = (size_t)b * s->T + t;
            const float *sc = score + row * nW;
            const uint8_t *se = sel ? sel + row * nW : NULL;
            float *ds = dscore + row * nW;
            memset(ds, 0, sizeof(float) * nW);
            kl_row[row] = NAN;
            const int n = n_visible(s, t);
            double P[n > 0 ? n : 1], sumP = 0.0, mx = -INFINITY, sumR = 0.0;
            int m = 0;
            for (int j = 0; j < n; j++) {
                P[j] = 0.0;
                if (se && !se[j]) continue;
                m++;
                for (int h = 0; h < H; h++) {
                    const float *qh = q + (row * H + h) * d, *kj = ck + (((size_t)b * nW + j) * G + h / group) * d;
                    double dot = 0.0;
                    for (int x = 0; x < d; x++) dot += (double)qh[x] * kj[x];
                    P[j] += exp(dot * inv_sqrt_d - lse[row * H + h]);
                }
                sumP += P[j];
                if (sc[j] > mx) mx = sc[j];
            }
            if (m == 0 || !(sumP > 0.0)) continue;
            for (int j = 0; j < n; j++) if (!se || se[j]) sumR += exp(sc[j] - mx);
            const double lnR = log(sumR) + mx;
            double kl = 0.0;
            for (int j = 0; j < n; j++) {
                if (se && !se[j]) continue;
                const double p = P[j] / sumP, lr = sc[j] - lnR;
                if (p > 0.0) kl += p * (log(p) - lr);
                ds[j] = (float)(exp(lr) - p);
            }
            kl_row[row] = kl;
        }
    double total = 0.0;
    long queries = 0;
    for (size_t r = 0; r < (size_t)s->B * s->T; r++)
        if (!isnan(kl_row[r])) { total += kl_row[r]; queries++; }
    free(kl_row);
    *count = queries;
    return total;
}

void indexer_scores_bwd(const IndexerShape *s, const float *iq, const float *iw, const float *ik, const float *dscore,
                        float scale, float *diq, float *diw, float *dik) {
    const int HI = s->HI, dI = s->dI, nW = s->nW;
    const float ws = w_scale(s);
    memset(diq, 0, sizeof(float) * (size_t)s->B * s->T * HI * dI);
    memset(diw, 0, sizeof(float) * (size_t)s->B * s->T * HI);
    memset(dik, 0, sizeof(float) * (size_t)s->B * nW * dI);
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < s->B; b++)          /* dik rows of sequence b are written by its task only */
        for (int t = 0; t < s->T; t++) {
            const size_t row = (size_t)b * s->T + t;
            const float *qt = iq + row * HI * dI, *wt = iw + row * HI, *ds = dscore + row * nW;
            float *dq = diq + row * HI * dI, *dw = diw + row * HI;
            const int n = n_visible(s, t);
            for (int j = 0; j < n; j++) {
                const float g = ds[j] * scale;
                if (g == 0.0f) continue;
                const float *kj = ik + ((size_t)b * nW + j) * dI;
                float *dk = dik + ((size_t)b * nW + j) * dI;
                for (int h = 0; h < HI; h++) {
                    float dot = 0.0f;
                    for (int x = 0; x < dI; x++) dot += qt[h * dI + x] * kj[x];
                    if (dot <= 0.0f) continue;
                    dw[h] += g * ws * dot;
                    const float c = g * wt[h] * ws;
                    for (int x = 0; x < dI; x++) { dq[h * dI + x] += c * kj[x]; dk[x] += c * qt[h * dI + x]; }
                }
            }
        }
}
