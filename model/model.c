/* The model (docs/spec.md §1-§2), written once against the op API (kernels/kernels.h).
 *
 * Forward, N = B*T rows:
 *   x = embed[tok]                                             [N, D]
 *   per layer:
 *     x_norm = RMSNorm_in(x)                                   [N, D]
 *     q = RoPE(qnorm(x_norm Wq^T)), k = RoPE(knorm(x_norm Wk^T)), v = x_norm Wv^T   [N, H*d], [N, G*d]
 *     compressed: per branch E = compressor(x_norm) [B, nW, G, d];
 *                 ck = RoPE(cknorm(E^K), jS), cv = E^V (or ck when keys and values are tied)
 *     x_mid = x + attention(q, k, v, ck, cv) Wo^T
 *     mid_norm = RMSNorm_post(x_mid);  x = x_mid + (silu(mid_norm Wg^T) * mid_norm Wu^T) Wd^T
 *   logits = RMSNorm_final(x) E_out^T  (E_out = embed when tied, else lm_head), fused with the
 *   cross-entropy, which also produces d(final norm output) in the same pass.
 * (x is the residual stream; the code's x_in is layer L's x, x_final the last one.)
 * The backward pass walks the same calls in reverse; its residual gradient dx is fp32 on every
 * backend (docs/spec.md §1.1: rmsnorm_bwd_residual accumulates it and writes the act_t copy the
 * W_down / W_o GEMM backwards read; PHASELAB_BF16_RESIDUAL_GRAD=1 rounds it to act_t, the old
 * CUDA path). With qk_norm = false there is no q/k/ck
 * norm. compressor = deepseek implies tied keys and values (docs/spec.md: "keys and values tied").
 * Section 2b: compressor = shared has one gate and one payload map (n_maps = 1); grid = staggered
 * gives KV head g its own window grid starting at o_g (kernels/visibility.h): the buffers keep
 * nW = head 0's window count rows per head (a head's missing last rows stay zero) and the
 * compressed keys are rotated to o_g + jS with their own table (crope_tab [nW*G] positions);
 * docs/spec.md §6.2: model_set_grid_shift shifts sequence b's grids by u_b (phase jitter): the
 * shapes carry the shifts and the compressed keys use a per-call table (crope_shift [B*nW*G]
 * positions, row (b*nW + j)*G + g at o_g + u_b + jS);
 * the gate-coverage penalty (model_set_gate_coverage) adds its alpha-gradient to the
 * compressor backward and is never part of the returned loss.
 *
 * Fused projection: W_q, W_k, W_v of a layer are adjacent in the parameter arena (and the
 * gradient arena) whenever the padding of the tensor table allows it, so [q | k | v] =
 * x_norm [W_q; W_k; W_v]^T is one GEMM whose [N, H*d + 2*G*d] output is split by copy_2d; the
 * backward gathers [dq | dk | dv] and runs one GEMM for d x_norm and one for all three weight
 * gradients (fewer, larger GEMMs: issue 18). Tensor names and the checkpoint layout are unchanged.
 *
 * Memory: every activation the backward pass needs lives in one arena allocated at creation
 * for (max_batch, T); gradient scratch is shared between layers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "common/errors.h"
#include "kernels/kernels.h"
#include "kernels/chunk_boundaries.h"

typedef LayerTensorIndex LayerTensors;   /* tensor-table indices of one layer (model/tensors.h) */

typedef struct {               /* saved activations of one layer */
    act_t *x_in, *x_norm;      /* [N, D] layer input x and RMSNorm_in(x) */
    float *rstd_in;            /* [N] */
    act_t *q_raw, *q;          /* [N, H*d] (q_raw: before qnorm, only with qk_norm) */
    act_t *k_raw, *k, *v;      /* [N, G*d] */
    float *rstd_q, *rstd_k;    /* [N*H], [N*G] */
    act_t *entry[2];           /* [B, nW, G, d] compressor output per branch (before cknorm) */
    act_t *payload[2];         /* [B, nW, G, W, d] */
    float *alpha[2];           /* [B, nW, G, W, c] */
    float *pn_rstd[2];         /* [B, nW, G, W] */
    act_t *cin;                /* [N, D] compressor input a_t + M a_{t-1} (token_shift only, docs/spec.md §6.3) */
    act_t *ck;                 /* [B, nW, G, d] keys after cknorm + RoPE */
    float *rstd_ck;            /* [B*nW*G] */
    act_t *attn;               /* [N, H*d] */
    float *lse;                /* [N*H] */
    act_t *x_mid, *mid_norm;   /* [N, D] x_mid and RMSNorm_post(x_mid) */
    float *rstd_post;          /* [N] */
    act_t *g, *u, *h;          /* [N, F] */
    /* the lightning indexer of a csa layer (docs/spec.md §5.4; the ops indexer_*, kernels/indexer.h) */
    act_t *iq, *iw;            /* [N, HI*dI], [N, HI] */
    act_t *ientry, *ipayload;  /* [B, nW, 1, dI] (before its key norm), [B, nW, 1, W, dI] */
    float *ialpha, *irstd;     /* [B, nW, 1, W, dI], [B*nW] */
    act_t *ik;                 /* [B, nW, dI] its keys */
    float *iscore, *idscore;   /* [B, T, nW] I(t, j) and dKL/dI */
    uint8_t *isel;             /* [B, T, nW] the top-k selection */
    /* learned chunk boundaries (docs/spec.md §6.5; nW = T entry rows, and the compressor's alpha, payload and
     * pn_rstd are per token: [B, T, G, c], [B, T, G, d], [B, T, G], at the start of their buffers) */
    float *bprob, *bprob_sg;   /* [B, T] p_t and sg(p_t) (backend memory) */
    uint8_t *bflag;            /* [B, T] bd_t */
    int32_t *bends, *bcount;   /* [B, T] entry ends (T after the last), [B] n_b */
    float *crope_bd;           /* [B * T, r/2, 2] entry j of sequence b rotated to its first token s_{b,j} */
} LayerActs;

struct Model {
    ModelConfig cfg;
    const Backend *be;
    TensorTable tt;
    int max_batch, T;
    int T_max, nW_max;         /* the creation length (arena, RoPE tables) and its window count; T and
                                  dims: the current length of the forward passes (model_set_seq_len) */
    ModelConfig *lcfg;         /* [n_layers] each layer's config (model/layer_kinds.h: cfg itself without a schedule) */
    ModelDims *ldims;          /* [n_layers] sizes derived from lcfg[L] and T (model/dims.h), computed once */
    int any_gated;             /* some layer's compressor has gate weights */
    int *lind;                 /* [n_layers] 1: the layer has a lightning indexer (layer_has_indexer) */
    /* the indexer's training (model_set_indexer) and the KL of the last forward (model_indexer_kl) */
    double ind_weight;         /* lambda of the KL term */
    int ind_dense;             /* 1: dense warm-up (every visible entry, no top-k) */
    double kl_sum, loss_scale;
    long kl_count;
    act_t *diq, *diw, *dik, *dientry;   /* indexer gradient scratch, the largest layer's */
    act_t *ida;                /* [N, D] the indexer's d x_norm: discarded (its input is detached) */
    float *params, *grads;     /* [n_alloc] fp32 */
    size_t n_alloc;            /* n_floats, or more when padded for sharding */
    act_t *work;               /* working weights (== params on the CPU) */
    LayerTensors *layers;      /* [n_layers] */
    LayerActs *acts;           /* [n_layers] */
    int emb, final_norm, lm_head;
    /* arena */
    void *arena;
    size_t arena_bytes;
    act_t *x_final, *xf;       /* [N, D] */
    float *rstd_final;         /* [N] */
    int32_t *tokens, *targets; /* [N] */
    float *losses;             /* [N] */
    /* gradient scratch */
    float *dx;                 /* [N, D] d x, the residual gradient: fp32 on every backend (docs/spec.md §1.1) */
    act_t *dx_act;             /* [N, D] dx as act_t, the dY of the output projections' GEMMs (down, o); it is
                                  dx itself where act_t is fp32 (the CPU) */
    int round_residual_grad;   /* 1: dx is rounded to act_t after every norm backward (PHASELAB_BF16_RESIDUAL_GRAD=1) */
    act_t *dxf;                /* [N, D] d xf (final-norm output) */
    act_t *dnorm;              /* [N, D] d of a norm output: x_norm, mid_norm (also the argmax gather) */
    act_t *dq, *dq_raw, *dattn;/* [N, H*d] */
    act_t *dk, *dk_raw, *dv;   /* [N, G*d] */
    act_t *dg, *du, *dh;       /* [N, F] */
    act_t *dck, *dcv, *dentry; /* [B, nW, G, d] */
    act_t *tsh, *dtsh, *dcin;  /* [N, D] token shift (docs/spec.md §6.3): a_{t-1} rows, their gradient, d cin */
    int fused_qkv;             /* 1: every layer's q, k, v weights are adjacent in the parameter arena
                                  (and their gradients): one [H*d + 2*G*d, D] projection (see lay_out) */
    act_t *qkv;                /* [N, H*d + 2*G*d] the fused projection's output (forward) or d of it
                                  (backward); scratch shared by the layers */
    float *rope_tab;           /* [T, r/2, 2] */
    float *crope_tab;          /* grid = staggered: [nW * G, r/2, 2], row j*G + g at o_g + jS */
    /* per-sequence grid shifts (docs/spec.md §6.2), set by model_set_grid_shift */
    int32_t *grid_shift;       /* [max_batch] host: u_b */
    int shift_on;              /* 1: the forward and backward passes use grid_shift */
    float *crope_shift;        /* [max_batch * nW * G, r/2, 2] backend memory (allocated on first use) */
    float *host_losses;        /* [N] */
    double *step_loss;         /* [1] backend memory: the step's loss sum (model_accumulate_micro_batch) */
    /* analysis hook (model_set_attn_hook): active inside model_argmax_at only */
    ModelAttnHook attn_hook;
    void *attn_hook_ctx;
    const int *hook_positions; /* [B] while model_argmax_at runs, else NULL */
    float *hook_rows;          /* [max_batch, H*d] host */
    /* gate-coverage penalty (docs/spec.md §2b), allocated by model_set_gate_coverage */
    double cov_lambda;
    double cov_scale;          /* weight of one sequence's penalty in this backward (loss_scale * T) */
    float *dalpha;             /* [B, nW, G, W, c] */
    float *cov_seq;            /* [B] backend memory */
    float *host_cov;           /* [B] */
    /* learned chunk boundaries (docs/spec.md §6.5): host copies of each layer's last decisions, the ratio
     * loss (model_set_boundary_ratio) and the hold of the gradient checks (model_hold_boundaries) */
    int bd_any;                /* some layer has learned boundaries */
    int bd_hold, bd_B;         /* 1: the forwards reuse the held decisions and sg(p); B of the last forward */
    double bd_lambda;          /* lambda_r */
    uint8_t **bd_flag;         /* [n_layers][max_batch * T] host */
    float **bd_prob;           /* [n_layers][max_batch * T] host */
    int32_t **bd_ends, **bd_count;   /* [n_layers][max_batch * T], [n_layers][max_batch] host (the shapes' entry ends) */
    double *bd_F, *bd_R;       /* [n_layers] F_l and R_l of the last forward */
    float *bd_dprob;           /* [max_batch * T] backend: d loss / d p_t of the layer in the backward */
    float *host_rope, *host_crope;   /* [T, r/2, 2] the RoPE table, [max_batch * T, r/2, 2] a layer's entry table */
};

