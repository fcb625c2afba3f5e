/* Per-kind phase folds of the lookup probe (docs/spec.md §3.7, §5.5): with a layer schedule the
 * probe's counts by residue r = t_K mod P are folded once per compressed layer kind of the
 * schedule, each by that kind's own stride S_k and grid offset o_k:
 *     phase_k(r) = (r - o_k) mod S_k        (o_k = dims_grid_offset(dims_of(layer_config(l), T), 0),
 *                                            KV head 0 of the kind's first layer; S_k | P required)
 *     correct_k[phi] = sum of correct(r) over r with phase_k(r) = phi, total_k likewise
 *     A_k(phi) = 100 correct_k / total_k, its 95% Wilson interval, and per protocol the phase-effect
 *     test of §3.7 (phase_homogeneity_test) on the S_k x 2 table
 * so that a weak phase can be traced to the kind at whose period it lives. Every layer of a kind
 * runs the same config (layer_config), so one kind has one S and one o. The lcm fold of §5.5
 * (ProbeResult.fold) is kept beside these. */
#ifndef PHASELAB_KIND_FOLD_H
#define PHASELAB_KIND_FOLD_H
#include <stdio.h>
#include "trainer/probe_eval.h"

#define KIND_FOLD_MAX 5                    /* N_KINDS (model/layer_kinds.h) */

typedef struct {
    int kind;                              /* KIND_* (model/layer_kinds.h) */
    const char *name;                      /* "csa", "hca", "compressed" */
    int S, o;                              /* the kind's stride and grid offset (KV head 0) */
    int n_layers, first_layer;             /* layers of this kind, the first of them */
    int ok;                                /* 1 when S divides P (else no fold: counts zero, tests NaN) */
    long correct[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES], total[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];   /* [2, S] */
    ChiSquare test[PROBE_N_PROTOCOLS];
} KindFold;

/* The fold geometry of layer kind `kind` (KIND_*), the one rule for every per-kind fold (the
 * probe's folds here, the kinds knocked out whole in analysis/analysis.c): the stride and grid
 * offset of the kind's first layer l,
 *     S_k = layer_config(l).stride,  o_k = dims_grid_offset(dims_of(layer_config(l), T), 0)
 * returning 1; a kind without a grid (full, window) returns 0 with the convention S_k = 8,
 * o_k = 0 (the default fold of probe_phase_fold); a kind no layer has returns -1 (S_k, o_k
 * untouched). first_layer (may be NULL) gets l. */
int kind_fold_geometry(const ModelConfig *mc, int kind, int T, int *S, int *o, int *first_layer);

/* The compressed kinds of mc's schedule in KIND_* order (none without a schedule: the model's own
 * fold is then ProbeResult.fold), folded from pr's counts; T: the evaluation length (dims_of).
 * Returns the number of kinds written to out[KIND_FOLD_MAX]. */
int probe_kind_folds(const ModelConfig *mc, int T, const ProbeResult *pr, KindFold *out);

/* The stride of each kind's fold, S_of_kind[KIND_*]: S_k where mc has a schedule, the kind has a
 * grid and S_k divides the probe's P residues (the folds probe_kind_folds computes with ok = 1), 0
 * for every other kind. The metrics file sizes its /probe_kinds columns by it. */
void kind_fold_periods(const ModelConfig *mc, int T, int P, int S_of_kind[KIND_FOLD_MAX]);

/* The table: per kind and protocol, A_k(phi) with n per phase, and the test (chi2, df, p). */
void probe_print_kind_folds(FILE *f, const KindFold *kf, int n);
#endif
