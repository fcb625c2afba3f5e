/* The probe folded by chunk phase: trainer/chunk_phase.h (docs/spec.md §6.5 "Phase fold"). */
#include <math.h>
#include <stdlib.h>
#include "trainer/chunk_phase.h"
#include "trainer/probe_eval.h"   /* probe_wilson */

int chunk_phase_init(ChunkPhaseCounts *c, int protocols, int layers, int window) {
    *c = (ChunkPhaseCounts){.protocols = protocols, .layers = layers, .window = window};
    const size_t n = (size_t)protocols * layers * (window + 1);
    c->correct = calloc(n, sizeof *c->correct);
    c->total = calloc(n, sizeof *c->total);
    c->acc = calloc(n, sizeof *c->acc);
    c->lo = calloc(n, sizeof *c->lo);
    c->hi = calloc(n, sizeof *c->hi);
    c->test = calloc((size_t)protocols * layers, sizeof *c->test);
    if (c->correct && c->total && c->acc && c->lo && c->hi && c->test) return 0;
    chunk_phase_free(c);
    return -1;
}

void chunk_phase_free(ChunkPhaseCounts *c) {
    free(c->correct), free(c->total), free(c->acc), free(c->lo), free(c->hi), free(c->test);
    *c = (ChunkPhaseCounts){0};
}

int chunk_phase_of(const unsigned char *bd, int T, int t, int W) {
    for (int e = t; e < T && e - t < W; e++)     /* a chunk is at most W tokens: e - t <= W - 1 */
        if (bd[e]) return W - 1 - (e - t);
    return W;
}

void chunk_phase_add(ChunkPhaseCounts *c, int protocol, int layer, const unsigned char *bd, int T, int t_key, int right) {
    const long i = chunk_phase_index(c, protocol, layer, chunk_phase_of(bd, T, t_key, c->window));
    c->total[i]++;
    c->correct[i] += right != 0;
}

void chunk_phase_finalize(ChunkPhaseCounts *c) {
    const int K = c->window + 1;
    for (int p = 0; p < c->protocols; p++)
        for (int l = 0; l < c->layers; l++) {
            for (int k = 0; k < K; k++) {
                const long i = chunk_phase_index(c, p, l, k);
                c->acc[i] = c->total[i] ? 100.0 * c->correct[i] / c->total[i] : NAN;
                probe_wilson(c->correct[i], c->total[i], 1.959963984540054, &c->lo[i], &c->hi[i]);
                c->lo[i] *= 100.0, c->hi[i] *= 100.0;
            }
            const long i0 = chunk_phase_index(c, p, l, 0);
            c->test[(long)p * c->layers + l] = phase_homogeneity_test(c->correct + i0, c->total + i0, c->window);
        }
}

void chunk_phase_print(FILE *f, const ChunkPhaseCounts *c, const char *const *names) {
    fprintf(f, "by chunk phase of the key (learned boundaries; slot W-1-(e-t_K), W = %d; u: unpooled): accuracy %% "
            "[95%% Wilson interval] (n)\n", c->window);
    for (int p = 0; p < c->protocols; p++)
        for (int l = 0; l < c->layers; l++) {
            fprintf(f, "  %-20s layer %2d:", names[p], l);
            for (int k = 0; k <= c->window; k++) {
                const long i = chunk_phase_index(c, p, l, k);
                if (!c->total[i]) continue;
                if (k < c->window) fprintf(f, " %d: %.1f [%.1f, %.1f] (%ld)", k, c->acc[i], c->lo[i], c->hi[i], c->total[i]);
                else fprintf(f, " u: %.1f [%.1f, %.1f] (%ld)", c->acc[i], c->lo[i], c->hi[i], c->total[i]);
            }
            const ChiSquare *t = &c->test[(long)p * c->layers + l];
            fprintf(f, " | homogeneity p = %.3g%s\n", t->p, t->permutations ? " (permutation p: an expected count < 5)" : "");
        }
}
