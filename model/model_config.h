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
    int token_shift;         /* the compressor reads a_t + M a_{t-1} (docs/spec.md §6.3) */
} ModelConfig;

/* The words of the enum keys, indexed by their value (config_gate_names[GATE_VECTOR] is
 * "vector"), NULL-terminated: the one spelling the parser accepts and every writer prints. */
extern const char *const config_attention_names[];   /* ATTN_* */
extern const char *const config_gate_names[];        /* GATE_* */
extern const char *const config_local_names[];       /* LOCAL_* */
extern const char *const config_compressor_names[];  /* COMPRESSOR_* */
extern const char *const config_grid_names[];        /* GRID_* */
/* Sizes derived from the config (windows, channels, maps, tied K/V, grid offsets): model/dims.h. */

/* The raw-token visibility (VIS_*, kernels/visibility.h) of the config's attention. */
static inline int config_visibility(const ModelConfig *m) {
    return m->attention == ATTN_FULL ? VIS_FULL : m->local == LOCAL_TAIL ? VIS_TAIL : VIS_WINDOW;
}
#endif
