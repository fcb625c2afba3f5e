/* The op API: every computation of the model's forward and backward pass and of the optimizer,
 * as a table of functions that each backend (kernels/cpu, kernels/cuda) fills in. The model
 * (model/model.c) is written once against this table.
 *
 * Memory: every pointer argument lives in the backend's memory (host memory for the CPU
 * backend, device memory for CUDA), allocated with be->alloc. Element types:
 *   act_t   the backend's activation type: fp32 on the CPU, bf16 on CUDA. Activations and the
 *           working copy of the weights that the forward and backward passes read.
 *   float   fp32 always: master weights, gradients, optimizer state, softmax statistics
 *           (rstd, logsumexp, gate weights alpha), losses.
 *   int32_t token ids and targets (target < 0 = ignored position).
 * On the CPU backend the working weights ARE the master weights (act_t == float).
 *
 * Conventions: a "matrix" W of shape [N, K] acts as y = W x (PyTorch Linear). Row-major
 * everywhere. Backward functions accumulate (+=) into weight gradients; whether they overwrite
 * or accumulate into activation gradients is said per function. Reductions are deterministic:
 * the same inputs give the same bits on every run (no float atomics). */
#ifndef PHASELAB_KERNELS_H
#define PHASELAB_KERNELS_H
#include <stddef.h>
#include <stdint.h>

typedef void act_t;

/* Which raw tokens a query sees (VIS_FULL | VIS_WINDOW | VIS_TAIL) and the per-head window grid
 * (VIS_GRID_ALIGNED | VIS_GRID_STAGGERED): model/visibility.h, the one statement of the rule. */
#include "model/visibility.h"

/* Shapes of one attention call. q [B,T,H,d], k,v [B,T,G,d], ck,cv [B,nW,G,d]. */
typedef struct {
    int B, T, H, G, d;
    int n_windows, window, stride;   /* compressed entries (n_windows = 0: none); n_windows is KV
                                        head 0's count, the most any head has (buffer rows) */
    int visibility;                  /* VIS_* */
    int n_local;
    int grid;                        /* VIS_GRID_*: head g's entries are those of its own grid */
} AttnShape;

/* Shapes of one compressor branch (SPEC.md section 2). */
enum { GATEK_SCALAR = 0, GATEK_VECTOR = 1, GATEK_UNIFORM = 2 };
typedef struct {
    int B, T, D, G, d;
    int window, stride, n_windows;
    int gate;         /* GATEK_* */
    int channels;     /* c: 1 (scalar, uniform) or d (vector) */
    int n_maps;       /* W (paper), 2 (deepseek: offsets < S use map 0, the rest map 1), 1 (shared) */
    float eps;        /* post-norm epsilon */
    int grid;         /* VIS_GRID_*: head g's window j covers o_g + jS .. o_g + jS + W - 1, and only
                         its first vis_n_windows(T, W, S, o_g) of the n_windows rows exist (the rest
                         of the buffers are zero: entry, payload, alpha) */
} CompShape;

/* Map index of window offset i (paper: i; deepseek: 0 for i < S, else 1; shared: 0). */
static inline int comp_map_index(const CompShape *s, int i) {
    return s->n_maps == s->window ? i : s->n_maps == 1 ? 0 : (i < s->stride ? 0 : 1);
}

/* Shapes of one decode attention call (model/decode.c): ONE query position, H heads, against a
 * cache of n_entries compressed entries (slots 0..n_entries-1 of ck, cv [entry_cap, G, d]) and
 * n_raw raw tokens held in a ring of ring_cap slots (k, v [ring_cap, G, d]) starting at slot
 * raw_first and wrapping around (slot (raw_first + x) % ring_cap, x < n_raw). */
typedef struct {
    int H, G, d;
    int n_entries;
    int ring_cap, raw_first, n_raw;
} DecodeAttnShape;

