/* Incremental decoding with a compressed KV cache (model/decode.h), written against the op API
 * (kernels/kernels.h) so that it runs on every backend that provides attention_decode.
 *
 * One step at position t, per layer (the same math as model/model.c's forward, one row):
 *   a = RMSNorm_in(x);  q = RoPE(qnorm(Wq a), t);  k = RoPE(knorm(Wk a), t);  v = Wv a
 *   raw ring:   k, v -> slot t % ring_cap           (skipped when ring_cap = 0)
 *   compressed: a -> input slot t % W; for each KV head g whose window j completes at t
 *               (t = o_g + jS + W - 1, o_g its grid offset, kernels/visibility.h; aligned grid:
 *               o_g = 0, every head at once):
 *               E^B_g = compressor_fwd over the W inputs a_{t-W+1..t} in offset order (one
 *               window, T = W: the training kernel itself, on the heads that complete at t: a
 *               run of consecutive heads with equal o_g, their slice of the weights),
 *               Khat_{j,g} = RoPE(cknorm(E^K_g), o_g + jS) and Vhat_{j,g} = E^V_g (or Khat when
 *               tied) -> entry slot (j, g).  Entries are never rewritten.
 *   attention_decode: head g sees its complete entries and its visible raw tokens (window
 *   [max(0, t-n_local+1), t]; tail (e_t, t] with e_t the end of head g's last complete window, or
 *   -1; full [0, t]), the op asks kernels/visibility.h per head (decode_head_view).
 *   x += Wo attn;  x += W_down(silu(W_gate m) * W_up m), m = RMSNorm_post(x)
 * logits = RMSNorm_final(x) @ E_out^T (a [1, V] matmul, downloaded as fp32).
 * The tail ring holds the most raw tokens any head sees, max over g of max(o_g + W - 1, S - 1)
 * (vis_tail_max_raw; aligned: max(W-1, S-1)). With grid = staggered, heads 1..G-1 may have one
 * window fewer than head 0 at a given context: their last entry slot is then never written.
 * Learned chunk boundaries (docs/spec.md §6.5, write_chunk): at t the layer scores its input, p_t =
 * sigmoid(w_bd . a_t + c_bd) (the training op boundary_decide), decides bd_t = chunk_boundary(p_t, t - s + 1,
 * W) with s the open chunk's first token, and on a boundary pools a_s..a_t from the input ring with the
 * training op chunk_compressor_fwd (the masked window ending at t), Khat rotated to s, into entry slot
 * n (the n-th boundary); every KV head sees entries by their ends (vis_query_view_ends), a tail query at
 * most the W - 1 raw tokens of the open chunk. The factor c_j of training is 1 here (no gradient). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/decode.h"
#include "common/errors.h"
#include "model/model.h"
#include "model/tensors.h"
#include "model/dims.h"
#include "model/layer_kinds.h"
#include "kernels/kernels.h"
#include "kernels/chunk_boundaries.h"

/* One layer whose config is c (a layer_config): total_bytes = layer_bytes * c->n_layers. */
static void layer_cache_layout(const ModelConfig *c, long context, size_t e, DecodeCacheLayout *o) {
    memset(o, 0, sizeof *o);
    const size_t Gd = (size_t)c->n_kv_heads * c->head_dim;
    o->context = context;
    if (c->attention == ATTN_FULL) {
        o->ring_cap = (int)context;
    } else if (c->attention == ATTN_WINDOW) {   /* raw sliding window only */
        o->ring_cap = context < c->n_local ? (int)context : c->n_local;
    } else {
        const int W = c->window, G = c->n_kv_heads;
        const int ctx = context < 0x7fffffff ? (int)context : 0x7fffffff;
        const ModelDims dm = dims_of(c, 0);
        o->entry_cap = dims_windows_at(&dm, ctx);   /* head 0 (multi-rate: the smallest stride's): the most */
        o->ring_cap = c->local == LOCAL_TAIL ? 0 : c->n_local;
        for (int g = 0; g < G; g++) {
            const int og = dims_grid_offset(&dm, g), Sg = dims_head_stride(&dm, g);
            o->head_entries += vis_n_windows(ctx, W, Sg, og);
            if (c->local == LOCAL_TAIL && vis_tail_max_raw(W, Sg, og) > o->ring_cap) o->ring_cap = vis_tail_max_raw(W, Sg, og);
        }
        if (dm.boundaries) {   /* docs/spec.md §6.5: up to one entry per token; a tail query sees at most the
                                * W - 1 tokens of the open chunk (a chunk of W tokens is closed by force) */
            o->entry_cap = ctx;
            o->head_entries = (long)G * ctx;
            if (c->local == LOCAL_TAIL) o->ring_cap = W - 1;
        }
        o->value_entries = !dims_of(c, 0).tied_kv;
        o->input_rows = W + (c->token_shift ? 1 : 0);   /* + a_{t-1} with token shift (docs/spec.md §6.3) */
    }
    o->entry_bytes = (size_t)o->entry_cap * Gd * e * (1 + o->value_entries);
    o->raw_bytes = 2 * (size_t)o->ring_cap * Gd * e;
    o->input_bytes = (size_t)o->input_rows * c->d_model * e;
    o->index_bytes = c->indexer_topk > 0 ? (size_t)o->entry_cap * c->indexer_dim * e : 0;
    o->layer_bytes = o->entry_bytes + o->raw_bytes + o->input_bytes + o->index_bytes;
    o->total_bytes = o->layer_bytes * c->n_layers;
}

void decode_cache_layout_layer(const ModelConfig *c, int L, long context, size_t e, DecodeCacheLayout *o) {
    const ModelConfig lc = layer_config(c, L);
    layer_cache_layout(&lc, context, e, o);
    o->total_bytes = o->layer_bytes;
}

void decode_cache_layout(const ModelConfig *c, long context, size_t e, DecodeCacheLayout *o) {
    if (!c->layer_attention[0]) { layer_cache_layout(c, context, e, o); return; }
    /* a schedule: each field the largest layer's, total_bytes the exact sum over the layers */
    memset(o, 0, sizeof *o);
    o->context = context;
    for (int L = 0; L < c->n_layers; L++) {
        DecodeCacheLayout l;
        decode_cache_layout_layer(c, L, context, e, &l);
#define MAXF(f) if (l.f > o->f) o->f = l.f
        MAXF(entry_cap); MAXF(head_entries); MAXF(value_entries); MAXF(ring_cap); MAXF(input_rows);
        MAXF(entry_bytes); MAXF(raw_bytes); MAXF(input_bytes); MAXF(index_bytes); MAXF(layer_bytes);
#undef MAXF
        o->total_bytes += l.layer_bytes;
    }
}

