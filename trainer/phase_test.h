/* Phase-effect test (docs/spec.md §3.7): Pearson's chi-square test of homogeneity of the
 * correct / incorrect counts of K groups (the P residue groups of a probe, or the same counts
 * folded by phase t_K mod S), and its p-value.
 *
 *   table        n_g = correct_g + wrong_g, N = sum n_g, C = sum correct_g, I = N - C
 *   expected     E_g^c = n_g C / N,  E_g^i = n_g I / N
 *   statistic    X^2 = sum_g (correct_g - E_g^c)^2 / E_g^c + (wrong_g - E_g^i)^2 / E_g^i
 *   df           K' - 1, K' = the groups with n_g > 0
 *   p-value      Q(df / 2, X^2 / 2), Q the regularized upper incomplete gamma function
 * Choices where docs/spec.md §3.7 is silent: groups without prompts are left out of the table (they add
 * no row, so K' - 1 degrees of freedom); when every prompt is correct or every prompt is
 * wrong (C = 0 or I = 0) the table has one column, homogeneity holds trivially: X^2 = 0,
 * p = 1; with fewer than 2 non-empty groups the test is undefined: NaN, df 0.
 * The chi-square distribution of X^2 is an approximation that needs every expected count
 * E_g^c, E_g^i to be about 5 or more (Cochran's rule); min_expected reports the smallest.
 * Small counts (docs/spec.md §3.7): when an expected count is below PHASE_MIN_EXPECTED,
 * phase_homogeneity_test replaces the chi-square p by a Monte Carlo permutation p: under H0 the C
 * correct prompts are a uniformly random C-subset of the N prompts (the group sizes and C fixed:
 * the exact conditional null of the table), R = PHASE_PERMUTATIONS such tables are drawn
 * (partial Fisher-Yates over the N prompt labels with a splitmix64 stream from
 * PHASE_PERMUTATION_SEED, index i + next() mod (N - i)), and
 *     p = (1 + #{draws with X^2* >= X^2 (1 - 1e-12)}) / (R + 1),
 * which is never below 1 / (R + 1) and is exact in expectation at any count. */
#ifndef PHASELAB_PHASE_TEST_H
#define PHASELAB_PHASE_TEST_H

typedef struct {
    double chi2;    /* X^2, NaN when undefined */
    double p;       /* p-value, NaN when undefined */
    int df;         /* degrees of freedom (0 when undefined) */
    double min_expected;   /* the smallest expected count of the table (NaN when undefined) */
    int permutations;      /* 0: p from the chi-square distribution; R > 0: p from R permuted tables */
} ChiSquare;

#define PHASE_MIN_EXPECTED 5.0
#define PHASE_PERMUTATIONS 10000
#define PHASE_PERMUTATION_SEED 20260438u
/* 1 when the test is defined but an expected count is below PHASE_MIN_EXPECTED. */
int chi2_small_expected(const ChiSquare *t);

/* Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), a > 0, x >= 0:
 * series for P = 1 - Q when x < a + 1, Lentz continued fraction for Q otherwise (relative
 * accuracy ~1e-14). NaN for a <= 0, x < 0 or NaN input. */
double gamma_q(double a, double x);

/* Upper tail of the chi-square distribution with df degrees of freedom: Q(df/2, x/2). */
double chi2_sf(double x, int df);

/* The homogeneity test over K groups (correct[g] <= total[g]). */
ChiSquare chi2_homogeneity(const long *correct, const long *total, int K);

/* The same statistic with the Monte Carlo permutation p over R tables drawn from seed (above);
 * undefined or one-column tables as chi2_homogeneity. */
ChiSquare chi2_permutation(const long *correct, const long *total, int K, int R, unsigned long long seed);
/* The test every probe table reports: chi2_homogeneity, or chi2_permutation (PHASE_PERMUTATIONS,
 * PHASE_PERMUTATION_SEED) when an expected count is below PHASE_MIN_EXPECTED. */
ChiSquare phase_homogeneity_test(const long *correct, const long *total, int K);

/* Folds P residue counts into S phase groups (phase = r mod S); requires S | P (otherwise
 * returns -1 and leaves the outputs untouched). correct_out, total_out: [S]. */
int fold_by_phase(const long *correct, const long *total, int P, int S, long *correct_out, long *total_out);
/* The same by the phase of a KV head whose window grid starts at o (docs/spec.md §2b: the phase of t
 * for head g is (t - o_g) mod S; vis_phase of kernels/visibility.h): residue r goes to phase
 * (r - o) mod S, which is (t - o) mod S for every t = r mod P since S | P. o = 0: fold_by_phase. */
int fold_by_head_phase(const long *correct, const long *total, int P, int S, int o, long *correct_out, long *total_out);
/* The map behind it: phase_of[r] = (r - o) mod S for r = 0..P-1 (-1 unless S | P) ... */
int head_phase_map(int P, int S, int o, int *phase_of);
/* ... and the fold by any such map (-1 when an entry is outside 0..S-1). */
int fold_by_phase_map(const long *correct, const long *total, int P, int S, const int *phase_of, long *correct_out,
                      long *total_out);
#define PHASE_MAX_RESIDUES 4096   /* the most residues fold_by_head_phase folds */
#endif
