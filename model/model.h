/* The model: the Qwen3 decoder of docs/spec.md §1 with the compressed attention of section 2,
 * written once as a sequence of calls to the op API of kernels/kernels.h, so that the same code
 * runs on every backend.
 *
 * Parameters live in one flat fp32 buffer carved by the tensor table (model/tensors.h);
 * gradients in a second buffer with the same layout. Activations live in one arena sized at
 * creation from (max_batch, T), so an out-of-memory shows at start-up. */
#ifndef PHASELAB_MODEL_H
#define PHASELAB_MODEL_H
#include <stdint.h>
#include "model/model_config.h"
#include "model/tensors.h"

struct Backend;
typedef struct Model Model;

/* Creates the model for batches of up to max_batch sequences of T tokens. */
Model *model_create(const ModelConfig *cfg, const struct Backend *be, int max_batch, int T, char *err);
/* Same, with the parameter and gradient buffers padded to at least min_floats floats (ZeRO-1
 * shards them into equal parts; the padding stays zero). */
Model *model_create_padded(const ModelConfig *cfg, const struct Backend *be, int max_batch, int T,
                           size_t min_floats, char *err);
/* The kernels take shapes as int (the op API, the BLAS's leading dimensions): 0, or -1 with err
 * for a config whose micro-batch of max_batch x T tokens, or whose compressor, needs an int
 * above 2^31 - 1: tokens B*T, per-head rows B*T*max(H, G), the compressor's row stride S*D and
 * gradient row W*G*(d + c). The config loader runs it with train.micro_batch x data.seq_len
 * (trainer/run_config.c), model_create with its own sizes. */
int model_shape_check(const ModelConfig *cfg, long max_batch, long T, char *err);
/* Bytes of the activation arena. */
size_t model_arena_bytes(const Model *m);
void model_free(Model *m);

const TensorTable *model_tensors(const Model *m);
float *model_params(Model *m);            /* [n_params] fp32, backend memory */
float *model_grads(Model *m);             /* [n_params] fp32, backend memory */
/* Normal(0, 0.02) matrices and embedding, norms 1, gates and biases 0, sinks 0 (docs/spec.md). */
void model_init_params(Model *m, uint64_t seed);
/* Host copies of the fp32 parameters [n_floats] (download / upload, then refresh working copies). */
void model_download_params(Model *m, float *host);
void model_upload_params(Model *m, const float *host);
/* The working weights [n_floats] act_t, backend memory: bf16 on CUDA, the fp32 master itself on
 * the CPU. Written by the optimizer's owned step (trainer/optimizer.h) in the same pass as the
 * master; nobody else writes them. */
struct PhaselabAct *model_working_params(Model *m);   /* act_t, kernels/kernels.h */
/* Call after the fp32 parameters were changed by hand (upload, analysis edits): refreshes the
 * working copies. The optimizer step does not need it (it writes both). */
void model_params_updated(Model *m);

/* The sequence length T of the following forward passes (and backward passes): 1 <= T <= the
 * T given to model_create (the default). The activation arena is reused: nothing is allocated.
 * The model is causal (docs/spec.md §1-§2: a query sees compressed entries whose window has
 * ended at or before it and raw tokens up to itself), so the outputs at positions t < T of a
 * sequence depend only on its tokens 0..t: a prompt evaluated at its own length gives the
 * logits it gives padded to the model's T. Returns 0, or -1 with err filled. */
int model_set_seq_len(Model *m, int T, char *err);
int model_seq_len(const Model *m);   /* the current T */

/* Per-sequence grid shifts (docs/spec.md §6.1-6.2, phase jitter): from now on the forward and
 * backward passes of up to B sequences move sequence b's window grids by shift[b]
 * (0 <= u < model_grid_shift_period; KV head g by u mod S_g; host memory, copied), its entries'
 * RoPE positions with them. NULL clears them (every grid at its
 * config offset: evaluation). model_set_seq_len clears them too. Returns 0, or -1 with err
 * (full attention, a shift out of range, B out of 1..max_batch, out of memory). */