typedef struct {               /* the cache of one layer (backend memory) */
    act_t *ck, *cv;            /* [entry_cap, G, d] entries (cv NULL when tied) */
    act_t *k, *v;              /* [ring_cap, G, d] raw keys (after knorm + RoPE) and values */
    act_t *inputs;             /* [W (+1), D] compressor inputs (a, or a + M a_{p-1} with token shift), slot
                                  p % W; with token shift row W holds a_{t-1} */
    act_t *ik;                 /* [entry_cap, dI] the lightning indexer's keys (csa layers with one) */
    /* learned chunk boundaries (docs/spec.md §6.5), host: the ends of the entries written so far, their count
     * and the first token of the open chunk */
    int32_t *ends;             /* [entry_cap] */
    int n_ends, open;
} LayerCache;


struct Decoder {
    struct Model *m;
    const ModelConfig *c;
    const Backend *be;
    int max_context, pos;
    ModelConfig *lcfg;         /* [n_layers] each layer's config (model/layer_kinds.h) */
    ModelDims *ldims;          /* [n_layers] its T-free sizes (model/dims.h): tied_kv, channels, n_maps */
    DecodeCacheLayout lay;     /* the model's (decode_cache_layout) */
    DecodeCacheLayout *llay;   /* [n_layers] each layer's (decode_cache_layout_layer) */
    LayerCache *lc;
    LayerTensorIndex *li;
    int emb, final_norm, lm_head;
    size_t cache_bytes, scratch_bytes;
    /* scratch, one row each */
    act_t *x, *a, *q_raw, *q, *k_raw, *k, *v, *attn, *x_mid, *mn, *g, *u, *h, *xf, *logits;
    act_t *win;                /* [W, D] the window's inputs in offset order */
    act_t *tsb;                /* [D] the compressor input a_t + M a_{t-1} (token shift) */
    act_t *entry[2];           /* [G, d] */
    act_t *payload;            /* [G, W, d] */
    float *alpha, *pn_rstd;    /* [G, W, c], [G, W] */
    float *bprob;              /* [1] the boundary score p_t (learned chunk boundaries, docs/spec.md §6.5) */
    float *rstd;               /* [max(H, G, 1)] */
    float *rope_tab;           /* [max_context, r/2, 2] */
    int32_t *tok;              /* [1] */
    /* the lightning indexer (docs/spec.md §5.4), one row: q^I [HI*dI], w [HI], an entry [dI], its
     * compressor's payload and alpha [W, dI], the scores and the selection [the most entry slots] */
    act_t *iq, *iw, *ientry, *ipayload;
    float *ialpha, *iscore;
    uint8_t *isel;
};

/* ---- allocation with bookkeeping: the measured bytes are the sum of what was asked for ---- */
static void *take(const Backend *be, size_t bytes, size_t *counter, int *fail) {
    if (bytes == 0) return NULL;
    void *p = be->alloc(be->ctx, bytes);
    if (!p) *fail = 1;
    *counter += bytes;
    return p;
}

static int cache_alloc(LayerCache *lc, const ModelConfig *c, long context, const Backend *be, size_t *bytes) {
    const size_t Gd = (size_t)c->n_kv_heads * c->head_dim, e = be->act_bytes;
    int fail = 0;
    for (int L = 0; L < c->n_layers; L++) {
        DecodeCacheLayout one;
        const DecodeCacheLayout *lay = &one;
        decode_cache_layout_layer(c, L, context, e, &one);
        lc[L].ck = take(be, (size_t)lay->entry_cap * Gd * e, bytes, &fail);
        lc[L].cv = lay->value_entries ? take(be, (size_t)lay->entry_cap * Gd * e, bytes, &fail) : NULL;
        lc[L].k = take(be, (size_t)lay->ring_cap * Gd * e, bytes, &fail);
        lc[L].v = take(be, (size_t)lay->ring_cap * Gd * e, bytes, &fail);
        lc[L].inputs = take(be, (size_t)lay->input_rows * c->d_model * e, bytes, &fail);
        lc[L].ik = take(be, lay->index_bytes, bytes, &fail);
        const ModelConfig lcf = layer_config(c, L);
        if (lcf.attention == ATTN_COMPRESSED && lcf.boundaries == BOUNDARIES_LEARNED) {   /* host ints, not cache bytes */
            lc[L].ends = calloc(lay->entry_cap > 0 ? lay->entry_cap : 1, sizeof(int32_t));
            if (!lc[L].ends) fail = 1;
        }
        lc[L].n_ends = lc[L].open = 0;
    }
    return fail ? -1 : 0;
}

static void cache_release(LayerCache *lc, int n_layers, const Backend *be) {
    for (int L = 0; L < n_layers; L++) {
        void *p[6] = {lc[L].ck, lc[L].cv, lc[L].k, lc[L].v, lc[L].inputs, lc[L].ik};
        for (int i = 0; i < 6; i++) if (p[i]) be->free(be->ctx, p[i]);
        free(lc[L].ends);
    }
}

size_t decode_cache_measure(const ModelConfig *cfg, const Backend *be, long max_context) {
    LayerCache *lc = calloc(cfg->n_layers, sizeof *lc);
    if (!lc) return 0;                                     /* 0: could not be measured */
    size_t bytes = 0;
    int rc = cache_alloc(lc, cfg, max_context, be, &bytes);
    cache_release(lc, cfg->n_layers, be);
    free(lc);
    return rc ? 0 : bytes;
}

