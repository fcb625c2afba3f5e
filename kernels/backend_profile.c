/* The timing wrapper of kernels/backend_profile.h: one forwarder per op of kernels/ops.def
 * (generated from its OP / OPR lines), and one work function per op stating what the op does.
 *
 * Work per call (A = the inner backend's act_bytes, 4 = fp32; "bytes" = each tensor the op reads
 * or writes counted once, a read-modify-write (+=) twice: the least a memory-bound op must move):
 *   matmul_fwd     2 M N K FLOPs;  bytes (M K + N K + M N (2 with accumulate)) A
 *   matmul_bwd     2 M N K for dw += dout^T in, + 2 M N K for din = dout w when din is asked for;
 *                  bytes dout, in (and w, din) A + dw 2 x 4 N K
 *   attention_fwd  4 d FLOPs per (query head, query, visible key): q.k and p v, 2 d each, the keys
 *                  a query sees (compressed entries + raw tokens) counted by the visibility rule
 *                  (kernels/visibility.h; docs/spec.md §1.2, §2.5, §2.6; with learned boundaries, each
 *                  sequence's own entry ends, §6.5)
 *   attention_bwd  10 d per (query head, query, visible key) = 2.5 x the forward: the scores
 *                  recomputed (q.k, 2d), dP = dO.v (2d), dQ += dS k, dK += dS q, dV += P dO
 *                  (2d each); the softmax's exp and scaling (a few FLOPs per key) not counted
 *   attention_decode 4 d per (query head, visible key) of one query
 *   compressor_fwd per (sequence, existing window, KV head, offset i): the payload C a (2 D d),
 *                  the gate logits Z a (2 D c, none when uniform) and the weighted sum (2 d)
 *                  (docs/spec.md §2.2): 2 D (d + c) + 2 d
 *   compressor_bwd twice the projections (da and the weight gradients) + 4 d: 4 D (d + c) + 4 d
 *   classifier     2 N D V for the logits; with dx also dx = dlogits E and dE += dlogits^T x:
 *                  6 N D V (the softmax's few FLOPs per logit not counted); bytes x, E, targets,
 *                  losses (+ dx, 2 x dE fp32) once each: a chunked kernel that rereads E moves more
 *   logits_argmax  2 N D V
 *   indexer_scores 2 HI dI per visible (query, entry) pair; indexer_kl 2 H d per pair of the set
 *                  (min(topk, n_t) a query); indexer_scores_bwd 8 HI dI per pair of the set (the
 *                  dots again in both kernels, diq and dik); indexer_select bytes only
 *   memory-bound ops: bytes only (add 3 n A; swiglu fwd 3 n A, bwd 5 n A; rmsnorm fwd 2 rows C A
 *                  + C A + 4 rows, bwd (3 or 4) rows C A + C A + 4 rows + 8 C; rope 2 rows nh r A
 *                  + the table; embedding fwd 2 N D A + 4 N, bwd N D A + 8 N D + 4 N; adamw_cast
 *                  28 n + n A (the working copy, when it is not the master); copies, uploads ...).
 * The recorded op seconds include each op's synchronization (kernels/backend_profile.h). */
#include <stdlib.h>
#include <string.h>
#include "kernels/backend_profile.h"
#include "common/clock.h"

enum {
#define OP(ret, op, params, args) OPI_##op,
#include "kernels/ops.def"
    N_OPS
};
static const char *const OP_NAMES[N_OPS] = {
#define OP(ret, op, params, args) #op,
#include "kernels/ops.def"
};

enum { GEMM_NONE, GEMM_FWD, GEMM_BWD_DW, GEMM_BWD_BOTH };
static const char *const GEMM_PRODUCT[] = {"", "fwd", "bwd dw", "bwd din+dw"};
#define MAX_GEMMS 256
#define ATTN_MEMO 16

typedef struct { long calls; double seconds, flops, bytes; } OpStat;
typedef struct { int kind, M, N, K; long calls; double seconds, flops, bytes; } GemmStat;
typedef struct { AttnShape s; double pairs; } AttnMemo;

/* the profiled backend's context */
struct BackendCtx {
    const Backend *inner;
    int on;
    OpStat op[N_OPS];
    GemmStat gemm[MAX_GEMMS];
    int n_gemm;
    long gemm_unrecorded;                /* calls of shapes beyond MAX_GEMMS */
    double w_flops, w_bytes;             /* the work of the op being called (work_NAME) */
    int w_gemm, w_M, w_N, w_K;
    AttnMemo memo[ATTN_MEMO];            /* (query head, query, visible key) pairs per shape */
    int n_memo, next_memo;
};

