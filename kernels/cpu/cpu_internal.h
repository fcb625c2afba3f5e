/* Internal declarations shared by the CPU backend's files (kernels/cpu/). Every op works on
 * fp32 host memory (act_t == float); loops are parallelised with OpenMP over independent
 * outputs, so results do not depend on scheduling; matmuls go to OpenBLAS sgemm. */
#ifndef PHASELAB_CPU_INTERNAL_H
#define PHASELAB_CPU_INTERNAL_H
#include "kernels/kernels.h"

/* Loops over fewer elements than this run on the calling thread: a parallel region costs more
 * than the work (incremental decoding runs one row at a time; on a loaded machine an OpenMP
 * barrier waiting for a descheduled thread costs a whole time slice). Each element is computed
 * the same way either way, so results do not change. */
#define CPU_SERIAL_WORK 32768

void cpu_matmul_fwd(act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate);
void cpu_matmul_bwd(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                    int M, int N, int K, int accumulate);
void cpu_rmsnorm_fwd(act_t *out, float *rstd, const act_t *in, const act_t *w, int rows, int C, float eps);
void cpu_rmsnorm_bwd(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                     const float *rstd, int rows, int C, int accumulate);
void cpu_rope(act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse);
void cpu_attention_fwd(const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                       const act_t *v, const act_t *ck, const act_t *cv, const float *sink);
void cpu_attention_bwd(const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, act_t *dck, act_t *dcv,
                       float *dsink, const act_t *dout, const act_t *out, const float *lse,
                       const act_t *q, const act_t *k, const act_t *v, const act_t *ck,
                       const act_t *cv, const float *sink);
void cpu_attention_decode(const DecodeAttnShape *s, act_t *out, const act_t *q, const act_t *ck,
                          const act_t *cv, const act_t *k, const act_t *v, const float *sink);
void cpu_compressor_fwd(const CompShape *s, act_t *entry, float *alpha, act_t *payload, float *pn_rstd,
                        const act_t *a, const act_t *gate_w, const act_t *gate_b,
                        const act_t *payload_w, const act_t *post_w);
void cpu_compressor_bwd(const CompShape *s, act_t *da, float *dgate_w, float *dgate_b, float *dpayload_w,
                        float *dpost_w, const act_t *dentry, const float *alpha, const act_t *payload,
                        const float *pn_rstd, const act_t *a, const act_t *gate_w,
                        const act_t *payload_w, const act_t *post_w, const float *dalpha_extra);
void cpu_gate_coverage(const CompShape *s, const float *alpha, float *dalpha, float *per_seq, float grad_scale);
void cpu_classifier(const act_t *x, const act_t *emb, const int32_t *targets, int N, int D, int V,
                    float *losses, act_t *dx, float *demb, float grad_scale);
void cpu_logits_argmax(const act_t *x, const act_t *emb, int N, int D, int V, int32_t *out);
void cpu_embedding_fwd(act_t *out, const int32_t *tokens, const act_t *table, int N, int D);
void cpu_embedding_bwd(float *dtable, const int32_t *tokens, const act_t *dout, int N, int D);
void cpu_add(act_t *y, const act_t *x, size_t n);
void cpu_swiglu_fwd(act_t *h, const act_t *g, const act_t *u, size_t n);
void cpu_swiglu_bwd(act_t *dg, act_t *du, const act_t *dh, const act_t *g, const act_t *u, size_t n);
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, float bc1, float bc2);
double cpu_sumsq(const float *x, size_t n);
void cpu_scale(float *x, size_t n, float s);
#endif
