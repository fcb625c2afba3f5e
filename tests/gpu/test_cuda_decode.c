/* Incremental decoding (model/decode.c) on the CUDA backend against the full-sequence forward of
 * the CPU backend (fp32), for full attention and the compressed-attention variants of docs/spec.md
 * section 2, grid = staggered of section 2b (per-head entries, RoPE positions and tails) and the
 * multi-rate strides of section 6.4 (model.head_strides: a stride per KV head) and the learned chunk
 * boundaries of section 6.5 (the decoder decides and pools each chunk at its boundary): the
 * same random parameters (matrices N(0, 0.05), norms 1 + N(0, 0.2), gate biases
 * and sinks N(0, 1)) and tokens; the CUDA decoder is fed token by token and its logits at every
 * position are compared with the CPU forward's (final-norm output @ E_out^T on the host); the same
 * after a chunked prefill of 13 tokens (decoder_prefill_chunk: the training forward's kernels).
 * Tolerance (bf16): max_v |dec - ref| / max_v |ref| <= 5e-2 at every position. Measured in the
 * CPU emulation of the CUDA backend (tests/cuemu): 0.8-2.5% over the variants, the same size as
 * the CUDA backend's own full forward against the CPU's (printed beside it as "# ..." lines),
 * while a logic error (a wrong visible set, a missing entry or sink, a wrong RoPE position)
 * gives errors of order 1.
 * Also: the cache bytes measured from the CUDA allocations equal the formula with 2-byte
 * elements. Without a GPU (or a CUDA build) it prints one skip line per variant. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "model/decode.h"
#include "model/tensors.h"

typedef struct {
    const char *name;
    void (*apply)(ModelConfig *c);
    const char *zero;   /* tensors whose name contains it start at 0 (NULL: none) */
} Variant;

static void v_full(ModelConfig *c) { (void)c; }
static void v_full_kv1_sink(ModelConfig *c) { c->tie_embeddings = 0; c->n_kv_heads = 1; c->attn_sink = 1; }
static void v_comp(ModelConfig *c) { c->attention = ATTN_COMPRESSED; }
static void v_vector_post(ModelConfig *c) { v_comp(c); c->gate = GATE_VECTOR; c->post_norm = 1; }
static void v_uniform(ModelConfig *c) { v_comp(c); c->gate = GATE_UNIFORM; }
static void v_nobias_tied(ModelConfig *c) { v_comp(c); c->gate_bias = 0; c->kv_tied = 1; }
static void v_noqk_rope4(ModelConfig *c) { v_comp(c); c->qk_norm = 0; c->rope_dims = 4; }
static void v_rope0(ModelConfig *c) { v_comp(c); c->rope_dims = 0; }
static void v_tail_sink(ModelConfig *c) { v_comp(c); c->local = LOCAL_TAIL; c->attn_sink = 1; }
static void v_deepseek(ModelConfig *c) { v_comp(c); c->compressor = COMPRESSOR_DEEPSEEK; c->window = 4; c->stride = 2; c->kv_tied = 1; }
static void v_overlap_tail_vec(ModelConfig *c) { v_comp(c); c->window = 4; c->stride = 2; c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1; }
static void v_w5s3(ModelConfig *c) { v_comp(c); c->window = 5; c->stride = 3; }
static void v_kv1(ModelConfig *c) { v_comp(c); c->n_kv_heads = 1; c->tie_embeddings = 0; }
/* grid = staggered (docs/spec.md §2b): per-head entry counts, RoPE positions o_g + jS and tails */
static void v_stag_tail_sink(ModelConfig *c) { v_tail_sink(c); c->grid = GRID_STAGGERED; }          /* G2 W4/S4: o = 0, 2 */
static void v_stag_g4_w4s2_tail_vec_tied(ModelConfig *c) {                                          /* o = 0, 0, 1, 1 */
    v_comp(c); c->grid = GRID_STAGGERED; c->n_kv_heads = 4; c->window = 4; c->stride = 2; c->local = LOCAL_TAIL;
    c->gate = GATE_VECTOR; c->kv_tied = 1;
}
static void v_stag_g4(ModelConfig *c) { v_comp(c); c->grid = GRID_STAGGERED; c->n_kv_heads = 4; }   /* o = 0, 1, 2, 3 */

/* docs/spec.md §6.3: token shift (the decoder's compressor input a_t + M a_{t-1}) */
static void v_ts(ModelConfig *c) { v_comp(c); c->token_shift = 1; }
/* docs/spec.md §5.4: csa layers on DeepSeek-V4's geometry (o_base = S - W: the partial entry 0 the
 * decoder writes at t = o_base + W - 1 from the present inputs); no indexer (CPU only) */
static void v_sched_csa(ModelConfig *c) { tu_schedule(c, 2, "csa,window"); c->kv_tied = 1; c->attn_sink = 1; c->csa_topk = 0; }
static void v_sched_csa_scalar_s1(ModelConfig *c) {
    tu_schedule(c, 2, "full,csa"); c->csa_topk = 0; c->csa_gate = GATE_SCALAR; c->csa_compressor = COMPRESSOR_PAPER;
    c->csa_window = 4; c->csa_stride = 1; c->post_norm = 1;
}
static void v_ts_overlap_tail_vec(ModelConfig *c) { v_overlap_tail_vec(c); c->token_shift = 1; }