Decoder *decoder_create(struct Model *m, int max_context, char *err) {
    const ModelConfig *c = model_config(m);
    const Backend *be = model_backend(m);
    if (!be->attention_decode) {
        set_err(err, "the %s backend has no incremental decoding (attention_decode)", be->name);
        return NULL;
    }
    if (max_context < 1) { set_err(err, "decoder: max_context %d, expected >= 1", max_context); return NULL; }
    if (model_has_boundaries(m) && !be->boundaries) {   /* docs/spec.md §6.5 (model_create refuses it there too) */
        set_err(err, "decoder: model.boundaries = learned is not implemented on the %s backend", be->name);
        return NULL;
    }
    for (int L = 0; L < c->n_layers; L++)
        if (layer_has_indexer(c, L) && !be->entry_select) {
            set_err(err, "decoder: layer %d has a lightning indexer (csa_topk = %d, docs/spec.md §5.4), which the %s "
                    "backend cannot decode yet; use run.device = cpu", L, c->csa_topk, be->name);
            return NULL;
        }
    Decoder *dec = calloc(1, sizeof *dec);
    if (!dec) { set_err(err, "out of memory: %zu bytes for the decoder", sizeof *dec); return NULL; }
    dec->m = m; dec->c = c; dec->be = be; dec->max_context = max_context;
    decode_cache_layout(c, max_context, be->act_bytes, &dec->lay);
    const TensorTable *tt = model_tensors(m);
    dec->li = calloc(c->n_layers, sizeof *dec->li);
    dec->lc = calloc(c->n_layers, sizeof *dec->lc);
    dec->lcfg = calloc(c->n_layers, sizeof *dec->lcfg);
    dec->ldims = calloc(c->n_layers, sizeof *dec->ldims);
    dec->llay = calloc(c->n_layers, sizeof *dec->llay);
    if (!dec->li || !dec->lc || !dec->lcfg || !dec->ldims || !dec->llay) {
        set_err(err, "out of memory: %zu bytes for the decoder's %d layer tables", c->n_layers * (sizeof *dec->li + sizeof *dec->lc),
                c->n_layers);
        decoder_free(dec);
        return NULL;
    }
    size_t W = 0, ch = 1;        /* the largest compressed layer's window and gate channels: scratch */
    for (int L = 0; L < c->n_layers; L++) {
        tensor_table_layer(tt, L, &dec->li[L]);
        dec->lcfg[L] = layer_config(c, L);
        dec->ldims[L] = dims_of(&dec->lcfg[L], 0);
        decode_cache_layout_layer(c, L, max_context, be->act_bytes, &dec->llay[L]);
        if (dec->lcfg[L].attention == ATTN_COMPRESSED) {
            if ((size_t)dec->lcfg[L].window > W) W = dec->lcfg[L].window;
            if ((size_t)dec->ldims[L].channels > ch) ch = dec->ldims[L].channels;
        }
    }
    ModelTensorIndex top;
    tensor_table_model(tt, c->tie_embeddings, &top);
    dec->emb = top.emb; dec->final_norm = top.final_norm; dec->lm_head = top.lm_head;

    int fail = cache_alloc(dec->lc, c, max_context, be, &dec->cache_bytes);
    const size_t e = be->act_bytes, D = c->d_model, Hd = (size_t)c->n_heads * c->head_dim,
                 Gd = (size_t)c->n_kv_heads * c->head_dim, F = c->d_ff, V = c->vocab_size;
    const size_t G = c->n_kv_heads;
    size_t *sb = &dec->scratch_bytes;
    dec->x = take(be, D * e, sb, &fail); dec->a = take(be, D * e, sb, &fail);
    dec->q_raw = take(be, Hd * e, sb, &fail); dec->q = take(be, Hd * e, sb, &fail);
    dec->k_raw = take(be, Gd * e, sb, &fail); dec->k = take(be, Gd * e, sb, &fail);
    dec->v = take(be, Gd * e, sb, &fail); dec->attn = take(be, Hd * e, sb, &fail);
    dec->x_mid = take(be, D * e, sb, &fail); dec->mn = take(be, D * e, sb, &fail);
    dec->g = take(be, F * e, sb, &fail); dec->u = take(be, F * e, sb, &fail); dec->h = take(be, F * e, sb, &fail);
    dec->xf = take(be, D * e, sb, &fail); dec->logits = take(be, V * e, sb, &fail);
    if (W) {
        dec->win = take(be, W * D * e, sb, &fail);
        if (c->token_shift) dec->tsb = take(be, D * e, sb, &fail);
        dec->entry[0] = take(be, Gd * e, sb, &fail); dec->entry[1] = take(be, Gd * e, sb, &fail);
        dec->payload = take(be, G * W * c->head_dim * e, sb, &fail);
        dec->alpha = take(be, G * W * ch * 4, sb, &fail);
        dec->pn_rstd = take(be, G * W * 4, sb, &fail);
        if (model_has_boundaries(m)) dec->bprob = take(be, 4, sb, &fail);
    }
    if (model_has_indexer(c)) {
        const size_t HI = c->indexer_heads, dI = c->indexer_dim;
        size_t cap = 1;
        for (int L = 0; L < c->n_layers; L++) if ((size_t)dec->llay[L].entry_cap > cap) cap = dec->llay[L].entry_cap;
        dec->iq = take(be, HI * dI * e, sb, &fail); dec->iw = take(be, HI * e, sb, &fail);
        dec->ientry = take(be, dI * e, sb, &fail); dec->ipayload = take(be, W * dI * e, sb, &fail);
        dec->ialpha = take(be, W * dI * 4, sb, &fail); dec->iscore = take(be, cap * 4, sb, &fail);
        dec->isel = take(be, cap, sb, &fail);
    }
    size_t nr = (size_t)(c->n_heads > c->n_kv_heads ? c->n_heads : c->n_kv_heads) + 1;
    dec->rstd = take(be, nr * 4, sb, &fail);
    dec->tok = take(be, 4, sb, &fail);
    if (c->rope_dims > 0) {
        size_t tab_bytes = (size_t)max_context * (c->rope_dims / 2) * 2 * sizeof(float);
        dec->rope_tab = take(be, tab_bytes, sb, &fail);
        if (dec->rope_tab) {
            float *tab = rope_table(max_context, c->rope_dims, c->rope_theta);
            if (tab) be->upload(be->ctx, dec->rope_tab, tab, tab_bytes);
            else fail = 1;                                         /* host memory: reported below */
            free(tab);
        }
    }
    if (fail) {
        set_err(err, "out of %s memory for the decode cache (%.1f MiB for %d tokens) and scratch (%.1f MiB)",
                be->name, dec->cache_bytes / 1048576.0, max_context, dec->scratch_bytes / 1048576.0);
        decoder_free(dec);
        return NULL;
    }
    return dec;
}

void decoder_free(Decoder *dec) {
    if (!dec) return;
    const Backend *be = dec->be;
    if (dec->lc) cache_release(dec->lc, dec->c->n_layers, be);
    void *p[] = {dec->x, dec->a, dec->q_raw, dec->q, dec->k_raw, dec->k, dec->v, dec->attn, dec->x_mid, dec->mn,
                 dec->g, dec->u, dec->h, dec->xf, dec->logits, dec->win, dec->entry[0], dec->entry[1], dec->payload,
                 dec->alpha, dec->pn_rstd, dec->rstd, dec->tok, dec->rope_tab, dec->iq, dec->iw, dec->ientry,
                 dec->ipayload, dec->ialpha, dec->iscore, dec->isel, dec->tsb, dec->bprob};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) if (p[i]) be->free(be->ctx, p[i]);
    free(dec->lc);
    free(dec->li);
    free(dec->lcfg);
    free(dec->ldims);
    free(dec->llay);
    free(dec);
}