typedef struct {
    Backend be;
    BackendCollectives coll;
    struct BackendCtx ctx;
} Profiled;

/* ---- the work of each op (the formulas of the header comment) ---- */

/* (query head, query, visible key) triples of one attention call, over the batch */
static double attn_pairs(BackendCtx *P, const AttnShape *s) {
    if (s->entry_ends && s->entry_count) {   /* learned boundaries: each sequence's own ends, shared by its KV heads */
        double keys = 0;
        for (int b = 0; b < s->B; b++)
            for (int t = 0; t < s->T; t++) {
                VisQueryView v = vis_query_view_ends(s->visibility, t, (const int *)s->entry_ends + (size_t)b * s->n_windows,
                                                     s->entry_count[b], s->n_local);
                keys += v.n_entries + (t - v.raw_lo + 1);
            }
        return keys * s->H;              /* (per call: the ends change every batch, nothing memoised) */
    }
    if (!s->grid_shift)                  /* (a shifted call's offsets are per call: not memoised) */
        for (int i = 0; i < P->n_memo; i++)
            if (!memcmp(&P->memo[i].s, s, sizeof *s)) return P->memo[i].pairs;
    double keys = 0;
    const int n_seq = s->grid_shift ? s->B : 1;   /* without shifts every sequence sees the same */
    for (int b = 0; b < n_seq; b++)
        for (int g = 0; g < s->G; g++) {
            int o = 0, nW = 0;
            const int Sg = attn_head_stride(s, g);   /* docs/spec.md §6.4: the head's own stride */
            if (s->n_windows > 0) {
                o = attn_head_offset(s, b, g);
                nW = vis_n_windows(s->T, s->window, Sg, o);
                if (nW > s->n_windows) nW = s->n_windows;
            }
            for (int t = 0; t < s->T; t++) {
                VisQueryView v = vis_query_view(s->visibility, t, s->window, Sg, o, nW, s->n_local);
                keys += v.n_entries + (t - v.raw_lo + 1);
            }
        }
    const double pairs = keys * (s->grid_shift ? 1 : s->B) * (s->G > 0 ? s->H / s->G : 0);
    if (s->grid_shift) return pairs;
    AttnMemo *m = &P->memo[P->n_memo < ATTN_MEMO ? P->n_memo++ : P->next_memo++ % ATTN_MEMO];
    m->s = *s;
    m->pairs = pairs;
    return pairs;
}

/* bytes of one attention call's tensors: q, out, dq ([B,T,H,d]), k, v ([B,T,G,d]), entries
 * ([B,nW,G,d]) and lse ([B,T,H] fp32), each `times` times */
static double attn_bytes(const AttnShape *s, double A, double q_times, double kv_times, double entry_times) {
    const double q = (double)s->B * s->T * s->H * s->d * A, kv = (double)s->B * s->T * s->G * s->d * A;
    const double e = (double)s->B * s->n_windows * s->G * s->d * A, lse = (double)s->B * s->T * s->H * 4;
    return q * q_times + kv * kv_times + e * entry_times + lse;
}

/* (window, KV head) pairs that exist in a compressor call, over the batch */
static double comp_windows(const CompShape *s) {
    double n = 0;
    for (int b = 0; b < s->B; b++)
        for (int g = 0; g < s->G; g++) n += comp_head_windows(s, b, g);
    return n;
}

#define ACT ((double)ctx->inner->act_bytes)
#define WORK(flops, bytes) (ctx->w_flops = (flops), ctx->w_bytes = (bytes))
/* every work function has the op's full parameter list (so a changed op fails to compile here);
 * most read only some of them */
