/* Learned chunk boundaries (model.boundaries = learned, docs/spec.md §6.5): the decision rule and the
 * ratio loss, written once for the CPU ops (kernels/cpu/cpu_chunk_compressor.c), the model (the ratio
 * loss's value and slope, model/model.c) and the decoder (model/decode.c).
 *
 * Decision: scanning t = 0..T-1 with s the first token of the open chunk (s = 0 at the start, t + 1 after
 * a boundary at t), token t ends an entry iff
 *     bd_t = 1   iff   p_t >= 1/2   or   t - s + 1 = W          (forced: the chunk reached W tokens)
 * Ratio loss of one layer over the B x T positions of a micro-batch, N = S (the target mean length):
 *     F = mean bd_t,   G = mean p_t,   R = N/(N-1) ((N-1) F G + (1 - F)(1 - G))
 *     dR/dG = N/(N-1) ((N-1) F - (1 - F))          (F is held: it has no gradient)
 * Header-only and free of backend types. */
#ifndef PHASELAB_CHUNK_BOUNDARIES_H
#define PHASELAB_CHUNK_BOUNDARIES_H

#if defined(__CUDACC__)   /* the CUDA backend's decision scan calls the same rule (kernels/cuda/cuda_boundaries.cu) */
#define CB_FN __host__ __device__ static inline
#else
#define CB_FN static inline
#endif

/* bd_t for score p (= sigmoid(q_t)) when the open chunk, token t included, has open_len tokens. */
CB_FN int chunk_boundary(float p, int open_len, int W) { return p >= 0.5f || open_len >= W; }

/* The scan of one sequence: prob [T] -> flag [T] (bd_t), ends [rows] (the t of each boundary, then T
 * past the last) and the entry count. Sequential by definition; the CPU op and the CUDA kernel (one
 * thread per sequence) both run this. */
CB_FN int chunk_scan_row(const float *prob, int T, int W, int rows, unsigned char *flag, int *ends) {
    int open = 0, n = 0;               /* the first token of the open chunk: t + 1 after a boundary at t */
    for (int t = 0; t < T; t++) {
        const int bd = chunk_boundary(prob[t], t - open + 1, W);
        flag[t] = (unsigned char)bd;
        if (bd) { ends[n++] = t; open = t + 1; }
    }
    for (int j = n; j < rows; j++) ends[j] = T;
    return n;
}

/* R of a layer from its boundary rate F and mean score G, target mean chunk length N >= 2. */
static inline double chunk_ratio_loss(double F, double G, int N) {
    return (double)N / (N - 1.0) * ((N - 1.0) * F * G + (1.0 - F) * (1.0 - G));
}
/* dR/dG at boundary rate F (each p_t's slope is this / (B T)). */
static inline double chunk_ratio_slope(double F, int N) { return (double)N / (N - 1.0) * ((N - 1.0) * F - (1.0 - F)); }
#endif
