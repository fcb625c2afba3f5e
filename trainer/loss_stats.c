/* Per-group mean loss with window-clustered standard errors (definitions in trainer/loss_stats.h,
 * docs/spec.md §3c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "trainer/loss_stats.h"

int loss_stats_init(LossStats *ls, int groups) {
    memset(ls, 0, sizeof *ls);
    if (groups < 1) return -1;
    ls->moments = calloc((size_t)(groups + 1) * LOSS_STATS_MOMENTS, sizeof(double));
    ls->window = malloc(sizeof(double) * 2 * ((size_t)groups + 1));
    if (!ls->moments || !ls->window) { loss_stats_free(ls); return -1; }
    ls->groups = groups;
    return 0;
}

void loss_stats_free(LossStats *ls) {
    free(ls->moments);
    free(ls->window);
    memset(ls, 0, sizeof *ls);
}

static void add_cluster(double *m, double s, double n) {
    m[0] += s, m[1] += n, m[2] += s * s, m[3] += s * n, m[4] += n * n;
}

void loss_stats_add_window(LossStats *ls, const float *loss, const unsigned char *counted, int T, long offset) {
    const int P = ls->groups;
    double *s = ls->window, *n = ls->window + P + 1;    /* [P + 1] each */
    memset(s, 0, sizeof(double) * 2 * ((size_t)P + 1));
    long g0 = ((offset % P) + P) % P;
    for (int t = 0; t < T; t++) {
        if (counted && !counted[t]) continue;
        int g = (int)((g0 + t) % P);
        s[g] += loss[t], n[g] += 1;
        s[P] += loss[t], n[P] += 1;
    }
    for (int g = 0; g <= P; g++) add_cluster(ls->moments + (size_t)g * LOSS_STATS_MOMENTS, s[g], n[g]);
    ls->windows += 1;
}

void loss_stats_get(const LossStats *ls, int g, double *mean, double *se, double *tokens) {
    const double *m = ls->moments + (size_t)g * LOSS_STATS_MOMENTS;
    const double K = ls->windows, N = m[1];
    double mu = N > 0 ? m[0] / N : NAN;
    double ss = m[2] - 2 * mu * m[3] + mu * mu * m[4];   /* sum_k (s_k - mu n_k)^2 */
    if (ss < 0) ss = 0;                                  /* rounding of an exact 0 */
    *mean = mu;
    *se = N > 0 && K >= 2 ? sqrt(K / (K - 1) * ss) / N : NAN;
    *tokens = N;
}