static void work_alloc(BackendCtx *ctx, size_t bytes) {}
static void work_free(BackendCtx *ctx, void *p) {}
static void work_upload(BackendCtx *ctx, void *dst, const void *host_src, size_t bytes) { WORK(0, bytes); }
static void work_download(BackendCtx *ctx, void *host_dst, const void *src, size_t bytes) { WORK(0, bytes); }
static void work_zero(BackendCtx *ctx, void *dst, size_t bytes) { WORK(0, bytes); }
static void work_copy(BackendCtx *ctx, void *dst, const void *src, size_t bytes) { WORK(0, 2.0 * bytes); }
static void work_copy_2d(BackendCtx *ctx, act_t *dst, int ld_dst, const act_t *src, int ld_src, int rows, int cols) {
    WORK(0, 2.0 * rows * cols * ACT);
}
static void work_synchronize(BackendCtx *ctx) {}
static void work_upload_act(BackendCtx *ctx, act_t *dst, const float *host_src, size_t n) { WORK(0, n * (4 + ACT)); }
static void work_download_act(BackendCtx *ctx, float *host_dst, const act_t *src, size_t n) { WORK(0, n * (4 + ACT)); }
static void work_cast_params(BackendCtx *ctx, act_t *dst, const float *src, size_t n) {
    WORK(0, (const void *)dst == (const void *)src ? 0.0 : n * (4 + ACT));
}
static void work_add(BackendCtx *ctx, act_t *y, const act_t *x, size_t n) { WORK(0, 3.0 * n * ACT); }
static void work_swiglu_fwd(BackendCtx *ctx, act_t *h, const act_t *g, const act_t *u, size_t n) { WORK(0, 3.0 * n * ACT); }
static void work_swiglu_bwd(BackendCtx *ctx, act_t *dg, act_t *du, const act_t *dh, const act_t *g, const act_t *u,
                            size_t n) {
    WORK(0, 5.0 * n * ACT);
}
static void work_embedding_fwd(BackendCtx *ctx, act_t *out, const int32_t *tokens, const act_t *table, int N, int D) {
    WORK(0, 2.0 * N * D * ACT + 4.0 * N);
}
static void work_embedding_bwd(BackendCtx *ctx, float *dtable, const int32_t *tokens, const float *dout, int N, int D) {
    WORK(0, 4.0 * N * D + 8.0 * N * D + 4.0 * N);
}
static void work_rmsnorm_fwd(BackendCtx *ctx, act_t *out, float *rstd, const act_t *in, const act_t *w, int rows, int C,
                             float eps) {
    WORK(0, 2.0 * rows * C * ACT + C * ACT + 4.0 * rows);
}
static void work_rmsnorm_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                             const float *rstd, int rows, int C, int accumulate) {
    WORK(0, (3.0 + (accumulate != 0)) * rows * C * ACT + C * ACT + 4.0 * rows + 8.0 * C);
}
/* dy, x read (act_t); dres read when accumulating and written (fp32); its act_t copy written where it
 * is a buffer of its own (not where it aliases dres: act_t fp32) */
static void work_rmsnorm_bwd_residual(BackendCtx *ctx, float *dres, act_t *dres_act, float *dw, const act_t *dout,
                                      const act_t *in, const act_t *w, const float *rstd, int rows, int C, int accumulate,
                                      int round_act) {
    const double copy = dres_act && (void *)dres_act != (void *)dres ? ACT : 0.0;
    WORK(0, (2.0 * ACT + 4.0 * (1 + (accumulate != 0)) + copy) * rows * C + C * ACT + 4.0 * rows + 8.0 * C);
}
static void work_matmul_fwd(BackendCtx *ctx, act_t *out, const act_t *in, const act_t *w, int M, int N, int K,
                            int accumulate) {
    WORK(2.0 * M * N * K, ((double)M * K + (double)N * K + (1.0 + (accumulate != 0)) * M * N) * ACT);
    ctx->w_gemm = GEMM_FWD; ctx->w_M = M; ctx->w_N = N; ctx->w_K = K;
}
static void work_matmul_bwd(BackendCtx *ctx, act_t *din, float *dw, const act_t *dout, const act_t *in, const act_t *w,
                            int M, int N, int K, int accumulate) {
    const double mnk2 = 2.0 * M * N * K;
    double bytes = ((double)M * N + (double)M * K) * ACT + 8.0 * N * K;            /* dout, in; dw += */
    if (din) bytes += ((double)N * K + (1.0 + (accumulate != 0)) * M * K) * ACT;   /* w; din */
    WORK(din ? 2 * mnk2 : mnk2, bytes);
    ctx->w_gemm = din ? GEMM_BWD_BOTH : GEMM_BWD_DW; ctx->w_M = M; ctx->w_N = N; ctx->w_K = K;
}
static void work_rope(BackendCtx *ctx, act_t *x, const float *cos_sin, int rows, int nh, int d, int r, int period, int mult,
                      int inverse) {
    const int positions = period < rows ? period : rows;
    WORK(0, 2.0 * rows * nh * r * ACT + 4.0 * positions * r);
}
static void work_attention_fwd(BackendCtx *ctx, const AttnShape *s, act_t *out, float *lse, const act_t *q,
                               const act_t *k, const act_t *v, const act_t *ck, const act_t *cv, const float *sink) {
    /* reads q, k, v, ck, cv; writes out, lse */
    WORK(4.0 * s->d * attn_pairs(ctx, s), attn_bytes(s, ACT, 2, 2, 2));
}
static void work_attention_bwd(BackendCtx *ctx, const AttnShape *s, act_t *dq, act_t *dk, act_t *dv, act_t *dck,
                               act_t *dcv, float *dsink, const act_t *dout, const act_t *out, const float *lse,
                               const act_t *q, const act_t *k, const act_t *v, const act_t *ck, const act_t *cv,
                               const float *sink) {
    /* reads dout, out, q, lse, k, v, ck, cv; writes dq, dk, dv, dck, dcv */
    WORK(10.0 * s->d * attn_pairs(ctx, s), attn_bytes(s, ACT, 4, 4, 4));
}
static void work_attention_decode(BackendCtx *ctx, const DecodeAttnShape *s, act_t *out, const act_t *q,
                                  const act_t *ck, const act_t *cv, const act_t *k, const act_t *v, const float *sink) {
    double keys = 0;
    for (int g = 0; g < s->G; g++) {
        int n_entries, raw_first, n_raw;
        decode_head_view(s, g, &n_entries, &raw_first, &n_raw);
        keys += n_entries + n_raw;
    }
    const int per_kv = s->G > 0 ? s->H / s->G : 0;
    WORK(4.0 * s->d * keys * per_kv, 2.0 * keys * s->d * ACT + 2.0 * s->H * s->d * ACT);
}
/* channels of the gate logits a compressor call computes: none when uniform (no gate weight) */
static int comp_gate_channels(const CompShape *s, const act_t *gate_w) { return gate_w ? s->channels : 0; }
/* bytes of a compressor call: a [B,T,D], the weights, entry [B,nW,G,d], alpha [.., W, c] fp32 and
 * payload [.., W, d] (each `times` times: 1 forward, 2 backward: read and gradient) */
