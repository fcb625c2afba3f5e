/* Builds the tensor table of a config: the HuggingFace Qwen3 names and shapes for the backbone
 * and the compressor names of docs/spec.md §2. Tensors a variant switches off do not exist:
 * no q_norm/k_norm/ck_norm without qk_norm, no value branch when keys and values are tied
 * (kv_tied, or compressor = deepseek), no gate tensors for uniform gates, no bias without
 * gate_bias, no lm_head with tied embeddings. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/tensors.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "common/errors.h"

static int add_tensor(TensorTable *tt, int *cap, int layer, int decay, int init, int ndim, const int64_t *shape,
                      const char *fmt, ...) {
    if (*cap < 0) return -1;                 /* an earlier allocation failed (see the builder) */
    if (tt->n == *cap) {
        int grow = *cap ? *cap * 2 : 64;
        TensorInfo *t = grow > *cap ? realloc(tt->t, sizeof(TensorInfo) * (size_t)grow) : NULL;
        if (!t) { *cap = -1; return -1; }
        tt->t = t;
        *cap = grow;
    }
    TensorInfo *t = &tt->t[tt->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, TENSOR_NAME_LEN, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) { t->shape[i] = shape[i]; t->numel *= (size_t)shape[i]; }
    t->offset = tt->n_floats;
    t->decay = decay;
    t->layer = layer;
    t->init = init;
    tt->n_params += t->numel;
    tt->n_floats += (t->numel + 15) & ~(size_t)15;
    return tt->n - 1;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(layer, decay, init, name_fmt, ...) \
    add_tensor(tt, &cap, layer, decay, init, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), name_fmt

static const TensorTable *sort_table;      /* the table cmp_by_name sorts (build is not reentrant) */
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(sort_table->t[*(const int *)a].name, sort_table->t[*(const int *)b].name);
}

