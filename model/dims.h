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
 *              the rows of every per-head buffer [B, nW, G, ...]; 0 for full attention
 *   tied_kv    one compressor branch whose entries are both keys and values: kv_tied, or
 *              compressor = deepseek ("keys and values tied"); branches = 1 + !tied_kv
 *   gated      the compressor has gate weights (gate = scalar | vector, not uniform)
 *   channels   c, the last axis of alpha [.., W, c] and of the gate weight: head_dim for vector
 *              gates, 1 for scalar and uniform
 *   n_maps     maps per branch along the W axis of gate weight and payload: W (paper), 2
 *              (deepseek: offsets < S use map 0, the rest map 1), 1 (shared)
 *   visibility VIS_* (kernels/visibility.h): which raw tokens a query sees
 *   grid       GRID_*: the KV heads' window grid (aligned for full attention: it has none)
 * and, per KV head g, dims_grid_offset (o_base + o_g) and dims_head_windows (vis_n_windows there);
 * dims_seq_offset adds a sequence's shift u_b (phase jitter, docs/spec.md §6.2).
 * All integer arithmetic; T = 0 where only the T-free sizes are needed (n_windows is then 0). */
#ifndef PHASELAB_DIMS_H
#define PHASELAB_DIMS_H
#include "model/model_config.h"

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
    return d;
}

/* o_base + o_g: KV head g's grid offset at shift 0 (0 on the aligned grid). */
static inline int dims_grid_offset(const ModelDims *d, int g) {
    return vis_entry_offset(d->grid, g, d->stride, d->n_kv_heads, d->grid_base, 0);
}
/* ... and in a sequence shifted by u (phase jitter): o_base + o_g + u. */
static inline int dims_seq_offset(const ModelDims *d, int g, int u) {
    return vis_entry_offset(d->grid, g, d->stride, d->n_kv_heads, d->grid_base, u);
}
/* Windows of KV head g at T and shift 0 (staggered heads g > 0 may have one fewer than n_windows). */
static inline int dims_head_windows(const ModelDims *d, int g) {
    return d->compressed ? vis_n_windows(d->T, d->window, d->stride, dims_grid_offset(d, g)) : 0;
}
#endif
