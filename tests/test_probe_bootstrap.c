/* trainer/probe_bootstrap: the interventions' intervals (stratified percentile bootstrap of the
 * probe's mean over residues, and of the paired relative change 100 (M_b - M_a) / M_a), on
 * synthetic outcomes whose answers are known:
 *   - pairing: b = a gives exactly [0, 0] (independent draws for a and b would not); a all right,
 *     b all wrong gives [-100, -100]; a never right leaves no replicate: NaN; no prompts: NaN;
 *   - the mean's interval has the width of the closed form: M = (1/P) sum_r k_r / n_r has
 *     variance (1/P^2) sum_r p_r (1 - p_r) / n_r, so the 95% interval is ~ 2 x 1.96 of its root;
 *   - coverage: outcomes drawn with known p_a(r), p_b(r) (b right only where a is, with a known
 *     conditional rate: strongly paired, like a knockout), the interval of the relative change
 *     holds the true value 100 (mean p_b - mean p_a) / mean p_a in 88-99% of 300 data sets;
 *   - the same inputs give the same bits (a fixed seed). */
#include "tests/check.h"
#include "trainer/probe_bootstrap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 777;
static double unif(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}

int main(void) {
    enum { P = 8, PER = 24, N = P * PER };
    int residue[N];
    unsigned char a[N], b[N];
    for (int i = 0; i < N; i++) residue[i] = i % P;
    double lo, hi;

    /* pairing and the edges */
    for (int i = 0; i < N; i++) a[i] = b[i] = unif() < 0.6;
    probe_boot_ci(residue, N, P, a, b, &lo, &hi);
    check(lo == 0 && hi == 0, "probe_bootstrap: b = a gives [0, 0] (one draw serves both)", "[%g, %g]", lo, hi);
    for (int i = 0; i < N; i++) a[i] = 1, b[i] = 0;
    probe_boot_ci(residue, N, P, a, b, &lo, &hi);
    check(lo == -100 && hi == -100, "probe_bootstrap: a all right, b all wrong gives [-100, -100]", "[%g, %g]", lo, hi);
    for (int i = 0; i < N; i++) a[i] = 0;
    probe_boot_ci(residue, N, P, a, b, &lo, &hi);
    check(isnan(lo) && isnan(hi), "probe_bootstrap: a never right: no relative change, NaN", "[%g, %g]", lo, hi);
    probe_boot_ci(residue, 0, P, a, NULL, &lo, &hi);
    check(isnan(lo) && isnan(hi), "probe_bootstrap: no prompts: NaN", "[%g, %g]", lo, hi);

    /* the mean's interval against the closed form */
    double p[P], var = 0, mean = 0;
    for (int r = 0; r < P; r++) p[r] = 0.1 + 0.1 * r;
    for (int i = 0; i < N; i++) a[i] = unif() < p[residue[i]];
    for (int r = 0; r < P; r++) {
        long k = 0;
        for (int i = r; i < N; i += P) k += a[i];
        double ph = (double)k / PER;
        mean += 100.0 * ph / P;
        var += ph * (1 - ph) / PER / (P * P);
    }
    probe_boot_ci(residue, N, P, a, NULL, &lo, &hi);
    const double width = hi - lo, want = 2 * 1.959964 * 100 * sqrt(var);
    check(fabs(width / want - 1) < 0.12 && lo < mean && mean < hi, "probe_bootstrap: the mean's interval has the closed form's width",
          "[%.2f, %.2f] around %.2f: width %.2f, closed form %.2f", lo, hi, mean, width, want);
    double lo2, hi2;
    probe_boot_ci(residue, N, P, a, NULL, &lo2, &hi2);
    check(lo2 == lo && hi2 == hi, "probe_bootstrap: the same inputs give the same bits", "[%g, %g] then [%g, %g]", lo, hi, lo2, hi2);

    /* coverage of the paired relative change */
    double pa[P], keep[P], ma = 0, mb = 0;
    for (int r = 0; r < P; r++) {
        pa[r] = 0.3 + 0.08 * r;                 /* clean accuracy by residue */
        keep[r] = r % 2 ? 0.5 : 0.9;            /* P(b right | a right); b never right where a is wrong */
        ma += pa[r] / P, mb += pa[r] * keep[r] / P;
    }
    const double truth = 100 * (mb - ma) / ma;
    int covered = 0, sets = 300;
    for (int s = 0; s < sets; s++) {
        for (int i = 0; i < N; i++) {
            a[i] = unif() < pa[residue[i]];
            b[i] = a[i] && unif() < keep[residue[i]];
        }
        probe_boot_ci(residue, N, P, a, b, &lo, &hi);
        covered += lo <= truth && truth <= hi;
    }
    check(covered >= 0.88 * sets && covered <= 0.99 * sets, "probe_bootstrap: the paired interval covers the true change ~95% of the time",
          "%d of %d data sets (true change %.2f%%)", covered, sets, truth);
    return check_exit_code();
}