int tensor_table_build(TensorTable *tt, const ModelConfig *m, char *err) {
    memset(tt, 0, sizeof *tt);
    int cap = 0;
    const int64_t D = m->d_model, H = m->n_heads, G = m->n_kv_heads, d = m->head_dim, F = m->d_ff, V = m->vocab_size;
    if (D <= 0 || H <= 0 || G <= 0 || d <= 0 || F <= 0 || V <= 0 || m->n_layers <= 0)
        return set_err(err, "tensor table: every dimension must be positive");
    const int N_ = TENSOR_INIT_NORMAL, ONE = TENSOR_INIT_ONES, ZERO = TENSOR_INIT_ZEROS;
    ADD(-1, 1, N_, "model.embed_tokens.weight", V, D));
    for (int L = 0; L < m->n_layers; L++) {
        const char *p = "model.layers";
        ADD(L, 0, ONE, "%s.%d.input_layernorm.weight", D), p, L);
        ADD(L, 1, N_, "%s.%d.self_attn.q_proj.weight", H * d, D), p, L);
        ADD(L, 1, N_, "%s.%d.self_attn.k_proj.weight", G * d, D), p, L);
        ADD(L, 1, N_, "%s.%d.self_attn.v_proj.weight", G * d, D), p, L);
        ADD(L, 1, N_, "%s.%d.self_attn.o_proj.weight", D, H * d), p, L);
        if (m->qk_norm) {
            ADD(L, 0, ONE, "%s.%d.self_attn.q_norm.weight", d), p, L);
            ADD(L, 0, ONE, "%s.%d.self_attn.k_norm.weight", d), p, L);
        }
        const ModelConfig lc = layer_config(m, L);   /* the layer's kind (model/layer_kinds.h) */
        if (lc.attention == ATTN_COMPRESSED) {
            int64_t W = lc.window;
            const ModelDims dims = dims_of(&lc, 0);
            int64_t maps = dims.n_maps;   /* W axis of gate weight and payload: W | 2 | 1 */
            int64_t c = dims.channels;
            for (int br = 0; br < dims.branches; br++) {
                const char *b = br == 0 ? "k" : "v";
                if (dims.gated) {
                    ADD(L, 1, ZERO, "%s.%d.self_attn.compressor.%s_gate.weight", G, maps, c, D), p, L, b);
                    if (m->gate_bias)
                        ADD(L, 0, ZERO, "%s.%d.self_attn.compressor.%s_gate.bias", G, W, c), p, L, b);
                }
                ADD(L, 1, N_, "%s.%d.self_attn.compressor.%s_payload.weight", G, maps, d, D), p, L, b);
                if (m->post_norm)
                    ADD(L, 0, ONE, "%s.%d.self_attn.compressor.%s_post_norm.weight", d), p, L, b);
            }
            if (m->qk_norm)
                ADD(L, 0, ONE, "%s.%d.self_attn.compressor.ck_norm.weight", d), p, L);
            if (m->token_shift)   /* docs/spec.md §6.3: M [D, D], 0 at init (the plain compressor) */
                ADD(L, 1, ZERO, "%s.%d.self_attn.compressor.token_shift.weight", D, D), p, L);
            if (m->boundaries == BOUNDARIES_LEARNED) {   /* docs/spec.md §6.5: q_t = w_bd . a_t + c_bd */
                ADD(L, 1, N_, "%s.%d.self_attn.compressor.boundary.weight", D), p, L);     /* w_bd [D] */
                ADD(L, 0, ZERO, "%s.%d.self_attn.compressor.boundary.bias", 1), p, L);     /* c_bd [1] */
            }
        }
        if (layer_has_indexer(m, L)) {   /* docs/spec.md §5.4: vector gates, the layer's maps, one key head */
            const int64_t HI = m->indexer_heads, dI = m->indexer_dim, W = lc.window, maps = dims_of(&lc, 0).n_maps;
            ADD(L, 1, N_, "%s.%d.self_attn.indexer.q_proj.weight", HI * dI, D), p, L);
            ADD(L, 1, N_, "%s.%d.self_attn.indexer.weights_proj.weight", HI, D), p, L);
            ADD(L, 1, ZERO, "%s.%d.self_attn.indexer.compressor.gate.weight", 1, maps, dI, D), p, L);
            ADD(L, 0, ZERO, "%s.%d.self_attn.indexer.compressor.gate.bias", 1, W, dI), p, L);
            ADD(L, 1, N_, "%s.%d.self_attn.indexer.compressor.payload.weight", 1, maps, dI, D), p, L);
            ADD(L, 0, ONE, "%s.%d.self_attn.indexer.k_norm.weight", dI), p, L);
        }
        if (m->attn_sink)
            ADD(L, 0, ZERO, "%s.%d.self_attn.attn_sink", H), p, L);
        ADD(L, 0, ONE, "%s.%d.post_attention_layernorm.weight", D), p, L);
        ADD(L, 1, N_, "%s.%d.mlp.gate_proj.weight", F, D), p, L);
        ADD(L, 1, N_, "%s.%d.mlp.up_proj.weight", F, D), p, L);
        ADD(L, 1, N_, "%s.%d.mlp.down_proj.weight", D, F), p, L);
    }
    ADD(-1, 0, ONE, "model.norm.weight", D));
    if (!m->tie_embeddings)
        ADD(-1, 1, N_, "lm_head.weight", V, D));
    if (cap < 0) { tensor_table_free(tt); return set_err(err, "tensor table: out of memory (%d layers)", m->n_layers); }
    /* names in sorted order, for tensor_table_find */
    tt->by_name = malloc(sizeof(int) * (size_t)(tt->n + 1));
    if (!tt->by_name) { tensor_table_free(tt); return set_err(err, "tensor table: out of memory"); }
    for (int i = 0; i < tt->n; i++) tt->by_name[i] = i;
    sort_table = tt;
    qsort(tt->by_name, (size_t)tt->n, sizeof(int), cmp_by_name);
    sort_table = NULL;
    return 0;
}

void tensor_table_free(TensorTable *tt) {
    free(tt->t);
    free(tt->by_name);
    memset(tt, 0, sizeof *tt);
}

