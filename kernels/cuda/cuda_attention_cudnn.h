/* cuDNN fused scaled-dot-product attention for the full causal case of the CUDA backend
 * (kernels/cuda/cuda_attention_cudnn.cu has the math, the graphs and the choices).
 *
 * Both functions return 1 when cuDNN computed the call and 0 when it did not (shape or case not
 * supported, cuDNN unavailable, PHASELAB_ATTN=custom, backward not enabled, ...); on 0 nothing
 * observable was written and the caller runs the custom kernels instead.
 *
 * Only s->visibility == VIS_FULL with s->n_windows == 0 and no sink is handled (the caller passes
 * no sink). Layouts and meanings are those of attention_fwd / attention_bwd in kernels/kernels.h:
 *   q, out, dout, dq [B,T,H,d] bf16;  k, v, dk, dv [B,T,G,d] bf16 (GQA: head h reads KV head
 *   h / (H/G));  lse [B,T,H] fp32 = natural log of sum_s exp(q.k_s / sqrt(d)) over s <= t.
 * Forward writes out and lse. Backward overwrites dq, dk, dv (like the custom kernels).
 * The backward runs unless run.deterministic is set (see the .cu for why). */
#ifndef PHASELAB_CUDA_ATTENTION_CUDNN_H
#define PHASELAB_CUDA_ATTENTION_CUDNN_H
#include "kernels/cuda/cuda_common.h"

/* 1 when cuDNN fused attention handled the call, 0 when this shape is not supported (caller
 * falls back to the custom kernels). */
int cu_cudnn_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                           const act_t *v);
int cu_cudnn_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, const act_t *dout,
                           const act_t *out, const float *lse, const act_t *q, const act_t *k,
                           const act_t *v);
#endif
