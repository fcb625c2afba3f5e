/* trainer/loss_stats: bootstrap standard errors and the homogeneity test of grouped mean losses
 * (docs/spec.md §4.8), on synthetic data whose answers are known in closed form:
 *   - I_x(1, b) = 1 - (1 - x)^b and I_x(a, 1) = x^a; F critical values of printed tables
 *     (F(2, 10) = 4.10, F(5, 20) = 2.71, F(1, 30) = 4.17 at 5%; F(3, 60) = 4.13 at 1%);
 *   - unit u, group k: m tokens of loss mu_k + w_u + e (w_u ~ N(0, tau^2) shared by the unit's
 *     groups, e ~ N(0, sigma^2)): with equal counts m_k is a mean of n iid unit means, so its
 *     standard error is sqrt((tau^2 + sigma^2 / m) / n);
 *   - under H0 (equal mu_k) the test's rejection rate at 5% over many data sets is near 5%,
 *     also with the strong correlation tau brings (a diagonal-only test would be far off);
 *   - a group shifted by 10 standard errors is found; groups without tokens or in one unit only
 *     are left out; same seed, same bits. */
#include "tests/check.h"
#include "trainer/loss_stats.h"
#include "common/errors.h"

#include <math.h>
#include <string.h>
#include <stdint.h>

static uint64_t rng_state = 12345;
static double unif(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif()); }

/* sum, cnt [n, K]: m tokens per (unit, group), loss mu[k] + w_u + e */
static void synth(double *sum, double *cnt, long n, int K, int m, const double *mu, double tau, double sigma) {
    for (long u = 0; u < n; u++) {
        double w = tau * gauss();
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int t = 0; t < m; t++) s += mu[k] + w + sigma * gauss();
            sum[u * K + k] = s;
            cnt[u * K + k] = m;
        }
    }
}