int tensor_table_find(const TensorTable *tt, const char *name) {
    int lo = 0, hi = tt->n;              /* binary search of by_name: O(log n) per lookup */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(tt->t[tt->by_name[mid]].name, name);
        if (c == 0) return tt->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static int layer_tensor(const TensorTable *tt, const char *fmt, int L, const char *b) {
    char name[TENSOR_NAME_LEN];
    snprintf(name, sizeof name, fmt, L, b ? b : "");
    return tensor_table_find(tt, name);
}

void tensor_table_layer(const TensorTable *tt, int L, LayerTensorIndex *w) {
    w->in_norm = layer_tensor(tt, "model.layers.%d.input_layernorm.weight%s", L, NULL);
    w->q = layer_tensor(tt, "model.layers.%d.self_attn.q_proj.weight%s", L, NULL);
    w->k = layer_tensor(tt, "model.layers.%d.self_attn.k_proj.weight%s", L, NULL);
    w->v = layer_tensor(tt, "model.layers.%d.self_attn.v_proj.weight%s", L, NULL);
    w->o = layer_tensor(tt, "model.layers.%d.self_attn.o_proj.weight%s", L, NULL);
    w->q_norm = layer_tensor(tt, "model.layers.%d.self_attn.q_norm.weight%s", L, NULL);
    w->k_norm = layer_tensor(tt, "model.layers.%d.self_attn.k_norm.weight%s", L, NULL);
    w->ck_norm = layer_tensor(tt, "model.layers.%d.self_attn.compressor.ck_norm.weight%s", L, NULL);
    w->sink = layer_tensor(tt, "model.layers.%d.self_attn.attn_sink%s", L, NULL);
    w->token_shift = layer_tensor(tt, "model.layers.%d.self_attn.compressor.token_shift.weight%s", L, NULL);
    w->boundary_w = layer_tensor(tt, "model.layers.%d.self_attn.compressor.boundary.weight%s", L, NULL);
    w->boundary_b = layer_tensor(tt, "model.layers.%d.self_attn.compressor.boundary.bias%s", L, NULL);
    w->post_norm = layer_tensor(tt, "model.layers.%d.post_attention_layernorm.weight%s", L, NULL);
    w->gate = layer_tensor(tt, "model.layers.%d.mlp.gate_proj.weight%s", L, NULL);
    w->up = layer_tensor(tt, "model.layers.%d.mlp.up_proj.weight%s", L, NULL);
    w->down = layer_tensor(tt, "model.layers.%d.mlp.down_proj.weight%s", L, NULL);
    for (int br = 0; br < 2; br++) {
        const char *b = br == 0 ? "k" : "v";
        w->gate_w[br] = layer_tensor(tt, "model.layers.%d.self_attn.compressor.%s_gate.weight", L, b);
        w->gate_b[br] = layer_tensor(tt, "model.layers.%d.self_attn.compressor.%s_gate.bias", L, b);
        w->payload[br] = layer_tensor(tt, "model.layers.%d.self_attn.compressor.%s_payload.weight", L, b);
        w->pn[br] = layer_tensor(tt, "model.layers.%d.self_attn.compressor.%s_post_norm.weight", L, b);
    }
    w->iq = layer_tensor(tt, "model.layers.%d.self_attn.indexer.q_proj.weight%s", L, NULL);
    w->iw = layer_tensor(tt, "model.layers.%d.self_attn.indexer.weights_proj.weight%s", L, NULL);
    w->igate_w = layer_tensor(tt, "model.layers.%d.self_attn.indexer.compressor.gate.weight%s", L, NULL);
    w->igate_b = layer_tensor(tt, "model.layers.%d.self_attn.indexer.compressor.gate.bias%s", L, NULL);
    w->ipayload = layer_tensor(tt, "model.layers.%d.self_attn.indexer.compressor.payload.weight%s", L, NULL);
    w->iknorm = layer_tensor(tt, "model.layers.%d.self_attn.indexer.k_norm.weight%s", L, NULL);
}

void tensor_table_model(const TensorTable *tt, int tie_embeddings, ModelTensorIndex *out) {
    out->emb = tensor_table_find(tt, "model.embed_tokens.weight");
    out->final_norm = tensor_table_find(tt, "model.norm.weight");
    out->lm_head = tie_embeddings ? out->emb : tensor_table_find(tt, "lm_head.weight");
}
