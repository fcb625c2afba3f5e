/* Uncertainty of grouped mean losses (docs/spec.md §4.8): per-group mean token loss, its
 * bootstrap standard error over resampling units, and a homogeneity test across the groups.
 *
 * Input: n resampling units u (validation windows; for ./train --score the scored windows or
 * documents) and K groups k (residues t mod P, or phases t mod S):
 *   sum [n, K]   sum of the token losses (nats) of unit u that fall in group k
 *   cnt [n, K]   their number
 * Point estimate (a ratio: every token weighs the same, as in the plain per-residue loss):
 *   m_k = sum_u sum[u,k] / sum_u cnt[u,k]                                   [K]  (NaN if no token)
 * Bootstrap (the units are the independent draws; tokens of one window are correlated, so the
 * tokens are not): replicate b = 0..B-1 draws n units with replacement (a splitmix64 stream from
 * `seed`, index = next() mod n), m*_{b,k} the ratio over the drawn units. A replicate in which a
 * tested group (below) draws no token is drawn again (counted in `redrawn`).
 *   se_k = sd_b(m*_{b,k}) with divisor B - 1                                 [K]
 * Tested groups: those with tokens in at least 2 units (others: se NaN, not tested); K' of them.
 * Homogeneity test (H0: every tested group has the same expected loss): the K' - 1 contrasts
 * d_j = m_j - m_last (j over the tested groups but the last; any full-rank contrast basis gives
 * the same statistic), their bootstrap covariance Sigma [K'-1, K'-1] (divisor B - 1), and
 *   T2 = ((n - 1) / n) d' Sigma^-1 d          (the bootstrap covariance estimates ((n-1)/n) S/n,
 *                                              S the unbiased covariance of the units' influence values)
 *   F  = T2 (n - q) / (q (n - 1)),  q = K' - 1,  on (q, n - q) degrees of freedom   (Hotelling's T^2)
 *   p  = upper tail of F(q, n - q)
 * The F calibration, not chi-square(q), because Sigma is estimated from n units: with n = 128
 * windows and q = 23 a chi-square(23) reference would reject a flat model 21% of the time at
 * the 5% level (tests/test_loss_stats.c measures the F version's rate: about 5%). Undefined (NaN, df 0) when K' < 2, n <= q, or Sigma is not positive definite.
 * The overall mean (all groups' tokens) gets the same bootstrap: overall, overall_se (NaN, like a
 * group's, unless at least 2 units have tokens: one unit's replicates are all that unit, sd 0).
 * Deterministic: the same inputs, B and seed give the same bits on every machine. */
#ifndef PHASELAB_LOSS_STATS_H
#define PHASELAB_LOSS_STATS_H
#include <stddef.h>
#include <stdint.h>

#define LOSS_STATS_B 1000                        /* replicates used by ./train and --eval */
#define LOSS_STATS_SEED UINT64_C(20260438)       /* their seed */

typedef struct {
    int K;              /* groups */
    long units;         /* n */
    int B;              /* replicates */
    uint64_t seed;
    double *mean;       /* [K] m_k (NaN: no token) */
    double *se;         /* [K] bootstrap standard error (NaN: untested group) */
    double *tokens;     /* [K] tokens per group */
    int tested;         /* K' */
    double overall, overall_se, overall_tokens;
    double t2, F;       /* statistics (NaN when undefined) */
    int df1, df2;       /* q, n - q (0 when undefined) */
    double p;           /* p-value of F (NaN when undefined) */
    long redrawn;       /* replicates drawn again */
} LossStats;

/* sum, cnt: [n, K] row-major. B >= 2. Fills out (free with loss_stats_free); -1 and err on a bad
 * argument or out of memory. */
int loss_stats_compute(const double *sum, const double *cnt, long n, int K, int B, uint64_t seed, LossStats *out,
                       char *err);
void loss_stats_free(LossStats *s);
/* LOSS_STATS_FEW_DF: below this many denominator degrees of freedom (n - q: windows beyond the
 * contrasts) the F test is valid but has little power; loss_stats_power_note writes a note saying
 * so into out (empty otherwise, and for an undefined test). */
#define LOSS_STATS_FEW_DF 10
void loss_stats_power_note(const LossStats *s, char *out, size_t len);

/* Upper tail of the F distribution with (d1, d2) degrees of freedom: I_{d2/(d2 + d1 x)}(d2/2, d1/2),
 * the regularized incomplete beta function (continued fraction, modified Lentz). NaN on bad input. */
double f_sf(double x, double d1, double d2);
/* The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1 (NaN otherwise). */
double beta_inc(double a, double b, double x);
#endif
