/* Incremental decoding (model/decode.c) against the full-sequence forward (model/model.c), for
 * full attention and every compressed-attention variant of docs/spec.md §2, on tiny models with
 * random weights:
 *   - the logits of every position, fed token by token through the cache, equal the full
 *     forward's (final-norm output @ E_out^T, computed here on the host) to DECODE_REL_TOL
 *     (4e-5) of the position's largest logit;
 *   - a chunked prefill (decoder_prefill_chunk) of P tokens followed by token-by-token decoding
 *     gives the same logits, for prompt lengths around every window phase;
 *   - greedy generation from a prompt equals, step by step, the argmax of the full forward over
 *     the sequence so far (model_argmax_at);
 *   - decoding past the model's seq_len equals the forward of a model built for the longer T;
 *   - the cache bytes measured from the allocations equal the formula, and the formula's figures
 *     for the Qwen3-0.6B shape (and a staggered layout) equal numbers worked out by hand here.
 * grid = staggered (docs/spec.md §2b) with G = 2 and 4 KV heads, local = window and tail, S < W and
 * S = W, tied K/V, vector gates, post-norm, sink, shared compressor: every check above against the
 * full forward (which has each head's own grid); G = 1 staggered equals aligned bit for bit.
 * Multi-rate strides (docs/spec.md §6.4: each KV head's entries complete at its own times j S_g +
 * W - 1) with G = 2 and 4, co-prime strides and stride 1, tail, vector gates, post-norm, tied K/V,
 * sink, shared maps and token shift: the same checks.
 * Learned chunk boundaries (docs/spec.md §6.5: the decoder scores each token, decides with the open chunk's
 * length and pools the chunk from its input ring; a chunked prefill runs token by token) with tail and
 * window, vector, uniform and shared gates, post-norm, tied K/V, sink and token shift: the same checks. */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "model/decode.h"
#include "model/tensors.h"

/* The two paths do the same fp32 arithmetic in different orders (one token's vectors against a
 * batched forward; BLAS kernels chosen at run time for the CPU), with weights of std 0.4. Measured
 * worst: below 1e-5 in the -O3 build, 1.07e-5 (vector gates, position 23) in the sanitizer build
 * on an AVX-512 machine; a wrong cache entry, mask or position gives errors of 1e-2 and more. */
#define DECODE_REL_TOL 4e-5

typedef struct { const char *name; void (*apply)(ModelConfig *c); } Variant;