static double comp_bytes(BackendCtx *ctx, const CompShape *s, int c_gate, double times, double weight_grad_bytes) {
    const double rows = (double)s->B * s->n_windows * s->G;
    const double w = (double)s->G * s->n_maps * (s->d + c_gate) * s->D * ACT;
    return times * ((double)s->B * s->T * s->D * ACT + rows * s->d * ACT + rows * s->window * (s->channels * 4.0 + s->d * ACT))
           + w + weight_grad_bytes;
}
static void work_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry, float *alpha, act_t *payload,
                                float *pn_rstd, const act_t *a, const act_t *gate_w, const act_t *gate_b,
                                const act_t *payload_w, const act_t *post_w) {
    const int c = comp_gate_channels(s, gate_w);
    const double offsets = comp_windows(s) * s->window;
    WORK(offsets * (2.0 * s->D * (s->d + c) + 2.0 * s->d), comp_bytes(ctx, s, c, 1, 0));
}
static void work_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da, float *dgate_w, float *dgate_b,
                                float *dpayload_w, float *dpost_w, const act_t *dentry, const float *alpha,
                                const act_t *payload, const float *pn_rstd, const act_t *a, const act_t *gate_w,
                                const act_t *payload_w, const act_t *post_w, const float *dalpha_extra) {
    const int c = comp_gate_channels(s, gate_w);
    const double offsets = comp_windows(s) * s->window;
    WORK(offsets * (4.0 * s->D * (s->d + c) + 4.0 * s->d),
         comp_bytes(ctx, s, c, 2, 8.0 * s->G * s->n_maps * (s->d + c) * s->D));
}
/* learned chunk boundaries (docs/spec.md §6.5): every token once per head (T (d + c) D multiply-adds per head) */
static void work_boundary_decide(BackendCtx *ctx, const CompShape *s, float *prob, float *prob_sg, uint8_t *flag, int32_t *ends,
                                 int32_t *count, const act_t *a, const act_t *w_bd, const act_t *c_bd, int hold) {
    WORK(2.0 * s->B * s->T * s->D, (double)s->B * s->T * (s->D * ACT + 13.0));
}
static void work_chunk_compressor_fwd(BackendCtx *ctx, const CompShape *s, act_t *entry, float *alpha, act_t *payload,
                                      float *pn_rstd, const act_t *a, const act_t *gate_w, const act_t *gate_b,
                                      const act_t *payload_w, const act_t *post_w) {
    const int c = comp_gate_channels(s, gate_w);
    WORK((double)s->B * s->T * s->G * (2.0 * s->D * (s->d + c) + 2.0 * s->d), comp_bytes(ctx, s, c, 1, 0));
}
static void work_chunk_compressor_bwd(BackendCtx *ctx, const CompShape *s, act_t *da, float *dgate_w, float *dgate_b,
                                      float *dpayload_w, float *dpost_w, const act_t *dentry, const float *alpha,
                                      const act_t *payload, const float *pn_rstd, const act_t *a, const act_t *gate_w,
                                      const act_t *payload_w, const act_t *post_w) {
    const int c = comp_gate_channels(s, gate_w);
    WORK((double)s->B * s->T * s->G * (4.0 * s->D * (s->d + c) + 4.0 * s->d),
         comp_bytes(ctx, s, c, 2, 8.0 * s->G * s->n_maps * (s->d + c) * s->D));
}
static void work_boundary_scale(BackendCtx *ctx, const CompShape *s, act_t *x, const float *prob, const float *prob_sg) {
    WORK((double)s->B * s->T * s->G * s->d, 2.0 * s->B * s->T * s->G * s->d * ACT);
}
static void work_boundary_scale_bwd(BackendCtx *ctx, const CompShape *s, float *dprob, act_t *dx, const act_t *x,
                                    const float *prob, const float *prob_sg) {
    WORK(3.0 * s->B * s->T * s->G * s->d, 3.0 * s->B * s->T * s->G * s->d * ACT);
}
static void work_boundary_bwd(BackendCtx *ctx, const CompShape *s, act_t *da, float *dw_bd, float *dc_bd, float *dprob,
                              const float *prob, const act_t *a, const act_t *w_bd, float dprob_all) {
    WORK(4.0 * s->B * s->T * s->D, 3.0 * s->B * s->T * s->D * ACT);
}
static void work_gate_coverage(BackendCtx *ctx, const CompShape *s, const float *alpha, float *dalpha, float *per_seq,
                               float grad_scale) {
    const double n = (double)s->B * s->n_windows * s->G * s->window * s->channels;
    WORK(0, n * 4.0 * (dalpha ? 2 : 1) + 4.0 * s->B);
}
/* The lightning indexer (docs/spec.md §5.4): the (query, entry) pairs of a call, over the batch:
 * every visible one, or (set = 1) the scored set min(topk, n_t) of each query (the top-k; the
 * dense warm-up's set is every visible entry, which this undercounts) */
