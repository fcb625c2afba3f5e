/* The tensor table: every trainable tensor of a config, with its HuggingFace / docs/spec.md name,
 * shape and offset into the flat fp32 parameter buffer. It is the single source of truth for
 * checkpoint I/O, gradient reduction, optimizer sharding, weight decay, gradient norms and the
 * parameter count. Tensors are laid out in table order, each offset aligned to 16 floats. */
#ifndef PHASELAB_TENSORS_H
#define PHASELAB_TENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "model/model_config.h"

#define TENSOR_NAME_LEN 96
#define TENSOR_MAX_DIMS 4

typedef struct {
    char name[TENSOR_NAME_LEN];
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    size_t numel;
    size_t offset;        /* in floats, into the flat buffer */
    int decay;            /* 1: weight decay applies (matrices, embeddings); 0: norms, biases, sinks */
    int layer;            /* -1 for embedding / final norm / lm_head */
    int init;             /* TENSOR_INIT_* */
} TensorInfo;

enum { TENSOR_INIT_NORMAL = 0, TENSOR_INIT_ONES = 1, TENSOR_INIT_ZEROS = 2 };

typedef struct {
    TensorInfo *t;
    int n;
    size_t n_params;      /* sum of numel (distinct trainable parameters) */
    size_t n_floats;      /* buffer length including alignment padding */
    int *by_name;         /* [n] indices of t in name order (tensor_table_find) */
} TensorTable;

int tensor_table_build(TensorTable *tt, const ModelConfig *m, char *err);
void tensor_table_free(TensorTable *tt);
/* Index of the tensor with that name, or -1. */
int tensor_table_find(const TensorTable *tt, const char *name);

/* Tensor-table indices of one layer's weights, -1 where the variant has none (branch 0 = K,
 * 1 = V of the compressor); the lookup the forward, the backward and the decoder share. */
typedef struct {
    int in_norm, q, k, v, o, q_norm, k_norm, post_norm, gate, up, down;
    int gate_w[2], gate_b[2], payload[2], pn[2], ck_norm, sink, token_shift;
    int boundary_w, boundary_b;   /* learned chunk boundaries (docs/spec.md §6.5): w_bd [D], c_bd [1] */
    /* the lightning indexer of a csa layer (docs/spec.md §5.4): query and weight projections, its
     * compressor's gate weight, bias and payload, its key norm */
    int iq, iw, igate_w, igate_b, ipayload, iknorm;
} LayerTensorIndex;
void tensor_table_layer(const TensorTable *tt, int L, LayerTensorIndex *out);

/* The model-level weights: embedding, final norm, LM head (= the embedding when tied). */
typedef struct { int emb, final_norm, lm_head; } ModelTensorIndex;
void tensor_table_model(const TensorTable *tt, int tie_embeddings, ModelTensorIndex *out);
#endif