static void v_full(ModelConfig *c) { (void)c; }
static void v_full_untied_g1(ModelConfig *c) { c->tie_embeddings = 0; c->n_kv_heads = 1; }
static void v_comp(ModelConfig *c) { c->attention = ATTN_COMPRESSED; }
static void v_vector(ModelConfig *c) { v_comp(c); c->gate = GATE_VECTOR; }
static void v_uniform(ModelConfig *c) { v_comp(c); c->gate = GATE_UNIFORM; }
static void v_nobias(ModelConfig *c) { v_comp(c); c->gate_bias = 0; }
static void v_tied(ModelConfig *c) { v_comp(c); c->kv_tied = 1; }
static void v_postnorm(ModelConfig *c) { v_comp(c); c->post_norm = 1; }
static void v_noqk(ModelConfig *c) { v_comp(c); c->qk_norm = 0; }
static void v_rope0(ModelConfig *c) { v_comp(c); c->rope_dims = 0; }
static void v_rope4(ModelConfig *c) { v_comp(c); c->rope_dims = 4; }
static void v_tail(ModelConfig *c) { v_comp(c); c->local = LOCAL_TAIL; }
static void v_deepseek(ModelConfig *c) { v_comp(c); c->compressor = COMPRESSOR_DEEPSEEK; c->window = 4; c->stride = 2; c->kv_tied = 1; }
static void v_sink(ModelConfig *c) { v_comp(c); c->attn_sink = 1; }
static void v_sink_full(ModelConfig *c) { c->attn_sink = 1; }
static void v_overlap(ModelConfig *c) { v_comp(c); c->window = 4; c->stride = 2; }
static void v_overlap_tail(ModelConfig *c) { v_overlap(c); c->local = LOCAL_TAIL; }
static void v_w5s3(ModelConfig *c) { v_comp(c); c->window = 5; c->stride = 3; c->n_local = 1; }
static void v_w2s3_tail(ModelConfig *c) { v_comp(c); c->window = 2; c->stride = 3; c->local = LOCAL_TAIL; }
static void v_w1s1_tail(ModelConfig *c) { v_comp(c); c->window = 1; c->stride = 1; c->local = LOCAL_TAIL; }
static void v_kv1(ModelConfig *c) { v_comp(c); c->n_kv_heads = 1; c->tie_embeddings = 0; }
static void v_overlap_tail_vec(ModelConfig *c) { v_overlap(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1; }
static void v_shared(ModelConfig *c) { v_comp(c); c->compressor = COMPRESSOR_SHARED; }
static void v_shared_tail_vector(ModelConfig *c) { v_shared(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; }
static void v_deepseek_sink_tail(ModelConfig *c) { v_deepseek(c); c->attn_sink = 1; c->local = LOCAL_TAIL; }
/* grid = staggered (docs/spec.md §2b): KV head g's windows start at o_g = floor(gS/G). tu_tiny_config has
 * H = 4 query heads; G = 4 puts one query head on each KV head. */
static void v_stag(ModelConfig *c) { v_comp(c); c->grid = GRID_STAGGERED; }                        /* G2 W4 S4: o = 0, 2 */
static void v_stag_tail(ModelConfig *c) { v_stag(c); c->local = LOCAL_TAIL; }
static void v_stag_g4(ModelConfig *c) { v_stag(c); c->n_kv_heads = 4; }                             /* o = 0, 1, 2, 3 */
static void v_stag_g4_tail(ModelConfig *c) { v_stag_g4(c); c->local = LOCAL_TAIL; }
static void v_stag_g4_s2(ModelConfig *c) { v_stag_g4(c); c->window = 4; c->stride = 2; }            /* S < W: o = 0, 0, 1, 1 */
static void v_stag_g4_s2_tail_vec_tied(ModelConfig *c) {
    v_stag_g4_s2(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->kv_tied = 1;
}
static void v_stag_w5s3_tail_vec(ModelConfig *c) {                                                  /* G2: o = 0, 1 */
    v_stag(c); c->window = 5; c->stride = 3; c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1;
}
static void v_stag_tied_sink(ModelConfig *c) { v_stag(c); c->kv_tied = 1; c->attn_sink = 1; }
static void v_stag_g4_shared_tail(ModelConfig *c) { v_stag_g4_tail(c); c->compressor = COMPRESSOR_SHARED; }
static void v_stag_g1(ModelConfig *c) { v_kv1(c); c->grid = GRID_STAGGERED; }                      /* = aligned */

/* layer schedules (docs/spec.md §5): one kind per layer, the kinds' own W/S/gates */
static void v_sched_window(ModelConfig *c) { tu_schedule(c, 2, "window*2"); }
static void v_sched_hca(ModelConfig *c) { tu_schedule(c, 2, "hca,hca"); c->kv_tied = 1; c->attn_sink = 1; }
static void v_sched_mix(ModelConfig *c) { tu_schedule(c, 3, "window,csa,hca"); c->kv_tied = 1; c->attn_sink = 1; }
static void v_sched_mix_base(ModelConfig *c) { v_tail(c); tu_schedule(c, 4, "compressed,full,window,hca"); }
static void v_sched_mix_stag(ModelConfig *c) { v_stag(c); tu_schedule(c, 3, "hca,compressed,window"); c->post_norm = 1; }
/* the lightning indexer (docs/spec.md §5.4): its key cache and per-step top-k against the forward's */
static void v_sched_indexer(ModelConfig *c) { v_sched_mix(c); c->csa_topk = 2; c->indexer_heads = 2; c->indexer_dim = 4; }
static void v_sched_indexer3(ModelConfig *c) { tu_schedule(c, 2, "csa,csa"); c->csa_topk = 3; c->indexer_heads = 3; c->indexer_dim = 8; }
/* docs/spec.md §6.3: the compressor reads a_t + M a_{t-1} (the decoder keeps a_{t-1}) */
static void v_ts(ModelConfig *c) { v_comp(c); c->token_shift = 1; }
static void v_ts_overlap_tail_vec(ModelConfig *c) { v_overlap_tail_vec(c); c->token_shift = 1; }
static void v_ts_deepseek_sink_tail(ModelConfig *c) { v_deepseek_sink_tail(c); c->token_shift = 1; }
static void v_ts_stag_g4_tail(ModelConfig *c) { v_stag_g4_tail(c); c->token_shift = 1; }
static void v_ts_w1s1_tail(ModelConfig *c) { v_w1s1_tail(c); c->token_shift = 1; }


static const Variant variants[] = {
    {"full", v_full}, {"full_untied_kv1", v_full_untied_g1}, {"full_sink", v_sink_full},
    {"scalar", v_comp}, {"vector", v_vector}, {"uniform", v_uniform}, {"no_gate_bias", v_nobias},
    {"kv_tied", v_tied}, {"post_norm", v_postnorm}, {"no_qk_norm", v_noqk}, {"rope0", v_rope0},
    {"rope4", v_rope4}, {"tail", v_tail}, {"deepseek", v_deepseek}, {"attn_sink", v_sink},
    {"overlap_w4s2", v_overlap}, {"overlap_w4s2_tail", v_overlap_tail}, {"w5s3_nlocal1", v_w5s3},
    {"w2s3_tail", v_w2s3_tail}, {"w1s1_tail", v_w1s1_tail}, {"kv1_untied", v_kv1},
    {"overlap_tail_vector_postnorm", v_overlap_tail_vec}, {"deepseek_sink_tail", v_deepseek_sink_tail},
    {"shared", v_shared}, {"shared_tail_vector", v_shared_tail_vector},
    {"staggered_g2", v_stag}, {"staggered_g2_tail", v_stag_tail}, {"staggered_g4", v_stag_g4},
    {"staggered_g4_tail", v_stag_g4_tail}, {"staggered_g4_w4s2", v_stag_g4_s2},
    {"staggered_g4_w4s2_tail_vector_tied", v_stag_g4_s2_tail_vec_tied}, {"staggered_g2_w5s3_tail_vector_postnorm", v_stag_w5s3_tail_vec},
    {"staggered_g2_tied_sink", v_stag_tied_sink}, {"staggered_g4_shared_tail", v_stag_g4_shared_tail},
    {"staggered_g1", v_stag_g1},
    {"schedule_window", v_sched_window}, {"schedule_hca_tied_sink", v_sched_hca},
    {"schedule_window_csa_hca", v_sched_mix}, {"schedule_compressed_tail_full_window_hca", v_sched_mix_base},
    {"schedule_hca_staggered_window_postnorm", v_sched_mix_stag},
    {"schedule_window_csa_hca_indexer_top2", v_sched_indexer}, {"schedule_csa_csa_indexer_top3", v_sched_indexer3},
    {"token_shift", v_ts}, {"token_shift_overlap_tail_vector_postnorm", v_ts_overlap_tail_vec},
    {"token_shift_deepseek_sink_tail", v_ts_deepseek_sink_tail}, {"token_shift_staggered_g4_tail", v_ts_stag_g4_tail},
    {"token_shift_w1s1_tail", v_ts_w1s1_tail},
    {"multirate_4_2", tu_mr}, {"multirate_g4_4_3_2_1_tail_vector", tu_mr_g4_tail_vec},
    {"multirate_w5_5_3_postnorm_tied_sink", tu_mr_w5_pn_tied}, {"multirate_g4_2_4_4_3_shared_tail", tu_mr_g4_shared_tail},
    {"multirate_token_shift_rope4", tu_mr_ts_rope4},
    {"multirate_staggered_g4_w5_4_3_2_1_tail_vector", tu_mr_stag_g4_tail}, {"multirate_staggered_w5_5_3_postnorm_tied_sink", tu_mr_stag_w5},
    /* docs/spec.md §6.5: learned chunk boundaries, W 4 / S 2 (boundary.bias -0.5: natural and forced boundaries) */
    {"boundaries_tail", tu_bd_tail}, {"boundaries_vector_window_postnorm", tu_bd_vec_pn}, {"boundaries_tied_sink", tu_bd_tied_sink},
    {"boundaries_uniform", tu_bd_uniform}, {"boundaries_token_shift_rope4", tu_bd_ts}, {"boundaries_shared_tail", tu_bd_shared},
};

/* host logits [T, V] = hidden [T, D] @ E_out^T from the model's host parameters */
static void host_logits(Model *m, const float *hidden, int T, float *logits) {
    const ModelConfig *c = model_config(m);
    const TensorTable *tt = model_tensors(m);
    float *p = malloc(sizeof(float) * tt->n_floats);
    model_download_params(m, p);
    int i = tensor_table_find(tt, c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    const float *E = p + tt->t[i].offset;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < c->vocab_size; v++) {
            double s = 0;
            for (int k = 0; k < c->d_model; k++) s += (double)hidden[(size_t)t * c->d_model + k] * E[(size_t)v * c->d_model + k];
            logits[(size_t)t * c->vocab_size + v] = (float)s;
        }
    free(p);
}

/* max over positions of max_v |dec - ref| / max_v |ref| */
static double rel_err(const float *dec, const float *ref, int T, int V, int *worst_t) {
    double worst = 0;
    *worst_t = -1;
    for (int t = 0; t < T; t++) {
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) {
            double a = fabs((double)dec[(size_t)t * V + v] - ref[(size_t)t * V + v]), b = fabs(ref[(size_t)t * V + v]);
            if (a > num) num = a;
            if (b > den) den = b;
        }
        double r = den > 0 ? num / den : num;
        if (r > worst || r != r) { worst = r; *worst_t = t; }
    }
    return worst;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

int main(void) {
    const Backend *be = backend_cpu(2);
    const int T = 40, V = 23, D = 16;
    char name[256], err[ERR_LEN];
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        ModelConfig cfg = tu_tiny_config();
        variants[vi].apply(&cfg);
        const char *vn = variants[vi].name;
        Model *m = model_create(&cfg, be, 1, T, err);
        snprintf(name, sizeof name, "decode %s: model builds", vn);
        if (!check(m != NULL, name, "%s", err)) continue;
        tu_random_params(m, 11 + vi, 0.4);
        if (model_has_boundaries(m)) tu_set_boundary_bias(m, -0.5f);
        int32_t tok[T];
        tu_random_tokens(tok, T, V, 5 + vi);
        float *hidden = malloc(sizeof(float) * T * D), *ref = malloc(sizeof(float) * T * V),
              *got = malloc(sizeof(float) * T * V);
        model_debug_final_hidden(m, tok, 1, hidden);
        host_logits(m, hidden, T, ref);

        Decoder *dec = decoder_create(m, T, err);
        snprintf(name, sizeof name, "decode %s: decoder builds", vn);
        if (!check(dec != NULL, name, "%s", err)) { model_free(m); continue; }
        int rc = 0;
        for (int t = 0; t < T && !rc; t++) rc = decoder_step(dec, tok[t], got + (size_t)t * V, err);
        int wt = -1;
        double r = rc ? INFINITY : rel_err(got, ref, T, V, &wt);
        snprintf(name, sizeof name, "decode %s: incremental logits = full forward at all %d positions (%g rel)", vn, T, DECODE_REL_TOL);
        printf("# %s: relative error %.3g\n", name, r);
        check(!rc && r <= DECODE_REL_TOL, name, "%s relative error %.3g at position %d", rc ? err : "", r, wt);

        snprintf(name, sizeof name, "decode %s: a full context refuses one more token", vn);
        check(decoder_step(dec, tok[0], NULL, err) != 0, name, "step %d accepted", T);

        /* chunked prefill of P tokens, then token by token: every logit from P-1 on */
        const int chunks[] = {1, 6, 13, 23, T};
        for (int ci = 0; ci < 5; ci++) {
            const int P = chunks[ci];
            decoder_reset(dec);
            rc = decoder_prefill_chunk(dec, tok, P, got + (size_t)(P - 1) * V, err);
            for (int t = P; t < T && !rc; t++) rc = decoder_step(dec, tok[t], got + (size_t)t * V, err);
            r = rc ? INFINITY : rel_err(got + (size_t)(P - 1) * V, ref + (size_t)(P - 1) * V, T - P + 1, V, &wt);
            snprintf(name, sizeof name, "decode %s: chunked prefill of %d tokens then decoding = full forward (%g rel)", vn, P, DECODE_REL_TOL);
            printf("# %s: relative error %.3g\n", name, r);
            check(!rc && r <= DECODE_REL_TOL, name, "%s relative error %.3g at position %d", rc ? err : "", r, wt + P - 1);
        }

        /* cache accounting: measured allocations = formula */
        DecodeCacheLayout lay;
        decode_cache_layout(&cfg, T, sizeof(float), &lay);
        snprintf(name, sizeof name, "decode %s: cache bytes measured = formula", vn);
        check(decoder_cache_bytes(dec) == lay.total_bytes && lay.total_bytes == decode_cache_measure(&cfg, be, T),
              name, "measured %zu, measure() %zu, formula %zu", decoder_cache_bytes(dec),
              decode_cache_measure(&cfg, be, T), lay.total_bytes);

        /* greedy generation from a 5-token prompt vs argmax of the full forward step by step */
        decoder_reset(dec);
        int32_t seq[T];
        memcpy(seq, tok, sizeof(int32_t) * 5);
        float lg[64];
        rc = decoder_prefill(dec, seq, 5, lg, err);
        int bad = -1;
        for (int n = 5; n < T && !rc; n++) {
            seq[n] = argmax(lg, V);
            int32_t padded[T], want;
            memset(padded, 0, sizeof padded);
            memcpy(padded, seq, sizeof(int32_t) * n);
            int pos = n - 1;
            model_argmax_at(m, padded, 1, &pos, &want);
            if (want != seq[n] && bad < 0) bad = n;
            if (n + 1 < T) rc = decoder_step(dec, seq[n], lg, err);
        }
        snprintf(name, sizeof name, "decode %s: greedy generation = argmax of the full forward at every step", vn);
        check(!rc && bad < 0, name, "%s first mismatch at position %d", rc ? err : "", bad);
        decoder_free(dec);

        /* past the training length: a model built for T2 = 2T is the reference */
        if (vi % 4 == 3 || !strcmp(vn, "tail") || !strcmp(vn, "full") || !strcmp(vn, "staggered_g4_tail")) {
            const int T2 = 2 * T;
            Model *m2 = model_create(&cfg, be, 1, T2, err);
            float *params = malloc(sizeof(float) * model_tensors(m)->n_floats);
            model_download_params(m, params);
            model_upload_params(m2, params);
            int32_t tok2[2 * T];
            tu_random_tokens(tok2, T2, V, 99 + vi);
            float *hid2 = malloc(sizeof(float) * T2 * D), *ref2 = malloc(sizeof(float) * T2 * V),
                  *got2 = malloc(sizeof(float) * T2 * V);
            model_debug_final_hidden(m2, tok2, 1, hid2);
            host_logits(m2, hid2, T2, ref2);
            Decoder *d2 = decoder_create(m, T2, err);      /* the T-model's weights, 2T positions */
            rc = 0;
            for (int t = 0; t < T2 && !rc; t++) rc = decoder_step(d2, tok2[t], got2 + (size_t)t * V, err);
            r = rc ? INFINITY : rel_err(got2, ref2, T2, V, &wt);
            snprintf(name, sizeof name, "decode %s: decoding past seq_len %d to %d = forward of a T=%d model", vn, T, T2, T2);
            printf("# %s: relative error %.3g\n", name, r);
            check(!rc && r <= DECODE_REL_TOL, name, "%s relative error %.3g at position %d", rc ? err : "", r, wt);
            decoder_free(d2);
            model_free(m2);
            free(params); free(hid2); free(ref2); free(got2);
        }
        free(hidden); free(ref); free(got);
        model_free(m);
    }

    /* the formula at the Qwen3-0.6B shape (28 layers, D 1024, G 8, d 128), bf16, worked by hand:
     * full, 32768 tokens: 2 (K,V) * 32768 * 8 * 128 * 2 B = 128 MiB per layer;
     * W8/S8, n_local 16, 32768 tokens: 4096 entries * 1024 * 2 B * 2 (K,V) = 16 MiB
     *   + raw 2 * 16 * 1024 * 2 B = 64 KiB + inputs 8 * 1024 * 2 B = 16 KiB per layer. */
    ModelConfig q3;
    Config full_cfg;
    config_defaults(&full_cfg);
    q3 = full_cfg.model;
    DecodeCacheLayout lf, lc;
    q3.attention = ATTN_FULL;
    decode_cache_layout(&q3, 32768, 2, &lf);
    check(lf.layer_bytes == 128u << 20 && lf.total_bytes == 28 * (128ull << 20), "decode: Qwen3-0.6B full cache at 32K",
          "per layer %zu, total %zu", lf.layer_bytes, lf.total_bytes);
    q3.attention = ATTN_COMPRESSED; q3.window = 8; q3.stride = 8; q3.local = LOCAL_WINDOW; q3.n_local = 16;
    decode_cache_layout(&q3, 32768, 2, &lc);
    check(lc.layer_bytes == (16u << 20) + (64u << 10) + (16u << 10) && lc.entry_cap == 4096,
          "decode: Qwen3-0.6B W8/S8 cache at 32K", "per layer %zu (%d entries)", lc.layer_bytes, lc.entry_cap);

    /* staggered cache layout, worked by hand: G 4, W4/S4, tail, 40 tokens: o_g = 0, 1, 2, 3;
     * windows per head (40 - o - 4) / 4 + 1 = 10, 9, 9, 9 -> 37 entries in 10 x 4 slots; the tail
     * ring holds the most raw tokens a head sees: head 3 before its first window (t = 5: 0..5) = 6. */
    ModelConfig st = tu_tiny_config();
    v_stag_g4_tail(&st);
    DecodeCacheLayout ls;
    decode_cache_layout(&st, 40, 4, &ls);
    check(ls.entry_cap == 10 && ls.head_entries == 37 && ls.ring_cap == 6, "decode: staggered G4 W4/S4 tail layout at 40 tokens",
          "entry_cap %d (want 10), head_entries %ld (want 37), ring_cap %d (want 6)", ls.entry_cap, ls.head_entries, ls.ring_cap);
    st.local = LOCAL_WINDOW;
    decode_cache_layout(&st, 40, 4, &ls);
    check(ls.ring_cap == st.n_local && ls.head_entries == 37, "decode: staggered G4 local = window keeps the n_local ring",
          "ring_cap %d (want %d), head_entries %ld", ls.ring_cap, st.n_local, ls.head_entries);
    v_comp(&st); st.grid = GRID_ALIGNED; st.local = LOCAL_TAIL;
    decode_cache_layout(&st, 40, 4, &ls);
    check(ls.entry_cap == 10 && ls.head_entries == 40 && ls.ring_cap == 3, "decode: aligned G4 W4/S4 tail layout at 40 tokens",
          "entry_cap %d, head_entries %ld, ring_cap %d (want 10, 40, 3)", ls.entry_cap, ls.head_entries, ls.ring_cap);

    /* G = 1: staggered decodes bit for bit as aligned (o_0 = 0), same parameters and tokens */
    {
        ModelConfig ca = tu_tiny_config(), cs;
        v_kv1(&ca);
        ca.local = LOCAL_TAIL;
        cs = ca;
        cs.grid = GRID_STAGGERED;
        Model *ma = model_create(&ca, be, 1, T, err), *ms = model_create(&cs, be, 1, T, err);
        int same = 0;
        if (ma && ms) {
            tu_random_params(ma, 77, 0.4);
            float *params = malloc(sizeof(float) * model_tensors(ma)->n_floats);
            model_download_params(ma, params);
            model_upload_params(ms, params);
            int32_t tok[T];
            tu_random_tokens(tok, T, V, 78);
            float *la = malloc(sizeof(float) * T * V), *lb = malloc(sizeof(float) * T * V);
            Decoder *da = decoder_create(ma, T, err), *ds = decoder_create(ms, T, err);
            int rc = !da || !ds;
            for (int t = 0; t < T && !rc; t++)
                rc = decoder_step(da, tok[t], la + (size_t)t * V, err) || decoder_step(ds, tok[t], lb + (size_t)t * V, err);
            same = !rc && memcmp(la, lb, sizeof(float) * T * V) == 0;
            decoder_free(da); decoder_free(ds);
            free(params); free(la); free(lb);
        }
        check(same, "decode: grid = staggered with 1 KV head decodes bit for bit as aligned (tail)", "%s", err);
        model_free(ma); model_free(ms);
    }
    return check_failures ? 1 : 0;
}
