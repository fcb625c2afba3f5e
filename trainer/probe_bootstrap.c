/* Stratified percentile bootstrap of the probe's mean accuracy and of its paired relative change
 * (the math: trainer/probe_bootstrap.h). */
#include "trainer/probe_bootstrap.h"
#include <math.h>
#include <stdlib.h>
#include "common/splitmix.h"

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* type-7 quantile of sorted v [n] */
static double quantile(const double *v, int n, double q) {
    double h = (n - 1) * q;
    int i = (int)floor(h);
    return i + 1 < n ? v[i] + (h - i) * (v[i + 1] - v[i]) : v[n - 1];
}

/* The mean over residues of 100 * the right fraction of each residue's draw, for hits a and (when
 * not NULL) b at the same drawn prompts; idx [n] the protocol's prompts grouped by residue, start
 * [P + 1] each residue's first; rng NULL: no resampling (the observed means). */
static void draw_means(const int *idx, const int *start, int P, const unsigned char *a, const unsigned char *b,
                       uint64_t *rng, double *ma, double *mb) {
    double sa = 0, sb = 0;
    int used = 0;
    for (int r = 0; r < P; r++) {
        const int n = start[r + 1] - start[r];
        if (n == 0) continue;
        long ka = 0, kb = 0;
        for (int j = 0; j < n; j++) {
            const int i = idx[start[r] + (rng ? (int)(splitmix64(rng) % (uint64_t)n) : j)];
            ka += a[i];
            if (b) kb += b[i];
        }
        sa += 100.0 * ka / n, sb += 100.0 * kb / n, used++;
    }
    *ma = used ? sa / used : NAN;
    *mb = used ? sb / used : NAN;
}

void probe_boot_ci(const int *residue, int n, int P, const unsigned char *a, const unsigned char *b, double *lo, double *hi) {
    *lo = *hi = NAN;
    int *idx = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)), *start = calloc((size_t)P + 1, sizeof(int));
    int *fill = malloc(sizeof(int) * (size_t)(P > 0 ? P : 1));
    double *rep = malloc(sizeof(double) * PROBE_BOOT_B);
    if (!idx || !start || !fill || !rep || n <= 0) goto done;
    /* the prompts grouped by residue (a counting sort) */
    for (int i = 0; i < n; i++) start[residue[i] + 1]++;
    for (int r = 0; r < P; r++) start[r + 1] += start[r];
    for (int r = 0; r < P; r++) fill[r] = start[r];
    for (int i = 0; i < n; i++) idx[fill[residue[i]]++] = i;
    uint64_t rng = PROBE_BOOT_SEED;
    int kept = 0;
    for (int k = 0; k < PROBE_BOOT_B; k++) {
        double ma, mb;
        draw_means(idx, start, P, a, b, &rng, &ma, &mb);
        if (!b) rep[kept++] = ma;
        else if (ma > 0) rep[kept++] = 100.0 * (mb - ma) / ma;
    }
    if (kept < 0.95 * PROBE_BOOT_B) goto done;
    qsort(rep, (size_t)kept, sizeof *rep, cmp_double);
    *lo = quantile(rep, kept, 0.025);
    *hi = quantile(rep, kept, 0.975);
done:
    free(idx), free(start), free(fill), free(rep);
}

/* the protocol's prompts of ps: their residues and outcomes, then probe_boot_ci */
static void protocol_ci(const ProbeSet *ps, int protocol, const unsigned char *a, const unsigned char *b, double *lo,
                        double *hi) {
    *lo = *hi = NAN;
    const int n_all = probe_set_count(ps);
    int *res = malloc(sizeof(int) * (size_t)(n_all ? n_all : 1)), n = 0;
    unsigned char *sa = malloc((size_t)(n_all ? n_all : 1)), *sb = malloc((size_t)(n_all ? n_all : 1));
    if (res && sa && sb) {
        for (int i = 0; i < n_all; i++) {
            ProbePrompt pr;
            probe_set_prompt(ps, i, &pr);
            if (pr.protocol != protocol) continue;
            res[n] = pr.residue, sa[n] = a[i], sb[n] = b ? b[i] : 0, n++;
        }
        probe_boot_ci(res, n, probe_set_residues(ps), sa, b ? sb : NULL, lo, hi);
    }
    free(res), free(sa), free(sb);
}

void probe_mean_ci(const ProbeSet *ps, int protocol, const unsigned char *hits, double *lo, double *hi) {
    protocol_ci(ps, protocol, hits, NULL, lo, hi);
}

void probe_rel_change_ci(const ProbeSet *ps, int protocol, const unsigned char *a, const unsigned char *b, double *lo,
                         double *hi) {
    protocol_ci(ps, protocol, a, b, lo, hi);
}