/* ---- arena: a sizing pass then a carving pass over the same calls ---- */
typedef struct { char *base; size_t used; } Carver;
static void *carve(Carver *c, size_t bytes) {
    size_t at = c->used;
    c->used += (bytes + 255) & ~(size_t)255;
    return c->base ? c->base + at : NULL;
}

/* The dims of the layers whose entries need a table per (j, g): a staggered grid or multi-rate
 * strides (docs/spec.md §6.4; all of them have the config's own W and S: only the compressed kind
 * keeps model.grid, and head_strides is refused with a schedule), or NULL when no layer has one. */
static const ModelDims *staggered_dims(const Model *m) {
    for (int L = 0; L < m->cfg.n_layers; L++)
        if ((m->ldims[L].grid == GRID_STAGGERED || m->ldims[L].multirate) && m->ldims[L].n_windows > 0) return &m->ldims[L];
    return NULL;
}

/* Index of tensor fmt % (L, b) in the table, -1 when the config has none. */
static void lay_out(Model *m, Carver *c) {
    const ModelConfig *cfg = &m->cfg;
    size_t N = (size_t)m->max_batch * m->T, D = cfg->d_model, Hd = (size_t)cfg->n_heads * cfg->head_dim,
           Gd = (size_t)cfg->n_kv_heads * cfg->head_dim, F = cfg->d_ff, A = m->be->act_bytes;
    size_t E_max = 0;                                              /* the most entries of a layer: gradient scratch */
    size_t ind_rows = 0;                                           /* the most entry rows of an indexer layer */
    for (int L = 0; L < cfg->n_layers; L++) {
        LayerActs *act = &m->acts[L];
        const int nW = m->ldims[L].n_windows;  /* windows of KV head 0: buffer rows (model/dims.h) */
        size_t E = (size_t)m->max_batch * nW * Gd;                 /* entries */
        size_t slots = (size_t)m->max_batch * nW * cfg->n_kv_heads * m->lcfg[L].window;
        if (E > E_max) E_max = E;
        act->x_in = carve(c, N * D * A); act->x_norm = carve(c, N * D * A); act->rstd_in = carve(c, N * 4);
        act->q = carve(c, N * Hd * A); act->k = carve(c, N * Gd * A); act->v = carve(c, N * Gd * A);
        if (cfg->qk_norm) {
            act->q_raw = carve(c, N * Hd * A); act->k_raw = carve(c, N * Gd * A);
            act->rstd_q = carve(c, N * cfg->n_heads * 4); act->rstd_k = carve(c, N * cfg->n_kv_heads * 4);
        }
        if (nW > 0) {
            for (int br = 0; br < m->ldims[L].branches; br++) {
                act->entry[br] = carve(c, E * A);
                act->payload[br] = carve(c, slots * cfg->head_dim * A);
                act->alpha[br] = carve(c, slots * m->ldims[L].channels * 4);
                if (cfg->post_norm) act->pn_rstd[br] = carve(c, slots * 4);
            }
            act->ck = carve(c, E * A);
            if (cfg->token_shift) act->cin = carve(c, N * D * A);
            act->rstd_ck = carve(c, (size_t)m->max_batch * nW * cfg->n_kv_heads * 4);
            if (m->ldims[L].boundaries) {   /* docs/spec.md §6.5 (nW = T: the per-token buffers fit in the slots) */
                act->bprob = carve(c, N * 4); act->bprob_sg = carve(c, N * 4); act->bflag = carve(c, N);
                act->bends = carve(c, N * 4); act->bcount = carve(c, (size_t)m->max_batch * 4);
                act->crope_bd = carve(c, N * (cfg->rope_dims / 2 + 1) * 2 * 4);
            }
        }
        act->attn = carve(c, N * Hd * A); act->lse = carve(c, N * cfg->n_heads * 4);
        act->x_mid = carve(c, N * D * A); act->mid_norm = carve(c, N * D * A); act->rstd_post = carve(c, N * 4);
        act->g = carve(c, N * F * A); act->u = carve(c, N * F * A); act->h = carve(c, N * F * A);
        if (m->lind[L]) {
            const size_t HI = cfg->indexer_heads, dI = cfg->indexer_dim, rows = (size_t)m->max_batch * nW;
            const size_t islots = rows * m->lcfg[L].window;
            act->iq = carve(c, N * HI * dI * A); act->iw = carve(c, N * HI * A);
            act->ientry = carve(c, rows * dI * A); act->ipayload = carve(c, islots * dI * A);
            act->ialpha = carve(c, islots * dI * 4); act->irstd = carve(c, rows * 4); act->ik = carve(c, rows * dI * A);
            act->iscore = carve(c, (size_t)m->max_batch * m->T * nW * 4);
            act->idscore = carve(c, (size_t)m->max_batch * m->T * nW * 4);
            act->isel = carve(c, (size_t)m->max_batch * m->T * nW);
            if (rows > ind_rows) ind_rows = rows;
        }
    }
    if (ind_rows > 0) {     /* the indexer's gradient scratch, shared by its layers */
        const size_t HI = cfg->indexer_heads, dI = cfg->indexer_dim;
        m->diq = carve(c, N * HI * dI * A); m->diw = carve(c, N * HI * A);
        m->dik = carve(c, ind_rows * dI * A); m->dientry = carve(c, ind_rows * dI * A);
        m->ida = carve(c, N * D * A);
    }
    m->x_final = carve(c, N * D * A); m->xf = carve(c, N * D * A); m->rstd_final = carve(c, N * 4);
    m->tokens = carve(c, N * 4); m->targets = carve(c, N * 4); m->losses = carve(c, N * 4);
    m->dx = carve(c, N * D * 4); m->dnorm = carve(c, N * D * A); m->dxf = carve(c, N * D * A);
    m->dx_act = A == sizeof(float) ? (act_t *)m->dx : carve(c, N * D * A);
    m->dq = carve(c, N * Hd * A); m->dq_raw = carve(c, N * Hd * A); m->dattn = carve(c, N * Hd * A);
    m->dk = carve(c, N * Gd * A); m->dk_raw = carve(c, N * Gd * A); m->dv = carve(c, N * Gd * A);
    m->dg = carve(c, N * F * A); m->du = carve(c, N * F * A); m->dh = carve(c, N * F * A);
    if (E_max > 0) { m->dck = carve(c, E_max * A); m->dcv = carve(c, E_max * A); m->dentry = carve(c, E_max * A); }
    if (m->bd_any) m->bd_dprob = carve(c, N * 4);
    if (E_max > 0 && cfg->token_shift) { m->tsh = carve(c, N * D * A); m->dtsh = carve(c, N * D * A); m->dcin = carve(c, N * D * A); }
    if (m->fused_qkv) m->qkv = carve(c, N * (Hd + 2 * Gd) * A);
    m->rope_tab = carve(c, (size_t)m->T * (cfg->rope_dims / 2 + 1) * 2 * 4);
    const ModelDims *sd = staggered_dims(m);
    if (sd) m->crope_tab = carve(c, (size_t)sd->n_windows * cfg->n_kv_heads * (cfg->rope_dims / 2 + 1) * 2 * 4);
}

static int model_shape_check_layer(const ModelConfig *cfg, char *err);

int model_shape_check(const ModelConfig *cfg, long max_batch, long T, char *err) {
    const double INT_LIMIT = 2147483647.0;
    const double tokens = (double)max_batch * T, heads = cfg->n_heads > cfg->n_kv_heads ? cfg->n_heads : cfg->n_kv_heads;
    if (tokens > INT_LIMIT || tokens * heads > INT_LIMIT)
        return set_err(err, "micro-batch %ld x seq_len %ld = %.0f tokens x %.0f heads = %.0f per-head rows exceeds 2^31 - 1, "
                       "the kernels' int shapes; use a smaller micro_batch or seq_len", max_batch, T, tokens, heads,
                       tokens * heads);
    for (int L = 0; L < cfg->n_layers; L++) {
        const ModelConfig lc = layer_config(cfg, L);
        if (lc.attention != ATTN_COMPRESSED || (L > 0 && !cfg->layer_attention[0])) continue;
        if (model_shape_check_layer(&lc, err)) return -1;
    }
    return 0;
}

/* The compressor's int sizes of one compressed layer's config. */
static int model_shape_check_layer(const ModelConfig *cfg, char *err) {
    const double INT_LIMIT = 2147483647.0;
    {
        const double c = cfg->gate == GATE_VECTOR ? cfg->head_dim : cfg->gate == GATE_UNIFORM ? 0 : 1;
        int S_max = cfg->stride, hs[HEAD_STRIDES_MAX];   /* the largest row step (multi-rate: max S_g, §6.4) */
        for (int g = 0, n = config_head_strides(cfg, hs, NULL); g < n; g++) if (hs[g] > S_max) S_max = hs[g];
        const double lda = (double)S_max * cfg->d_model, ld_grad = (double)cfg->window * cfg->n_kv_heads * (cfg->head_dim + c);
        if (lda > INT_LIMIT)
            return set_err(err, "stride %d x d_model %d = %.0f exceeds 2^31 - 1, the compressor's row stride (a BLAS int); "
                           "use a smaller stride or d_model", S_max, cfg->d_model, lda);
        if (ld_grad > INT_LIMIT)
            return set_err(err, "window %d x n_kv_heads %d x (head_dim %d + %.0f gate channels) = %.0f exceeds 2^31 - 1, the "
                           "compressor's gradient row (a BLAS int); use a smaller window, n_kv_heads or head_dim",
                           cfg->window, cfg->n_kv_heads, cfg->head_dim, c, ld_grad);
    }
    return 0;
}

