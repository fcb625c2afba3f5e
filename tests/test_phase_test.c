/* Tests of the phase-effect test (trainer/phase_test.c): the chi-square p-value against closed
 * forms computed here independently of the code under test (integer a: Q(n, x) = e^-x sum_{i<n}
 * x^i / i!; half-integer a: Q(n + 1/2, x) = erfc(sqrt x) + e^-x sum_{i=1..n} x^(i-1/2) / Gamma(i + 1/2)),
 * the homogeneity statistic against tables worked by hand, the degenerate cases, the fold by
 * phase, and the probe table (probe_result_finalize fills the tests). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/phase_test.h"
#include "trainer/probe_eval.h"

static double q_integer(int n, double x) {
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < n; i++) { term *= x / i; sum += term; }
    return exp(-x) * sum;
}

static double q_half(int n, double x) {
    double sum = erfc(sqrt(x)), g = sqrt(M_PI) / 2.0;   /* Gamma(3/2) */
    for (int i = 1; i <= n; i++) {
        sum += exp(-x + (i - 0.5) * log(x)) / g;
        g *= i + 0.5;
    }
    return sum;
}

static int rel_close(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b) || (a == b); }

/* Minimal stand-in so the archive's probe_eval.o links without the model. */
struct Model;
void model_argmax_at(struct Model *m, const int *tokens, int B, const int *positions, int *out);
int model_set_seq_len(struct Model *m, int T, char *err);
int model_seq_len(const struct Model *m);
int model_set_seq_len(struct Model *m, int T, char *err) { (void)m, (void)T, (void)err; return 0; }
int model_seq_len(const struct Model *m) { (void)m; return 1; }
/* the probe's chunk-phase fold asks these (learned boundaries, trainer/chunk_phase.h): none here */
int model_has_boundaries(const struct Model *m) { (void)m; return 0; }
const unsigned char *model_boundary_flags(const struct Model *m, int layer) { (void)m, (void)layer; return 0; }
void model_argmax_at(struct Model *m, const int *tokens, int B, const int *positions, int *out) {
    (void)m, (void)tokens, (void)positions;
    for (int b = 0; b < B; b++) out[b] = 0;
}


/* ---- the small-count permutation test, against exact enumeration ---------------------------
 * The exact conditional p of a K x 2 table: every vector k of correct counts with sum C and
 * 0 <= k_g <= n_g has probability prod_g C(n_g, k_g) / C(N, C) (multivariate hypergeometric);
 * p = the sum over the tables whose X^2 (computed here, not by trainer/phase_test.c) is at least
 * the observed one. */
static double log_choose(long n, long k) { return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0); }

static double x2_of(const long *k, const long *n, int K, double N, double C) {
    double I = N - C, x = 0;
    for (int g = 0; g < K; g++) {
        double ec = n[g] * C / N, ei = n[g] * I / N;
        x += (k[g] - ec) * (k[g] - ec) / ec + ((n[g] - k[g]) - ei) * ((n[g] - k[g]) - ei) / ei;
    }
    return x;
}

static void exact_walk(int g, long left, long *k, const long *n, int K, double N, double C, double x2obs, double *p) {
    if (g == K - 1) {
        if (left > n[g]) return;
        k[g] = left;
        if (x2_of(k, n, K, N, C) >= x2obs * (1 - 1e-12)) {
            double lp = -log_choose((long)N, (long)C);
            for (int i = 0; i < K; i++) lp += log_choose(n[i], k[i]);
            *p += exp(lp);
        }
        return;
    }
    for (long v = 0; v <= n[g] && v <= left; v++) {
        k[g] = v;
        exact_walk(g + 1, left - v, k, n, K, N, C, x2obs, p);
    }
}

static double exact_p(const long *correct, const long *total, int K) {
    double N = 0, C = 0;
    for (int g = 0; g < K; g++) N += total[g], C += correct[g];
    long k[16];
    double p = 0;
    exact_walk(0, (long)C, k, total, K, N, C, x2_of(correct, total, K, N, C), &p);
    return p;
}