typedef struct Backend {
    const char *name;                /* "cpu" | "cuda" */
    size_t act_bytes;                /* sizeof one act_t element */
    double peak_flops;               /* for MFU: fp32 (cpu) or bf16 dense (cuda) FLOP/s */
    int staggered_grid;              /* 1: attention and compressor implement grid = staggered */

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes);    /* zero-filled; NULL on failure */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*zero)(void *dst, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* backend -> backend */
    void (*synchronize)(void);
    /* host fp32 -> backend act_t (n elements), and back */
    void (*upload_act)(act_t *dst, const float *host_src, size_t n);
    void (*download_act)(float *host_dst, const act_t *src, size_t n);
    /* working weights from master weights: dst[n] = (act_t) src[n]; no-op when they alias */
    void (*cast_params)(act_t *dst, const float *src, size_t n);

    /* ---- elementwise ---- */
    /* y[n] += x[n] */
    void (*add)(act_t *y, const act_t *x, size_t n);
    /* h = silu(g) * u, silu(z) = z / (1 + e^-z); all [n] */
    void (*swiglu_fwd)(act_t *h, const act_t *g, const act_t *u, size_t n);
    /* dg, du overwritten from dh */
    void (*swiglu_bwd)(act_t *dg, act_t *du, const act_t *dh, const act_t *g, const act_t *u, size_t n);

    /* ---- embedding ---- */
    /* out[n,:] = table[tokens[n],:]; out [N,D], table [V,D] */
    void (*embedding_fwd)(act_t *out, const int32_t *tokens, const act_t *table, int N, int D);
    /* dtable[tokens[n],:] += dout[n,:] */
    void (*embedding_bwd)(float *dtable, const int32_t *tokens, const act_t *dout, int N, int D);

    /* ---- RMSNorm over the last dim C of [rows, C]: out = in * rstd * w, rstd = 1/sqrt(mean(in^2)+eps) ---- */
    void (*rmsnorm_fwd)(act_t *out, float *rstd, const act_t *in, const act_t *w, int rows, int C, float eps);
    /* din (accumulate ? += : =), dw += */
    void (*rmsnorm_bwd)(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                        const float *rstd, int rows, int C, int accumulate);

    /* ---- matmul: out [M,N] (accumulate ? += : =) in [M,K] @ w[N,K]^T ---- */
    void (*matmul_fwd)(act_t *out, const act_t *in, const act_t *w, int M, int N, int K, int accumulate);
    /* din [M,K] (accumulate ? += : =) dout @ w (skipped when din is NULL); dw [N,K] += dout^T @ in */
    void (*matmul_bwd)(act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                       int M, int N, int K, int accumulate);

    /* ---- RoPE (rotate-half) on the LAST r dims of each of nh heads of x [rows, nh, d], in place.
     * Row i has position (i % period) * mult. cos_sin [positions, r/2, 2] from rope_table().
     * inverse = 1 rotates by -angle (the backward of the forward rotation). ---- */
    void (*rope)(act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult, int inverse);

    /* ---- attention over compressed entries + raw tokens (or full causal), one softmax,
     * scale 1/sqrt(d), optional sink logit per head in the denominator only.
     * out [B,T,H,d], lse [B,T,H] (log of the softmax denominator, sink included). ---- */
    void (*attention_fwd)(const AttnShape *s, act_t *out, float *lse, const act_t *q, const act_t *k,
                          const act_t *v, const act_t *ck, const act_t *cv, const float *sink);
    /* dq [B,T,H,d], dk, dv [B,T,G,d], dck, dcv [B,nW,G,d] overwritten; dsink [H] += */
    void (*attention_bwd)(const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, act_t *dck, act_t *dcv,
                          float *dsink, const act_t *dout, const act_t *out, const float *lse,
                          const act_t *q, const act_t *k, const act_t *v, const act_t *ck,
                          const act_t *cv, const float *sink);

    /* ---- decode attention: out [H,d] for q [H,d] over the visible entries then raw tokens, one
     * softmax, scale 1/sqrt(d), optional sink per head in the denominator only (as
     * attention_fwd). NULL on a backend without incremental decoding. ---- */
    void (*attention_decode)(const DecodeAttnShape *s, act_t *out, const act_t *q, const act_t *ck,
                             const act_t *cv, const act_t *k, const act_t *v, const float *sink);

    /* ---- compressor branch: entry [B,nW,G,d] = sum_i alpha_{j,i} * p_{j,i}
     * alpha [B,nW,G,W,c] (softmax over i of gate logits), payload [B,nW,G,W,d] (raw C a, before
     * post-norm), pn_rstd [B,nW,G,W] (post-norm statistics, only with post_w).
     * a [B,T,D]; gate_w [G,n_maps,c,D] (NULL: uniform); gate_b [G,W,c] (may be NULL);
     * payload_w [G,n_maps,d,D]; post_w [d] (NULL: no post-norm). ---- */
    void (*compressor_fwd)(const CompShape *s, act_t *entry, float *alpha, act_t *payload, float *pn_rstd,
                           const act_t *a, const act_t *gate_w, const act_t *gate_b,
                           const act_t *payload_w, const act_t *post_w);
    /* da [B,T,D] +=; dgate_w, dgate_b, dpayload_w, dpost_w += (NULL where the tensor is absent).
     * dalpha_extra [B,nW,G,W,c] (may be NULL): a gradient with respect to alpha from outside the
     * entries (the gate-coverage penalty), added to dE . p' before the softmax backward. */
    void (*compressor_bwd)(const CompShape *s, act_t *da, float *dgate_w, float *dgate_b, float *dpayload_w,
                           float *dpost_w, const act_t *dentry, const float *alpha, const act_t *payload,
                           const float *pn_rstd, const act_t *a, const act_t *gate_w,
                           const act_t *payload_w, const act_t *post_w, const float *dalpha_extra);

    /* ---- gate-coverage penalty (SPEC.md 2b), one branch of one layer. Per sequence b:
     * gbar_i = mean over the existing windows j of every KV head g (and channels) of
     * alpha[b,j,g,i,.]; per_seq[b] = ln W - H(gbar) (overwritten, fp32). When dalpha is not NULL
     * it is overwritten with grad_scale * d per_seq[b] / d alpha (0 where a window does not
     * exist). NULL in a backend that does not implement it. ---- */
    void (*gate_coverage)(const CompShape *s, const float *alpha, float *dalpha, float *per_seq, float grad_scale);

    /* ---- classifier + cross-entropy, chunked over rows (never all logits at once).
     * logits = x [N,D] @ emb [V,D]^T; losses [N] = logsumexp - logit[target] (0 where target < 0).
     * When dx is not NULL: dx [N,D] = d(grad_scale * sum losses)/dx (overwritten), demb [V,D] +=. ---- */
    void (*classifier)(const act_t *x, const act_t *emb, const int32_t *targets, int N, int D, int V,
                       float *losses, act_t *dx, float *demb, float grad_scale);
    /* out[n] = argmax_v logits[n, v] for rows x [N,D] */
    void (*logits_argmax)(const act_t *x, const act_t *emb, int N, int D, int V, int32_t *out);

    /* ---- optimizer and reductions on fp32 buffers ---- */
    /* AdamW on n elements: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd * p) */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                  float eps, float wd, float bc1, float bc2);
    /* sum of squares, deterministic, accumulated in double */
    double (*sumsq)(const float *x, size_t n);
    void (*scale)(float *x, size_t n, float s);
} Backend;

/* The CPU backend (fp32, OpenMP, OpenBLAS); threads <= 0 uses every core. */
const Backend *backend_cpu(int threads);
#ifdef PHASELAB_CUDA
/* The CUDA backend on the given device; NULL (and err filled) when no usable GPU exists. */
const Backend *backend_cuda(int device, char *err);
#endif
/* Picks a backend for run.device = auto | cpu | cuda; prints one line saying which. */
const Backend *backend_select(const char *device, int threads, int local_rank, char *err);

/* Host helper: the RoPE table [positions, r/2, 2] (cos, sin) for inv_freq_i = theta^(-2i/r),
 * angles computed in double. Caller frees. */
float *rope_table(int positions, int r, double theta);   /* malloc'd; NULL when out of memory */
#endif