/* The host side of learned chunk boundaries (docs/spec.md §6.5): per layer the last decisions, scores and
 * entry ends (what the shapes and model_boundary_* read), the RoPE table the entry tables are cut from. */
static int boundaries_alloc(Model *m, char *err) {
    const int nL = m->cfg.n_layers, r = m->cfg.rope_dims;
    const size_t N = (size_t)m->max_batch * m->T_max;
    m->bd_flag = calloc(nL, sizeof *m->bd_flag); m->bd_prob = calloc(nL, sizeof *m->bd_prob);
    m->bd_ends = calloc(nL, sizeof *m->bd_ends); m->bd_count = calloc(nL, sizeof *m->bd_count);
    m->bd_F = calloc(nL, sizeof(double)); m->bd_R = calloc(nL, sizeof(double));
    int fail = !m->bd_flag || !m->bd_prob || !m->bd_ends || !m->bd_count || !m->bd_F || !m->bd_R;
    for (int L = 0; !fail && L < nL; L++) {
        if (!m->ldims[L].boundaries) continue;
        m->bd_flag[L] = calloc(N, 1); m->bd_prob[L] = calloc(N, sizeof(float));
        m->bd_ends[L] = calloc(N, sizeof(int32_t)); m->bd_count[L] = calloc(m->max_batch, sizeof(int32_t));
        fail = !m->bd_flag[L] || !m->bd_prob[L] || !m->bd_ends[L] || !m->bd_count[L];
    }
    if (!fail && r > 0) {
        m->host_rope = rope_table(m->T_max, r, m->cfg.rope_theta);
        m->host_crope = calloc(N * (r / 2) * 2, sizeof(float));
        fail = !m->host_rope || !m->host_crope;
    }
    return fail ? set_err(err, "out of host memory for the learned boundaries of %d layers", nL) : 0;
}

Model *model_create(const ModelConfig *cfg, const Backend *be, int max_batch, int T, char *err) {
    return model_create_padded(cfg, be, max_batch, T, 0, err);
}

Model *model_create_padded(const ModelConfig *cfg, const Backend *be, int max_batch, int T, size_t min_floats,
                           char *err) {
    if (model_shape_check(cfg, max_batch, T, err)) return NULL;
    if (be->max_head_dim > 0 && cfg->head_dim > be->max_head_dim)
        return set_err(err, "head_dim %d: the %s backend's kernels support head_dim <= %d; use run.device=cpu or a "
                       "smaller head_dim", cfg->head_dim, be->name, be->max_head_dim), NULL;
    if (be->max_comp_kv_heads > 0 && cfg->attention == ATTN_COMPRESSED && cfg->n_kv_heads > be->max_comp_kv_heads)
        return set_err(err, "n_kv_heads %d: the %s backend's compressor supports at most %d KV heads; use "
                       "run.device=cpu or fewer KV heads", cfg->n_kv_heads, be->name, be->max_comp_kv_heads), NULL;
    if (!be->head_stride && cfg->attention == ATTN_COMPRESSED && cfg->head_strides[0])
        return set_err(err, "model.head_strides = %s: the %s backend's kernels do not take a stride per KV head yet "
                       "(docs/spec.md §6.4); use run.device=cpu or model.head_strides = (empty)", cfg->head_strides,
                       be->name), NULL;
    if (!be->boundaries && cfg->attention == ATTN_COMPRESSED && cfg->boundaries == BOUNDARIES_LEARNED)
        return set_err(err, "model.boundaries = learned: the %s backend does not run learned chunk boundaries "
                       "(docs/spec.md §6.5); use run.device=cpu or model.boundaries = grid", be->name), NULL;
    const char *bf16_grad = getenv("PHASELAB_BF16_RESIDUAL_GRAD");   /* the old act_t residual gradient (docs/gpu.md) */
    if (bf16_grad && *bf16_grad && strcmp(bf16_grad, "0") && strcmp(bf16_grad, "1"))
        return set_err(err, "PHASELAB_BF16_RESIDUAL_GRAD=%s: expected 0 or 1", bf16_grad), NULL;
    Model *m = calloc(1, sizeof *m);
    if (!m) { set_err(err, "out of memory: %zu bytes for the model", sizeof *m); return NULL; }
    m->cfg = *cfg;
    m->be = be;
    m->round_residual_grad = bf16_grad && !strcmp(bf16_grad, "1");
    m->max_batch = max_batch;
    m->T = T;
    if (tensor_table_build(&m->tt, cfg, err)) { free(m); return NULL; }
    m->lcfg = calloc(cfg->n_layers, sizeof *m->lcfg);
    m->ldims = calloc(cfg->n_layers, sizeof *m->ldims);
    m->lind = calloc(cfg->n_layers, sizeof *m->lind);
    m->layers = calloc(cfg->n_layers, sizeof(LayerTensors));
    m->acts = calloc(cfg->n_layers, sizeof(LayerActs));
    if (!m->layers || !m->acts || !m->lcfg || !m->ldims || !m->lind) {
        set_err(err, "out of host memory for %d layers", cfg->n_layers);
        free(m->layers); free(m->acts); free(m->lcfg); free(m->ldims); free(m->lind); tensor_table_free(&m->tt); free(m);
        return NULL;
    }
    /* Every arena size below is a size_t product: bound them all in double first so that none
     * can wrap (each term over-counts its carve() calls; 2^60 bytes is far past any machine). */
    double N = (double)max_batch * T, per_layer = 0;
    double widths = (double)cfg->d_model + (double)cfg->n_heads * cfg->head_dim +
                    (double)cfg->n_kv_heads * cfg->head_dim + cfg->d_ff + cfg->n_heads + cfg->n_kv_heads;
    m->T_max = T;
    for (int L = 0; L < cfg->n_layers; L++) {
        m->lcfg[L] = layer_config(cfg, L);
        m->ldims[L] = dims_of(&m->lcfg[L], T);
        m->lind[L] = layer_has_indexer(cfg, L);
        if (m->lind[L] && !be->entry_select) {
            set_err(err, "layer %d: the lightning indexer (csa_topk > 0, docs/spec.md §5.4) is not implemented on the %s "
                    "backend yet; use run.device = cpu or model.csa_topk = 0", L, be->name);
            model_free(m); return NULL;
        }
        const ModelDims *ld = &m->ldims[L];
        if (ld->compressed && ld->n_windows == 0) {
            set_err(err, "seq_len %d is shorter than one compression window (window %d of layer %d)", T, ld->window, L);
            model_free(m); return NULL;
        }
        if (ld->n_windows > m->nW_max) m->nW_max = ld->n_windows;
        m->any_gated |= ld->compressed && ld->gated;
        m->bd_any |= ld->boundaries;
        double slots = (double)max_batch * ld->n_windows * cfg->n_kv_heads * ld->window;
        double layer = N * widths + slots * (cfg->head_dim + ld->channels) +
                       (double)max_batch * ld->n_windows * cfg->n_kv_heads * cfg->head_dim;
        if (layer > per_layer) per_layer = layer;
    }
    double bound = 64.0 * ((double)cfg->n_layers + 1) * per_layer + 64.0 * N * cfg->vocab_size + 64.0 * (double)T * cfg->rope_dims;
    if (max_batch < 1 || T < 1 || !(bound < 1152921504606846976.0)) {
        set_err(err, "activations for micro-batch %d x seq_len %d would exceed 2^60 bytes (%.3g); use a smaller "
                "micro_batch, seq_len or model", max_batch, T, bound);
        model_free(m); return NULL;
    }
    const TensorTable *tt = &m->tt;
    for (int L = 0; L < cfg->n_layers; L++) {
        tensor_table_layer(tt, L, &m->layers[L]);
    }
    ModelTensorIndex top;
    tensor_table_model(tt, cfg->tie_embeddings, &top);
    m->emb = top.emb; m->final_norm = top.final_norm; m->lm_head = top.lm_head;
    /* The tensor table lays q, k, v out one after the other (model/tensors.c), padded to 16
     * floats: adjacent whenever H*d*D and G*d*D are multiples of 16. Then W_q, W_k, W_v of a layer
     * are the rows of one [H*d + 2*G*d, D] matrix at W_q's offset (the same for their gradients),
     * and the three projections are one GEMM (the names and the checkpoint layout do not change). */
    m->fused_qkv = be->copy_2d != NULL;
    for (int L = 0; L < cfg->n_layers; L++) {
        const TensorInfo *q = &tt->t[m->layers[L].q], *k = &tt->t[m->layers[L].k], *v = &tt->t[m->layers[L].v];
        if (k->offset != q->offset + q->numel || v->offset != k->offset + k->numel) m->fused_qkv = 0;
    }

    m->n_alloc = tt->n_floats > min_floats ? tt->n_floats : min_floats;
    m->params = be->alloc(be->ctx, m->n_alloc * sizeof(float));
    m->grads = be->alloc(be->ctx, m->n_alloc * sizeof(float));
    m->work = be->act_bytes == sizeof(float) ? (act_t *)m->params : be->alloc(be->ctx, tt->n_floats * be->act_bytes);
    Carver c = {0};
    lay_out(m, &c);
    m->arena_bytes = c.used;
    m->arena = be->alloc(be->ctx, c.used);
    m->host_losses = malloc(sizeof(float) * (size_t)max_batch * T);
    /* the host rows of the gate-coverage sums and of the analysis hook, made here so that
     * neither model_gate_coverage nor model_set_attn_hook (no error return) can run out */
    m->host_cov = malloc(sizeof(float) * (size_t)max_batch);
    m->grid_shift = calloc((size_t)max_batch, sizeof(int32_t));
    m->hook_rows = malloc(sizeof(float) * (size_t)max_batch * cfg->n_heads * cfg->head_dim);
    m->step_loss = be->alloc(be->ctx, sizeof(double));
    if (!m->params || !m->grads || !m->work || !m->arena || !m->host_losses || !m->host_cov || !m->grid_shift || !m->hook_rows ||
        !m->step_loss) {
        set_err(err, "out of %s memory: parameters %.1f MiB + activations %.1f MiB for micro-batch %d x %d",
                be->name, tt->n_floats * (8.0 + be->act_bytes) / 1048576.0, c.used / 1048576.0, max_batch, T);
        model_free(m);
        return NULL;
    }
    c = (Carver){.base = m->arena};
    lay_out(m, &c);
    if (m->bd_any && boundaries_alloc(m, err)) { model_free(m); return NULL; }
    if (cfg->rope_dims > 0) {
        float *tab = rope_table(T, cfg->rope_dims, cfg->rope_theta);
        if (!tab) {
            set_err(err, "out of host memory for the RoPE table (seq_len %d x rope_dims %d)", T, cfg->rope_dims);
            model_free(m);
            return NULL;
        }
        be->upload(be->ctx, m->rope_tab, tab, (size_t)T * (cfg->rope_dims / 2) * 2 * sizeof(float));
        if (m->crope_tab) {      /* entry (j, g) of a staggered grid sits at o_g + jS (multi-rate: j S_g) */
            const int G = cfg->n_kv_heads, half = cfg->rope_dims / 2;
            const ModelDims *sd = staggered_dims(m);
            float *ctab = entry_rope_table(tab, T, cfg->rope_dims, sd->n_windows, G, sd->stride, dims_head_strides(sd),
                                           sd->grid, sd->grid_base, NULL, 1);
            if (!ctab) {
                set_err(err, "out of host memory for the entry RoPE table (%d windows x %d KV heads)", sd->n_windows, G);
                free(tab); model_free(m);
                return NULL;
            }
            be->upload(be->ctx, m->crope_tab, ctab, (size_t)sd->n_windows * G * half * 2 * sizeof(float));
            free(ctab);
        }
        free(tab);
    }
    return m;
}

