/* The gate-coverage penalty on the CPU (docs/spec.md §2b), one branch of one layer.
 *
 * For sequence b, over the windows that exist (j < nW_g of each KV head g: staggered grids give
 * heads different counts, and a shifted sequence (docs/spec.md §6.2) its own nW_{b,g}: n_b is
 * per sequence) and the c channels (vector gates):
 *   n_b        = c * sum_g nW_g                                  (the number of averaged rows)
 *   gbar_{b,i} = (1 / n_b) sum_{g, j < nW_g, ch} alpha_{b,j,g,i,ch}
 *   per_seq[b] = ln W - H(gbar_b),   H(p) = -sum_i p_i ln p_i    (0 when gbar is uniform)
 * Every existing (window, head) pair weighs the same; with the aligned grid this is the plain
 * mean over j and g of docs/spec.md. Gradient (dalpha not NULL), with grad_scale the weight of
 * sequence b's penalty in the objective:
 *   d per_seq[b] / d alpha_{b,j,g,i,ch} = (ln gbar_{b,i} + 1) / n_b   (0 for absent windows)
 * Partial windows (a negative o_base, docs/spec.md §6.1): a masked slot (before the sequence) counts
 * as weight 0 (its alpha is 0) and its window still counts whole in n_b, so gbar stays a
 * distribution over the W offsets (every window's alpha sums to 1 over its present slots); its
 * dalpha is 0 (alpha there is the constant 0, not a function of the parameters).
 * Uniform gates have constant alpha: per_seq = 0 and no gradient (the caller skips them).
 * Sums run in a fixed order in double: deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"

void cpu_gate_coverage(BackendCtx *ctx, const CompShape *s, const float *alpha, float *dalpha, float *per_seq, float grad_scale) {
    const int B = s->B, nW = s->n_windows, G = s->G, W = s->window, c = s->channels;
    const size_t per_b = (size_t)nW * G * W * c;
    /* [W] each, on the heap (W reaches 65536) */
    double *gbar = cpu_scratch(sizeof(double) * (W > 0 ? (size_t)W : 1), "the gate-coverage mean");
    float *coef = cpu_scratch(sizeof(float) * (W > 0 ? (size_t)W : 1), "the gate-coverage gradient");
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < W; i++) gbar[i] = 0.0;
        long rows = 0;
        for (int g = 0; g < G; g++) {
            int nWg = comp_head_windows(s, b, g);
            rows += (long)nWg * c;
            for (int j = 0; j < nWg; j++) {
                const float *al = alpha + b * per_b + (((size_t)j * G + g) * W) * c;   /* [W, c] */
                for (int i = 0; i < W; i++)
                    for (int ch = 0; ch < c; ch++) gbar[i] += al[i * c + ch];
            }
        }
        double h = 0.0;
        for (int i = 0; i < W; i++) {
            gbar[i] = rows ? gbar[i] / rows : 1.0 / W;
            if (gbar[i] > 0) h -= gbar[i] * log(gbar[i]);
        }
        per_seq[b] = (float)(log((double)W) - h);
        if (!dalpha) continue;
        float *da = dalpha + b * per_b;
        memset(da, 0, sizeof(float) * per_b);
        if (!rows) continue;
        for (int i = 0; i < W; i++)
            coef[i] = (float)(grad_scale * (log(gbar[i] > 1e-30 ? gbar[i] : 1e-30) + 1.0) / rows);
        for (int g = 0; g < G; g++) {
            int nWg = comp_head_windows(s, b, g);
            for (int j = 0; j < nWg; j++) {
                float *d = da + (((size_t)j * G + g) * W) * c;
                const int f = vis_window_first_slot(j, comp_head_stride(s, g), comp_head_offset(s, b, g));   /* masked: 0 */
                for (int i = f; i < W; i++)
                    for (int ch = 0; ch < c; ch++) d[i * c + ch] = coef[i];
            }
        }
    }
    free(gbar);
    free(coef);
}