static double idx_pairs(const IndexerShape *s, int set) {
    double n = 0;
    for (int t = 0; t < s->T; t++) {
        const int v = vis_n_entries(s->t0 + t, s->W, s->S, s->o, s->nW);
        n += set && s->topk > 0 && v > s->topk ? s->topk : v;
    }
    return n * s->B;
}
static double idx_in_bytes(BackendCtx *ctx, const IndexerShape *s) {   /* iq, iw, ik */
    return ((double)s->B * s->T * s->HI * (s->dI + 1) + (double)s->B * s->nW * s->dI) * ACT;
}
static void work_indexer_scores(BackendCtx *ctx, const IndexerShape *s, float *score, const act_t *iq, const act_t *iw,
                                const act_t *ik) {
    WORK(2.0 * s->HI * s->dI * idx_pairs(s, 0), idx_in_bytes(ctx, s) + 4.0 * s->B * s->T * s->nW);
}
static void work_indexer_select(BackendCtx *ctx, const IndexerShape *s, uint8_t *sel, const float *score) {
    WORK(0, 5.0 * s->B * s->T * s->nW);
}
static void work_indexer_kl(BackendCtx *ctx, const IndexerShape *s, float *dscore, const act_t *q, const act_t *ck,
                            const float *lse, const float *score, const uint8_t *sel, long *count) {
    WORK(2.0 * s->H * s->d * idx_pairs(s, sel != NULL),
         ((double)s->B * s->T * s->H * s->d + (double)s->B * s->nW * s->G * s->d) * ACT + 4.0 * s->B * s->T * s->H +
         9.0 * s->B * s->T * s->nW);
}
/* the dots recomputed in both backward kernels (2 x 2 HI dI) + diq and dik (2 HI dI each) */
static void work_indexer_scores_bwd(BackendCtx *ctx, const IndexerShape *s, act_t *diq, act_t *diw, act_t *dik,
                                    const float *dscore, const act_t *iq, const act_t *iw, const act_t *ik, float scale) {
    WORK(8.0 * s->HI * s->dI * idx_pairs(s, 1), 2.0 * idx_in_bytes(ctx, s) + 4.0 * s->B * s->T * s->nW);
}
static void work_classifier(BackendCtx *ctx, const act_t *x, const act_t *emb, const int32_t *targets, int N, int D, int V,
                            float *losses, act_t *dx, float *demb, float grad_scale) {
    const double ndv2 = 2.0 * N * D * V;
    double bytes = (double)N * D * ACT + (double)V * D * ACT + 8.0 * N;           /* x, E, targets, losses */
    if (dx) bytes += (double)N * D * ACT + 8.0 * V * D;                           /* dx, dE += */
    WORK(dx ? 3 * ndv2 : ndv2, bytes);
}
static void work_logits_argmax(BackendCtx *ctx, const act_t *x, const act_t *emb, int N, int D, int V, int32_t *out) {
    WORK(2.0 * N * D * V, (double)N * D * ACT + (double)V * D * ACT + 4.0 * N);
}
static void work_adamw_cast(BackendCtx *ctx, float *p, act_t *w, const float *g, float *m, float *v, size_t n,
                            float gscale, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2) {
    const int cast = w && (const void *)w != (const void *)p;
    WORK(0, 28.0 * n + (cast ? n * ACT : 0.0));   /* read g, m, v, p; write m, v, p (+ w) */
}
static void work_loss_accumulate(BackendCtx *ctx, double *acc, const float *losses, const int32_t *targets, int rows,
                                 int cols) {
    WORK(0, 8.0 * rows * cols + 16.0);
}
static void work_sumsq(BackendCtx *ctx, const float *x, size_t n) { WORK(0, 4.0 * n); }
static void work_set_deterministic(BackendCtx *ctx, int on) {}
#undef WORK
#undef ACT