int main(void) {
    /* --- p-values against closed forms over a grid of (df, x), both sides of a + 1 --- */
    {
        int bad = 0;
        char why[256] = "";
        double xs[] = {0.01, 0.5, 1.0, 2.5, 5.0, 9.9, 10.1, 23.0, 40.0, 80.0, 200.0};
        for (int df = 1; df <= 47; df++)
            for (size_t k = 0; k < sizeof xs / sizeof *xs; k++) {
                double x = xs[k];
                double ref = df % 2 == 0 ? q_integer(df / 2, x / 2) : q_half(df / 2, x / 2);
                double got = chi2_sf(x, df);
                if (!rel_close(got, ref, 1e-10)) {
                    if (!bad) snprintf(why, sizeof why, "df %d x %g: %.15g, expected %.15g", df, x, got, ref);
                    bad++;
                }
            }
        check(!bad, "chi2_sf matches the closed forms for df 1..47", "%d mismatches, first %s", bad, why);
    }
    check(fabs(chi2_sf(3.841458820694124, 1) - 0.05) < 1e-12, "chi2_sf: 95% quantile of df 1 gives 0.05",
          "%.15g", chi2_sf(3.841458820694124, 1));
    check(rel_close(chi2_sf(200.0, 4), 101.0 * exp(-100.0), 1e-10), "chi2_sf: far tail keeps relative accuracy",
          "%.6g vs %.6g", chi2_sf(200.0, 4), 101.0 * exp(-100.0));
    check(chi2_sf(0.0, 5) == 1.0 && isnan(chi2_sf(1.0, 0)) && isnan(gamma_q(-1.0, 1.0)),
          "chi2_sf: x = 0 gives 1, bad arguments NaN", "");

    /* --- homogeneity statistic, by hand --- */
    {
        /* correct 10, 20, 30 of 40 each: N 120, C = I = 60, expected 20 everywhere;
         * X^2 = (100 + 0 + 100)/20 * 2 = 20, df 2, p = e^-10 */
        long c[] = {10, 20, 30}, t[] = {40, 40, 40};
        ChiSquare r = chi2_homogeneity(c, t, 3);
        check(r.df == 2 && fabs(r.chi2 - 20.0) < 1e-12 && rel_close(r.p, exp(-10.0), 1e-10),
              "chi2_homogeneity: 3 groups by hand", "chi2 %.12g df %d p %.12g", r.chi2, r.df, r.p);
    }
    {
        /* unequal groups: correct 5/10, 30/40; N 50, C 35, I 15.
         * E_c = 7, 28; E_i = 3, 12. X^2 = 4/7 + 4/28 + 4/3 + 4/12 = 0.571429 + 0.142857 + 1.333333 + 0.333333
         * = 2.380952 (= 50/21); df 1, p = erfc(sqrt(X^2 / 2)) */
        long c[] = {5, 30}, t[] = {10, 40};
        ChiSquare r = chi2_homogeneity(c, t, 2);
        double x2 = 50.0 / 21.0;
        check(r.df == 1 && fabs(r.chi2 - x2) < 1e-12 && rel_close(r.p, erfc(sqrt(x2 / 2)), 1e-10),
              "chi2_homogeneity: unequal groups by hand", "chi2 %.12g df %d p %.12g", r.chi2, r.df, r.p);
    }
    {
        long c[] = {4, 4, 4, 4}, t[] = {8, 8, 8, 8};
        ChiSquare r = chi2_homogeneity(c, t, 4);
        check(r.chi2 == 0.0 && r.p == 1.0 && r.df == 3, "chi2_homogeneity: a flat table does not reject", "chi2 %g p %g", r.chi2, r.p);
        long all[] = {8, 8, 8, 8};
        r = chi2_homogeneity(all, t, 4);
        check(r.chi2 == 0.0 && r.p == 1.0 && r.df == 3, "chi2_homogeneity: all correct gives X^2 0, p 1", "chi2 %g p %g", r.chi2, r.p);
        long c2[] = {3, 0, 5}, t2[] = {8, 0, 8};
        r = chi2_homogeneity(c2, t2, 3);
        /* empty group dropped: 3/8 vs 5/8, N 16, C 8, I 8, E 4: X^2 = 4 * 1/4 = 1, df 1 */
        check(r.df == 1 && fabs(r.chi2 - 1.0) < 1e-12, "chi2_homogeneity: empty groups are left out", "chi2 %g df %d", r.chi2, r.df);
        long one[] = {3}, tone[] = {8};
        r = chi2_homogeneity(one, tone, 1);
        check(isnan(r.chi2) && isnan(r.p) && r.df == 0, "chi2_homogeneity: one group is undefined", "");
    }
    {
        long c[24], t[24], fc[8], ft[8];
        for (int r = 0; r < 24; r++) { c[r] = r; t[r] = 100; }
        int ok = fold_by_phase(c, t, 24, 8, fc, ft) == 0;
        for (int s = 0; s < 8; s++) ok = ok && fc[s] == s + (s + 8) + (s + 16) && ft[s] == 300;
        check(ok, "fold_by_phase sums residues r = s mod S", "");
        check(fold_by_phase(c, t, 24, 7, fc, ft) == -1, "fold_by_phase refuses S not dividing P", "");
        /* a staggered head with o = 3 (docs/spec.md §2b: phase (t - o) mod S): phase s holds the residues
         * r = s + 3 (mod 8), i.e. (s + 3) % 8, +8, +16 */
        ok = fold_by_head_phase(c, t, 24, 8, 3, fc, ft) == 0;
        for (int s = 0; s < 8; s++) ok = ok && fc[s] == 3 * ((s + 3) % 8) + 24 && ft[s] == 300;
        check(ok, "fold_by_head_phase with grid offset 3 puts residue r in phase (r - 3) mod S", "phase 0 has %ld, want %d", fc[0], 33);
        /* G = 2, S = 4, P = 24, o_1 = 2: residue 0 is phase 2 of head 1, residue 2 its phase 0 */
        long one0[24] = {0}, tot[24];
        for (int r = 0; r < 24; r++) tot[r] = 1;
        one0[0] = 1;
        long f4[4], t4[4];
        ok = fold_by_head_phase(one0, tot, 24, 4, 2, f4, t4) == 0 && f4[2] == 1 && f4[0] == 0 && f4[1] == 0 && f4[3] == 0 && t4[0] == 6;
        check(ok, "fold_by_head_phase: G 2, S 4, head 1 (o = 2): residue 0 is its phase 2", "phases %ld %ld %ld %ld", f4[0], f4[1], f4[2], f4[3]);
        int map[24];
        ok = head_phase_map(24, 4, 2, map) == 0;
        for (int r = 0; r < 24; r++) ok = ok && map[r] == (r + 2) % 4;   /* (r - 2) mod 4, by hand */
        check(ok, "head_phase_map: G 2, S 4, o = 2: r -> (r - 2) mod 4", "map[0] %d", map[0]);
        check(head_phase_map(24, 7, 0, map) == -1, "head_phase_map refuses S not dividing P", "");
        int bad[24] = {0};
        bad[5] = 4;
        check(fold_by_phase_map(c, t, 24, 4, bad, f4, t4) == -1, "fold_by_phase_map refuses a phase outside 0..S-1", "");
    }
    /* --- the probe table carries the tests --- */
    {
        ProbeResult pr;
        probe_result_clear(&pr, 24);
        for (int r = 0; r < 24; r++) {
            pr.total[0][r] = 48;
            pr.correct[0][r] = r % 8 < 4 ? 40 : 8;     /* strongly phase dependent */
        }
        pr.fold = 8;
        probe_result_finalize(&pr);
        /* folded: 120/144 at phases 0..3, 24/144 at 4..7: N 1152, C 576, E 72 every cell:
         * X^2 = 8 * (48^2/72) * 2 = 8 * 32 * 2 = 512, df 7 */
        check(pr.test_phase[0].df == 7 && fabs(pr.test_phase[0].chi2 - 512.0) < 1e-9 && pr.test_phase[0].p < 1e-100,
              "probe table: phase-folded test by hand", "chi2 %g df %d p %g", pr.test_phase[0].chi2,
              pr.test_phase[0].df, pr.test_phase[0].p);
        check(pr.test_residue[0].df == 23 && pr.test_residue[0].p < 1e-90, "probe table: residue test rejects", "df %d p %g",
              pr.test_residue[0].df, pr.test_residue[0].p);
        check(isnan(pr.test_phase[1].chi2), "probe table: a protocol without prompts has no test", "");
        char buf[8192];
        FILE *f = fmemopen(buf, sizeof buf, "w");
        probe_print_table(f, &pr);
        fclose(f);
        check(strstr(buf, "phase-effect test") && strstr(buf, "chi2 512.00 (df 7)"), "probe table prints the test", "%s", buf);
        check(!strstr(buf, "not retrieving") && !strstr(buf, "expected count"),
              "probe table: a retrieving probe with large counts has no chance line and no small-count warning", "%s", buf);
    }
    /* --- expected counts (Cochran's rule) --- */
    {
        /* the unequal table above: E_c = 7, 28, E_i = 3, 12: smallest 3 < 5 */
        long c[] = {5, 30}, t[] = {10, 40};
        ChiSquare r = chi2_homogeneity(c, t, 2);
        check(fabs(r.min_expected - 3.0) < 1e-12 && chi2_small_expected(&r), "chi2: smallest expected count 3 (by hand) warns",
              "min %g", r.min_expected);
        long c3[] = {10, 20, 30}, t3[] = {40, 40, 40};   /* every expected count 20 */
        r = chi2_homogeneity(c3, t3, 3);
        check(fabs(r.min_expected - 20.0) < 1e-12 && !chi2_small_expected(&r), "chi2: expected counts 20 do not warn", "min %g",
              r.min_expected);
        long one[] = {3}, tone[] = {8};
        r = chi2_homogeneity(one, tone, 1);
        check(!chi2_small_expected(&r), "chi2: an undefined test does not warn", "");
    }
    /* --- a probe at chance says so; small counts warn --- */
    {
        ProbeResult pr;
        probe_result_clear(&pr, 24);
        pr.candidates = 64;                 /* chance 1/64 = 1.5625% */
        for (int r = 0; r < 24; r++) pr.total[0][r] = 2, pr.correct[0][r] = r == 5;   /* 1 of 48 */
        pr.fold = 8;
        probe_result_finalize(&pr);
        char line[256], buf[8192];
        /* Wilson 95% for 1/48 by hand: p = 1/48, z^2 = 3.8415: centre (0.020833 + 0.040016) / 1.080031 = 0.056341,
         * half 1.959964 sqrt(0.020399/48 + 3.8415/9216) / 1.080031 = 1.959964 * 0.029015 / 1.080031 = 0.052654:
         * [0.37%, 10.90%], which holds 1.5625% */
        int nr = probe_not_retrieving(&pr, 0, line, sizeof line);
        check(nr && strstr(line, "not retrieving: mean accuracy 2.1% (95% CI 0.4-10.9%) includes chance 1/64"),
              "probe at chance: 'not retrieving' with the pooled accuracy, its Wilson interval and chance 1/N", "%d %s", nr, line);
        FILE *f = fmemopen(buf, sizeof buf, "w");
        probe_print_table(f, &pr);
        fclose(f);
        check(strstr(buf, "-> not retrieving: mean accuracy") && !strstr(buf, "homogeneity not rejected"),
              "probe table: a probe at chance says 'not retrieving', not 'homogeneity not rejected'", "%s", buf);
        for (int r = 0; r < 24; r++) pr.total[0][r] = 1000, pr.correct[0][r] = 0;     /* 0 of 24000: below chance */
        probe_result_finalize(&pr);
        nr = probe_not_retrieving(&pr, 0, line, sizeof line);
        check(nr && strstr(line, "is below chance 1/64"), "probe below chance: 'not retrieving ... is below chance'", "%d %s", nr, line);
        /* retrieving (40 of 48 per phase group pattern) but 2 prompts per residue: expected counts < 5, permutation p */
        for (int r = 0; r < 24; r++) pr.total[0][r] = 2, pr.correct[0][r] = r % 8 < 4 ? 2 : 1;
        probe_result_finalize(&pr);
        nr = probe_not_retrieving(&pr, 0, line, sizeof line);
        f = fmemopen(buf, sizeof buf, "w");
        probe_print_table(f, &pr);
        fclose(f);
        check(!nr && strstr(buf, "smallest expected count") && strstr(buf, "< 5") && strstr(buf, "permuted tables") &&
                  pr.test_residue[0].permutations == PHASE_PERMUTATIONS && pr.test_phase[0].permutations == PHASE_PERMUTATIONS,
              "probe table: a retrieving probe with 2 prompts per residue reports permutation p-values and says so", "%s", buf);
        /* every residue 1 or 2 of 2: the most homogeneous table there is, so no permuted table is less extreme */
        check(pr.test_residue[0].p == 1.0, "... the most homogeneous 2-prompt table has permutation p = 1", "p %g", pr.test_residue[0].p);
        pr.candidates = 0;
        for (int r = 0; r < 24; r++) pr.correct[0][r] = 0;
        probe_result_finalize(&pr);
        check(!probe_not_retrieving(&pr, 0, line, sizeof line), "unknown candidates: no chance judgement", "");
    }
    /* --- small counts: the Monte Carlo permutation p against the exact conditional p --- */
    {
        struct { long c[6], n[6]; int K; } T[] = {
            {{5, 0}, {5, 5}, 2},                         /* exact p = 2 / C(10, 5) = 0.00794; chi-square 0.00157 */
            {{3, 0, 0}, {3, 3, 3}, 3},
            {{2, 1, 0, 4, 1, 0}, {4, 4, 4, 4, 4, 4}, 6},
            {{1, 0, 0, 0, 1, 0}, {8, 8, 8, 8, 8, 8}, 6},  /* 2 correct of 48: every expected count < 5 */
        };
        for (int i = 0; i < (int)(sizeof T / sizeof T[0]); i++) {
            double want = exact_p(T[i].c, T[i].n, T[i].K);
            ChiSquare mc = chi2_permutation(T[i].c, T[i].n, T[i].K, PHASE_PERMUTATIONS, PHASE_PERMUTATION_SEED);
            ChiSquare used = phase_homogeneity_test(T[i].c, T[i].n, T[i].K);
            double sd = sqrt(want * (1 - want) / PHASE_PERMUTATIONS) + 1.0 / PHASE_PERMUTATIONS;
            char name[96];
            snprintf(name, sizeof name, "permutation p equals the exact conditional p within 4 sd (table %d)", i);
            check(fabs(mc.p - want) < 4 * sd && mc.permutations == PHASE_PERMUTATIONS, name, "mc %g exact %g (chi-square %g)",
                  mc.p, want, chi2_homogeneity(T[i].c, T[i].n, T[i].K).p);
            snprintf(name, sizeof name, "small expected counts: the reported p is the permutation p (table %d)", i);
            check(used.permutations == PHASE_PERMUTATIONS && used.p == mc.p && used.chi2 == mc.chi2, name, "p %g perms %d",
                  used.p, used.permutations);
        }
        double want = 2.0 / 252.0;
        check(fabs(exact_p(T[0].c, T[0].n, 2) - want) < 1e-12, "the enumeration itself: 5/5 vs 0/5 has p = 2/C(10,5)", "%g",
              exact_p(T[0].c, T[0].n, 2));
        long c[3] = {40, 60, 50}, n[3] = {100, 100, 100};    /* every expected count 50: chi-square as before */
        ChiSquare big = phase_homogeneity_test(c, n, 3), plain = chi2_homogeneity(c, n, 3);
        check(big.permutations == 0 && big.p == plain.p, "large counts keep the chi-square p", "perms %d", big.permutations);
        ChiSquare again = chi2_permutation(T[2].c, T[2].n, 6, 2000, 7), again2 = chi2_permutation(T[2].c, T[2].n, 6, 2000, 7);
        check(again.p == again2.p, "the permutation p is deterministic for a seed", "%g %g", again.p, again2.p);
        long one[2] = {0, 0}, tot[2] = {5, 5};
        ChiSquare flat = chi2_permutation(one, tot, 2, 100, 1);
        check(flat.p == 1 && flat.chi2 == 0, "a one-column table stays X^2 = 0, p = 1", "%g", flat.p);
    }
    return check_exit_code();
}
