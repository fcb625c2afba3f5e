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

    /* values longer than any fixed buffer are read whole (issue 37): a = 000...0184 with 300 zeros is 184 */
    {
        char *text = malloc(2000);
        char zeros[301];
        memset(zeros, '0', 300), zeros[300] = 0;
        snprintf(text, 2000, "[sweep]\nprompt = 20 81\na = %s184\nb = 82\nfiller = %s208\nL0 = %s0\nL1 = 00015\n", zeros, zeros, zeros);
        write_text(p, text);
        rc = filler_sweep_load(p, 256, 32, &sp, err);
        check(rc == 0 && sp.a == 184 && sp.filler == 208 && sp.L0 == 0 && sp.L1 == 15,
              "sweep file: a = 000...0184 (300 zeros) is token 184, not a cut '000...' = 0", "%s a %d", rc ? err : "", rc ? -1 : sp.a);
        if (!rc) filler_sweep_free(&sp);
        /* a value past the old 256-byte buffer that is not a token id must be refused, not cut to one */
        snprintf(text, 2000, "[sweep]\nprompt = 20 81\na = %s184x\nb = 82\nfiller = 208\nL0 = 0\nL1 = 15\n", zeros);
        write_text(p, text);
        rc = filler_sweep_load(p, 256, 32, &sp, err);
        check(rc == -1 && strstr(err, ":3: a = "), "sweep file: a long bad id is refused naming the line", "%s", rc ? err : "accepted");
        free(text);
    }
    /* a 16386-token prompt is 16386 tokens (the old 65536-byte buffer cut it to 16384), checked against T */
    {
        size_t cap = 16386 * 4 + 200;
        char *text = malloc(cap);
        size_t n = (size_t)sprintf(text, "[sweep]\nprompt =");
        for (int i = 0; i < 16386; i++) n += (size_t)sprintf(text + n, " 208");
        sprintf(text + n, "\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 3\n");
        write_text(p, text);
        rc = filler_sweep_load(p, 256, 16386 + 3, &sp, err);
        check(rc == -1 && strstr(err, "the prompt is 16386 tokens") && strstr(err, ":2:"),
              "sweep file: a 16386-token prompt against T = 16389 is refused (fewer than 4 filler lengths), not cut", "%s",
              rc ? err : "accepted");
        if (!rc) filler_sweep_free(&sp);
        rc = filler_sweep_load(p, 256, 16386 + 8, &sp, err);
        check(rc == 0 && sp.n_prompt == 16386 && sp.L1 == 3, "sweep file: a 16386-token prompt is read whole", "%s n %d", rc ? err : "",
              rc ? -1 : sp.n_prompt);
        if (!rc) filler_sweep_free(&sp);
        free(text);
    }
    /* a key given twice, or with its alternative, is an error naming both lines: nothing silently wins */
    struct { const char *text, *want; } twice[] = {
        {"[sweep]\nprompt = 20\na = 81\nb = 82\na = 83\nfiller = 208\nL0 = 0\nL1 = 8\n", ":5: a given twice (lines 3 and 5)"},
        {"[sweep]\nprompt = 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\nL1 = 9\n", ":8: L1 given twice (lines 7 and 8)"},
        {"[sweep]\nprompt = 20\ntokenizer = bytes\na = 81\na_text = x\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n",
         ":5: a and a_text both given (lines 4 and 5)"},
        {"[sweep]\nprompt = 20\ntext = ab\ntokenizer = bytes\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n",
         ":3: prompt and text both given"},
        {"[sweep]\nprompt = 20\na = 81\nb = 82\nfiller = 208\nL0 = -1\nL1 = 8\n", "L0 = '-1'"},
        {"[sweep]\nprompt = 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 99999999999999999999999\n", "L1 = '99999"},
        {"[sweep]\nprompt = 20 +81\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n", ":2: prompt: '+81' is not a token id"},
        {"[sweep]\nprompt = 20 4294967297\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n", ":2: prompt: '4294967297' is not a token id"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof *twice; i++) {
        write_text(p, twice[i].text);
        rc = filler_sweep_load(p, 256, 32, &sp, err);
        char name[96];
        snprintf(name, sizeof name, "sweep file: duplicate or bad value %zu is an error naming the line", i);
        check(rc == -1 && strstr(err, twice[i].want) && strstr(err, p) == err, name, "%s (want '%s')", rc ? err : "accepted", twice[i].want);
        if (!rc) filler_sweep_free(&sp);
    }
    return check_exit_code();
}
