/* Phase-effect test: Pearson chi-square homogeneity test of correct/incorrect counts and the
 * regularized incomplete gamma function for its p-value (formulas in trainer/phase_test.h).
 *
 * Q(a, x): for x < a + 1 the series
 *     P(a, x) = e^{-x} x^a / Gamma(a + 1) * sum_{n>=0} x^n / ((a + 1) ... (a + n)),  Q = 1 - P,
 * otherwise the continued fraction
 *     Q(a, x) = e^{-x} x^a / Gamma(a) * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...)))
 * evaluated with the modified Lentz method. Both converge fast on their side of a + 1. */
#include "trainer/phase_test.h"
#include "kernels/visibility.h"   /* vis_phase: the phase of a position for a head's grid (docs/spec.md §2b) */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

enum { GAMMA_MAX_ITER = 100000 };
#define GAMMA_EPS 1e-15
#define GAMMA_TINY 1e-300

static double gamma_p_series(double a, double x) {
    double term = 1.0 / a, sum = term, ap = a;
    for (int n = 1; n < GAMMA_MAX_ITER; n++) {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if (fabs(term) < fabs(sum) * GAMMA_EPS) break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

static double gamma_q_fraction(double a, double x) {
    double b = x + 1.0 - a, c = 1.0 / GAMMA_TINY, d = 1.0 / b, h = d;
    for (int i = 1; i < GAMMA_MAX_ITER; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < GAMMA_TINY) d = GAMMA_TINY;
        c = b + an / c;
        if (fabs(c) < GAMMA_TINY) c = GAMMA_TINY;
        d = 1.0 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1.0) < GAMMA_EPS) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double gamma_q(double a, double x) {
    if (!(a > 0.0) || !(x >= 0.0)) return NAN;
    if (x == 0.0) return 1.0;
    if (isinf(x)) return 0.0;
    if (x < a + 1.0) {
        double q = 1.0 - gamma_p_series(a, x);
        return q < 0.0 ? 0.0 : q;
    }
    return gamma_q_fraction(a, x);
}

double chi2_sf(double x, int df) {
    if (df < 1 || !(x >= 0.0)) return NAN;
    return gamma_q(0.5 * df, 0.5 * x);
}

int chi2_small_expected(const ChiSquare *t) {
    return t->df > 0 && isfinite(t->min_expected) && t->min_expected < PHASE_MIN_EXPECTED;
}

ChiSquare chi2_homogeneity(const long *correct, const long *total, int K) {
    ChiSquare r = {NAN, NAN, 0, NAN, 0};
    double N = 0, C = 0;
    int groups = 0;
    for (int g = 0; g < K; g++) {
        if (total[g] <= 0) continue;
        N += (double)total[g];
        C += (double)correct[g];
        groups++;
    }
    if (groups < 2) return r;
    r.df = groups - 1;
    double I = N - C;
    if (C == 0 || I == 0) {          /* one-column table: trivially homogeneous */
        r.chi2 = 0.0;
        r.p = 1.0;
        return r;
    }
    double x2 = 0.0;
    for (int g = 0; g < K; g++) {
        if (total[g] <= 0) continue;
        double n = (double)total[g], k = (double)correct[g];
        double ec = n * C / N, ei = n * I / N;
        if (!(r.min_expected <= ec)) r.min_expected = ec;
        if (!(r.min_expected <= ei)) r.min_expected = ei;
        x2 += (k - ec) * (k - ec) / ec + ((n - k) - ei) * ((n - k) - ei) / ei;
    }
    r.chi2 = x2;
    r.p = chi2_sf(x2, r.df);
    return r;
}

/* X^2 of a table with these correct counts, the group sizes n_g and C, I fixed (all n_g > 0). */
static double chi2_statistic(const long *correct, const long *total, int K, double N, double C) {
    double I = N - C, x2 = 0.0;
    for (int g = 0; g < K; g++) {
        double n = (double)total[g], k = (double)correct[g];
        double ec = n * C / N, ei = n * I / N;
        x2 += (k - ec) * (k - ec) / ec + ((n - k) - ei) * ((n - k) - ei) / ei;
    }
    return x2;
}

static uint64_t perm_next(uint64_t *state) {   /* splitmix64 */
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

ChiSquare chi2_permutation(const long *correct, const long *total, int K, int R, unsigned long long seed) {
    ChiSquare r = chi2_homogeneity(correct, total, K);
    if (r.df < 1 || !(r.chi2 > 0) || R < 1) return r;   /* undefined, or X^2 = 0: p = 1 either way */
    /* the non-empty groups, their labels per prompt */
    long N = 0, C = 0;
    int G = 0;
    for (int g = 0; g < K; g++) if (total[g] > 0) N += total[g], C += correct[g], G++;
    long *tot = malloc(sizeof(long) * G), *cnt = malloc(sizeof(long) * G), *obs = malloc(sizeof(long) * G);
    int *label = malloc(sizeof(int) * (size_t)N);
    if (!tot || !cnt || !obs || !label) {
        free(tot), free(cnt), free(obs), free(label);
        return r;                                        /* out of memory: the chi-square p stays */
    }
    G = 0;
    long at = 0;
    for (int g = 0; g < K; g++) {
        if (total[g] <= 0) continue;
        tot[G] = total[g], obs[G] = correct[g];
        for (long i = 0; i < total[g]; i++) label[at++] = G;
        G++;
    }
    double x2 = chi2_statistic(obs, tot, G, (double)N, (double)C);
    /* draw the smaller of the two classes: m prompts, counted as correct (or as wrong) */
    int draw_correct = C <= N - C;
    long m = draw_correct ? C : N - C;
    uint64_t state = seed;
    long extreme = 0;
    for (int b = 0; b < R; b++) {
        for (int g = 0; g < G; g++) cnt[g] = 0;
        for (long i = 0; i < m; i++) {
            long j = i + (long)(perm_next(&state) % (uint64_t)(N - i));
            int t = label[i];
            label[i] = label[j], label[j] = t;
            cnt[label[i]]++;
        }
        if (!draw_correct)
            for (int g = 0; g < G; g++) cnt[g] = tot[g] - cnt[g];
        if (chi2_statistic(cnt, tot, G, (double)N, (double)C) >= x2 * (1 - 1e-12)) extreme++;
    }
    r.p = (1.0 + (double)extreme) / (1.0 + R);
    r.permutations = R;
    free(tot), free(cnt), free(obs), free(label);
    return r;
}

ChiSquare phase_homogeneity_test(const long *correct, const long *total, int K) {
    ChiSquare r = chi2_homogeneity(correct, total, K);
    if (chi2_small_expected(&r)) r = chi2_permutation(correct, total, K, PHASE_PERMUTATIONS, PHASE_PERMUTATION_SEED);
    return r;
}

int fold_by_phase(const long *correct, const long *total, int P, int S, long *correct_out, long *total_out) {
    return fold_by_head_phase(correct, total, P, S, 0, correct_out, total_out);
}

int head_phase_map(int P, int S, int o, int *phase_of) {
    if (S < 1 || P < S || P % S) return -1;
    for (int r = 0; r < P; r++) phase_of[r] = vis_phase(r, S, o);   /* S | P: (t - o) mod S = (r - o) mod S */
    return 0;
}

int fold_by_phase_map(const long *correct, const long *total, int P, int S, const int *phase_of, long *correct_out,
                      long *total_out) {
    for (int r = 0; r < P; r++) if (phase_of[r] < 0 || phase_of[r] >= S) return -1;
    for (int s = 0; s < S; s++) correct_out[s] = total_out[s] = 0;
    for (int r = 0; r < P; r++) {
        correct_out[phase_of[r]] += correct[r];
        total_out[phase_of[r]] += total[r];
    }
    return 0;
}

int fold_by_head_phase(const long *correct, const long *total, int P, int S, int o, long *correct_out, long *total_out) {
    int map[PHASE_MAX_RESIDUES];
    if (P > PHASE_MAX_RESIDUES || head_phase_map(P, S, o, map)) return -1;
    return fold_by_phase_map(correct, total, P, S, map, correct_out, total_out);
}