void model_free(Model *m) {
    if (!m) return;
    const Backend *be = m->be;
    if (m->work && (void *)m->work != (void *)m->params) be->free(be->ctx, m->work);
    if (m->params) be->free(be->ctx, m->params);
    if (m->grads) be->free(be->ctx, m->grads);
    if (m->arena) be->free(be->ctx, m->arena);
    if (m->dalpha) be->free(be->ctx, m->dalpha);
    if (m->cov_seq) be->free(be->ctx, m->cov_seq);
    free(m->host_cov);
    free(m->grid_shift);
    if (m->crope_shift) be->free(be->ctx, m->crope_shift);
    free(m->host_losses);
    if (m->step_loss) m->be->free(m->be->ctx, m->step_loss);
    free(m->hook_rows);
    for (int L = 0; m->bd_flag && L < m->cfg.n_layers; L++) {
        free(m->bd_flag[L]); free(m->bd_prob[L]); free(m->bd_ends[L]); free(m->bd_count[L]);
    }
    free(m->bd_flag); free(m->bd_prob); free(m->bd_ends); free(m->bd_count); free(m->bd_F); free(m->bd_R);
    free(m->host_rope); free(m->host_crope);
    free(m->layers);
    free(m->acts);
    free(m->lcfg);
    free(m->ldims);
    free(m->lind);
    tensor_table_free(&m->tt);
    free(m);
}

const TensorTable *model_tensors(const Model *m) { return &m->tt; }
float *model_params(Model *m) { return m->params; }
float *model_grads(Model *m) { return m->grads; }
size_t model_arena_bytes(const Model *m) { return m->arena_bytes; }

act_t *model_working_params(Model *m) { return m->work; }

void model_zero_grads(Model *m) {
    m->be->zero(m->be->ctx, m->grads, m->n_alloc * sizeof(float));
    m->be->zero(m->be->ctx, m->step_loss, sizeof(double));
}

double model_step_loss_sum(Model *m) {
    double sum;
    m->be->download(m->be->ctx, &sum, m->step_loss, sizeof(double));
    return sum;
}

void model_download_params(Model *m, float *host) {
    m->be->download(m->be->ctx, host, m->params, m->tt.n_floats * sizeof(float));
}

void model_upload_params(Model *m, const float *host) {
    m->be->upload(m->be->ctx, m->params, host, m->tt.n_floats * sizeof(float));
    model_params_updated(m);
}

void model_params_updated(Model *m) {
    if ((void *)m->work != (void *)m->params) m->be->cast_params(m->be->ctx, m->work, m->params, m->tt.n_floats);
}

/* SplitMix64 -> Box-Muller normals: the init is reproducible from the seed alone. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* Generated and uploaded a chunk at a time (no host copy of the whole model: nothing here can
 * run out of memory): a 16 MiB host chunk, or 16 KiB on the stack when even that is not to be
 * had. Each tensor's numbers are the same sequence either way; the gaps between tensors are 0. */
void model_init_params(Model *m, uint64_t seed) {
    enum { STACK_CHUNK = 4096, HEAP_CHUNK = 1 << 22 };
    float stack_chunk[STACK_CHUNK];
    size_t cap = m->tt.n_floats < HEAP_CHUNK ? m->tt.n_floats : HEAP_CHUNK;
    float *heap = cap > STACK_CHUNK ? malloc(cap * sizeof(float)) : NULL;
    float *chunk = heap ? heap : stack_chunk;
    if (!heap) cap = STACK_CHUNK;
    m->be->zero(m->be->ctx, m->params, m->tt.n_floats * sizeof(float));
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        uint64_t s = seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        for (size_t j0 = 0; j0 < t->numel; j0 += cap) {
            const size_t n = t->numel - j0 < cap ? t->numel - j0 : cap;
            for (size_t j = 0; j < n; j++) {
                if (t->init == TENSOR_INIT_ONES) chunk[j] = 1.0f;
                else if (t->init == TENSOR_INIT_ZEROS) chunk[j] = 0.0f;
                else {
                    double u1 = uniform01(&s), u2 = uniform01(&s);
                    chunk[j] = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
                }
            }
            m->be->upload(m->be->ctx, m->params + t->offset + j0, chunk, n * sizeof(float));
        }
    }
    free(heap);
    model_params_updated(m);
}

/* Tensor i of the table (NULL when i < 0: absent): its working weight (act_t, what the ops read),
 * its fp32 master weight, its fp32 gradient. */
static const act_t *weight(const Model *m, int i) {
    return i < 0 ? NULL : (const act_t *)((const char *)m->work + m->tt.t[i].offset * m->be->act_bytes);
}
/* element e of activation buffer p */
static act_t *act_at(const Model *m, act_t *p, size_t e) { return (act_t *)((char *)p + e * m->be->act_bytes); }
static float *master(const Model *m, int i) { return i < 0 ? NULL : m->params + m->tt.t[i].offset; }
static float *grad(const Model *m, int i) { return i < 0 ? NULL : m->grads + m->tt.t[i].offset; }
const ModelConfig *model_config(const Model *m) { return &m->cfg; }
const Backend *model_backend(const Model *m) { return m->be; }
const void *model_working_weight(const Model *m, int i) { return weight(m, i); }
const float *model_master_weight(const Model *m, int i) { return master(m, i); }

static AttnShape attn_shape(const Model *m, int L, int B) {
    const ModelConfig *c = &m->lcfg[L];
    const ModelDims *dm = &m->ldims[L];
    AttnShape s = {.B = B, .T = m->T, .H = c->n_heads, .G = c->n_kv_heads, .d = c->head_dim,
                   .n_windows = dm->n_windows, .window = c->window, .stride = c->stride, .n_local = c->n_local,
                   .visibility = dm->visibility, .grid = dm->grid, .grid_base = dm->grid_base,
                   .grid_shift = m->shift_on ? m->grid_shift : NULL, .head_stride = dims_head_strides(dm)};
    if (m->lind[L] && !m->ind_dense) s.entry_select = m->acts[L].isel;   /* the indexer's top-k (§5.4) */
    if (dm->boundaries) { s.entry_ends = m->bd_ends[L]; s.entry_count = m->bd_count[L]; }   /* §6.5 */
    return s;
}

static CompShape comp_shape(const Model *m, int L, int B) {
    const ModelConfig *c = &m->lcfg[L];
    const ModelDims *dm = &m->ldims[L];
    CompShape s = {.B = B, .T = m->T, .D = c->d_model, .G = c->n_kv_heads, .d = c->head_dim,
                   .window = c->window, .stride = c->stride, .n_windows = dm->n_windows,
                   .gate = c->gate, .channels = dm->channels, .n_maps = dm->n_maps, .eps = (float)c->norm_eps,
                   .grid = dm->grid, .grid_base = dm->grid_base, .grid_shift = m->shift_on ? m->grid_shift : NULL,
                   .head_stride = dims_head_strides(dm)};
    if (dm->boundaries) { s.entry_ends = m->bd_ends[L]; s.entry_count = m->bd_count[L]; }   /* §6.5 */
    return s;
}

/* The analysis hook: z at the requested positions to the host, the hook, and back. */
static void run_attn_hook(Model *m, int layer, act_t *attn, int B) {
    const Backend *be = m->be;
    const int H = m->cfg.n_heads, d = m->cfg.head_dim, Hd = H * d;
    for (int b = 0; b < B; b++)
        be->download_act(be->ctx, m->hook_rows + (size_t)b * Hd,
                         (const act_t *)((const char *)attn + ((size_t)b * m->T + m->hook_positions[b]) * Hd * be->act_bytes), Hd);
    m->attn_hook(m->attn_hook_ctx, layer, m->hook_rows, B, H, d);
    for (int b = 0; b < B; b++)
        be->upload_act(be->ctx, (act_t *)((char *)attn + ((size_t)b * m->T + m->hook_positions[b]) * Hd * be->act_bytes),
                       m->hook_rows + (size_t)b * Hd, Hd);
}

void model_set_attn_hook(Model *m, ModelAttnHook hook, void *ctx) {
    m->attn_hook = hook;
    m->attn_hook_ctx = ctx;
}

/* RoPE of the compressed keys [B, nW, G, d] at their window starts: jS (aligned: one position
 * per row j for all heads), o_g + jS (staggered: one position per (j, g), own table),
 * o_g + u_b + jS (shifted sequences: one position per (b, j, g), the table of this call). */
