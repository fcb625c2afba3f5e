/* Grouped mean losses with bootstrap standard errors and a Hotelling-type homogeneity test
 * (definitions in trainer/loss_stats.h, docs/spec.md §4.8).
 *
 * I_x(a, b) by the continued fraction
 *   I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...))),
 *   d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),  d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)),
 * evaluated with the modified Lentz method where x < (a + 1) / (a + b + 2), and through
 * I_x(a, b) = 1 - I_{1-x}(b, a) otherwise. */
#include "trainer/loss_stats.h"
#include "common/errors.h"
#include "common/splitmix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BETA_MAX_ITER = 10000 };
#define BETA_EPS 1e-15
#define BETA_TINY 1e-300

static double beta_fraction(double a, double b, double x) {
    double qab = a + b, qap = a + 1.0, qam = a - 1.0;
    double c = 1.0, d = 1.0 - qab * x / qap;
    if (fabs(d) < BETA_TINY) d = BETA_TINY;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= BETA_MAX_ITER; m++) {
        int m2 = 2 * m;
        double an = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + an * d;
        if (fabs(d) < BETA_TINY) d = BETA_TINY;
        c = 1.0 + an / c;
        if (fabs(c) < BETA_TINY) c = BETA_TINY;
        d = 1.0 / d;
        h *= d * c;
        an = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + an * d;
        if (fabs(d) < BETA_TINY) d = BETA_TINY;
        c = 1.0 + an / c;
        if (fabs(c) < BETA_TINY) c = BETA_TINY;
        d = 1.0 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1.0) < BETA_EPS) break;
    }
    return h;
}

