/* The lightning indexer's selection statistics on a probe set (docs/spec.md §5.4, "Selection by
 * phase"): for each csa layer with an indexer (window W, stride S, grid offset o from dims_of, nW
 * entry rows) and each prompt, at the query position q (the prompt's first scored position) with
 * n_q = vis_n_entries(q) visible entries and k_q = min(topk, n_q) of them selected:
 *
 *   holding entries  H = {j : 0 <= j < n_q, o + jS <= t_K <= o + jS + W - 1}   (the visible entries
 *                    whose window pools the target key's position t_K; 1 or W/S of them)
 *   counted          the prompts with H non-empty (else the key is not yet in any visible entry)
 *   hit              some j in H is selected (S_q of §5.4)
 *   phase            (t_K - o) mod S (vis_phase: the key's slot in the csa grid)
 *   chance           1 - C(n_q - |H|, k_q) / C(n_q, k_q): the hit probability of k_q entries drawn
 *                    uniformly from the n_q visible ones (the rate an indexer blind to content gets)
 * per protocol and phase: hits, n, rate = hits / n with its 95% Wilson interval, the mean chance,
 * and across phases the homogeneity test of §3.7 (phase_homogeneity_test: Pearson chi-square on the
 * S x 2 table of hits and misses, a permutation p when an expected count is below 5). By recency:
 * for every visible entry j of every query, age a = n_q - 1 - j (0 = the newest); visible[a] and
 * selected[a] counted over the prompts (both protocols), rate = selected / visible. */
#ifndef PHASELAB_INDEXER_STATS_H
#define PHASELAB_INDEXER_STATS_H
#include "data/probe.h"
#include "trainer/phase_test.h"
#include "model/model_config.h"
#include <stdint.h>

struct Model;

typedef struct {
    int W, S, o, nW, topk;         /* the layer's geometry (visibility) and k */
} IndexerGeom;

/* One query: n_q, k_q, |H| and the hit (1), miss (0) or not counted (-1) for the key at position
 * p and a query at q whose selection row sel [nW] (1 = selected) is given. */
typedef struct { int n_visible, n_selected, n_holding, hit; } IndexerQuery;
IndexerQuery indexer_query_stats(const IndexerGeom *g, const uint8_t *sel, int q, int p);
/* 1 - C(n - h, k) / C(n, k) (0 <= h <= n, 0 <= k <= n): a uniform k-subset of n meets a fixed h-subset. */
double indexer_chance_hit(int n, int k, int h);

typedef struct {
    int layer;                     /* the csa layer */
    IndexerGeom g;
    long hits[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES], n[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];   /* [2, S] */
    double chance_sum[PROBE_N_PROTOCOLS][PROBE_MAX_RESIDUES];                                      /* [2, S] */
    long uncounted[PROBE_N_PROTOCOLS];   /* prompts with no visible holding entry */
    long all_selected[PROBE_N_PROTOCOLS];/* counted prompts with n_q <= topk (every entry selected) */
    long *visible, *selected;      /* [nW] by age */
    ChiSquare test[PROBE_N_PROTOCOLS];
} IndexerLayerStats;

typedef struct {
    int n_layers;                  /* csa layers with an indexer */
    IndexerLayerStats *l;          /* [n_layers] */
} IndexerStats;

/* Runs every prompt of ps through m (model_argmax_at at its first scored position; micro_batch
 * rows of one length per batch, the model's T restored afterwards) and counts the above for every
 * indexer layer of mc (the evaluation grid, dims_of at T). S of a layer must be <= PROBE_MAX_RESIDUES.
 * Returns 0, or -1 with err; indexer_stats_free releases st. */
int indexer_stats_run(struct Model *m, const ModelConfig *mc, const ProbeSet *ps, int T, int micro_batch, IndexerStats *st,
                      char *err);
/* The tests (fills test[]) from the counts. */
void indexer_stats_finalize(IndexerStats *st);
void indexer_stats_free(IndexerStats *st);
#endif
