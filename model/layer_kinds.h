/* The per-layer attention schedule (docs/spec.md §5): model.layer_attention names each layer's
 * kind, and layer_config derives the config that layer runs with, so that everything per layer
 * (dims_of, the tensor table, the kernels' shapes, the decoder, the FLOP count) reads one
 * ModelConfig exactly as a one-kind model does.
 *
 * Kinds (built on the Qwen3 block of §1: GQA, QK-norm, SwiGLU, the sink and tied K/V stay global):
 *   full        §1.2 causal attention                         attention = full
 *   compressed  §2 with the model.* keys (window, stride, gate, compressor, local, grid)
 *   window      raw sliding window of n_local tokens only      attention = window (no entries)
 *   csa         §2 with csa_window/csa_stride/csa_gate/csa_compressor, local = window, aligned grid
 *   hca         §2 with hca_window/hca_stride/hca_gate/hca_compressor, local = window, aligned grid
 * Syntax: a comma list of kinds, KIND*N repeating one N times, exactly n_layers in all; empty =
 * every layer model.attention (full | compressed), the behaviour without a schedule bit for bit. */
#ifndef PHASELAB_LAYER_KINDS_H
#define PHASELAB_LAYER_KINDS_H
#include "model/model_config.h"

enum { KIND_FULL = 0, KIND_COMPRESSED = 1, KIND_WINDOW = 2, KIND_CSA = 3, KIND_HCA = 4, N_KINDS = 5 };
extern const char *const layer_kind_names[];   /* KIND_*, NULL-terminated */

/* Parses c->layer_attention into kinds[n_layers] (may be NULL: check only). Empty text: every
 * layer the kind of model.attention. Returns 0, or -1 with err saying which item is wrong and
 * what was expected. */
int layer_schedule_parse(const ModelConfig *c, int *kinds, char *err);
/* Layer L's kind (the config must have parsed; a bad schedule reads as model.attention). */
int layer_kind(const ModelConfig *c, int L);
/* The config layer L runs with: c with attention, window, stride, gate, compressor, local and
 * grid of its kind (c itself for the kind of model.attention). */
ModelConfig layer_config(const ModelConfig *c, int L);
/* 1 when layer L has a lightning indexer (a csa layer with csa_topk > 0, docs/spec.md §5.4). */
int layer_has_indexer(const ModelConfig *c, int L);
/* 1 when some layer has one. */
int model_has_indexer(const ModelConfig *c);
/* 1 when a layer running config lc (layer_config) has compressor gates: attention = compressed
 * and gate != uniform (the layers gate statistics, gate cycling and the gate-coverage penalty
 * act on). */
int layer_has_gates(const ModelConfig *lc);
/* The common period of strides: lcm(acc, S) (acc = 0: none yet, the result is S), the period a
 * fold over several layers' phases (t - o_l) mod S_l runs on. Callers cap it. */
long stride_lcm(long acc, long S);
/* 1 when some layer's config differs from c's own (a mixed schedule): per-model readers of
 * model.window/stride (gate statistics, interventions, the HF remote code) must then refuse or
 * go layer by layer. */
int layer_schedule_mixed(const ModelConfig *c);
/* Validates the kinds the schedule uses: every layer's W, S, compressor rule and seq_len, one
 * line naming the key; returns 0 or -1 with err and *bad_key ("csa_stride", ...). */
int layer_schedule_check(const ModelConfig *c, int seq_len, const char **bad_key, char *err);
#endif
