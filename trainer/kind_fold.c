/* Per-kind phase folds of the probe counts (trainer/kind_fold.h, docs/spec.md §3.7, §5.5). */
#include "trainer/kind_fold.h"

#include <math.h>
#include <string.h>

#include "model/dims.h"
#include "model/layer_kinds.h"

int kind_fold_geometry(const ModelConfig *mc, int kind, int T, int *S, int *o, int *first_layer) {
    int l = 0;
    while (l < mc->n_layers && layer_kind(mc, l) != kind) l++;
    if (l == mc->n_layers) return -1;
    if (first_layer) *first_layer = l;
    const ModelConfig lc = layer_config(mc, l);
    const ModelDims d = dims_of(&lc, T);
    if (!d.compressed) { *S = 8, *o = 0; return 0; }          /* full, window: no grid */
    *S = lc.stride, *o = dims_grid_offset(&d, 0);
    return 1;
}

/* A kind's fold exists when its stride divides the probe's residues (head_phase_map's rule). */
static int fold_fits(int S, int P) { return S >= 1 && S <= PROBE_MAX_RESIDUES && P % S == 0; }

void kind_fold_periods(const ModelConfig *mc, int T, int P, int S_of_kind[KIND_FOLD_MAX]) {
    for (int k = 0; k < KIND_FOLD_MAX; k++) {
        int S = 0, o = 0;
        S_of_kind[k] = mc->layer_attention[0] && kind_fold_geometry(mc, k, T, &S, &o, NULL) == 1 && fold_fits(S, P) ? S : 0;
    }
}

int probe_kind_folds(const ModelConfig *mc, int T, const ProbeResult *pr, KindFold *out) {
    if (!mc->layer_attention[0]) return 0;
    int n = 0;
    for (int k = 0; k < N_KINDS; k++) {
        KindFold *f = &out[n];
        memset(f, 0, sizeof *f);
        f->kind = k, f->first_layer = -1;
        if (kind_fold_geometry(mc, k, T, &f->S, &f->o, &f->first_layer) != 1) continue;   /* absent, or no grid */
        for (int l = 0; l < mc->n_layers; l++) f->n_layers += layer_kind(mc, l) == k;
        f->name = layer_kind_names[k];
        int map[PROBE_MAX_RESIDUES];
        f->ok = fold_fits(f->S, pr->residues) && head_phase_map(pr->residues, f->S, f->o, map) == 0;
        for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
            if (f->ok && fold_by_phase_map(pr->correct[p], pr->total[p], pr->residues, f->S, map, f->correct[p], f->total[p]) == 0)
                f->test[p] = phase_homogeneity_test(f->correct[p], f->total[p], f->S);
            else
                f->test[p] = (ChiSquare){NAN, NAN, 0, NAN, 0};
        }
        n++;
    }
    return n;
}

void probe_print_kind_folds(FILE *f, const KindFold *kf, int n) {
    for (int k = 0; k < n; k++) {
        const KindFold *x = &kf[k];
        if (!x->ok) {
            fprintf(f, "%s layers (%d, S %d, o %d): no fold: S does not divide the probe's residues P\n", x->name,
                    x->n_layers, x->S, x->o);
            continue;
        }
        fprintf(f, "by the %s layers' phase (t_K - (%d)) mod %d (%d layer%s from %d): accuracy %% (n)\n", x->name, x->o, x->S,
                x->n_layers, x->n_layers == 1 ? "" : "s", x->first_layer);
        for (int p = 0; p < PROBE_N_PROTOCOLS; p++) {
            long N = 0;
            for (int s = 0; s < x->S; s++) N += x->total[p][s];
            if (!N) continue;
            fprintf(f, "  %-3s", probe_protocol_name(p));
            int worst = -1;
            double wa = INFINITY;
            for (int s = 0; s < x->S; s++) {
                double a = x->total[p][s] ? 100.0 * x->correct[p][s] / x->total[p][s] : NAN;
                if (isfinite(a) && a < wa) wa = a, worst = s;
                fprintf(f, " %d:%.1f(%ld)", s, a, x->total[p][s]);
            }
            const ChiSquare *t = &x->test[p];
            double lo = NAN, hi = NAN;
            if (worst >= 0) probe_wilson(x->correct[p][worst], x->total[p][worst], PROBE_Z95, &lo, &hi);
            fprintf(f, "\n  %-3s worst phase %d (%.1f%%, 95%% Wilson interval [%.1f, %.1f], n = %ld); phase test chi2 %.2f (df %d) "
                    "p %.3g%s\n", probe_protocol_name(p), worst, wa, 100 * lo, 100 * hi, worst >= 0 ? x->total[p][worst] : 0L,
                    t->chi2, t->df, t->p, t->permutations ? " (permutation p: an expected count < 5)" : "");
        }
    }
}