/* docs/spec.md §5.4: a window,csa,hca stack with the lightning indexer, top-3. Its weights_proj
 * starts at 0, so every score is 0 and the top-3 is each query's first 3 visible entries on both
 * backends (the tie rule): with random indexer weights the GPU's bf16 scores can order two
 * near-equal entries differently from the CPU's fp32 ones, a different model rather than a
 * rounding error (tests/gpu/test_cuda_model_parity.c). A decoder that ignored the selection sees
 * up to 14 entries instead of 3: an error of order 1. */
static void v_csa_indexer(ModelConfig *c) {
    tu_schedule(c, 3, "window,csa,hca");
    c->kv_tied = 1; c->attn_sink = 1;
    c->csa_topk = 3; c->indexer_heads = 2; c->indexer_dim = 4;
}

/* docs/spec.md §6.4, multi-rate strides (model.stride = the smallest S_g): per-head entry times
 * t = j S_g + W - 1, tails and RoPE positions j S_g; staggered 4,3 (o = 0, 1); a stride-1 head */
static void v_mr42_tail_sink(ModelConfig *c) { v_tail_sink(c); c->stride = 2; snprintf(c->head_strides, sizeof c->head_strides, "4,2"); }
static void v_mr43_stag(ModelConfig *c) { v_comp(c); c->grid = GRID_STAGGERED; c->stride = 3; snprintf(c->head_strides, sizeof c->head_strides, "4,3"); }
static void v_mr4321_tail_vec(ModelConfig *c) {
    v_comp(c); c->n_kv_heads = 4; c->stride = 1; c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1;
    snprintf(c->head_strides, sizeof c->head_strides, "4,3,2,1");
}

