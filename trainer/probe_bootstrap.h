/* Intervals for the interventions' probe accuracies (docs/spec.md §4.10): a percentile bootstrap
 * over the probe's prompts, stratified by residue, from each prompt's outcome (1 right, 0 wrong).
 *
 * The statistic is the probe's mean M = (1/P') sum_r A(r), A(r) = 100 (right in r) / n_r over the
 * P' residues with prompts of the protocol (ProbeResult.mean). One replicate draws, for every
 * residue r, n_r of its prompts with replacement (SplitMix64, seed fixed: the same interval on
 * every machine) and recomputes M; the interval is the 2.5th and 97.5th percentiles of B
 * replicates (type-7 quantiles of the sorted replicates).
 *   probe_mean_ci:        M of one condition;
 *   probe_rel_change_ci:  100 (M_b - M_a) / M_a of two conditions scored on the same prompts
 *                         (the clean model a, an intervention b): paired, one draw of prompt
 *                         indices serves both, so what the prompts share cancels. Replicates with
 *                         M_a = 0 are left out; fewer than 95% left (a nearly blind clean model):
 *                         NaN, NaN.
 * NaN, NaN when the protocol has no prompts. */
#ifndef PHASELAB_PROBE_BOOTSTRAP_H
#define PHASELAB_PROBE_BOOTSTRAP_H
#include <stdint.h>
#include "data/probe.h"

#define PROBE_BOOT_B 2000               /* replicates */
#define PROBE_BOOT_SEED UINT64_C(20261205)

/* The same on plain arrays: n prompts with residue [n] in 0..P-1 and outcomes a [n] (and b [n], or
 * NULL for the mean of a alone); one protocol. */
void probe_boot_ci(const int *residue, int n, int P, const unsigned char *a, const unsigned char *b, double *lo, double *hi);
void probe_mean_ci(const ProbeSet *ps, int protocol, const unsigned char *hits, double *lo, double *hi);
void probe_rel_change_ci(const ProbeSet *ps, int protocol, const unsigned char *a, const unsigned char *b, double *lo,
                         double *hi);
#endif
