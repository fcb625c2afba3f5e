/* Filler sweep (analysis/filler_sweep.c): the periodogram finds planted periods in synthetic
 * curves (a square wave of period 8, the flip of a phase-sensitive model, the same on a strong
 * linear drift, and a noisy sine of period 6), and the sweep-file reader takes tokens and refuses bad files with one line naming
 * the file, the line and what is allowed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/errors.h"
#include "tests/check.h"
#include "analysis/filler_sweep.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

int main(void) {
    double x[96], power[48], period[48];
    /* square wave of period 8 (4 up, 4 down), 64 points */
    for (int i = 0; i < 64; i++) x[i] = (i % 8) < 4 ? 0.3 : -0.2;
    double pk = periodogram(x, 64, power, period);
    check(pk == 8.0, "periodogram: square wave period 8", "peak %g", pk);
    check(period[0] == 64.0 && period[7] == 8.0, "periodogram: periods N/k", "%g %g", period[0], period[7]);
    /* sine of period 6 plus a slow trend-free pseudo-noise, 48 points */
    unsigned s = 7;
    for (int i = 0; i < 48; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = sin(2 * M_PI * i / 6.0) + 0.4 * (((s >> 16) & 0x7fff) / 32768.0 - 0.5);
    }
    pk = periodogram(x, 48, power, period);
    check(pk == 6.0, "periodogram: noisy sine period 6", "peak %g", pk);
    /* a hand value: x_i = cos(pi (i - 3.5) / 2), n = 8 (mean 0, symmetric so no linear trend): a pure
     * sinusoid at k = 2, |DFT| = n/2 = 4 there and 0 elsewhere: power(2) = 16 / 8 = 2 */
    for (int i = 0; i < 8; i++) x[i] = cos(M_PI * (i - 3.5) / 2.0);
    pk = periodogram(x, 8, power, period);
    check(pk == 4.0 && fabs(power[1] - 2.0) < 1e-12 && fabs(power[0]) < 1e-20, "periodogram: hand-computed power", "%g %g", power[1], power[0]);
    check(isnan(periodogram(x, 3, power, period)), "periodogram: fewer than 4 points is undefined", "");
    /* a period-8 flip riding on a strong linear drift: the drift is removed, the period found */
    for (int i = 0; i < 64; i++) x[i] = 0.02 * i + ((i % 8) < 4 ? 0.05 : -0.05);
    pk = periodogram(x, 64, power, period);
    check(pk == 8.0, "periodogram: period 8 under a linear drift", "peak %g", pk);

    /* dips at phases 0 and 5 of every 8 (the demo model's pattern): the DFT peak is a harmonic,
     * the folded period is 8 */
    double ex[48];
    for (int i = 0; i < 96; i++) x[i] = (i % 8 == 0 || i % 8 == 5) ? 0.0 : 1.0;
    int fp = folded_period(x, 96, ex);
    check(fp == 8 && fabs(ex[6] - 1.0) < 1e-12, "folded period of a two-dip period-8 curve is 8", "%d (%g)", fp, ex[6]);
    for (int i = 0; i < 48; i++) x[i] = sin(2 * M_PI * i / 6.0);
    check(folded_period(x, 48, ex) == 6, "folded period of a sine of period 6", "%d", folded_period(x, 48, ex));
    for (int i = 0; i < 20; i++) x[i] = 1.0;
    check(folded_period(x, 20, ex) == -1, "a flat curve has no folded period", "");
    mkdir("build/scratch", 0755);
    mkdir("build/scratch/test_filler_sweep", 0755);
    const char *p = "build/scratch/test_filler_sweep/sweep.ini";
    char err[ERR_LEN];
    FillerSweepSpec sp;
    write_text(p, "; a sweep\n[sweep]\nprompt = 20 81, 21 82 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 15\n");
    int rc = filler_sweep_load(p, 256, 32, &sp, err);
    check(rc == 0 && sp.n_prompt == 5 && sp.prompt[4] == 20 && sp.a == 81 && sp.b == 82 && sp.filler == 208 && sp.L1 == 15,
          "sweep file: tokens", "%s", rc ? err : "fields");
    if (!rc) filler_sweep_free(&sp);
    struct { const char *text, *want; } bad[] = {
        {"[sweep]\nprompt = 20 300\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 15\n", ":2: prompt: '300' is not a token id in 0..255"},
        {"[sweep]\nprompt = 20\na = 81\nb = 999\nfiller = 208\nL0 = 0\nL1 = 15\n", ":4: b = '999': expected a token id in 0..255"},
        {"[sweep]\nprompt = 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 40\n", "L1 <= 31 (T 32 minus the 1 prompt tokens)"},
        {"[sweep]\nprompt = 20\na = 81\nb = 81\nfiller = 208\nL0 = 0\nL1 = 8\n", "a and b are the same token"},
        {"[sweep]\nprompt = 20\na = 81\nb = 82\nL0 = 0\nL1 = 8\n", "missing filler"},
        {"[sweep]\nprompt = 20\nfoo = 1\n", ":3: unknown key 'foo'"},
        {"[other]\nprompt = 20\n", ":2: section [other]: expected [sweep]"},
        {"[sweep]\ntext = hello\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n", "text keys need tokenizer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(p, bad[i].text);
        rc = filler_sweep_load(p, 256, 32, &sp, err);
        char name[96];
        snprintf(name, sizeof name, "sweep file error %zu names the line and the rule", i);
        check(rc == -1 && strstr(err, bad[i].want) && strstr(err, p) == err, name, "%s (want '%s')", rc ? err : "accepted", bad[i].want);
    }
    /* text with the byte tokenizer: "ab" is two tokens; a_text must be one token */
    write_text(p, "[sweep]\ntext = \"ab\"\ntokenizer = bytes\na_text = \"c\"\nb_text = \"d\"\nfiller_text = \" \"\nL0 = 0\nL1 = 8\n");
    rc = filler_sweep_load(p, 257, 32, &sp, err);
    check(rc == 0 && sp.n_prompt == 2 && sp.prompt[0] == 'a' && sp.a == 'c' && sp.b == 'd' && sp.filler == ' ', "sweep file: text via a tokenizer",
          "%s", rc ? err : "fields");
    if (!rc) filler_sweep_free(&sp);
    return check_exit_code();
}
