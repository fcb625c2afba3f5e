/* The sizes a model config implies (docs/spec.md §2 and §2b), derived once: dims_of(cfg, T).
 *
 * Every place that needs one of these (the model's arena and op shapes, the tensor table, the
 * decoder, validation statistics, the FLOP count, the summary) reads it from a ModelDims instead
 * of re-deriving it from the config:
 *   grid_base  o_base, the static part of every grid offset (kernels/visibility.h, docs/spec.md §6.1):
 *              S - W on a csa layer (layer_config sets csa_layer: DeepSeek-V4's geometry, entry j
 *              pools jS + S - W .. jS + S - 1, docs/spec.md §5.4), 0 for every other kind and every
 *              variant of §2/§2b; a negative o_base > -W gives partial first windows
 *   n_windows  nW = #{j : o_base + jS + W - 1 <= T - 1}: the windows of KV head 0 at shift 0
 *              (o = o_base), the most any head or sequence has (every other offset is larger), so
 *              the rows of every per-head buffer [B, nW, G, ...]; 0 for full attention. With
 *              multi-rate strides the most over the heads at their own offsets (§6.4)
 *   multirate  model.head_strides is set: head_stride[g] = S_g (docs/spec.md §6.4); else 0 and
 *              every head has stride S (dims_head_strides is then NULL)
 *   tied_kv    one compressor branch whose entries are both keys and values: kv_tied, or
 *              compressor = deepseek ("keys and values tied"); branches = 1 + !tied_kv
 *   gated      the compressor has gate weights (gate = scalar | vector, not uniform)
 *   channels   c, the last axis of alpha [.., W, c] and of the gate weight: head_dim for vector
 *              gates, 1 for scalar and uniform
 *   n_maps     maps per branch along the W axis of gate weight and payload: W (paper), 2
 *              (deepseek: offsets < S use map 0, the rest map 1), 1 (shared)
 *   visibility VIS_* (kernels/visibility.h): which raw tokens a query sees
 *   grid       GRID_*: the KV heads' window grid (aligned for full attention: it has none)
 *   boundaries model.boundaries = learned (docs/spec.md §6.5): no grid; entries end where the learned
 *              scores decide, at most T of them per sequence, so n_windows = T (the buffer rows)
 * and, per KV head g, dims_head_stride (S_g), dims_grid_offset (o_base + o_g) and dims_head_windows (vis_n_windows there);
 * dims_seq_offset adds a sequence's shift u_b (phase jitter, docs/spec.md §6.2).
 * All integer arithmetic; T = 0 where only the T-free sizes are needed (n_windows is then 0). */
#ifndef PHASELAB_DIMS_H
#define PHASELAB_DIMS_H
#include "model/model_config.h"
#include "model/layer_kinds.h"   /* stride_lcm */
#include "common/errors.h"

typedef struct {
    int T;                     /* sequence length the window counts are for */
    int compressed;            /* attention = compressed */
    int window, stride;        /* W, S (as configured) */
    int n_kv_heads;            /* G */
    int grid_base;             /* o_base: static grid offset (S - W on csa layers, else 0; > -W) */
    int n_windows;             /* nW: KV head 0's windows at T and shift 0; 0 for full attention */
    int tied_kv, branches;     /* tied K/V: 1 branch, else 2 */
    int gated;                 /* gate weights exist (scalar | vector) */
    int channels;              /* c: head_dim (vector) or 1 */
    int n_maps;                /* W | 2 | 1 */
    int visibility;            /* VIS_* */
    int grid;                  /* GRID_*: GRID_ALIGNED for full attention */
    int multirate;             /* head_stride holds S_g per KV head (model.head_strides, §6.4) */
    int boundaries;            /* learned chunk boundaries (§6.5): n_windows = T entry rows, no grid */
    int head_stride[HEAD_STRIDES_MAX];   /* [G] S_g when multirate (else unused) */
} ModelDims;