void decoder_reset(Decoder *dec) {
    dec->pos = 0;
    for (int L = 0; L < dec->c->n_layers; L++) dec->lc[L].n_ends = dec->lc[L].open = 0;   /* learned boundaries */
}
int decoder_position(const Decoder *dec) { return dec->pos; }
int decoder_max_context(const Decoder *dec) { return dec->max_context; }
size_t decoder_cache_bytes(const Decoder *dec) { return dec->cache_bytes; }
size_t decoder_scratch_bytes(const Decoder *dec) { return dec->scratch_bytes; }
const DecodeCacheLayout *decoder_layout(const Decoder *dec) { return &dec->lay; }

static const act_t *Wt(const Decoder *dec, int i) { return model_working_weight(dec->m, i); }
static act_t *row(act_t *base, size_t index, size_t elems, size_t e) { return (act_t *)((char *)base + index * elems * e); }
/* the RoPE table row of position p (rope's row 0 with period 1 is that position) */
static const float *rope_at(const Decoder *dec, int p) {
    return dec->rope_tab + (size_t)p * (dec->c->rope_dims / 2) * 2;
}

/* The weights of KV heads g0.. of a [G, ...] tensor whose head slice has per_head elements. */
static const act_t *head_slice(const Decoder *dec, int i, int g0, size_t per_head) {
    return i < 0 ? NULL : (const act_t *)((const char *)Wt(dec, i) + (size_t)g0 * per_head * dec->be->act_bytes);
}

/* KV heads g0 .. g0+ng-1 (one grid offset o, one stride S: multi-rate strides, docs/spec.md §6.4)
 * have just completed their window j at position t = o + jS + W - 1: their entries go to slots (j, g0..) of layer L's cache. The aligned grid is the
 * call with g0 = 0, ng = G, o = 0. A window that starts before position 0 (o + jS < 0: the partial
 * first window of a negative o_base, docs/spec.md §6.1) is the training compressor's window 0 of
 * the t + 1 present inputs a_0..a_t at offset o + jS: its slots before the sequence are masked
 * exactly as in the full forward. Entry j is rotated to o - o_base + jS (vis_entry_position). */
static void write_entries(Decoder *dec, int L, int t, int j, int g0, int ng, int o, int S) {
    const Backend *be = dec->be;
    const ModelConfig *c = &dec->lcfg[L];
    const LayerTensorIndex *x = &dec->li[L];
    LayerCache *lc = &dec->lc[L];
    const int W = c->window, D = c->d_model, G = c->n_kv_heads, d = c->head_dim;
    const int M = dec->ldims[L].n_maps, ch = dec->ldims[L].channels;
    const size_t e = be->act_bytes, Gd = (size_t)G * d, nd = (size_t)ng * d;
    /* the window's inputs a_{max(0, t-W+1)..t} in position order: slot p % W */
    const int start = t - W + 1, p0 = start > 0 ? start : 0, present = t - p0 + 1;
    const act_t *win = lc->inputs;
    if (p0 % W != 0 || present < W) {
        for (int i = 0; i < present; i++)
            be->copy(be->ctx, row(dec->win, i, D, e), row(lc->inputs, (p0 + i) % W, D, e), D * e);
        win = dec->win;
    }
    CompShape cs = {.B = 1, .T = present, .D = D, .G = ng, .d = d, .window = W, .stride = c->stride, .n_windows = 1,
                    .channels = ch, .n_maps = M, .eps = (float)c->norm_eps};
    cs.gate = c->gate;
    cs.grid_base = start < 0 ? start : 0;   /* the window's own offset: masked slots i < -start */
    for (int br = 0; br < dec->ldims[L].branches; br++)
        be->compressor_fwd(be->ctx, &cs, dec->entry[br], dec->alpha, dec->payload, dec->pn_rstd, win,
                           head_slice(dec, x->gate_w[br], g0, (size_t)M * ch * D), head_slice(dec, x->gate_b[br], g0, (size_t)W * ch),
                           head_slice(dec, x->payload[br], g0, (size_t)M * d * D), Wt(dec, x->pn[br]));
    act_t *ck = (act_t *)((char *)row(lc->ck, j, Gd, e) + (size_t)g0 * d * e);
    if (c->qk_norm) be->rmsnorm_fwd(be->ctx, ck, dec->rstd, dec->entry[0], Wt(dec, x->ck_norm), ng, d, (float)c->norm_eps);
    else be->copy(be->ctx, ck, dec->entry[0], nd * e);
    if (c->rope_dims > 0)
        be->rope(be->ctx, ck, rope_at(dec, vis_entry_position(j, S, o, dec->ldims[L].grid_base)), 1, ng, d, c->rope_dims, 1, 1, 0);
    if (lc->cv) be->copy(be->ctx, (char *)row(lc->cv, j, Gd, e) + (size_t)g0 * d * e, dec->entry[1], nd * e);
    if (lc->ik && g0 == 0) {   /* the indexer's key of entry j (csa layers: one run; a partial window as the layer's, cs) */
        const int dI = c->indexer_dim;
        CompShape is = cs;
        is.G = 1; is.d = is.channels = dI; is.gate = GATE_VECTOR;
        be->compressor_fwd(be->ctx, &is, dec->ientry, dec->ialpha, dec->ipayload, NULL, win, Wt(dec, x->igate_w),
                           Wt(dec, x->igate_b), Wt(dec, x->ipayload), NULL);
        be->rmsnorm_fwd(be->ctx, row(lc->ik, j, dI, e), dec->rstd, dec->ientry, Wt(dec, x->iknorm), 1, dI, (float)c->norm_eps);
    }
}

/* Every KV head whose window completes at t (kernels/visibility.h), in runs of consecutive heads
 * with one grid offset and one stride: one compressor call per run (aligned grid: one run of all
 * G heads, or none). Staggered offsets o_g = floor(gS/G) are non-decreasing in g, so heads that
 * share an offset are adjacent; with multi-rate strides (docs/spec.md §6.4) each head's entries
 * complete at its own times t = j S_g + W - 1. */
static void write_completed(Decoder *dec, int L, int t) {
    const ModelConfig *c = &dec->lcfg[L];
    const ModelDims *dm = &dec->ldims[L];
    const int W = c->window, G = c->n_kv_heads;
    for (int g0 = 0; g0 < G;) {
        const int o = dims_grid_offset(dm, g0), S = dims_head_stride(dm, g0), j = vis_entry_closing_at(t, W, S, o);
        int g1 = g0 + 1;
        while (g1 < G && dims_grid_offset(dm, g1) == o && dims_head_stride(dm, g1) == S) g1++;
        if (j >= 0) write_entries(dec, L, t, j, g0, g1 - g0, o, S);
        g0 = g1;
    }
}