int model_set_grid_shift(Model *m, const int32_t *shift, int B, char *err);
/* P, the range [0, P) of a grid shift: the stride, or with multi-rate strides the lcm of the KV
 * heads' strides (model/dims.h dims_shift_period); 1 without a grid. */
int model_grid_shift_period(const Model *m);

/* Forward pass over tokens [B, T] (host int32). targets [B, T] (host, negative = ignored) may
 * be NULL (no loss). Returns the mean loss over non-ignored targets. token_losses [B, T]
 * (host, may be NULL) receives each position's loss (0 where ignored). */
double model_forward(Model *m, const int32_t *tokens, const int32_t *targets, int B, float *token_losses);
/* Forward and backward in one pass (the classifier's gradient is fused into its forward):
 * returns the mean loss like model_forward and ACCUMULATES into the gradient buffer the gradient
 * of (sum of token losses) * loss_scale. targets must not be NULL. */
double model_forward_backward(Model *m, const int32_t *tokens, const int32_t *targets, int B,
                              double loss_scale, float *token_losses);
/* Start of a step: sets the gradient buffer and the step's loss sum to zero. */
void model_zero_grads(Model *m);
/* One micro-batch of a training step: model_forward_backward whose per-token losses stay in
 * backend memory, where their sum is added to the step's loss sum (Backend.loss_accumulate:
 * += mean loss * B * T). No host transfer of losses. */
void model_accumulate_micro_batch(Model *m, const int32_t *tokens, const int32_t *targets, int B, double loss_scale);
/* The step's loss sum since model_zero_grads: one download of one double. */
double model_step_loss_sum(Model *m);

/* Forward without loss; argmax over the vocabulary of the logit at positions[b] of each
 * sequence b (host arrays: tokens [B, T], positions [B], out [B]). */
void model_argmax_at(Model *m, const int32_t *tokens, int B, const int *positions, int32_t *out);

/* Analysis hook (causal interventions: the KV-head knockout of analysis/analysis.c): while set,
 * every forward pass of model_argmax_at calls hook(ctx, layer, z, B, H, d) after each layer's
 * attention and before W_o, with z [B, H*d] a host fp32 copy of the attention outputs at the
 * requested positions (row b = position positions[b] of sequence b; head a at z[b*H*d + a*d ..]).
 * The hook may change z; the rows are written back before W_o. hook = NULL removes it. */
typedef void (*ModelAttnHook)(void *ctx, int layer, float *z, int B, int H, int d);
void model_set_attn_hook(Model *m, ModelAttnHook hook, void *ctx);

/* The model's config (as given to model_create). */
const ModelConfig *model_config(const Model *m);

/* Gate weights of the last forward, for gate statistics: alpha of layer l, branch (0 = key,
 * 1 = value), host copy [B, n_windows, G, W, c] with c = 1 (scalar, uniform) or head_dim
 * (vector). Returns the number of windows, 0 for full attention. */
int model_gate_alphas(Model *m, int layer, int branch, int B, float *out);
/* The same for a layer with learned chunk boundaries (docs/spec.md §6.5), whose gates are per
 * token: host copy [B, T, G, c] of the last forward (a token in no entry: 0). Returns T, or 0 for
 * any other layer (model_gate_alphas serves those). */
int model_gate_token_alphas(Model *m, int layer, int branch, int B, float *out);

/* Gate-coverage penalty (docs/spec.md §2b): from now on model_forward_backward also accumulates the
 * gradient of lambda * (sum over its sequences of the penalty) * loss_scale * T, i.e. with the
 * trainer's loss_scale = 1/(Bg T) the gradient of lambda * mean over the step's sequences. The
 * returned losses stay the plain cross-entropy. Error (err filled) where the backend lacks it
 * or the config has no gates. */
int model_set_gate_coverage(Model *m, double lambda, char *err);
/* Sum over the B sequences of the last forward of sum over layers and branches (one when keys
 * and values are tied) of ln W - H(gbar_b): the penalty without lambda. 0 without gates. */
double model_gate_coverage(Model *m, int B);