double beta_inc(double a, double b, double x) {
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return NAN;
    if (x == 0 || x == 1) return x;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
    return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

double f_sf(double x, double d1, double d2) {
    if (!(d1 > 0) || !(d2 > 0) || isnan(x)) return NAN;
    if (x <= 0) return 1.0;
    if (isinf(x)) return 0.0;
    return beta_inc(0.5 * d2, 0.5 * d1, d2 / (d2 + d1 * x));
}


/* Cholesky factor of the SPD matrix a [q, q] in place (lower triangle); -1 when not positive definite. */
static int cholesky(double *a, int q) {
    for (int j = 0; j < q; j++) {
        double s = a[(size_t)j * q + j];
        for (int k = 0; k < j; k++) s -= a[(size_t)j * q + k] * a[(size_t)j * q + k];
        if (!(s > 0) || !isfinite(s)) return -1;
        double l = sqrt(s);
        a[(size_t)j * q + j] = l;
        for (int i = j + 1; i < q; i++) {
            double t = a[(size_t)i * q + j];
            for (int k = 0; k < j; k++) t -= a[(size_t)i * q + k] * a[(size_t)j * q + k];
            a[(size_t)i * q + j] = t / l;
        }
    }
    return 0;
}

void loss_stats_free(LossStats *s) {
    if (!s) return;
    free(s->mean), free(s->se), free(s->tokens);
    memset(s, 0, sizeof *s);
}

int loss_stats_compute(const double *sum, const double *cnt, long n, int K, int B, uint64_t seed, LossStats *out,
                       char *err) {
    memset(out, 0, sizeof *out);
    if (n < 0 || K < 1 || B < 2 || (n > 0 && (!sum || !cnt)))
        return set_err(err, "loss_stats: expected n >= 0 units, K >= 1 groups, B >= 2 replicates (got %ld, %d, %d)", n, K, B);
    out->K = K, out->units = n, out->B = B, out->seed = seed;
    out->t2 = out->F = out->p = out->overall_se = NAN;
    out->mean = malloc(sizeof(double) * K);
    out->se = malloc(sizeof(double) * K);
    out->tokens = calloc((size_t)K, sizeof(double));
    int *tested = malloc(sizeof(int) * K);            /* the tested groups' indices, K' of them */
    long *units_with = calloc((size_t)K, sizeof(long));
    double *gsum = calloc((size_t)K + 1, sizeof(double)), *gcnt = calloc((size_t)K + 1, sizeof(double));
    long *draw = malloc(sizeof(long) * (n > 0 ? n : 1));
    double *rep = malloc(sizeof(double) * (size_t)B * (K + 1));   /* [B, K + 1]: groups, then overall */
    if (!out->mean || !out->se || !out->tokens || !tested || !units_with || !gsum || !gcnt || !draw || !rep) {
        free(tested), free(units_with), free(gsum), free(gcnt), free(draw), free(rep);
        loss_stats_free(out);
        return set_err(err, "loss_stats: out of memory for %ld units x %d groups x %d replicates", n, K, B);
    }
    /* point estimates */
    double all_s = 0, all_c = 0;
    long units_any = 0;                               /* units with a token in any group */
    for (long u = 0; u < n; u++) {
        int any = 0;
        for (int k = 0; k < K; k++) {
            double c = cnt[(size_t)u * K + k];
            gsum[k] += sum[(size_t)u * K + k];
            gcnt[k] += c;
            if (c > 0) units_with[k]++, any = 1;
        }
        units_any += any;
    }
    int Kt = 0;
    for (int k = 0; k < K; k++) {
        out->tokens[k] = gcnt[k];
        out->mean[k] = gcnt[k] > 0 ? gsum[k] / gcnt[k] : NAN;
        out->se[k] = NAN;
        all_s += gsum[k], all_c += gcnt[k];
        if (units_with[k] >= 2) tested[Kt++] = k;
    }
    out->tested = Kt;
    out->overall = all_c > 0 ? all_s / all_c : NAN;
    out->overall_tokens = all_c;

    /* replicates */
    uint64_t state = seed;
    long attempts = 0, max_attempts = 100L * B + 1000;
    for (int b = 0; b < B && n > 0 && all_c > 0;) {
        if (++attempts > max_attempts) break;
        for (long i = 0; i < n; i++) draw[i] = (long)(splitmix64(&state) % (uint64_t)n);
        memset(gsum, 0, sizeof(double) * (K + 1));
        memset(gcnt, 0, sizeof(double) * (K + 1));
        for (long i = 0; i < n; i++) {
            const double *s = sum + (size_t)draw[i] * K, *c = cnt + (size_t)draw[i] * K;
            for (int k = 0; k < K; k++) gsum[k] += s[k], gcnt[k] += c[k];
        }
        int empty = 0;
        for (int j = 0; j < Kt; j++) empty |= !(gcnt[tested[j]] > 0);
        double s_all = 0, c_all = 0;
        for (int k = 0; k < K; k++) s_all += gsum[k], c_all += gcnt[k];
        if (empty || !(c_all > 0)) {
            out->redrawn++;
            continue;
        }
        double *r = rep + (size_t)b * (K + 1);
        for (int k = 0; k < K; k++) r[k] = gcnt[k] > 0 ? gsum[k] / gcnt[k] : NAN;
        r[K] = s_all / c_all;
        b++;
    }
    int complete = attempts <= max_attempts && n > 0 && all_c > 0;
    if (complete) {
        for (int j = 0; j <= Kt; j++) {                       /* the tested groups, then overall */
            int k = j < Kt ? tested[j] : K;
            double mu = 0, v = 0;
            for (int b = 0; b < B; b++) mu += rep[(size_t)b * (K + 1) + k];
            mu /= B;
            for (int b = 0; b < B; b++) {
                double e = rep[(size_t)b * (K + 1) + k] - mu;
                v += e * e;
            }
            double se = sqrt(v / (B - 1));
            if (j < Kt) out->se[k] = se;
            else out->overall_se = units_any >= 2 ? se : NAN;   /* one unit: every replicate is it, sd 0 */
        }
        /* Hotelling-type test on the contrasts against the last tested group */
        int q = Kt - 1;
        if (q >= 1 && n > q) {
            double *cov = calloc((size_t)q * q, sizeof(double)), *d = malloc(sizeof(double) * q);
            double *mu = calloc((size_t)q, sizeof(double));
            if (cov && d && mu) {
                int last = tested[q];
                for (int j = 0; j < q; j++) d[j] = out->mean[tested[j]] - out->mean[last];
                for (int b = 0; b < B; b++) {
                    const double *r = rep + (size_t)b * (K + 1);
                    for (int j = 0; j < q; j++) mu[j] += r[tested[j]] - r[last];
                }
                for (int j = 0; j < q; j++) mu[j] /= B;
                for (int b = 0; b < B; b++) {
                    const double *r = rep + (size_t)b * (K + 1);
                    for (int i = 0; i < q; i++) {
                        double ei = r[tested[i]] - r[last] - mu[i];
                        for (int j = 0; j <= i; j++) cov[(size_t)i * q + j] += ei * (r[tested[j]] - r[last] - mu[j]);
                    }
                }
                for (int i = 0; i < q; i++)
                    for (int j = 0; j <= i; j++) cov[(size_t)i * q + j] /= (B - 1);
                if (cholesky(cov, q) == 0) {
                    /* d' Sigma^-1 d = |L^-1 d|^2 (forward substitution) */
                    double quad = 0;
                    for (int i = 0; i < q; i++) {
                        double t = d[i];
                        for (int k = 0; k < i; k++) t -= cov[(size_t)i * q + k] * d[k];
                        d[i] = t / cov[(size_t)i * q + i];
                        quad += d[i] * d[i];
                    }
                    out->t2 = (double)(n - 1) / n * quad;
                    out->df1 = q;
                    out->df2 = (int)(n - q);
                    out->F = out->t2 * (double)(n - q) / ((double)q * (n - 1));
                    out->p = f_sf(out->F, out->df1, out->df2);
                }
            }
            free(cov), free(d), free(mu);
        }
    }
    free(tested), free(units_with), free(gsum), free(gcnt), free(draw), free(rep);
    if (!complete && n > 0 && all_c > 0) {
        long redrawn = out->redrawn;
        loss_stats_free(out);
        return set_err(err, "loss_stats: %ld of %ld bootstrap draws left a tested group without tokens: the groups are too sparse "
                            "for %d replicates", redrawn, attempts, B);
    }
    return 0;
}

void loss_stats_power_note(const LossStats *s, char *out, size_t len) {
    if (len) out[0] = 0;
    if (isnan(s->p) || s->df2 >= LOSS_STATS_FEW_DF) return;
    snprintf(out, len, " (only %d df beyond the %d contrasts: %ld windows; the test has little power, more validation "
             "windows sharpen it)", s->df2, s->df1, s->units);
}