static const Variant variants[] = {
    {"full", v_full, NULL}, {"full_kv1_sink_untied", v_full_kv1_sink, NULL}, {"scalar", v_comp, NULL},
    {"vector_postnorm", v_vector_post, NULL}, {"uniform", v_uniform, NULL}, {"nobias_kvtied", v_nobias_tied, NULL},
    {"no_qk_norm_rope4", v_noqk_rope4, NULL}, {"rope0", v_rope0, NULL}, {"tail_sink", v_tail_sink, NULL}, {"deepseek", v_deepseek, NULL},
    {"overlap_tail_vector_postnorm", v_overlap_tail_vec, NULL}, {"w5s3", v_w5s3, NULL}, {"kv1_untied", v_kv1, NULL},
    {"staggered_g2_tail_sink", v_stag_tail_sink, NULL}, {"staggered_g4_w4s2_tail_vector_tied", v_stag_g4_w4s2_tail_vec_tied, NULL},
    {"staggered_g4", v_stag_g4, NULL},
    {"token_shift", v_ts, NULL}, {"token_shift_overlap_tail_vector_postnorm", v_ts_overlap_tail_vec, NULL},
    {"schedule_csa_v4_geometry_window", v_sched_csa, NULL}, {"schedule_full_csa_scalar_s1_postnorm", v_sched_csa_scalar_s1, NULL},
    {"csa_indexer_top3_scores_tied", v_csa_indexer, ".indexer.weights_proj."},
    {"multirate_4_2_tail_sink", v_mr42_tail_sink, NULL}, {"multirate_4_3_staggered", v_mr43_stag, NULL},
    {"multirate_4_3_2_1_tail_vector_postnorm", v_mr4321_tail_vec, NULL},
    /* learned chunk boundaries (docs/spec.md §6.5): tests/model_testutil.h's tu_bd* (W4, S2) */
    {"learned_boundaries", tu_bd, NULL}, {"learned_boundaries_tail", tu_bd_tail, NULL},
    {"learned_boundaries_vector_postnorm", tu_bd_vec_pn, NULL}, {"learned_boundaries_kvtied_sink", tu_bd_tied_sink, NULL},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

#ifndef PHASELAB_CUDA
int main(void) {
    char name[128];
    for (int i = 0; i < N_VARIANTS; i++) {
        snprintf(name, sizeof name, "cuda_decode %s", variants[i].name);
        check_skip(name, "no GPU (built without CUDA)");
    }
    return 0;
}
#else
int main(void) {
    char err[ERR_LEN] = "";
    const Backend *cpu = backend_cpu(0), *gpu = backend_cuda(0, err);
    char name[192];
    if (!gpu) {
        for (int i = 0; i < N_VARIANTS; i++) {
            snprintf(name, sizeof name, "cuda_decode %s", variants[i].name);
            check_skip(name, "no GPU");
        }
        fprintf(stderr, "(%s)\n", err);
        return 0;
    }
    const int T = 32;
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        ModelConfig cfg = tu_tiny_config();
        variants[vi].apply(&cfg);
        const int V = cfg.vocab_size, D = cfg.d_model;
        const char *vn = variants[vi].name;
        Model *mc = model_create(&cfg, cpu, 1, T, err);
        Model *mg = mc ? model_create(&cfg, gpu, 1, T, err) : NULL;
        snprintf(name, sizeof name, "cuda_decode %s: models build", vn);
        if (!check(mc && mg, name, "%s", err)) { model_free(mc); continue; }
        tu_random_params(mc, 500 + vi, 0.05);
        const TensorTable *tt = model_tensors(mc);
        float *host = calloc(tt->n_floats, sizeof(float));
        model_download_params(mc, host);
        if (variants[vi].zero) {
            for (int i = 0; i < tt->n; i++)
                if (strstr(tt->t[i].name, variants[vi].zero)) memset(host + tt->t[i].offset, 0, tt->t[i].numel * sizeof(float));
            model_upload_params(mc, host);
        }
        model_upload_params(mg, host);
        int32_t tok[64];
        tu_random_tokens(tok, T, V, 40 + vi);
        float *hid = malloc(sizeof(float) * T * D), *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
        model_debug_final_hidden(mc, tok, 1, hid);
        const float *E = host + tt->t[tensor_table_find(tt, cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight")].offset;
        for (int t = 0; t < T; t++)
            for (int v = 0; v < V; v++) {
                double s = 0;
                for (int k = 0; k < D; k++) s += (double)hid[(size_t)t * D + k] * E[(size_t)v * D + k];
                ref[(size_t)t * V + v] = (float)s;
            }
        Decoder *dec = decoder_create(mg, T, err);
        snprintf(name, sizeof name, "cuda_decode %s: decoder builds", vn);
        if (check(dec != NULL, name, "%s", err)) {
            int rc = 0;
            for (int t = 0; t < T && !rc; t++) rc = decoder_step(dec, tok[t], got + (size_t)t * V, err);
            double worst = 0;
            int wt = -1;
            for (int t = 0; t < T && !rc; t++) {
                double num = 0, den = 0;
                for (int v = 0; v < V; v++) {
                    double a = fabs((double)got[(size_t)t * V + v] - ref[(size_t)t * V + v]), b = fabs(ref[(size_t)t * V + v]);
                    if (a > num || a != a) num = a;
                    if (b > den) den = b;
                }
                double r = num / (den > 0 ? den : 1);
                if (!(r <= worst)) { worst = r; wt = t; }
            }
            snprintf(name, sizeof name, "cuda_decode %s: incremental logits = CPU full forward at all %d positions (bf16, 5e-2)", vn, T);
            check(!rc && worst <= 5e-2, name, "%s relative error %.3g at position %d", rc ? err : "", worst, wt);
            /* for scale: the CUDA full forward against the CPU's */
            float *hg = malloc(sizeof(float) * T * D);
            model_debug_final_hidden(mg, tok, 1, hg);
            double fw = 0;
            for (int t = 0; t < T; t++) {
                double num = 0, den = 0;
                for (int v = 0; v < V; v++) {
                    double s = 0;
                    for (int k = 0; k < D; k++) s += (double)hg[(size_t)t * D + k] * E[(size_t)v * D + k];
                    double a = fabs(s - ref[(size_t)t * V + v]), b = fabs(ref[(size_t)t * V + v]);
                    if (a > num) num = a;
                    if (b > den) den = b;
                }
                if (num / (den > 0 ? den : 1) > fw) fw = num / (den > 0 ? den : 1);
            }
            free(hg);
            printf("# cuda_decode %s: worst relative logit error: decoder %.3g, CUDA full forward %.3g\n", vn, worst, fw);
            /* chunked prefill of 13 tokens (the training forward's kernels over the prompt), then steps */
            decoder_reset(dec);
            const int P = 13;
            rc = decoder_prefill_chunk(dec, tok, P, got + (size_t)(P - 1) * V, err);
            for (int t = P; t < T && !rc; t++) rc = decoder_step(dec, tok[t], got + (size_t)t * V, err);
            double wc = 0;
            for (int t = P - 1; t < T && !rc; t++) {
                double num = 0, den = 0;
                for (int v = 0; v < V; v++) {
                    double a = fabs((double)got[(size_t)t * V + v] - ref[(size_t)t * V + v]), b = fabs(ref[(size_t)t * V + v]);
                    if (a > num || a != a) num = a;
                    if (b > den) den = b;
                }
                double r = num / (den > 0 ? den : 1);
                if (!(r <= wc)) wc = r;
            }
            snprintf(name, sizeof name, "cuda_decode %s: chunked prefill of %d tokens then decoding = CPU forward (bf16, 5e-2)", vn, P);
            check(!rc && wc <= 5e-2, name, "%s relative error %.3g", rc ? err : "", wc);
            DecodeCacheLayout lay;
            decode_cache_layout(&cfg, T, 2, &lay);
            snprintf(name, sizeof name, "cuda_decode %s: cache bytes measured = formula (bf16)", vn);
            check(decoder_cache_bytes(dec) == lay.total_bytes, name, "measured %zu, formula %zu", decoder_cache_bytes(dec),
                  lay.total_bytes);
            decoder_free(dec);
        }
        free(host); free(hid); free(ref); free(got);
        model_free(mc);
        model_free(mg);
    }
    return check_failures ? 1 : 0;
}
#endif
