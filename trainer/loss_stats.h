/* Mean token loss by group (residue or phase) with its standard error, windows as clusters
 * (docs/spec.md §3.8). The tokens of one window share their context, so they are not independent
 * draws; the window is the sampling unit. For group g, window k contributes the sum of its
 * counted token losses s_k and their count n_k (both 0 when it has no token of g). Over the K
 * windows added:
 *
 *   mean_g = sum_k s_k / sum_k n_k                                   (the plain per-token mean)
 *   se_g^2 = K / (K - 1) * sum_k (s_k - mean_g n_k)^2 / (sum_k n_k)^2
 *
 * the delta-method (linearization) variance of a ratio estimator over clusters, the analytic
 * counterpart of a bootstrap over windows (it is what a window bootstrap converges to). It is
 * kept as five running sums per group (sum s, sum n, sum s^2, sum s n, sum n^2), so partial
 * results add: ranks reduce the array with one sum all-reduce. se is NaN with fewer than 2
 * windows or no token; mean is NaN without a token. The overall mean (every group together) is
 * the last row, with its own clustered SE.
 *
 * Shapes: moments [groups + 1, LOSS_STATS_MOMENTS] doubles. */
#ifndef PHASELAB_LOSS_STATS_H
#define PHASELAB_LOSS_STATS_H

#define LOSS_STATS_MOMENTS 5

typedef struct {
    int groups;        /* P: residues or phases */
    double windows;    /* K (double: reduced with the moments) */
    double *moments;   /* [groups + 1, 5]: sum s, sum n, sum s^2, sum s n, sum n^2; row groups = all */
    double *window;    /* [2, groups + 1]: one window's s and n (scratch of loss_stats_add_window) */
} LossStats;

/* 0, or -1 when out of memory. */
int loss_stats_init(LossStats *ls, int groups);
void loss_stats_free(LossStats *ls);
/* One window of T token losses [T]; counted [T] (NULL: every token) says which to count; the
 * token at position t belongs to group (t + offset) mod groups. */
void loss_stats_add_window(LossStats *ls, const float *loss, const unsigned char *counted, int T, long offset);
/* Group g's mean, standard error and token count (g = groups: all tokens). */
void loss_stats_get(const LossStats *ls, int g, double *mean, double *se, double *tokens);
#endif