/* ---- recording ---- */

static void record(BackendCtx *P, int op, double seconds) {
    OpStat *o = &P->op[op];
    o->calls++;
    o->seconds += seconds;
    o->flops += P->w_flops;
    o->bytes += P->w_bytes;
    if (P->w_gemm == GEMM_NONE) return;
    GemmStat *g = NULL;
    for (int i = 0; i < P->n_gemm && !g; i++)
        if (P->gemm[i].kind == P->w_gemm && P->gemm[i].M == P->w_M && P->gemm[i].N == P->w_N && P->gemm[i].K == P->w_K)
            g = &P->gemm[i];
    if (!g && P->n_gemm < MAX_GEMMS) {
        g = &P->gemm[P->n_gemm++];
        *g = (GemmStat){.kind = P->w_gemm, .M = P->w_M, .N = P->w_N, .K = P->w_K};
    }
    if (!g) { P->gemm_unrecorded++; return; }
    g->calls++;
    g->seconds += seconds;
    g->flops += P->w_flops;
    g->bytes += P->w_bytes;
}

static void begin(BackendCtx *P) {
    P->w_flops = P->w_bytes = 0;
    P->w_gemm = GEMM_NONE;
}

/* The forwarders. Inside the inner block `ctx` is the inner backend's context, so `args` (the
 * op's argument names, ctx first) forwards the call unchanged; the work function gets the
 * profiler's own context. Their own locals are pf_* (no op parameter has that prefix). */
#define OP(ret, op, params, args)                 \
    static ret prof_##op params {                 \
        BackendCtx *pf_self = ctx;                \
        const Backend *pf_inner = pf_self->inner; \
        if (!pf_self->on) {                       \
            BackendCtx *ctx = pf_inner->ctx;      \
            pf_inner->op args;                    \
            return;                               \
        }                                         \
        begin(pf_self);                           \
        work_##op args;                           \
        double pf_t0, pf_t1;                      \
        {                                         \
            BackendCtx *ctx = pf_inner->ctx;      \
            pf_inner->synchronize(ctx);           \
            pf_t0 = clock_seconds();              \
            pf_inner->op args;                    \
            pf_inner->synchronize(ctx);           \
            pf_t1 = clock_seconds();              \
        }                                         \
        record(pf_self, OPI_##op, pf_t1 - pf_t0); \
    }