static void rope_entries(const Model *m, int L, act_t *x, int B, int inverse) {
    const ModelConfig *c = &m->lcfg[L];
    const int nW = m->ldims[L].n_windows;     /* windows of KV head 0: buffer rows (model/dims.h) */
    const int G = c->n_kv_heads, d = c->head_dim, r = c->rope_dims;
    if (m->ldims[L].boundaries) m->be->rope(m->be->ctx, x, m->acts[L].crope_bd, B * nW, G, d, r, B * nW, 1, inverse);   /* §6.5 */
    else if (m->shift_on) m->be->rope(m->be->ctx, x, m->crope_shift, B * nW * G, 1, d, r, B * nW * G, 1, inverse);
    else if (m->ldims[L].grid == GRID_STAGGERED || m->ldims[L].multirate) m->be->rope(m->be->ctx, x, m->crope_tab, B * nW * G, 1, d, r, nW * G, 1, inverse);
    else m->be->rope(m->be->ctx, x, m->rope_tab, B * nW, G, d, r, nW, c->stride, inverse);
}

/* ---- the lightning indexer of a csa layer (docs/spec.md §5.4): the backend's ops indexer_*
 * (kernels/ops.def; the math and IndexerShape: kernels/indexer.h) on backend memory ---- */
static IndexerShape indexer_shape(const Model *m, int L, int B) {
    const ModelConfig *c = &m->lcfg[L];
    IndexerShape s = {.B = B, .T = m->T, .nW = m->ldims[L].n_windows, .W = c->window, .S = c->stride,
                      .o = dims_grid_offset(&m->ldims[L], 0), .HI = c->indexer_heads, .dI = c->indexer_dim,
                      .topk = c->csa_topk, .H = c->n_heads, .G = c->n_kv_heads, .d = c->head_dim};
    return s;
}
static CompShape indexer_comp_shape(const Model *m, int L, int B) {
    CompShape s = comp_shape(m, L, B);
    s.G = 1;
    s.d = s.channels = m->cfg.indexer_dim;
    s.gate = GATE_VECTOR;
    return s;
}

/* Forward, before the layer's attention: q^I, w, the indexer's keys, the scores and the top-k. */
static void indexer_fwd(Model *m, int L, int B) {
    const Backend *be = m->be;
    const LayerTensors *w = &m->layers[L];
    LayerActs *act = &m->acts[L];
    const IndexerShape s = indexer_shape(m, L, B);
    const CompShape cs = indexer_comp_shape(m, L, B);
    const int N = B * m->T, D = m->cfg.d_model;
    be->matmul_fwd(be->ctx, act->iq, act->x_norm, weight(m, w->iq), N, s.HI * s.dI, D, 0);
    be->matmul_fwd(be->ctx, act->iw, act->x_norm, weight(m, w->iw), N, s.HI, D, 0);
    be->compressor_fwd(be->ctx, &cs, act->ientry, act->ialpha, act->ipayload, NULL, act->x_norm, weight(m, w->igate_w),
                       weight(m, w->igate_b), weight(m, w->ipayload), NULL);
    be->rmsnorm_fwd(be->ctx, act->ik, act->irstd, act->ientry, weight(m, w->iknorm), B * s.nW, s.dI, (float)m->cfg.norm_eps);
    be->indexer_scores(be->ctx, &s, act->iscore, act->iq, act->iw, act->ik);
    be->indexer_select(be->ctx, &s, act->isel, act->iscore);
}

/* Forward, after the layer's attention: the KL term and its gradient with respect to the scores. */
static void indexer_kl_fwd(Model *m, int L, int B) {
    const Backend *be = m->be;
    LayerActs *act = &m->acts[L];
    const IndexerShape s = indexer_shape(m, L, B);
    long count = 0;
    m->kl_sum += be->indexer_kl(be->ctx, &s, act->idscore, act->q, act->ck, act->lse, act->iscore,
                                m->ind_dense ? NULL : act->isel, &count);
    m->kl_count += count;
}

/* Backward of lambda * loss_scale * (sum of KL_t) into the indexer's parameters only: its input
 * x_norm is detached (the d x_norm goes to scratch) and the target p is a constant. */
static void indexer_bwd(Model *m, int L, int B) {
    const Backend *be = m->be;
    const LayerTensors *w = &m->layers[L];
    LayerActs *act = &m->acts[L];
    const IndexerShape s = indexer_shape(m, L, B);
    const CompShape cs = indexer_comp_shape(m, L, B);
    const int N = B * m->T, D = m->cfg.d_model;
    be->indexer_scores_bwd(be->ctx, &s, m->diq, m->diw, m->dik, act->idscore, act->iq, act->iw, act->ik,
                           (float)(m->ind_weight * m->loss_scale));
    be->rmsnorm_bwd(be->ctx, m->dientry, grad(m, w->iknorm), m->dik, act->ientry, weight(m, w->iknorm),
                    act->irstd, B * s.nW, s.dI, 0);
    be->zero(be->ctx, m->ida, (size_t)N * D * be->act_bytes);
    be->compressor_bwd(be->ctx, &cs, m->ida, grad(m, w->igate_w), grad(m, w->igate_b), grad(m, w->ipayload), NULL,
                       m->dientry, act->ialpha, act->ipayload, NULL, act->x_norm, weight(m, w->igate_w),
                       weight(m, w->ipayload), NULL, NULL);
    be->matmul_bwd(be->ctx, NULL, grad(m, w->iq), m->diq, act->x_norm, weight(m, w->iq), N, s.HI * s.dI, D, 0);
    be->matmul_bwd(be->ctx, NULL, grad(m, w->iw), m->diw, act->x_norm, weight(m, w->iw), N, s.HI, D, 0);
}

int model_set_indexer(Model *m, double weight, int dense, char *err) {
    if (!(weight >= 0) || !isfinite(weight)) return set_err(err, "indexer_weight = %g; expected a finite weight >= 0", weight);
    m->ind_weight = weight;
    m->ind_dense = dense != 0;
    return 0;
}

int model_indexer_dense(const Model *m) { return m->ind_dense; }

const uint8_t *model_indexer_selection(const Model *m, int L, int *nW) {
    if (L < 0 || L >= m->cfg.n_layers || !m->lind[L]) return NULL;
    *nW = m->ldims[L].n_windows;
    return m->acts[L].isel;
}

double model_indexer_kl(const Model *m, long *count) {
    if (count) *count = m->kl_count;
    return m->kl_sum;
}

/* Token shift (docs/spec.md §6.3): dst row (b, t) = src row (b, t - 1), row (b, 0) = 0. */
static void shift_rows(const Model *m, act_t *dst, const act_t *src, int B) {
    const Backend *be = m->be;
    const size_t D = m->cfg.d_model, T = m->T, e = be->act_bytes;
    for (int b = 0; b < B; b++) {
        be->zero(be->ctx, act_at(m, dst, b * T * D), D * e);
        if (T > 1) be->copy(be->ctx, act_at(m, dst, (b * T + 1) * D), act_at(m, (act_t *)src, b * T * D), (T - 1) * D * e);
    }
}
/* cin = a + shift(a) M^T: the compressor's input with token shift. */
static void token_shift_fwd(Model *m, act_t *cin, const act_t *a, const act_t *M, int B) {
    const Backend *be = m->be;
    const int N = B * m->T, D = m->cfg.d_model;
    shift_rows(m, m->tsh, a, B);
    be->copy(be->ctx, cin, a, (size_t)N * D * be->act_bytes);
    be->matmul_fwd(be->ctx, cin, m->tsh, M, N, D, D, 1);
}
/* From dcin: da += dcin + unshift(dcin M), dM += dcin^T shift(a). */
static void token_shift_bwd(Model *m, act_t *da, float *dM, const act_t *a, const act_t *M, int B) {
    const Backend *be = m->be;
    const size_t N = (size_t)B * m->T, D = m->cfg.d_model, T = m->T;
    be->add(be->ctx, da, m->dcin, N * D);
    shift_rows(m, m->tsh, a, B);
    be->matmul_bwd(be->ctx, m->dtsh, dM, m->dcin, m->tsh, M, (int)N, (int)D, (int)D, 0);
    for (int b = 0; b < B; b++)      /* row (b, t) of shift(a) is a_{b, t-1}: its gradient goes to row t - 1 */
        if (T > 1) be->add(be->ctx, act_at(m, da, b * T * D), act_at(m, m->dtsh, (b * T + 1) * D), (T - 1) * D);
}

/* Learned chunk boundaries of layer L (docs/spec.md §6.5), before its compressor: the scores of the
 * compressor's input a, the decisions (unless held: model_hold_boundaries), their host copies (the shapes'
 * entry ends, model_boundary_*), F_l, G_l and R_l, and the entry RoPE table at each entry's first token. */
static void boundaries_fwd(Model *m, int L, int B, const act_t *a) {
    const Backend *be = m->be;
    const LayerTensors *w = &m->layers[L];
    LayerActs *act = &m->acts[L];
    const int T = m->T, r = m->cfg.rope_dims, half = r / 2;
    const size_t N = (size_t)B * T;
    CompShape cs = comp_shape(m, L, B);
    be->boundary_decide(be->ctx, &cs, act->bprob, act->bprob_sg, act->bflag, act->bends, act->bcount, a,
                        weight(m, w->boundary_w), weight(m, w->boundary_b), m->bd_hold);
    be->download(be->ctx, m->bd_flag[L], act->bflag, N);
    be->download(be->ctx, m->bd_prob[L], act->bprob, N * sizeof(float));
    be->download(be->ctx, m->bd_ends[L], act->bends, N * sizeof(int32_t));
    be->download(be->ctx, m->bd_count[L], act->bcount, (size_t)B * sizeof(int32_t));
    double F = 0.0, Gm = 0.0;
    for (size_t n = 0; n < N; n++) { F += m->bd_flag[L][n]; Gm += m->bd_prob[L][n]; }
    m->bd_F[L] = F / N;
    m->bd_R[L] = chunk_ratio_loss(F / N, Gm / N, m->lcfg[L].stride);
    m->bd_B = B;
    if (r > 0) {   /* row b*T + j: entry j of sequence b at its first token s_{b,j} (rows j >= n_b: position 0) */
        for (int b = 0; b < B; b++)
            for (int j = 0; j < T; j++) {
                const int32_t *e = m->bd_ends[L] + (size_t)b * T;
                const int pos = j < m->bd_count[L][b] && j > 0 ? e[j - 1] + 1 : 0;
                memcpy(m->host_crope + ((size_t)b * T + j) * half * 2, m->host_rope + (size_t)pos * half * 2,
                       sizeof(float) * half * 2);
            }
        be->upload(be->ctx, act->crope_bd, m->host_crope, N * half * 2 * sizeof(float));
    }
}