/* Learned chunk boundaries (docs/spec.md §6.5) of layer L at position t, whose compressor input cin is in the
 * input ring: p_t, the decision with the open chunk's length (chunk_boundary), and on a boundary the entry
 * of the open chunk s..t: the training op chunk_compressor_fwd on its rows (one entry ending at its last
 * row: the masked window of W slots), cknorm, RoPE at its first token s, into entry slot n_ends. */
static void write_chunk(Decoder *dec, int L, int t, const act_t *cin) {
    const Backend *be = dec->be;
    const ModelConfig *c = &dec->lcfg[L];
    const LayerTensorIndex *x = &dec->li[L];
    LayerCache *lc = &dec->lc[L];
    const int W = c->window, D = c->d_model, G = c->n_kv_heads, d = c->head_dim;
    const size_t e = be->act_bytes, Gd = (size_t)G * d;
    const CompShape one = {.B = 1, .T = 1, .D = D, .window = W, .n_windows = 1};
    be->boundary_decide(be->ctx, &one, dec->bprob, NULL, NULL, NULL, NULL, cin, Wt(dec, x->boundary_w), Wt(dec, x->boundary_b), 1);
    float p;
    be->download(be->ctx, &p, dec->bprob, sizeof p);
    if (!chunk_boundary(p, t - lc->open + 1, W)) return;
    const int s0 = lc->open, n = t - s0 + 1, j = lc->n_ends;
    for (int i = 0; i < n; i++) be->copy(be->ctx, row(dec->win, i, D, e), row(lc->inputs, (s0 + i) % W, D, e), D * e);
    int32_t end = n - 1, count = 1;
    CompShape cs = {.B = 1, .T = n, .D = D, .G = G, .d = d, .window = W, .stride = c->stride, .n_windows = 1,
                    .gate = c->gate, .channels = dec->ldims[L].channels, .n_maps = dec->ldims[L].n_maps,
                    .eps = (float)c->norm_eps, .entry_ends = &end, .entry_count = &count};
    for (int br = 0; br < dec->ldims[L].branches; br++)
        be->chunk_compressor_fwd(be->ctx, &cs, dec->entry[br], dec->alpha, dec->payload, dec->pn_rstd, dec->win,
                                 Wt(dec, x->gate_w[br]), Wt(dec, x->gate_b[br]), Wt(dec, x->payload[br]), Wt(dec, x->pn[br]));
    act_t *ck = row(lc->ck, j, Gd, e);
    if (c->qk_norm) be->rmsnorm_fwd(be->ctx, ck, dec->rstd, dec->entry[0], Wt(dec, x->ck_norm), G, d, (float)c->norm_eps);
    else be->copy(be->ctx, ck, dec->entry[0], Gd * e);
    if (c->rope_dims > 0) be->rope(be->ctx, ck, rope_at(dec, s0), 1, G, d, c->rope_dims, 1, 1, 0);
    if (lc->cv) be->copy(be->ctx, row(lc->cv, j, Gd, e), dec->entry[1], Gd * e);
    lc->ends[j] = t;
    lc->n_ends = j + 1;
    lc->open = t + 1;
}