#define OPR(ret, op, params, args)                \
    static ret prof_##op params {                 \
        BackendCtx *pf_self = ctx;                \
        const Backend *pf_inner = pf_self->inner; \
        if (!pf_self->on) {                       \
            BackendCtx *ctx = pf_inner->ctx;      \
            return pf_inner->op args;             \
        }                                         \
        begin(pf_self);                           \
        work_##op args;                           \
        double pf_t0, pf_t1;                      \
        ret pf_ret;                               \
        {                                         \
            BackendCtx *ctx = pf_inner->ctx;      \
            pf_inner->synchronize(ctx);           \
            pf_t0 = clock_seconds();              \
            pf_ret = pf_inner->op args;           \
            pf_inner->synchronize(ctx);           \
            pf_t1 = clock_seconds();              \
        }                                         \
        record(pf_self, OPI_##op, pf_t1 - pf_t0); \
        return pf_ret;                            \
    }
#include "kernels/ops.def"

/* the collectives: forwarded with the inner context, not timed */
static BackendCtx *inner_ctx(BackendCtx *ctx) { return ctx->inner->ctx; }
static const BackendCollectives *inner_coll(BackendCtx *ctx) { return ctx->inner->collectives; }
static int coll_make_id(BackendCtx *ctx, void *id, char *err) { return inner_coll(ctx)->make_id(inner_ctx(ctx), id, err); }
static int coll_init(BackendCtx *ctx, const void *id, int world, int rank, const volatile int *abort_flag, char *err) {
    return inner_coll(ctx)->init(inner_ctx(ctx), id, world, rank, abort_flag, err);
}
static void coll_destroy(BackendCtx *ctx) { inner_coll(ctx)->destroy(inner_ctx(ctx)); }
static int coll_reduce_scatter_sum(BackendCtx *ctx, const float *send, float *recv, size_t shard, char *err) {
    return inner_coll(ctx)->reduce_scatter_sum(inner_ctx(ctx), send, recv, shard, err);
}
static int coll_allgather(BackendCtx *ctx, float *buf, size_t shard, int rank, char *err) {
    return inner_coll(ctx)->allgather(inner_ctx(ctx), buf, shard, rank, err);
}
static int coll_allreduce_sum(BackendCtx *ctx, float *buf, size_t n, char *err) {
    return inner_coll(ctx)->allreduce_sum(inner_ctx(ctx), buf, n, err);
}

const Backend *backend_profiled(const Backend *inner) {
    if (!inner || !inner->synchronize) return NULL;   /* every timing synchronizes */
    Profiled *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    Backend *b = &p->be;
    *b = *inner;   /* name, act_bytes, peak, device, shape limits: every description of the backend */
    b->ctx = &p->ctx;
    b->collectives = NULL;
    p->ctx.inner = inner;
    p->ctx.on = 1;
#define OP(ret, op, params, args) b->op = inner->op ? prof_##op : NULL;
#include "kernels/ops.def"
    if (inner->collectives) {
        const BackendCollectives *c = inner->collectives;
        p->coll.id_bytes = c->id_bytes;
        p->coll.make_id = c->make_id ? coll_make_id : NULL;
        p->coll.init = c->init ? coll_init : NULL;
        p->coll.destroy = c->destroy ? coll_destroy : NULL;
        p->coll.reduce_scatter_sum = c->reduce_scatter_sum ? coll_reduce_scatter_sum : NULL;
        p->coll.allgather = c->allgather ? coll_allgather : NULL;
        p->coll.allreduce_sum = c->allreduce_sum ? coll_allreduce_sum : NULL;
        b->collectives = &p->coll;
    }
    return b;
}

int backend_is_profiled(const Backend *b) { return b && b->synchronize == prof_synchronize; }

/* the context of a profiled backend (the Backend is the first member of Profiled) */
static BackendCtx *prof_of(const Backend *b) { return backend_is_profiled(b) ? b->ctx : NULL; }

void backend_profile_free(const Backend *profiled) {
    if (prof_of(profiled)) free((Profiled *)(void *)profiled);
}

void backend_profile_enable(const Backend *profiled, int on) {
    BackendCtx *P = prof_of(profiled);
    if (P) P->on = on != 0;
}

void backend_profile_reset(const Backend *profiled) {
    BackendCtx *P = prof_of(profiled);
    if (!P) return;
    memset(P->op, 0, sizeof P->op);
    P->n_gemm = 0;
    P->gemm_unrecorded = 0;
}

int backend_profile_op(const Backend *profiled, const char *op, OpProfile *out) {
    BackendCtx *P = prof_of(profiled);
    for (int i = 0; P && i < N_OPS; i++)
        if (!strcmp(OP_NAMES[i], op)) {
            *out = (OpProfile){P->op[i].calls, P->op[i].seconds, P->op[i].flops, P->op[i].bytes};
            return 0;
        }
    return -1;
}