int main(void) {
    char err[ERR_LEN];
    /* special functions */
    double worst = 0;
    for (double x = 0.05; x < 1; x += 0.1) {
        worst = fmax(worst, fabs(beta_inc(1, 3.5, x) - (1 - pow(1 - x, 3.5))));
        worst = fmax(worst, fabs(beta_inc(2.5, 1, x) - pow(x, 2.5)));
    }
    check(worst < 1e-12, "beta_inc: I_x(1, b) = 1 - (1-x)^b and I_x(a, 1) = x^a", "largest error %g", worst);
    double p1 = f_sf(4.10, 2, 10), p2 = f_sf(2.71, 5, 20), p3 = f_sf(4.17, 1, 30), p4 = f_sf(4.13, 3, 60);
    check(fabs(p1 - 0.05) < 0.001 && fabs(p2 - 0.05) < 0.001 && fabs(p3 - 0.05) < 0.001 && fabs(p4 - 0.01) < 0.0005,
          "f_sf: printed F critical values (5%: F(2,10) 4.10, F(5,20) 2.71, F(1,30) 4.17; 1%: F(3,60) 4.13)",
          "p = %g %g %g %g", p1, p2, p3, p4);
    check(f_sf(0, 3, 4) == 1 && isnan(f_sf(1, 0, 4)) && isnan(beta_inc(1, 1, 1.5)), "f_sf / beta_inc edge cases", "");

    enum { N = 128, K = 24, M = 5 };
    static double sum[N * K], cnt[N * K];
    double mu[K];
    for (int k = 0; k < K; k++) mu[k] = 1.0;
    const double tau = 0.3, sigma = 1.0;
    const double se_true = sqrt((tau * tau + sigma * sigma / M) / N);

    /* the standard error, averaged over groups and data sets */
    double ratio = 0;
    int sets = 20;
    for (int s = 0; s < sets; s++) {
        synth(sum, cnt, N, K, M, mu, tau, sigma);
        LossStats st;
        if (loss_stats_compute(sum, cnt, N, K, LOSS_STATS_B, LOSS_STATS_SEED + s, &st, err)) {
            check(0, "bootstrap runs", "%s", err);
            return check_exit_code();
        }
        for (int k = 0; k < K; k++) ratio += st.se[k] / se_true;
        loss_stats_free(&st);
    }
    ratio /= sets * K;
    /* the plug-in bootstrap is low by sqrt((n-1)/n) = 0.996; sampling noise of the mean ratio ~ 0.015 */
    check(ratio > 0.94 && ratio < 1.04, "bootstrap SE of a per-group mean equals sqrt((tau^2 + sigma^2/m)/n)",
          "mean se / true se = %.4f (true %.5f)", ratio);

    /* calibration under H0 */
    int reject = 0, reps = 300, undefined = 0;
    for (int s = 0; s < reps; s++) {
        synth(sum, cnt, N, K, M, mu, tau, sigma);
        LossStats st;
        if (loss_stats_compute(sum, cnt, N, K, LOSS_STATS_B, LOSS_STATS_SEED, &st, err)) {
            check(0, "bootstrap runs (H0)", "%s", err);
            return check_exit_code();
        }
        if (isnan(st.p)) undefined++;
        else if (st.p < 0.05) reject++;
        if (s == 0)
            check(st.df1 == K - 1 && st.df2 == N - (K - 1) && st.tested == K, "test degrees of freedom (K-1, n-K+1)",
                  "df %d %d tested %d", st.df1, st.df2, st.tested);
        loss_stats_free(&st);
    }
    double rate = (double)reject / reps;
    printf("# H0: %d of %d rejected at 5%%\n", reject, reps);
    /* binomial sd at 5% over 300 sets: 1.3 points */
    check(undefined == 0 && rate > 0.015 && rate < 0.095, "homogeneity test: about 5% rejections at the 5% level under H0",
          "%d of %d rejected (%.1f%%), %d undefined", reject, reps, 100 * rate, undefined);

    /* power: one group shifted by 10 standard errors (a 23-df test spreads its power) */
    mu[5] = 1.0 + 10 * se_true;
    synth(sum, cnt, N, K, M, mu, tau, sigma);
    LossStats st;
    int rc = loss_stats_compute(sum, cnt, N, K, LOSS_STATS_B, LOSS_STATS_SEED, &st, err);
    check(rc == 0 && st.p < 1e-4, "a group 10 SE away is detected", "p = %g", rc ? NAN : st.p);
    double overall_true = sqrt((tau * tau + sigma * sigma / (M * K)) / N);
    check(rc == 0 && st.overall_se > 0.8 * overall_true && st.overall_se < 1.2 * overall_true,
          "overall mean's SE near sqrt((tau^2 + sigma^2/(mK))/n)", "%g vs %g", rc ? NAN : st.overall_se, overall_true);
    /* determinism */
    LossStats again;
    rc |= loss_stats_compute(sum, cnt, N, K, LOSS_STATS_B, LOSS_STATS_SEED, &again, err);
    int same = rc == 0 && again.p == st.p && again.F == st.F;
    for (int k = 0; same && k < K; k++) same = again.se[k] == st.se[k] && again.mean[k] == st.mean[k];
    check(same, "same inputs and seed: the same bits", "");
    loss_stats_free(&again);
    rc = loss_stats_compute(sum, cnt, N, K, LOSS_STATS_B, LOSS_STATS_SEED + 1, &again, err);
    check(rc == 0 && again.se[0] != st.se[0], "another seed: other replicates", "");
    loss_stats_free(&again);
    loss_stats_free(&st);

    /* sparse groups: group 0 empty, group 1 in one unit only */
    for (long u = 0; u < N; u++) {
        sum[u * K + 0] = cnt[u * K + 0] = 0;
        if (u) sum[u * K + 1] = cnt[u * K + 1] = 0;
    }
    rc = loss_stats_compute(sum, cnt, N, K, 200, 7, &st, err);
    check(rc == 0 && isnan(st.mean[0]) && isfinite(st.mean[1]) && isnan(st.se[1]) && isfinite(st.se[2]) &&
              st.tested == K - 2 && st.df1 == K - 3,
          "a group without tokens has mean NaN, one in a single unit no SE; both left out of the test",
          "tested %d df1 %d", rc ? -1 : st.tested, rc ? -1 : st.df1);
    loss_stats_free(&st);
    /* too few units for the test: n <= q */
    rc = loss_stats_compute(sum, cnt, 10, K, 200, 7, &st, err);
    check(rc == 0 && isnan(st.p) && st.df1 == 0, "n <= K'-1 units: the test is undefined (NaN)", "p %g", rc ? 0 : st.p);
    loss_stats_free(&st);
    /* one unit (./train --score of a text shorter than a window): no SE at all, not 0 (every
     * replicate draws that unit, so the replicates' sd is 0: a claim of no uncertainty) */
    rc = loss_stats_compute(sum, cnt, 1, K, 200, 7, &st, err);
    check(rc == 0 && isfinite(st.overall) && isnan(st.overall_se) && isnan(st.se[2]),
          "a single unit: the overall SE is NaN like the groups', not 0", "overall_se %g", rc ? 0 : st.overall_se);
    loss_stats_free(&st);
    check(loss_stats_compute(sum, cnt, N, K, 1, 7, &st, err) != 0, "B < 2 is refused", "");
    /* the power note: few denominator df (n - q < LOSS_STATS_FEW_DF) are said, enough are not, an undefined test is not */
    {
        LossStats few = {.p = 0.3, .df1 = 3, .df2 = 5, .units = 8}, many = {.p = 0.3, .df1 = 3, .df2 = 40, .units = 43},
                  undef = {.p = NAN, .df1 = 0, .df2 = 0, .units = 1};
        char a[200], b[200], c[200];
        loss_stats_power_note(&few, a, sizeof a);
        loss_stats_power_note(&many, b, sizeof b);
        loss_stats_power_note(&undef, c, sizeof c);
        check(strstr(a, "5 df") && strstr(a, "little power") && !b[0] && !c[0],
              "power note: said for 5 df beyond 3 contrasts, not for 40, not for an undefined test", "'%s' '%s' '%s'", a, b, c);
    }
    return check_exit_code();
}