/* Forward of every layer and the final norm, for B sequences already uploaded to m->tokens. */
static void forward_layers(Model *m, int B) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const int N = B * m->T, D = c->d_model, H = c->n_heads, G = c->n_kv_heads, d = c->head_dim, F = c->d_ff;
    const float eps = (float)c->norm_eps;
    const int r = c->rope_dims;
    be->embedding_fwd(be->ctx, m->acts[0].x_in, m->tokens, weight(m, m->emb), N, D);
    m->kl_sum = 0.0;
    m->kl_count = 0;
    for (int L = 0; L < c->n_layers; L++) {
        const int nW = m->ldims[L].n_windows; /* windows of KV head 0: buffer rows (model/dims.h) */
        const ModelDims *dm = &m->ldims[L];
        AttnShape as = attn_shape(m, L, B);
        CompShape cs = comp_shape(m, L, B);
        const LayerTensors *w = &m->layers[L];
        LayerActs *act = &m->acts[L];
        be->rmsnorm_fwd(be->ctx, act->x_norm, act->rstd_in, act->x_in, weight(m, w->in_norm), N, D, eps);
        act_t *q_out = c->qk_norm ? act->q_raw : act->q, *k_out = c->qk_norm ? act->k_raw : act->k;
        if (m->fused_qkv) {      /* [q | k | v] = x_norm [W_q; W_k; W_v]^T, then split */
            const int P = (H + 2 * G) * d;
            be->matmul_fwd(be->ctx, m->qkv, act->x_norm, weight(m, w->q), N, P, D, 0);
            be->copy_2d(be->ctx, q_out, H * d, m->qkv, P, N, H * d);
            be->copy_2d(be->ctx, k_out, G * d, act_at(m, m->qkv, (size_t)H * d), P, N, G * d);
            be->copy_2d(be->ctx, act->v, G * d, act_at(m, m->qkv, (size_t)(H + G) * d), P, N, G * d);
        } else {
            be->matmul_fwd(be->ctx, q_out, act->x_norm, weight(m, w->q), N, H * d, D, 0);
            be->matmul_fwd(be->ctx, k_out, act->x_norm, weight(m, w->k), N, G * d, D, 0);
            be->matmul_fwd(be->ctx, act->v, act->x_norm, weight(m, w->v), N, G * d, D, 0);
        }
        if (c->qk_norm) {
            be->rmsnorm_fwd(be->ctx, act->q, act->rstd_q, act->q_raw, weight(m, w->q_norm), N * H, d, eps);
            be->rmsnorm_fwd(be->ctx, act->k, act->rstd_k, act->k_raw, weight(m, w->k_norm), N * G, d, eps);
        }
        if (r > 0) {
            be->rope(be->ctx, act->q, m->rope_tab, N, H, d, r, m->T, 1, 0);
            be->rope(be->ctx, act->k, m->rope_tab, N, G, d, r, m->T, 1, 0);
        }
        const act_t *cv = NULL;
        if (nW > 0) {
            const act_t *comp_in = act->x_norm;
            if (act->cin) {             /* docs/spec.md §6.3 */
                token_shift_fwd(m, act->cin, act->x_norm, weight(m, w->token_shift), B);
                comp_in = act->cin;
            }
            if (dm->boundaries) boundaries_fwd(m, L, B, comp_in);   /* docs/spec.md §6.5 */
            for (int br = 0; br < dm->branches; br++)
                (dm->boundaries ? be->chunk_compressor_fwd : be->compressor_fwd)(
                    be->ctx, &cs, act->entry[br], act->alpha[br], act->payload[br], act->pn_rstd[br], comp_in,
                    weight(m, w->gate_w[br]), weight(m, w->gate_b[br]), weight(m, w->payload[br]), weight(m, w->pn[br]));
            size_t E = (size_t)B * nW * G * d;
            if (c->qk_norm) be->rmsnorm_fwd(be->ctx, act->ck, act->rstd_ck, act->entry[0], weight(m, w->ck_norm), B * nW * G, d, eps);
            else be->copy(be->ctx, act->ck, act->entry[0], E * be->act_bytes);
            if (r > 0) rope_entries(m, L, act->ck, B, 0);
            if (dm->boundaries) {   /* the straight-through factor c_j on Khat and Vhat (value 1 unless held) */
                be->boundary_scale(be->ctx, &cs, act->ck, act->bprob, act->bprob_sg);
                if (!dm->tied_kv) be->boundary_scale(be->ctx, &cs, act->entry[1], act->bprob, act->bprob_sg);
            }
            cv = dm->tied_kv ? act->ck : act->entry[1];
            if (m->lind[L]) indexer_fwd(m, L, B);
        }
        be->attention_fwd(be->ctx, &as, act->attn, act->lse, act->q, act->k, act->v, nW ? act->ck : NULL, cv, master(m, w->sink));
        if (m->lind[L]) indexer_kl_fwd(m, L, B);
        if (m->attn_hook && m->hook_positions) run_attn_hook(m, L, act->attn, B);
        act_t *x_next = L + 1 < c->n_layers ? m->acts[L + 1].x_in : m->x_final;
        be->copy(be->ctx, act->x_mid, act->x_in, (size_t)N * D * be->act_bytes);
        be->matmul_fwd(be->ctx, act->x_mid, act->attn, weight(m, w->o), N, D, H * d, 1);
        be->rmsnorm_fwd(be->ctx, act->mid_norm, act->rstd_post, act->x_mid, weight(m, w->post_norm), N, D, eps);
        be->matmul_fwd(be->ctx, act->g, act->mid_norm, weight(m, w->gate), N, F, D, 0);
        be->matmul_fwd(be->ctx, act->u, act->mid_norm, weight(m, w->up), N, F, D, 0);
        be->swiglu_fwd(be->ctx, act->h, act->g, act->u, (size_t)N * F);
        be->copy(be->ctx, x_next, act->x_mid, (size_t)N * D * be->act_bytes);
        be->matmul_fwd(be->ctx, x_next, act->h, weight(m, w->down), N, D, F, 1);
    }
    be->rmsnorm_fwd(be->ctx, m->xf, m->rstd_final, m->x_final, weight(m, m->final_norm), N, D, eps);
}

