/* The probe folded by chunk phase (docs/spec.md §6.5 "Phase fold"), for models with learned
 * chunk boundaries (model.boundaries = learned), where t mod S means nothing.
 *
 * In layer l the token at t of a row whose boundary flags are bd[0..T-1] (1 = the token ends an
 * entry) is pooled by the entry that ends at e = min{u >= t : bd[u] = 1}, at slot
 *     phase_l(t) = W - 1 - (e - t)          in 0..W-1   (W - 1: the boundary token itself)
 * and is "unpooled" (phase W, the extra bin) when no boundary follows it in the row. On an aligned
 * W = S grid this is t mod S. A probe prompt's chunk phase in layer l is phase_l(t_K), t_K the
 * position of its target key (docs/spec.md §3.5), taken from the same forward that scores it.
 *
 * Counts per protocol p, layer l and bin k = 0..W (W + 1 bins):
 *     correct[p][l][k], total[p][l][k]          long, summed over ranks by the caller
 * and, once finalised, accuracy 100 correct / total with a 95% Wilson interval (NaN where
 * total = 0) and per (p, l) the homogeneity test across the pooled bins 0..W-1
 * (phase_homogeneity_test: chi-square, or the permutation p when expected counts are small).
 * The bins are not balanced: the model decides where its boundaries fall, so every table gives
 * its counts. */
#ifndef PHASELAB_CHUNK_PHASE_H
#define PHASELAB_CHUNK_PHASE_H
#include <stdio.h>
#include "trainer/phase_test.h"

typedef struct {
    int protocols;          /* P_n: protocols (PROBE_N_PROTOCOLS) */
    int layers;             /* L */
    int window;             /* W: bins 0..W-1 pooled, bin W unpooled */
    long *correct, *total;  /* [P_n, L, W + 1] */
    /* finalised (chunk_phase_finalize); percent, NaN where total = 0 */
    double *acc, *lo, *hi;  /* [P_n, L, W + 1] */
    ChiSquare *test;        /* [P_n, L]: homogeneity across bins 0..W-1 */
} ChunkPhaseCounts;

/* Allocates zeroed counts; 0 ok, -1 out of memory. */
int chunk_phase_init(ChunkPhaseCounts *c, int protocols, int layers, int window);
void chunk_phase_free(ChunkPhaseCounts *c);

/* phase_l(t) of the row bd[0..T-1] (above): 0..W-1, or W when no boundary is at or after t. */
int chunk_phase_of(const unsigned char *bd, int T, int t, int W);

/* One prompt's outcome in layer l: bd is its row of that layer's flags. */
void chunk_phase_add(ChunkPhaseCounts *c, int protocol, int layer, const unsigned char *bd, int T, int t_key, int right);

/* Accuracies, intervals and tests from the counts. */
void chunk_phase_finalize(ChunkPhaseCounts *c);

/* A table of the finalised counts: per protocol and layer, accuracy, 95% Wilson interval and n of
 * every bin, and the homogeneity p (marked when it is a permutation p); names[p] names protocol p. */
void chunk_phase_print(FILE *f, const ChunkPhaseCounts *c, const char *const *names);

/* Index of (protocol, layer, bin) in the [P_n, L, W + 1] arrays. */
static inline long chunk_phase_index(const ChunkPhaseCounts *c, int p, int l, int k) {
    return ((long)p * c->layers + l) * (c->window + 1) + k;
}
#endif