int decoder_step(Decoder *dec, int32_t token, float *logits, char *err) {
    const Backend *be = dec->be;
    const ModelConfig *c = dec->c;
    const int t = dec->pos;
    if (t >= dec->max_context)
        return set_err(err, "decoder: context full (%d tokens); create the decoder with a larger max_context", t);
    if (token < 0 || token >= c->vocab_size)
        return set_err(err, "decoder: token %d at position %d is outside the vocabulary 0..%d", token, t, c->vocab_size - 1);
    const int D = c->d_model, H = c->n_heads, G = c->n_kv_heads, d = c->head_dim, F = c->d_ff, r = c->rope_dims;
    const float eps = (float)c->norm_eps;
    const size_t e = be->act_bytes, Gd = (size_t)G * d;
    be->upload(be->ctx, dec->tok, &token, sizeof token);
    be->embedding_fwd(be->ctx, dec->x, dec->tok, Wt(dec, dec->emb), 1, D);
    for (int L = 0; L < c->n_layers; L++) {
        const ModelConfig *lcf = &dec->lcfg[L];
        const int W = lcf->window, S = lcf->stride;
        const int compressed = lcf->attention == ATTN_COMPRESSED;
        const LayerTensorIndex *x = &dec->li[L];
        LayerCache *lc = &dec->lc[L];
        be->rmsnorm_fwd(be->ctx, dec->a, dec->rstd, dec->x, Wt(dec, x->in_norm), 1, D, eps);
        if (c->qk_norm) {
            be->matmul_fwd(be->ctx, dec->q_raw, dec->a, Wt(dec, x->q), 1, H * d, D, 0);
            be->matmul_fwd(be->ctx, dec->k_raw, dec->a, Wt(dec, x->k), 1, G * d, D, 0);
            be->rmsnorm_fwd(be->ctx, dec->q, dec->rstd, dec->q_raw, Wt(dec, x->q_norm), H, d, eps);
            be->rmsnorm_fwd(be->ctx, dec->k, dec->rstd, dec->k_raw, Wt(dec, x->k_norm), G, d, eps);
        } else {
            be->matmul_fwd(be->ctx, dec->q, dec->a, Wt(dec, x->q), 1, H * d, D, 0);
            be->matmul_fwd(be->ctx, dec->k, dec->a, Wt(dec, x->k), 1, G * d, D, 0);
        }
        be->matmul_fwd(be->ctx, dec->v, dec->a, Wt(dec, x->v), 1, G * d, D, 0);
        if (r > 0) {
            be->rope(be->ctx, dec->q, rope_at(dec, t), 1, H, d, r, 1, 1, 0);
            be->rope(be->ctx, dec->k, rope_at(dec, t), 1, G, d, r, 1, 1, 0);
        }
        const int R = dec->llay[L].ring_cap;
        if (R > 0) {
            be->copy(be->ctx, row(lc->k, t % R, Gd, e), dec->k, Gd * e);
            be->copy(be->ctx, row(lc->v, t % R, Gd, e), dec->v, Gd * e);
        }
        if (compressed) {
            const act_t *cin = dec->a;
            if (x->token_shift >= 0) {   /* docs/spec.md §6.3: b_t = a_t + M a_{t-1}, a_{-1} = 0 */
                act_t *prev = row(lc->inputs, W, D, e);
                if (t == 0) be->zero(be->ctx, prev, D * e);
                be->copy(be->ctx, dec->tsb, dec->a, D * e);
                be->matmul_fwd(be->ctx, dec->tsb, prev, Wt(dec, x->token_shift), 1, D, D, 1);
                be->copy(be->ctx, prev, dec->a, D * e);
                cin = dec->tsb;
            }
            be->copy(be->ctx, row(lc->inputs, t % W, D, e), cin, D * e);
            if (dec->ldims[L].boundaries) write_chunk(dec, L, t, cin);   /* docs/spec.md §6.5 */
            else write_completed(dec, L, t);
        }
        DecodeAttnShape as = {.H = H, .G = G, .d = d, .t = t, .window = W, .stride = S,
                              .n_windows = compressed ? dec->llay[L].entry_cap : 0, .grid = compressed ? lcf->grid : GRID_ALIGNED,
                              .grid_base = dec->ldims[L].grid_base, .visibility = config_visibility(lcf), .n_local = lcf->n_local, .ring_cap = R > 0 ? R : 1,
                              .head_stride = dims_head_strides(&dec->ldims[L])};
        if (compressed && dec->ldims[L].boundaries) { as.entry_ends = lc->ends; as.entry_count = lc->n_ends; }
        if (lc->ik) {   /* the indexer's top-k of this query (docs/spec.md §5.4) */
            const int HI = lcf->indexer_heads, dI = lcf->indexer_dim;
            be->matmul_fwd(be->ctx, dec->iq, dec->a, Wt(dec, x->iq), 1, HI * dI, D, 0);
            be->matmul_fwd(be->ctx, dec->iw, dec->a, Wt(dec, x->iw), 1, HI, D, 0);
            IndexerShape is = {.B = 1, .T = 1, .t0 = t, .nW = dec->llay[L].entry_cap, .W = W, .S = S,
                               .o = dims_grid_offset(&dec->ldims[L], 0),
                               .HI = HI, .dI = dI, .topk = lcf->indexer_topk};
            be->indexer_scores(be->ctx, &is, dec->iscore, dec->iq, dec->iw, lc->ik);
            be->indexer_select(be->ctx, &is, dec->isel, dec->iscore);
            if (!model_indexer_dense(dec->m)) as.entry_select = dec->isel;
        }
        be->attention_decode(be->ctx, &as, dec->attn, dec->q, lc->ck, lc->cv ? lc->cv : lc->ck, lc->k, lc->v,
                             model_master_weight(dec->m, x->sink));
        be->copy(be->ctx, dec->x_mid, dec->x, D * e);
        be->matmul_fwd(be->ctx, dec->x_mid, dec->attn, Wt(dec, x->o), 1, D, H * d, 1);
        be->rmsnorm_fwd(be->ctx, dec->mn, dec->rstd, dec->x_mid, Wt(dec, x->post_norm), 1, D, eps);
        be->matmul_fwd(be->ctx, dec->g, dec->mn, Wt(dec, x->gate), 1, F, D, 0);
        be->matmul_fwd(be->ctx, dec->u, dec->mn, Wt(dec, x->up), 1, F, D, 0);
        be->swiglu_fwd(be->ctx, dec->h, dec->g, dec->u, F);
        be->copy(be->ctx, dec->x, dec->x_mid, D * e);
        be->matmul_fwd(be->ctx, dec->x, dec->h, Wt(dec, x->down), 1, D, F, 1);
    }
    dec->pos++;
    if (logits) {
        be->rmsnorm_fwd(be->ctx, dec->xf, dec->rstd, dec->x, Wt(dec, dec->final_norm), 1, D, eps);
        be->matmul_fwd(be->ctx, dec->logits, dec->xf, Wt(dec, dec->lm_head), 1, c->vocab_size, D, 0);
        be->download_act(be->ctx, logits, dec->logits, c->vocab_size);
    }
    return 0;
}

int decoder_prefill(Decoder *dec, const int32_t *tokens, int n, float *logits, char *err) {
    for (int i = 0; i < n; i++)
        if (decoder_step(dec, tokens[i], i == n - 1 ? logits : NULL, err)) return -1;
    return 0;
}

/* Chunked prefill from position 0 (see decode.h): model/model.c's forward_layers over n rows,
 * writing the compressed entries straight into the cache ([n_windows, G, d] is the cache's
 * layout for one sequence) and copying the last ring_cap keys/values and the last W inputs. */