static void backward_layers(Model *m, int B) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const int N = B * m->T, D = c->d_model, H = c->n_heads, G = c->n_kv_heads, d = c->head_dim, F = c->d_ff;
    const int r = c->rope_dims;
    /* dx = d loss / d x_final: fp32, accumulated by the norm backwards of every layer; each also writes
     * dx_act, the act_t copy the next output projection's GEMM reads (docs/spec.md §1.1) */
    const int rnd = m->round_residual_grad;
    be->rmsnorm_bwd_residual(be->ctx, m->dx, m->dx_act, grad(m, m->final_norm), m->dxf, m->x_final, weight(m, m->final_norm),
                             m->rstd_final, N, D, 0, rnd);
    for (int L = c->n_layers - 1; L >= 0; L--) {
        const int nW = m->ldims[L].n_windows; /* windows of KV head 0: buffer rows (model/dims.h) */
        const ModelDims *dm = &m->ldims[L];
        AttnShape as = attn_shape(m, L, B);
        CompShape cs = comp_shape(m, L, B);
        const LayerTensors *w = &m->layers[L];
        LayerActs *act = &m->acts[L];
        if (m->lind[L] && m->ind_weight > 0) indexer_bwd(m, L, B);
        /* MLP: x_out = x_mid + down(h) */
        be->matmul_bwd(be->ctx, m->dh, grad(m, w->down), m->dx_act, act->h, weight(m, w->down), N, D, F, 0);
        be->swiglu_bwd(be->ctx, m->dg, m->du, m->dh, act->g, act->u, (size_t)N * F);
        be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->gate), m->dg, act->mid_norm, weight(m, w->gate), N, F, D, 0);
        be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->up), m->du, act->mid_norm, weight(m, w->up), N, F, D, 1);
        be->rmsnorm_bwd_residual(be->ctx, m->dx, m->dx_act, grad(m, w->post_norm), m->dnorm, act->x_mid, weight(m, w->post_norm),
                                 act->rstd_post, N, D, 1, rnd);
        /* attention: x_mid = x_in + o(attn) */
        be->matmul_bwd(be->ctx, m->dattn, grad(m, w->o), m->dx_act, act->attn, weight(m, w->o), N, D, H * d, 0);
        const act_t *cv = nW ? (dm->tied_kv ? act->ck : act->entry[1]) : NULL;
        be->attention_bwd(be->ctx, &as, m->dq, m->dk, m->dv, m->dck, m->dcv, grad(m, w->sink), m->dattn, act->attn, act->lse,
                          act->q, act->k, act->v, nW ? act->ck : NULL, cv, master(m, w->sink));
        if (r > 0) {
            be->rope(be->ctx, m->dq, m->rope_tab, N, H, d, r, m->T, 1, 1);
            be->rope(be->ctx, m->dk, m->rope_tab, N, G, d, r, m->T, 1, 1);
        }
        act_t *dq = m->dq, *dk = m->dk;
        if (c->qk_norm) {
            be->rmsnorm_bwd(be->ctx, m->dq_raw, grad(m, w->q_norm), m->dq, act->q_raw, weight(m, w->q_norm), act->rstd_q, N * H, d, 0);
            be->rmsnorm_bwd(be->ctx, m->dk_raw, grad(m, w->k_norm), m->dk, act->k_raw, weight(m, w->k_norm), act->rstd_k, N * G, d, 0);
            dq = m->dq_raw;
            dk = m->dk_raw;
        }
        if (m->fused_qkv) {      /* gather [dq | dk | dv], one GEMM for d x_norm and one for dW_{q,k,v} */
            const int P = (H + 2 * G) * d;
            be->copy_2d(be->ctx, m->qkv, P, dq, H * d, N, H * d);
            be->copy_2d(be->ctx, act_at(m, m->qkv, (size_t)H * d), P, dk, G * d, N, G * d);
            be->copy_2d(be->ctx, act_at(m, m->qkv, (size_t)(H + G) * d), P, m->dv, G * d, N, G * d);
            be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->q), m->qkv, act->x_norm, weight(m, w->q), N, P, D, 0);
        } else {
            be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->q), dq, act->x_norm, weight(m, w->q), N, H * d, D, 0);
            be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->k), dk, act->x_norm, weight(m, w->k), N, G * d, D, 1);
            be->matmul_bwd(be->ctx, m->dnorm, grad(m, w->v), m->dv, act->x_norm, weight(m, w->v), N, G * d, D, 1);
        }
        if (nW > 0) {
            size_t E = (size_t)B * nW * G * d;
            if (dm->tied_kv) be->add(be->ctx, m->dck, m->dcv, E);       /* cv == ck */
            if (dm->boundaries) {   /* docs/spec.md §6.5: dp_e = K'.dKhat (+ V'.dVhat), dK' = c dKhat */
                be->zero(be->ctx, m->bd_dprob, (size_t)N * sizeof(float));
                be->boundary_scale_bwd(be->ctx, &cs, m->bd_dprob, m->dck, act->ck, act->bprob, act->bprob_sg);
                if (!dm->tied_kv) be->boundary_scale_bwd(be->ctx, &cs, m->bd_dprob, m->dcv, act->entry[1], act->bprob, act->bprob_sg);
            }
            if (r > 0) rope_entries(m, L, m->dck, B, 1);
            const act_t *dentry_k = m->dck;
            if (c->qk_norm) {
                be->rmsnorm_bwd(be->ctx, m->dentry, grad(m, w->ck_norm), m->dck, act->entry[0], weight(m, w->ck_norm), act->rstd_ck,
                                B * nW * G, d, 0);
                dentry_k = m->dentry;
            }
            if (act->cin) be->zero(be->ctx, m->dcin, (size_t)N * D * be->act_bytes);   /* the compressor adds into it */
            for (int br = 0; br < dm->branches; br++) {
                const float *dalpha = NULL;
                if (m->cov_lambda > 0 && dm->gated) {
                    be->gate_coverage(be->ctx, &cs, act->alpha[br], m->dalpha, m->cov_seq, (float)(m->cov_lambda * m->cov_scale));
                    dalpha = m->dalpha;
                }
                if (dm->boundaries)
                    be->chunk_compressor_bwd(be->ctx, &cs, act->cin ? m->dcin : m->dnorm, grad(m, w->gate_w[br]),
                                             grad(m, w->gate_b[br]), grad(m, w->payload[br]), grad(m, w->pn[br]),
                                             br == 0 ? dentry_k : m->dcv, act->alpha[br], act->payload[br], act->pn_rstd[br],
                                             act->cin ? act->cin : act->x_norm, weight(m, w->gate_w[br]),
                                             weight(m, w->payload[br]), weight(m, w->pn[br]));
                else
                    be->compressor_bwd(be->ctx, &cs, act->cin ? m->dcin : m->dnorm, grad(m, w->gate_w[br]), grad(m, w->gate_b[br]),
                                       grad(m, w->payload[br]), grad(m, w->pn[br]), br == 0 ? dentry_k : m->dcv, act->alpha[br],
                                       act->payload[br], act->pn_rstd[br], act->cin ? act->cin : act->x_norm,
                                       weight(m, w->gate_w[br]), weight(m, w->payload[br]), weight(m, w->pn[br]), dalpha);
            }
            if (dm->boundaries) {   /* the scores: the ST gradient and the ratio loss's, lambda_r/n_layers * dR_l/dp per
                                     * micro-batch, weighted loss_scale * B * T (1 / the step's micro-batches, all ranks) */
                const double slope = chunk_ratio_slope(m->bd_F[L], c->stride);
                const float dprob_all = (float)(m->bd_lambda / c->n_layers * m->loss_scale * slope);
                be->boundary_bwd(be->ctx, &cs, act->cin ? m->dcin : m->dnorm, grad(m, w->boundary_w), grad(m, w->boundary_b),
                                 m->bd_dprob, act->bprob, act->cin ? act->cin : act->x_norm, weight(m, w->boundary_w), dprob_all);
            }
            if (act->cin) token_shift_bwd(m, m->dnorm, grad(m, w->token_shift), act->x_norm, weight(m, w->token_shift), B);
        }
        /* layer 0's dx_act would have no reader (the embedding reads dx) */
        be->rmsnorm_bwd_residual(be->ctx, m->dx, L > 0 ? m->dx_act : NULL, grad(m, w->in_norm), m->dnorm, act->x_in,
                                 weight(m, w->in_norm), act->rstd_in, N, D, 1, rnd);
    }
    be->embedding_bwd(be->ctx, grad(m, m->emb), m->tokens, m->dx, N, D);
}

/* keep_loss: the losses stay in backend memory, added to the step's sum (no host transfer). */
static double run_forward(Model *m, const int32_t *tokens, const int32_t *targets, int B, float *token_losses,
                          int with_grad, double loss_scale, int keep_loss) {
    const Backend *be = m->be;
    const int N = B * m->T, D = m->cfg.d_model, V = m->cfg.vocab_size;
    be->upload(be->ctx, m->tokens, tokens, sizeof(int32_t) * N);
    forward_layers(m, B);
    if (!targets) return 0.0;
    be->upload(be->ctx, m->targets, targets, sizeof(int32_t) * N);
    be->classifier(be->ctx, m->xf, weight(m, m->lm_head), m->targets, N, D, V, m->losses, with_grad ? m->dxf : NULL,
                   with_grad ? grad(m, m->lm_head) : NULL, (float)loss_scale);
    if (with_grad) {
        m->cov_scale = loss_scale * m->T;
        m->loss_scale = loss_scale;
        backward_layers(m, B);
    }
    if (keep_loss) {
        be->loss_accumulate(be->ctx, m->step_loss, m->losses, m->targets, B, m->T);
        return 0.0;
    }
    be->download(be->ctx, m->host_losses, m->losses, sizeof(float) * N);
    double sum = 0.0;
    long count = 0;
    for (int i = 0; i < N; i++)
        if (targets[i] >= 0) { sum += m->host_losses[i]; count++; }
    if (token_losses) memcpy(token_losses, m->host_losses, sizeof(float) * N);
    return count ? sum / count : 0.0;
}

double model_forward(Model *m, const int32_t *tokens, const int32_t *targets, int B, float *token_losses) {
    return run_forward(m, tokens, targets, B, token_losses, 0, 0.0, 0);
}

double model_forward_backward(Model *m, const int32_t *tokens, const int32_t *targets, int B, double loss_scale,
                              float *token_losses) {
    return run_forward(m, tokens, targets, B, token_losses, 1, loss_scale, 0);
}

void model_accumulate_micro_batch(Model *m, const int32_t *tokens, const int32_t *targets, int B, double loss_scale) {
    run_forward(m, tokens, targets, B, NULL, 1, loss_scale, 1);
}

void model_argmax_at(Model *m, const int32_t *tokens, int B, const int *positions, int32_t *out) {
    const Backend *be = m->be;
    const int D = m->cfg.d_model;
    be->upload(be->ctx, m->tokens, tokens, sizeof(int32_t) * B * m->T);
    m->hook_positions = positions;
    forward_layers(m, B);
    m->hook_positions = NULL;
    /* gather the B requested rows into dD, then one argmax call */
    for (int b = 0; b < B; b++)
        be->copy(be->ctx, (char *)m->dnorm + (size_t)b * D * be->act_bytes,
                 (const char *)m->xf + ((size_t)b * m->T + positions[b]) * D * be->act_bytes, D * be->act_bytes);
    int32_t *dev_out = (int32_t *)m->targets;
    be->logits_argmax(be->ctx, m->dnorm, weight(m, m->lm_head), B, D, m->cfg.vocab_size, dev_out);
    be->download(be->ctx, out, dev_out, sizeof(int32_t) * B);
}

int model_gate_alphas(Model *m, int layer, int branch, int B, float *out) {
    const ModelDims *dm = &m->ldims[layer];
    if (dm->n_windows == 0 || dm->boundaries) return 0;   /* learned boundaries: alpha per token, no windows */
    LayerActs *act = &m->acts[layer];
    const float *src = act->alpha[dm->tied_kv ? 0 : branch];
    m->be->download(m->be->ctx, out, src,
                    sizeof(float) * (size_t)B * dm->n_windows * m->cfg.n_kv_heads * dm->window * dm->channels);
    return dm->n_windows;
}

int model_gate_token_alphas(Model *m, int layer, int branch, int B, float *out) {
    const ModelDims *dm = &m->ldims[layer];
    if (!dm->boundaries) return 0;
    const float *src = m->acts[layer].alpha[dm->tied_kv ? 0 : branch];   /* per token at the buffer's start (§6.5) */
    m->be->download(m->be->ctx, out, src, sizeof(float) * (size_t)B * m->T * m->cfg.n_kv_heads * dm->channels);
    return m->T;
}

/* Visible keys of query t reading KV head g (compressed entries + raw tokens), as the attention
 * kernels count them (kernels/visibility.h). */
static long visible_keys(const ModelConfig *c, const ModelDims *dims, int t, int g) {
    if (dims->visibility == VIS_WINDOW && !dims->compressed) return t < c->n_local ? t + 1 : c->n_local;
    if (!dims->compressed) return t + 1;
    if (dims->boundaries) {   /* docs/spec.md §6.5: modelled as entries ending every S tokens (the ratio target) */
        VisQueryView v = vis_query_view(dims->visibility, t, c->stride, c->stride, 0, vis_n_windows(dims->T, c->stride, c->stride, 0),
                                        c->n_local);
        return v.n_entries + (t - v.raw_lo + 1);
    }
    int o = dims_grid_offset(dims, g);
    VisQueryView v = vis_query_view(dims->visibility, t, c->window, dims_head_stride(dims, g), o, dims_head_windows(dims, g),
                                    c->n_local);
    const int ne = c->indexer_topk > 0 && v.n_entries > c->indexer_topk ? c->indexer_topk : v.n_entries;   /* top-k */
    return ne + (t - v.raw_lo + 1);
}

/* compressor = shared has one map per branch but still projects every offset's token with it:
 * the same FLOPs as paper, fewer parameters (docs/spec.md §2b). */
double model_flops_per_token(const ModelConfig *c0, int T) {
    double D = c0->d_model, V = c0->vocab_size, layers = 0;
    for (int L = 0; L < c0->n_layers; L++) {
        if (L > 0 && !c0->layer_attention[0]) { layers *= c0->n_layers; break; }   /* one kind: layer 0 times n_layers */
        const ModelConfig lc = layer_config(c0, L);
        layers += model_layer_flops_per_token(&lc, T);
    }
    return 3.0 * 2.0 * (layers + D * V);
}