static int cmp_gemm_time(const void *a, const void *b) {
    const GemmStat *x = a, *y = b;
    return (x->seconds < y->seconds) - (x->seconds > y->seconds);
}

int backend_profile_gemms(const Backend *profiled, GemmProfile *out, int max) {
    BackendCtx *P = prof_of(profiled);
    if (!P) return 0;
    GemmStat sorted[MAX_GEMMS];
    memcpy(sorted, P->gemm, sizeof(GemmStat) * P->n_gemm);
    qsort(sorted, P->n_gemm, sizeof sorted[0], cmp_gemm_time);
    int n = P->n_gemm < max ? P->n_gemm : max;
    for (int i = 0; i < n; i++)
        out[i] = (GemmProfile){GEMM_PRODUCT[sorted[i].kind], sorted[i].M, sorted[i].N, sorted[i].K, sorted[i].calls,
                               sorted[i].seconds, sorted[i].flops, sorted[i].bytes};
    return n;
}

/* "%9.1f" of a rate, or "-" where no work is counted */
static void rate(char *buf, size_t len, double work, double seconds) {
    if (work > 0 && seconds > 0) snprintf(buf, len, "%9.1f", work / seconds / 1e9);
    else snprintf(buf, len, "%9s", "-");
}

void backend_profile_report(FILE *f, const Backend *profiled, double step_seconds) {
    BackendCtx *P = prof_of(profiled);
    if (!P) { fprintf(f, "(not a profiled backend)\n"); return; }
    int order[N_OPS], n = 0;
    double in_ops = 0;
    for (int i = 0; i < N_OPS; i++)
        if (P->op[i].calls > 0) { order[n++] = i; in_ops += P->op[i].seconds; }
    for (int i = 1; i < n; i++)   /* insertion sort, most time first */
        for (int j = i; j > 0 && P->op[order[j]].seconds > P->op[order[j - 1]].seconds; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    const double step_ms = 1e3 * step_seconds;
    fprintf(f, "per-op time, %s backend (each op synchronized; %.1f ms of wall time recorded):\n", profiled->name, step_ms);
    fprintf(f, "  %-18s %8s %10s %10s %7s %9s %9s\n", "op", "calls", "ms total", "ms/call", "% step", "GFLOP/s", "GB/s");
    char gf[32], gb[32];
    for (int k = 0; k < n; k++) {
        const OpStat *o = &P->op[order[k]];
        rate(gf, sizeof gf, o->flops, o->seconds);
        rate(gb, sizeof gb, o->bytes, o->seconds);
        fprintf(f, "  %-18s %8ld %10.3f %10.4f %7.1f %s %s\n", OP_NAMES[order[k]], o->calls, 1e3 * o->seconds,
                1e3 * o->seconds / o->calls, step_ms > 0 ? 100 * 1e3 * o->seconds / step_ms : 0.0, gf, gb);
    }
    if (step_seconds > 0)
        fprintf(f, "  %-18s %8s %10.3f %10s %7.1f\n", "(between ops)", "", 1e3 * (step_seconds - in_ops), "",
                100 * (step_seconds - in_ops) / step_seconds);
    GemmProfile g[12];
    const int ng = backend_profile_gemms(profiled, g, 12);
    if (ng > 0) {
        fprintf(f, "GEMM shapes, most time first (out [M,N] = in [M,K] w [N,K]^T and its backward):\n");
        fprintf(f, "  %-11s %7s %7s %7s %8s %10s %7s %9s\n", "product", "M", "N", "K", "calls", "ms total", "% step", "GFLOP/s");
        for (int i = 0; i < ng; i++) {
            rate(gf, sizeof gf, g[i].flops, g[i].seconds);
            fprintf(f, "  %-11s %7d %7d %7d %8ld %10.3f %7.1f %s\n", g[i].product, g[i].M, g[i].N, g[i].K, g[i].calls,
                    1e3 * g[i].seconds, step_ms > 0 ? 100 * 1e3 * g[i].seconds / step_ms : 0.0, gf);
        }
        if (P->n_gemm > ng) fprintf(f, "  (%d more shapes)\n", P->n_gemm - ng);
    }
    if (P->gemm_unrecorded) fprintf(f, "  (%ld calls of shapes beyond the first %d not broken down)\n", P->gemm_unrecorded, MAX_GEMMS);
}
