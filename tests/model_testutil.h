/* Helpers shared by the model tests: tiny configs of every docs/spec.md variant, and random
 * parameters large enough that every term of the model matters (the docs/spec.md §1.4 init has zero gates,
 * which would hide gate-gradient mistakes). */
#ifndef PHASELAB_TESTS_MODEL_TESTUTIL_H
#define PHASELAB_TESTS_MODEL_TESTUTIL_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trainer/run_config.h"
#include "model/model.h"
#include "kernels/kernels.h"
#include "common/errors.h"

static inline double tu_uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((*s >> 11) + 0.5) / 9007199254740992.0;
}
static inline double tu_normal(uint64_t *s) {
    double u1 = tu_uniform(s), u2 = tu_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A tiny full-attention config: V 23, D 16, H 4, G 2, d 8, F 24, 2 layers. */
static inline ModelConfig tu_tiny_config(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.d_model = 16; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 8; c.d_ff = 24;
    c.vocab_size = 23; c.rope_theta = 10000.0; c.norm_eps = 1e-6; c.tie_embeddings = 1;
    c.attention = ATTN_FULL; c.window = 4; c.stride = 4; c.gate = GATE_SCALAR; c.gate_bias = 1;
    c.kv_tied = 0; c.post_norm = 0; c.qk_norm = 1; c.rope_dims = 8; c.local = LOCAL_WINDOW; c.n_local = 3;
    c.compressor = COMPRESSOR_PAPER; c.attn_sink = 0;
    return c;
}

/* A layer schedule (model.layer_attention, docs/spec.md §5) of n_layers layers on the tiny config:
 * csa W4/S2 (vector gates, deepseek maps), hca W4/S4 (vector gates, one shared map). */
static inline void tu_schedule(ModelConfig *c, int n_layers, const char *text) {
    c->n_layers = n_layers;
    snprintf(c->layer_attention, sizeof c->layer_attention, "%s", text);
    c->csa_window = 4; c->csa_stride = 2; c->csa_gate = GATE_VECTOR; c->csa_compressor = COMPRESSOR_DEEPSEEK;
    c->hca_window = 4; c->hca_stride = 4; c->hca_gate = GATE_VECTOR; c->hca_compressor = COMPRESSOR_SHARED;
}

/* Fills every parameter: matrices N(0, std), norm weights 1 + N(0, 0.2), gate biases and sinks N(0, 1). */
/* Written into a host array and uploaded: model_params() is backend memory (device memory on
 * CUDA, where a host write through it crashes; only the CPU backend's is host memory). */
static inline void tu_random_params(Model *m, uint64_t seed, double std) {
    const TensorTable *tt = model_tensors(m);
    float *p = (float *)calloc(tt->n_floats, sizeof(float));
    uint64_t s = seed * 2654435761u + 1;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        int is_norm = strstr(t->name, "norm") != NULL;
        int is_bias = strstr(t->name, "bias") != NULL || strstr(t->name, "attn_sink") != NULL;
        for (size_t j = 0; j < t->numel; j++) {
            double z = tu_normal(&s);
            p[t->offset + j] = (float)(is_norm ? 1.0 + 0.2 * z : is_bias ? z : std * z);
        }
    }
    model_upload_params(m, p);
    free(p);
}

static inline void tu_random_tokens(int32_t *tok, int n, int V, uint64_t seed) {
    uint64_t s = seed * 7919 + 3;
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(tu_uniform(&s) * V) % V;
}
#ifndef __cplusplus
/* docs/spec.md §6.4, multi-rate strides: KV head g pools with its own stride S_g (model.stride = the
 * smallest); tu_tiny_config has W = 4, H = 4 query heads, G = 2. The variants of test_gradcheck and
 * test_decode (C only: the emulator's C++ sources include this header too). */
static inline void tu_mr_set(ModelConfig *c, const char *strides, int smallest) {
    snprintf(c->head_strides, sizeof c->head_strides, "%s", strides);
    c->stride = smallest;
}
static inline void tu_mr(ModelConfig *c) { c->attention = ATTN_COMPRESSED; tu_mr_set(c, "4,2", 2); }                                 /* S and S/2 */
static inline void tu_mr_g4_tail_vec(ModelConfig *c) {                                                       /* co-prime 3, 2 */
    c->attention = ATTN_COMPRESSED; c->n_kv_heads = 4; tu_mr_set(c, "4,3,2,1", 1); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR;
}
static inline void tu_mr_w5_pn_tied(ModelConfig *c) {
    c->attention = ATTN_COMPRESSED; c->window = 5; tu_mr_set(c, "5,3", 3); c->post_norm = 1; c->kv_tied = 1; c->attn_sink = 1;
}
static inline void tu_mr_g4_shared_tail(ModelConfig *c) {
    c->attention = ATTN_COMPRESSED; c->n_kv_heads = 4; tu_mr_set(c, "2,4,4,3", 2); c->compressor = COMPRESSOR_SHARED; c->local = LOCAL_TAIL;
}
static inline void tu_mr_ts_rope4(ModelConfig *c) { tu_mr(c); c->token_shift = 1; c->rope_dims = 4; }
static inline void tu_mr_stag_g4_tail(ModelConfig *c) { tu_mr_g4_tail_vec(c); c->grid = GRID_STAGGERED; c->window = 5; }  /* o = 0, 0, 1, 0 */
static inline void tu_mr_stag_w5(ModelConfig *c) { tu_mr_w5_pn_tied(c); c->grid = GRID_STAGGERED; }                    /* o = 0, 1 */
/* docs/spec.md §6.5, learned chunk boundaries: W 4 (the longest chunk), S 2 (the target mean length) on
 * the tiny config; the variants of test_gradcheck (and test_decode). */
static inline void tu_bd(ModelConfig *c) { c->attention = ATTN_COMPRESSED; c->window = 4; c->stride = 2; c->boundaries = BOUNDARIES_LEARNED; }
static inline void tu_bd_tail(ModelConfig *c) { tu_bd(c); c->local = LOCAL_TAIL; }
static inline void tu_bd_vec_pn(ModelConfig *c) { tu_bd(c); c->gate = GATE_VECTOR; c->post_norm = 1; }
static inline void tu_bd_tied_sink(ModelConfig *c) { tu_bd(c); c->kv_tied = 1; c->attn_sink = 1; }
static inline void tu_bd_uniform(ModelConfig *c) { tu_bd(c); c->gate = GATE_UNIFORM; }
static inline void tu_bd_ts(ModelConfig *c) { tu_bd(c); c->token_shift = 1; c->rope_dims = 4; }
/* Every layer's boundary.bias c_bd = value (tu_random_params draws N(0, 1), which can leave a layer
 * with no forced boundary: every chunk cut by the score before W tokens). */
static inline void tu_set_boundary_bias(Model *m, float value) {
    const TensorTable *tt = model_tensors(m);
    float *p = (float *)malloc(sizeof(float) * tt->n_floats);
    model_download_params(m, p);
    for (int i = 0; i < tt->n; i++)
        if (strstr(tt->t[i].name, "compressor.boundary.bias")) p[tt->t[i].offset] = value;
    model_upload_params(m, p);
    free(p);
}
static inline void tu_bd_shared(ModelConfig *c) { tu_bd_tail(c); c->compressor = COMPRESSOR_SHARED; c->gate_bias = 1; }
#endif
#endif