/* Forward multiply-adds per token of one layer with config c (a layer_config). */
double model_layer_flops_per_token(const ModelConfig *c, int T) {
    double D = c->d_model, H = c->n_heads, G = c->n_kv_heads, d = c->head_dim, F = c->d_ff;
    double mm = D * H * d + 2 * D * G * d + H * d * D + 3 * D * F;   /* multiply-adds per token per layer */
    const ModelDims dims = dims_of(c, T);
    int heads = dims.grid == GRID_STAGGERED || dims.multirate ? c->n_kv_heads : 1;
    double vis = 0;
    for (int g = 0; g < heads; g++)                                  /* mean over the KV heads' grids */
        for (int t = 0; t < T; t++) vis += visible_keys(c, &dims, t, g);
    vis /= heads;
    double attn = 2.0 * H * d * vis / T;                             /* QK and PV */
    double comp = 0;
    if (dims.compressed) {
        double windows = 0;                                          /* (window, KV head) pairs */
        for (int g = 0; g < c->n_kv_heads; g++) windows += dims_head_windows(&dims, g);
        /* per window offset: the payload (d outputs) and the gate logits (c, none when uniform) */
        double per_window = (double)c->window * D * (d + (dims.gated ? dims.channels : 0));
        comp = dims.branches * per_window * windows / T;
        if (dims.boundaries)   /* docs/spec.md §6.5: every token once per head and branch, and its score */
            comp = dims.branches * (double)c->n_kv_heads * D * (d + (dims.gated ? dims.channels : 0)) + D;
        if (c->token_shift) comp += (double)D * D;   /* docs/spec.md §6.3: M a_{t-1}, one [D, D] product per token */
    }
    if (c->indexer_topk > 0) {   /* the lightning indexer (§5.4): q and w projections, its compressor, the scores */
        const double HI = c->indexer_heads, dI = c->indexer_dim;
        double scored = 0;                                           /* visible entries summed over the queries */
        for (int t = 0; t < T; t++) scored += vis_n_entries(t, c->window, c->stride, 0, dims.n_windows);
        comp += (HI * dI + HI) * D + 2.0 * c->window * D * dI * dims.n_windows / T + HI * dI * scored / T;
    }
    return mm + attn + comp;
}

int model_set_gate_coverage(Model *m, double lambda, char *err) {
    const ModelConfig *c = &m->cfg;
    if (!(lambda >= 0) || !isfinite(lambda)) return set_err(err, "gate_coverage = %g; expected a finite lambda >= 0", lambda);
    if (lambda > 0 && (m->nW_max == 0 || !m->any_gated))
        return set_err(err, "gate_coverage > 0 needs compressed attention with scalar or vector gates");
    if (lambda > 0 && !m->be->gate_coverage)
        return set_err(err, "train.gate_coverage > 0 is not implemented on the %s backend yet; use run.device = cpu",
                       m->be->name);
    m->cov_lambda = lambda;
    if (lambda > 0 && !m->dalpha) {
        size_t n = 0;   /* the largest layer's alpha */
        for (int L = 0; L < c->n_layers; L++) {
            size_t nl = (size_t)m->max_batch * m->ldims[L].n_windows * c->n_kv_heads * m->ldims[L].window * m->ldims[L].channels;
            if (nl > n) n = nl;
        }
        m->dalpha = m->be->alloc(m->be->ctx, n * sizeof(float));
        m->cov_seq = m->be->alloc(m->be->ctx, (size_t)m->max_batch * sizeof(float));
        if (!m->dalpha || !m->cov_seq) return set_err(err, "out of %s memory for the gate-coverage penalty", m->be->name);
    }
    return 0;
}

double model_gate_coverage(Model *m, int B) {
    const ModelConfig *c = &m->cfg;
    if (m->nW_max == 0 || !m->any_gated || !m->be->gate_coverage) return 0.0;
    if (!m->cov_seq) {
        char err[ERR_LEN];
        if (model_set_gate_coverage(m, m->cov_lambda, err)) return NAN;
        if (!m->cov_seq) {   /* lambda 0: allocate the per-sequence scratch only */
            m->cov_seq = m->be->alloc(m->be->ctx, (size_t)m->max_batch * sizeof(float));
            if (!m->cov_seq) return NAN;
        }
    }
    double sum = 0.0;
    for (int L = 0; L < c->n_layers; L++) {
        if (!m->ldims[L].compressed || !m->ldims[L].gated) continue;
        CompShape cs = comp_shape(m, L, B);
        for (int br = 0; br < m->ldims[L].branches; br++) {
            m->be->gate_coverage(m->be->ctx, &cs, m->acts[L].alpha[br], NULL, m->cov_seq, 0.0f);
            m->be->download(m->be->ctx, m->host_cov, m->cov_seq, sizeof(float) * B);
            for (int b = 0; b < B; b++) sum += m->host_cov[b];
        }
    }
    return sum;
}

/* A shorter length reuses the arena: every activation is carved for max_batch x T_max rows and
 * the compressed buffers for nW_max windows, so B x T rows and nW(T) <= nW_max windows fit at
 * the start of each buffer. The RoPE tables hold every position below T_max (the staggered one
 * rows j*G + g, j < nW_max: the first nW(T)*G rows are the same positions). */
int model_set_seq_len(Model *m, int T, char *err) {
    if (T < 1 || T > m->T_max)
        return set_err(err, "sequence length %d: expected 1 <= T <= %d (the model's seq_len)", T, m->T_max);
    m->T = T;
    for (int L = 0; L < m->cfg.n_layers; L++) m->ldims[L] = dims_of(&m->lcfg[L], T);
    m->shift_on = 0;                 /* the shifts' RoPE table was for the old length */
    return 0;
}

int model_set_grid_shift(Model *m, const int32_t *shift, int B, char *err) {
    if (!shift) { m->shift_on = 0; return 0; }
    const ModelConfig *c = &m->cfg;
    if (c->attention != ATTN_COMPRESSED)
        return set_err(err, "grid shifts need attention = compressed (full attention has no grid)");
    if (layer_schedule_mixed(c))   /* every layer is then the config's own: ldims[L] = its dims */
        return set_err(err, "grid shifts with a mixed layer_attention schedule are not implemented (docs/spec.md §5)");
    const ModelDims *dims0 = &m->ldims[0];
    if (B < 1 || B > m->max_batch) return set_err(err, "grid shifts for %d sequences: expected 1..%d", B, m->max_batch);
    const int period = dims_shift_period(dims0);
    for (int b = 0; b < B; b++)
        if (shift[b] < 0 || shift[b] >= period)
            return set_err(err, "grid shift %d of sequence %d: expected 0 <= u < %d (%s)", (int)shift[b], b, period,
                           dims0->multirate ? "the lcm of the KV heads' strides" : "the stride");
    memcpy(m->grid_shift, shift, sizeof(int32_t) * B);
    for (int b = B; b < m->max_batch; b++) m->grid_shift[b] = 0;
    const int nW = dims0->n_windows, G = c->n_kv_heads, r = c->rope_dims;
    if (r > 0 && nW > 0) {
        const Backend *be = m->be;
        const size_t floats = (size_t)m->max_batch * m->nW_max * G * (r / 2) * 2;
        if (!m->crope_shift && !(m->crope_shift = be->alloc(be->ctx, floats * sizeof(float))))
            return set_err(err, "out of %s memory for the shifted entries' RoPE table (%.1f MiB)", be->name, floats * 4 / 1048576.0);
        float *tab = rope_table(m->T, r, c->rope_theta);
        float *ctab = tab ? entry_rope_table(tab, m->T, r, nW, G, c->stride, dims_head_strides(dims0), dims0->grid,
                                             dims0->grid_base, shift, B) : NULL;
        if (!ctab) { free(tab); return set_err(err, "out of host memory for the shifted entries' RoPE table"); }
        be->upload(be->ctx, m->crope_shift, ctab, (size_t)B * nW * G * (r / 2) * 2 * sizeof(float));
        free(tab);
        free(ctab);
    }
    m->shift_on = 1;
    return 0;
}

int model_seq_len(const Model *m) { return m->T; }

int model_grid_shift_period(const Model *m) { return m->ldims[0].compressed ? dims_shift_period(&m->ldims[0]) : 1; }

/* ---- learned chunk boundaries (docs/spec.md §6.5) ---- */
int model_has_boundaries(const Model *m) { return m->bd_any; }
const unsigned char *model_boundary_flags(const Model *m, int layer) {
    return m->bd_any && layer >= 0 && layer < m->cfg.n_layers ? m->bd_flag[layer] : NULL;
}
const float *model_boundary_probs(const Model *m, int layer) {
    return m->bd_any && layer >= 0 && layer < m->cfg.n_layers ? m->bd_prob[layer] : NULL;
}
int model_boundary_batch(const Model *m, int *B, int *T) {
    if (!m->bd_any || m->bd_B == 0) return -1;
    *B = m->bd_B;
    *T = m->T;
    return 0;
}
int model_hold_boundaries(Model *m, int hold) {
    if (!m->bd_any || (hold && m->bd_B == 0)) return -1;
    m->bd_hold = hold != 0;
    return 0;
}
int model_set_boundary_ratio(Model *m, double lambda, char *err) {
    if (!(lambda >= 0) || !isfinite(lambda)) return set_err(err, "boundary_ratio = %g; expected a finite lambda_r >= 0", lambda);
    m->bd_lambda = lambda;
    return 0;
}
double model_boundary_ratio(const Model *m, double *rate) {
    double R = 0.0, F = 0.0;
    for (int L = 0; m->bd_any && m->bd_B > 0 && L < m->cfg.n_layers; L++) { R += m->bd_R[L]; F += m->bd_F[L]; }
    if (rate) *rate = m->bd_any ? F / m->cfg.n_layers : 0.0;
    return m->bd_any ? R / m->cfg.n_layers : 0.0;
}

/* Test hook: the final-norm output [B, T, D] of a forward pass, as host fp32. */
int model_debug_final_hidden(Model *m, const int32_t *tokens, int B, float *out) {
    m->be->upload(m->be->ctx, m->tokens, tokens, sizeof(int32_t) * B * m->T);
    forward_layers(m, B);
    m->be->download_act(m->be->ctx, out, m->xf, (size_t)B * m->T * m->cfg.d_model);
    return 0;
}