static inline ModelDims dims_of(const ModelConfig *c, int T) {
    ModelDims d;
    d.T = T;
    d.compressed = c->attention == ATTN_COMPRESSED;
    d.window = c->window;
    d.stride = c->stride;
    d.n_kv_heads = c->n_kv_heads;
    d.grid_base = d.compressed && c->csa_layer ? c->stride - c->window : 0;   /* the one rule */
    d.n_windows = d.compressed ? vis_n_windows(T, c->window, c->stride, d.grid_base) : 0;
    d.tied_kv = c->kv_tied || c->compressor == COMPRESSOR_DEEPSEEK;
    d.branches = d.tied_kv ? 1 : 2;
    d.gated = c->gate != GATE_UNIFORM;
    d.channels = c->gate == GATE_VECTOR ? c->head_dim : 1;
    d.n_maps = c->compressor == COMPRESSOR_DEEPSEEK ? 2 : c->compressor == COMPRESSOR_SHARED ? 1 : c->window;
    d.visibility = config_visibility(c);
    d.grid = d.compressed ? c->grid : GRID_ALIGNED;
    char why[ERR_LEN];   /* a bad head_strides is refused by the config's validation; here it is 0 */
    const int n_strides = d.compressed ? config_head_strides(c, d.head_stride, why) : 0;
    d.multirate = n_strides > 0;
    if (d.multirate) d.n_windows = 0;
    for (int g = 0; d.multirate && g < c->n_kv_heads; g++) {   /* the most rows any head has */
        const int Sg = d.head_stride[g];
        const int n = vis_n_windows(T, c->window, Sg, vis_entry_offset(d.grid, g, Sg, d.n_kv_heads, d.grid_base, 0));
        if (n > d.n_windows) d.n_windows = n;
    }
    d.boundaries = d.compressed && c->boundaries == BOUNDARIES_LEARNED;
    if (d.boundaries) d.n_windows = T;
    return d;
}

/* S_g per KV head [G] (docs/spec.md §6.4), or NULL when every head has stride S: what the kernel
 * shapes' head_stride carries (vis_head_stride). */
static inline const int *dims_head_strides(const ModelDims *d) { return d->multirate ? d->head_stride : NULL; }
/* KV head g's stride S_g. */
static inline int dims_head_stride(const ModelDims *d, int g) {
    return vis_head_stride(dims_head_strides(d), g, d->stride);
}

/* o_base + o_g: KV head g's grid offset at shift 0 (0 on the aligned grid). */
static inline int dims_grid_offset(const ModelDims *d, int g) {
    return vis_entry_offset(d->grid, g, dims_head_stride(d, g), d->n_kv_heads, d->grid_base, 0);
}
/* ... and in a sequence shifted by u (phase jitter): o_base + o_g + (u mod S_g). */
static inline int dims_seq_offset(const ModelDims *d, int g, int u) {
    return vis_entry_offset(d->grid, g, dims_head_stride(d, g), d->n_kv_heads, d->grid_base, u);
}
/* P: the range [0, P) of a sequence's shift u (docs/spec.md §6.2): S, or with multi-rate strides
 * (§6.4) the least common multiple of the S_g, so that u mod S_g is uniform on every head and the
 * heads' shifts (u mod S_0, u mod S_1, ...) take every combination their strides allow. */
static inline int dims_shift_period(const ModelDims *d) {
    long p = d->stride > 0 ? d->stride : 1;
    for (int g = 0; d->multirate && g < d->n_kv_heads; g++) p = stride_lcm(p, d->head_stride[g]);
    return (int)p;
}
/* The most windows any KV head has in T tokens at shift 0, the rows of a per-head buffer: head 0's
 * (the smallest offset) on a single-stride grid, the smallest stride's with multi-rate strides. */
static inline int dims_windows_at(const ModelDims *d, int T) {
    int n = 0;
    for (int g = 0; d->compressed && g < d->n_kv_heads; g++) {
        const int x = vis_n_windows(T, d->window, dims_head_stride(d, g), dims_grid_offset(d, g));
        if (x > n) n = x;
    }
    return n;
}
/* Windows of KV head g at T and shift 0 (staggered heads g > 0 may have one fewer than n_windows). */
static inline int dims_head_windows(const ModelDims *d, int g) {
    return d->compressed ? vis_n_windows(d->T, d->window, dims_head_stride(d, g), dims_grid_offset(d, g)) : 0;
}
#endif