int decoder_prefill_chunk(Decoder *dec, const int32_t *tokens, int n, float *logits, char *err) {
    const Backend *be = dec->be;
    const ModelConfig *c = dec->c;
    if (dec->pos != 0) return set_err(err, "decoder_prefill_chunk: the decoder is at position %d, expected 0", dec->pos);
    if (n < 1 || n > dec->max_context)
        return set_err(err, "decoder_prefill_chunk: %d tokens, expected 1..%d (the context)", n, dec->max_context);
    if (model_shape_check(c, 1, n, err)) return -1;      /* n x heads rows must fit the kernels' int */
    if (model_has_boundaries(dec->m)) return decoder_prefill(dec, tokens, n, logits, err);   /* §6.5: token by token */
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return set_err(err, "decoder: token %d at position %d is outside the vocabulary 0..%d", tokens[i], i,
                           c->vocab_size - 1);
    const int D = c->d_model, H = c->n_heads, G = c->n_kv_heads, d = c->head_dim, F = c->d_ff, r = c->rope_dims;
    const float eps = (float)c->norm_eps;
    const size_t e = be->act_bytes, Gd = (size_t)G * d, Hd = (size_t)H * d, N = n;
    /* the buffers' rows: the most windows (head 0's) and window slots of any compressed layer */
    int nW_rows = 0;
    size_t slots = 0, ch_max = 1;
    for (int L = 0; L < c->n_layers; L++) {
        const ModelConfig *lcf = &dec->lcfg[L];
        if (lcf->attention != ATTN_COMPRESSED) continue;
        const int nWL = dims_windows_at(&dec->ldims[L], n);
        if (nWL > nW_rows) nW_rows = nWL;
        if ((size_t)nWL * G * lcf->window > slots) slots = (size_t)nWL * G * lcf->window;
        if ((size_t)dec->ldims[L].channels > ch_max) ch_max = dec->ldims[L].channels;
    }
    size_t scratch = 0;
    int fail = 0;
    act_t *x = take(be, N * D * e, &scratch, &fail), *a = take(be, N * D * e, &scratch, &fail);
    act_t *x_mid = take(be, N * D * e, &scratch, &fail), *mn = take(be, N * D * e, &scratch, &fail);
    act_t *q_raw = take(be, N * Hd * e, &scratch, &fail), *q = take(be, N * Hd * e, &scratch, &fail);
    act_t *attn = take(be, N * Hd * e, &scratch, &fail);
    act_t *k_raw = take(be, N * Gd * e, &scratch, &fail), *k = take(be, N * Gd * e, &scratch, &fail);
    act_t *v = take(be, N * Gd * e, &scratch, &fail);
    act_t *g = take(be, N * F * e, &scratch, &fail), *u = take(be, N * F * e, &scratch, &fail);
    act_t *h = take(be, N * F * e, &scratch, &fail);
    float *rstd = take(be, N * (H > G ? H : G) * 4 + 4, &scratch, &fail), *lse = take(be, N * H * 4, &scratch, &fail);
    int32_t *tok = take(be, N * 4, &scratch, &fail);
    act_t *entry0 = nW_rows ? take(be, nW_rows * Gd * e, &scratch, &fail) : NULL;
    act_t *payload = nW_rows ? take(be, slots * d * e, &scratch, &fail) : NULL;
    float *alpha = nW_rows ? take(be, slots * ch_max * 4, &scratch, &fail) : NULL;
    float *pn_rstd = nW_rows ? take(be, slots * 4, &scratch, &fail) : NULL;
    /* grid = staggered, G > 1 (the compressed kind's layers, which have c's own W and S): entry
     * (j, g) sits at o_g + jS; its own table [nW * G, r/2, 2], row j*G + g (as model/model.c's
     * crope_tab), for this call */
    const int S = c->stride, nW = c->attention == ATTN_COMPRESSED || c->layer_attention[0] ? vis_n_windows(n, c->window, S, 0) : 0;
    int stag = 0;
    for (int L = 0; L < c->n_layers; L++)   /* (multi-rate strides: entry (j, g) at j S_g, docs/spec.md §6.4) */
        if (dec->lcfg[L].attention == ATTN_COMPRESSED && (dec->lcfg[L].grid == GRID_STAGGERED || dec->ldims[L].multirate)) stag = 1;
    stag = stag && G > 1 && r > 0 && nW > 0;
    const size_t ctab_floats = stag ? (size_t)nW * G * (r / 2) * 2 : 0;
    float *crope = stag ? take(be, ctab_floats * sizeof(float), &scratch, &fail) : NULL;
    /* the lightning indexer over the n rows (docs/spec.md §5.4): q^I, w, its entries, scores, selection */
    const int has_ind = model_has_indexer(c);
    const size_t HI = c->indexer_heads, dI = c->indexer_dim;
    act_t *i_q = has_ind ? take(be, N * HI * dI * e, &scratch, &fail) : NULL;
    act_t *i_w = has_ind ? take(be, N * HI * e, &scratch, &fail) : NULL;
    act_t *i_entry = has_ind && nW_rows ? take(be, nW_rows * dI * e, &scratch, &fail) : NULL;
    act_t *i_payload = has_ind && nW_rows ? take(be, slots / G * dI * e, &scratch, &fail) : NULL;
    float *i_alpha = has_ind && nW_rows ? take(be, slots / G * dI * 4, &scratch, &fail) : NULL;
    float *i_rstd = has_ind && nW_rows ? take(be, nW_rows * 4, &scratch, &fail) : NULL;
    float *i_score = has_ind && nW_rows ? take(be, N * nW_rows * 4, &scratch, &fail) : NULL;
    uint8_t *i_sel = has_ind && nW_rows ? take(be, N * nW_rows, &scratch, &fail) : NULL;
    const int tshift = c->attention == ATTN_COMPRESSED && !c->layer_attention[0] && c->token_shift;   /* docs/spec.md §6.3 */
    act_t *cin = tshift ? take(be, N * D * e, &scratch, &fail) : NULL, *tsh = tshift ? take(be, N * D * e, &scratch, &fail) : NULL;
    void *all[] = {x, a, x_mid, mn, q_raw, q, attn, k_raw, k, v, g, u, h, rstd, lse, tok, entry0, payload, alpha, pn_rstd, crope,
                   i_q, i_w, i_entry, i_payload, i_alpha, i_rstd, i_score, i_sel, cin, tsh};
    int rc = 0;
    if (fail) { rc = set_err(err, "out of %s memory for a prefill of %d tokens (%.1f MiB)", be->name, n, scratch / 1048576.0); goto done; }
    if (crope) {
        float *tab = rope_table(n, r, c->rope_theta);
        const ModelDims dm0 = dims_of(c, 0);
        float *ctab = tab ? entry_rope_table(tab, n, r, nW, G, S, dims_head_strides(&dm0), c->grid, dm0.grid_base, NULL, 1)
                          : NULL;   /* rows past head g's windows: 0 */
        if (!tab || !ctab) { free(tab); free(ctab); rc = set_err(err, "out of host memory for a prefill RoPE table"); goto done; }
        be->upload(be->ctx, crope, ctab, ctab_floats * sizeof(float));
        free(tab); free(ctab);
    }
    be->upload(be->ctx, tok, tokens, N * 4);
    be->embedding_fwd(be->ctx, x, tok, Wt(dec, dec->emb), n, D);
    for (int L = 0; L < c->n_layers; L++) {
        const ModelConfig *lcf = &dec->lcfg[L];
        const int compressed = lcf->attention == ATTN_COMPRESSED, W = lcf->window, S = lcf->stride;
        const int R = dec->llay[L].ring_cap;
        const int nW = compressed ? dims_windows_at(&dec->ldims[L], n) : 0;   /* head 0's (multi-rate: the most): the buffers' rows */
        const int grid = compressed ? lcf->grid : GRID_ALIGNED;
        AttnShape as = {.B = 1, .T = n, .H = H, .G = G, .d = d, .n_windows = nW, .window = W, .stride = S, .n_local = lcf->n_local};
        as.visibility = config_visibility(lcf);
        as.grid = grid;
        as.grid_base = dec->ldims[L].grid_base;
        as.head_stride = dims_head_strides(&dec->ldims[L]);
        CompShape cs = {.B = 1, .T = n, .D = D, .G = G, .d = d, .window = W, .stride = S, .n_windows = nW,
                        .channels = dec->ldims[L].channels, .n_maps = dec->ldims[L].n_maps, .eps = eps};
        cs.gate = lcf->gate;
        cs.grid = grid;
        cs.grid_base = dec->ldims[L].grid_base;
        cs.head_stride = dims_head_strides(&dec->ldims[L]);
        const LayerTensorIndex *ix = &dec->li[L];
        LayerCache *lc = &dec->lc[L];
        be->rmsnorm_fwd(be->ctx, a, rstd, x, Wt(dec, ix->in_norm), n, D, eps);
        if (c->qk_norm) {
            be->matmul_fwd(be->ctx, q_raw, a, Wt(dec, ix->q), n, H * d, D, 0);
            be->matmul_fwd(be->ctx, k_raw, a, Wt(dec, ix->k), n, G * d, D, 0);
            be->rmsnorm_fwd(be->ctx, q, rstd, q_raw, Wt(dec, ix->q_norm), n * H, d, eps);
            be->rmsnorm_fwd(be->ctx, k, rstd, k_raw, Wt(dec, ix->k_norm), n * G, d, eps);
        } else {
            be->matmul_fwd(be->ctx, q, a, Wt(dec, ix->q), n, H * d, D, 0);
            be->matmul_fwd(be->ctx, k, a, Wt(dec, ix->k), n, G * d, D, 0);
        }
        be->matmul_fwd(be->ctx, v, a, Wt(dec, ix->v), n, G * d, D, 0);
        if (r > 0) {
            be->rope(be->ctx, q, dec->rope_tab, n, H, d, r, n, 1, 0);
            be->rope(be->ctx, k, dec->rope_tab, n, G, d, r, n, 1, 0);
        }
        const act_t *ca = a;     /* the compressor's input: a, or a + shift(a) M^T (token shift) */
        if (tshift) {
            be->zero(be->ctx, tsh, D * e);
            if (n > 1) be->copy(be->ctx, row(tsh, 1, D, e), a, (N - 1) * D * e);
            be->copy(be->ctx, cin, a, N * D * e);
            be->matmul_fwd(be->ctx, cin, tsh, Wt(dec, ix->token_shift), n, D, D, 1);
            be->copy(be->ctx, row(lc->inputs, W, D, e), row(a, n - 1, D, e), D * e);   /* a_{t-1} for the next step */
            ca = cin;
        }
        if (nW > 0) {   /* entries of the prompt's complete windows, straight into the cache */
            be->compressor_fwd(be->ctx, &cs, entry0, alpha, payload, pn_rstd, ca, Wt(dec, ix->gate_w[0]), Wt(dec, ix->gate_b[0]),
                               Wt(dec, ix->payload[0]), Wt(dec, ix->pn[0]));
            if (lc->cv)
                be->compressor_fwd(be->ctx, &cs, lc->cv, alpha, payload, pn_rstd, ca, Wt(dec, ix->gate_w[1]), Wt(dec, ix->gate_b[1]),
                                   Wt(dec, ix->payload[1]), Wt(dec, ix->pn[1]));
            if (c->qk_norm) be->rmsnorm_fwd(be->ctx, lc->ck, rstd, entry0, Wt(dec, ix->ck_norm), nW * G, d, eps);
            else be->copy(be->ctx, lc->ck, entry0, nW * Gd * e);
            if (crope && (grid == GRID_STAGGERED || dec->ldims[L].multirate))   /* entry (j, g) at o_g + jS (or j S_g) */
                be->rope(be->ctx, lc->ck, crope, nW * G, 1, d, r, nW * G, 1, 0);
            else if (r > 0) be->rope(be->ctx, lc->ck, dec->rope_tab, nW, G, d, r, nW, S, 0);
        }
        if (lc->ik && nW > 0) {   /* the indexer: its keys straight into the cache, the prompt's top-k */
            CompShape is = cs;
            is.G = 1; is.d = is.channels = (int)dI; is.gate = GATE_VECTOR;
            be->matmul_fwd(be->ctx, i_q, a, Wt(dec, ix->iq), n, (int)(HI * dI), D, 0);
            be->matmul_fwd(be->ctx, i_w, a, Wt(dec, ix->iw), n, (int)HI, D, 0);
            be->compressor_fwd(be->ctx, &is, i_entry, i_alpha, i_payload, NULL, a, Wt(dec, ix->igate_w), Wt(dec, ix->igate_b),
                               Wt(dec, ix->ipayload), NULL);
            be->rmsnorm_fwd(be->ctx, lc->ik, i_rstd, i_entry, Wt(dec, ix->iknorm), nW, (int)dI, eps);
            IndexerShape ishape = {.B = 1, .T = n, .nW = nW, .W = W, .S = S, .o = dims_grid_offset(&dec->ldims[L], 0),
                                   .HI = (int)HI, .dI = (int)dI,
                                   .topk = lcf->indexer_topk};
            be->indexer_scores(be->ctx, &ishape, i_score, i_q, i_w, lc->ik);
            be->indexer_select(be->ctx, &ishape, i_sel, i_score);
            if (!model_indexer_dense(dec->m)) as.entry_select = i_sel;
        }
        be->attention_fwd(be->ctx, &as, attn, lse, q, k, v, nW ? lc->ck : NULL, nW ? (lc->cv ? lc->cv : lc->ck) : NULL,
                          model_master_weight(dec->m, ix->sink));
        for (int p = n - R > 0 ? n - R : 0; p < n && R > 0; p++) {
            be->copy(be->ctx, row(lc->k, p % R, Gd, e), row(k, p, Gd, e), Gd * e);
            be->copy(be->ctx, row(lc->v, p % R, Gd, e), row(v, p, Gd, e), Gd * e);
        }
        if (compressed)
            for (int p = n - W > 0 ? n - W : 0; p < n; p++) be->copy(be->ctx, row(lc->inputs, p % W, D, e), row((act_t *)ca, p, D, e), D * e);
        be->copy(be->ctx, x_mid, x, N * D * e);
        be->matmul_fwd(be->ctx, x_mid, attn, Wt(dec, ix->o), n, D, H * d, 1);
        be->rmsnorm_fwd(be->ctx, mn, rstd, x_mid, Wt(dec, ix->post_norm), n, D, eps);
        be->matmul_fwd(be->ctx, g, mn, Wt(dec, ix->gate), n, F, D, 0);
        be->matmul_fwd(be->ctx, u, mn, Wt(dec, ix->up), n, F, D, 0);
        be->swiglu_fwd(be->ctx, h, g, u, N * F);
        be->copy(be->ctx, x, x_mid, N * D * e);
        be->matmul_fwd(be->ctx, x, h, Wt(dec, ix->down), n, D, F, 1);
    }
    dec->pos = n;
    if (logits) {
        be->rmsnorm_fwd(be->ctx, dec->xf, dec->rstd, row(x, N - 1, D, e), Wt(dec, dec->final_norm), 1, D, eps);
        be->matmul_fwd(be->ctx, dec->logits, dec->xf, Wt(dec, dec->lm_head), 1, c->vocab_size, D, 0);
        be->download_act(be->ctx, logits, dec->logits, c->vocab_size);
    }
done:
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) if (all[i]) be->free(be->ctx, all[i]);
    return rc;
}