/* The lightning indexer of the csa layers (docs/spec.md §5.4): from now on model_forward_backward
 * also accumulates into the indexer's parameters (and only there) the gradient of
 * weight * loss_scale * (sum over the indexer layers and queries of KL_t); dense = 1 is the warm-up:
 * the attention sees every visible entry and KL_t is taken over all of them (else over the top-k).
 * Without a call: weight 0 (no indexer gradient) and top-k attention. */
int model_set_indexer(Model *m, double weight, int dense, char *err);
/* 1 while the dense warm-up is set (the decoder then attends to every visible entry too). */
int model_indexer_dense(const Model *m);
/* The last forward's sum of KL_t over the indexer layers and queries, and *count the terms. */
double model_indexer_kl(const Model *m, long *count);

/* The lightning indexer's top-k of layer L in the last forward (docs/spec.md §5.4), for analyses:
 * host array sel [B, T, nW] (T = model_seq_len, 1 = selected), *nW its rows per sequence; NULL when
 * layer L has no indexer. The indexer runs on the CPU backend only, so sel is host memory. */
const uint8_t *model_indexer_selection(const Model *m, int L, int *nW);

/* Learned chunk boundaries (model.boundaries = learned, docs/spec.md §6.5). */
/* 1 when the model has them. */
int model_has_boundaries(const struct Model *m);
/* Layer `layer`'s decisions bd_t of the last forward's micro-batch, host [B, T] row-major (1 = the token
 * ends an entry; B, T: model_boundary_batch); NULL when the layer has no learned boundaries. */
const unsigned char *model_boundary_flags(const struct Model *m, int layer);
/* ... and its scores p_t, host [B, T]; NULL likewise. */
const float *model_boundary_probs(const struct Model *m, int layer);
/* The last forward's B and T; 0 ok, -1 when no forward has run or the model has no learned boundaries. */
int model_boundary_batch(const struct Model *m, int *B, int *T);
/* hold = 1: the next forwards reuse the decisions and sg(p) of the last forward instead of recomputing them,
 * so that finite differences see the straight-through surrogate of §6.5 "Estimator definition" (the
 * entries are then multiplied by c_j = 1 + p_e - sg(p_e) != 1); 0: release. Returns 0, or -1 when the
 * model has no learned boundaries or (hold = 1) no forward has run. */
int model_hold_boundaries(struct Model *m, int hold);
/* The ratio loss's weight lambda_r (train.boundary_ratio; 0 until set): from now on model_forward_backward
 * also accumulates the gradient of lambda_r (1/n_layers) sum_l R_l weighted loss_scale * B * T (with the
 * trainer's loss_scale, 1 / the step's micro-batches on all ranks: the mean over them). The returned losses
 * stay the plain cross-entropy. Error for a negative or non-finite lambda. */
int model_set_boundary_ratio(Model *m, double lambda, char *err);
/* The last forward's (1/n_layers) sum_l R_l (the ratio loss without lambda_r) and, in *rate, the mean
 * boundary rate F_l; both 0 without learned boundaries. */
double model_boundary_ratio(const Model *m, double *rate);

/* Test hook: the final-norm output [B, T, D] of a forward pass over tokens [B, T], host fp32. */
int model_debug_final_hidden(Model *m, const int32_t *tokens, int B, float *out);

/* For the incremental decoder (model/decode.c): the backend, and tensor i's working weight
 * (act_t, backend memory) / fp32 master weight; NULL when i < 0. (The config: model_config.) */
const struct Backend *model_backend(const Model *m);
const void *model_working_weight(const Model *m, int tensor_index);
const float *model_master_weight(const Model *m, int tensor_index);

/* FLOPs of one training step per token (forward + backward, 6N-style plus attention). */
double model_flops_per_token(const ModelConfig *cfg, int T);
/* Forward multiply-adds per token of one layer whose config is c (a layer_config,
 * model/layer_kinds.h): projections, MLP, attention over the visible keys, the compressor. */
double model_layer_flops_per_token(const ModelConfig *c, int T);
#endif
