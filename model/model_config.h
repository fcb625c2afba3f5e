/* The model's own configuration: the [model] section of a run config as the model reads it
 * (dimensions and the variant of docs/spec.md sections 1, 2 and 2b), and the words of its enum
 * keys. The run's other sections and the INI reader live in trainer/run_config.h; model/ needs
 * only this file. */
#ifndef PHASELAB_MODEL_CONFIG_H
#define PHASELAB_MODEL_CONFIG_H
#include "kernels/visibility.h"   /* includes kernels/variants.h: ATTN_* GATE_* LOCAL_* COMPRESSOR_* GRID_* */

typedef struct {
    int d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff, vocab_size;
    double rope_theta, norm_eps;
    int tie_embeddings;
    int attention;           /* ATTN_FULL | ATTN_COMPRESSED */
    int window, stride;      /* W, S (compressed only) */
    int gate;                /* GATE_* */
    int gate_bias, kv_tied, post_norm, qk_norm;
    int rope_dims;           /* r: the LAST r dims of each head are rotated; 0 = no RoPE */
    int local;               /* LOCAL_* */
    int n_local;
    int compressor;          /* COMPRESSOR_* */
    int grid;                /* GRID_*: KV head g's windows start at o_g (kernels/visibility.h) */
    int attn_sink;
    /* The per-layer schedule (docs/spec.md §5, model/layer_kinds.h): a comma list of kinds, one per
     * layer (KIND*N repeats); empty = every layer model.attention. Kept as text and parsed where a
     * layer's config is derived (layer_config), so nothing derived can go stale. */
    char layer_attention[1024];
    /* the csa and hca kinds' compressors (W, S, gate, compressor); their raw window is n_local */
    int csa_window, csa_stride, csa_gate, csa_compressor;
    int hca_window, hca_stride, hca_gate, hca_compressor;
    /* the csa layers' lightning indexer (docs/spec.md §5.4): top-k entries per query (0 = none:
     * every visible entry), its heads and their dimension */
    int csa_topk, indexer_heads, indexer_dim;
    int indexer_topk;        /* derived, not a key: layer_config sets it to csa_topk on a csa layer
                                (the layer has a lightning indexer when > 0); 0 everywhere else */
    int csa_layer;           /* derived, not a key: layer_config sets it to 1 on a csa layer, whose
                                grid takes DeepSeek-V4's static offset o_base = S - W (dims_of,
                                docs/spec.md §5.4); 0 everywhere else */
    int token_shift;         /* the compressor reads a_t + M a_{t-1} (docs/spec.md §6.3) */
    /* multi-rate strides (docs/spec.md §6.4): S_0,S_1,... one per KV head; empty = every head
     * model.stride. Kept as text and parsed where the dims are derived (config_head_strides, dims_of). */
    char head_strides[512];
    int boundaries;          /* BOUNDARIES_*: content-defined chunk boundaries (docs/spec.md §6.5): W the
                                longest chunk, S the target mean chunk length */
} ModelConfig;

/* The most KV heads model.head_strides may name (ModelDims holds the strides in place). */
#define HEAD_STRIDES_MAX 64
/* model.head_strides parsed into out[HEAD_STRIDES_MAX]: the number of strides (0: the key is empty,
 * every head has model.stride), or -1 with err (ERR_LEN bytes) saying what was wrong: not a comma
 * list of integers, more than HEAD_STRIDES_MAX, a count other than n_kv_heads, a stride outside
 * 1..window, or stride not the smallest of them. */
int config_head_strides(const ModelConfig *m, int *out, char *err);

/* The words of the enum keys, indexed by their value (config_gate_names[GATE_VECTOR] is
 * "vector"), NULL-terminated: the one spelling the parser accepts and every writer prints. */
extern const char *const config_attention_names[];   /* ATTN_* */
extern const char *const config_gate_names[];        /* GATE_* */
extern const char *const config_local_names[];       /* LOCAL_* */
extern const char *const config_compressor_names[];  /* COMPRESSOR_* */
extern const char *const config_grid_names[];        /* GRID_* */
extern const char *const config_boundaries_names[];  /* BOUNDARIES_* */
/* Sizes derived from the config (windows, channels, maps, tied K/V, grid offsets): model/dims.h. */

/* The raw-token visibility (VIS_*, kernels/visibility.h) of the config's attention. */
static inline int config_visibility(const ModelConfig *m) {
    return m->attention == ATTN_FULL ? VIS_FULL : m->attention == ATTN_WINDOW ? VIS_WINDOW
         : m->local == LOCAL_TAIL ? VIS_TAIL : VIS_WINDOW;
}
#endif
