/* Finite-difference gradient check of every parameter tensor (the input embedding included)
 * for full attention and every compressed-attention variant of docs/spec.md §2, on tiny
 * shapes. For each tensor and two random unit directions u, the analytic directional derivative
 * g.u must match (L(p + eps u) - L(p - eps u)) / (2 eps) to 2% (+ a small absolute floor for
 * fp32 noise): a wrong sign or a missed term in any tensor's gradient fails.
 * The remedies of docs/spec.md §2b (compressor = shared, grid = staggered, the gate-coverage
 * penalty) are checked alone and combined with vector gates, tail, S < W, post-norm, tied K/V,
 * 1 and > 1 KV heads; with a penalty lambda the checked objective is
 *   mean cross-entropy + lambda * (sum over sequences of the penalty) * T / (B T - 1)
 * (the gradient model_forward_backward accumulates for loss_scale = 1 / (B T - 1)), its value
 * taken from model_gate_coverage, so the penalty's gradient is checked the same way.
 * The jitter_ variants shift each sequence's grids by its own u_b (docs/spec.md §6.2), alone and
 * on staggered grids, with the penalty too (whose n_b is then per sequence).
 * The multirate_ variants give each KV head its own stride S_g (docs/spec.md §6.4): S and S/2,
 * co-prime strides, stride 1, alone and with tail, vector gates, post-norm, tied K/V, shared maps,
 * token shift and the penalty.
 * Last, the PHASELAB_BF16_RESIDUAL_GRAD switch: a bad value is refused, 1 changes no CPU bit. */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

typedef struct { const char *name; void (*apply)(ModelConfig *c); double lambda; const int32_t *shift; } Variant;
/* docs/spec.md §6.2, phase jitter: per-sequence grid shifts u_b of the B = 2 sequences */
static const int32_t SHIFT_S4[] = {3, 1}, SHIFT_S2[] = {1, 0}, SHIFT_S4B[] = {2, 3};
/* with multi-rate strides u_b is in [0, lcm of the strides) and head g moves by u_b mod S_g: strides 5, 3
 * (lcm 15) shifted by 7 and 13 (heads 2, 1 and 3, 1); strides 4, 3, 2, 1 (lcm 12) by 11 and 5 */
static const int32_t SHIFT_MR15[] = {7, 13}, SHIFT_MR12[] = {11, 5};

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
static void v_kv1(ModelConfig *c) { v_comp(c); c->n_kv_heads = 1; c->tie_embeddings = 0; }
static void v_overlap_tail_vec(ModelConfig *c) { v_overlap(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1; }

/* docs/spec.md §2b */
static void v_shared(ModelConfig *c) { v_comp(c); c->compressor = COMPRESSOR_SHARED; }
static void v_shared_nobias(ModelConfig *c) { v_shared(c); c->gate_bias = 0; }
static void v_shared_vec_tail_pn(ModelConfig *c) { v_shared(c); c->gate = GATE_VECTOR; c->local = LOCAL_TAIL; c->post_norm = 1; }
static void v_shared_overlap_tied(ModelConfig *c) { v_overlap(c); c->compressor = COMPRESSOR_SHARED; c->kv_tied = 1; }
static void v_stag(ModelConfig *c) { v_comp(c); c->grid = GRID_STAGGERED; }
static void v_stag_kv4(ModelConfig *c) { v_stag(c); c->n_kv_heads = 4; }
static void v_stag_kv1(ModelConfig *c) { v_stag(c); c->n_kv_heads = 1; c->tie_embeddings = 0; }
static void v_stag_tail(ModelConfig *c) { v_stag_kv4(c); c->local = LOCAL_TAIL; }
static void v_stag_overlap_vec_pn(ModelConfig *c) { v_overlap(c); c->grid = GRID_STAGGERED; c->n_kv_heads = 4; c->gate = GATE_VECTOR; c->post_norm = 1; }
static void v_stag_overlap_tail_tied(ModelConfig *c) { v_overlap(c); c->grid = GRID_STAGGERED; c->local = LOCAL_TAIL; c->kv_tied = 1; }
static void v_stag_sink_rope4(ModelConfig *c) { v_stag_kv4(c); c->attn_sink = 1; c->rope_dims = 4; }
static void v_stag_shared(ModelConfig *c) { v_stag_kv4(c); c->compressor = COMPRESSOR_SHARED; c->local = LOCAL_TAIL; }
static void v_stag_deepseek(ModelConfig *c) { v_deepseek(c); c->grid = GRID_STAGGERED; }
static void v_cov_vec(ModelConfig *c) { v_vector(c); }
static void v_cov_kv1_tied(ModelConfig *c) { v_kv1(c); c->kv_tied = 1; }
static void v_cov_all(ModelConfig *c) { v_stag_overlap_vec_pn(c); c->compressor = COMPRESSOR_SHARED; c->local = LOCAL_TAIL; }

/* layer schedules (docs/spec.md §5): one kind per layer, the kinds' own W/S/gates */
static void v_sched_window(ModelConfig *c) { tu_schedule(c, 2, "window*2"); }
static void v_sched_hca(ModelConfig *c) { tu_schedule(c, 2, "hca,hca"); c->kv_tied = 1; c->attn_sink = 1; }
static void v_sched_mix(ModelConfig *c) { tu_schedule(c, 3, "window,csa,hca"); c->kv_tied = 1; c->attn_sink = 1; }
static void v_sched_mix_base(ModelConfig *c) { v_tail(c); tu_schedule(c, 4, "compressed,full,window,hca"); }
static void v_sched_mix_stag(ModelConfig *c) { v_stag(c); tu_schedule(c, 3, "hca,compressed,window"); c->post_norm = 1; }
/* csa layers on DeepSeek-V4's geometry (docs/spec.md §5.4, §6.1: o_base = S - W < 0, partial first
 * windows whose masked slots must get no gradient): the defaults (vector gates, deepseek maps, W4/S2
 * in the tiny config: o_base = -2), scalar gates with one map per slot and post-norm at S = 1
 * (o_base = -3: three partial windows), uniform gates with the shared map at W5/S2 (o_base = -3) */
static void v_sched_csa(ModelConfig *c) { tu_schedule(c, 2, "csa*2"); c->kv_tied = 1; c->attn_sink = 1; }
static void v_sched_csa_scalar_s1(ModelConfig *c) {
    tu_schedule(c, 2, "csa,window"); c->csa_gate = GATE_SCALAR; c->csa_compressor = COMPRESSOR_PAPER;
    c->csa_window = 4; c->csa_stride = 1; c->post_norm = 1;
}
static void v_sched_csa_uniform_shared(ModelConfig *c) {
    tu_schedule(c, 2, "full,csa"); c->csa_gate = GATE_UNIFORM; c->csa_compressor = COMPRESSOR_SHARED;
    c->csa_window = 5; c->csa_stride = 2;
}
/* docs/spec.md §6.3: token shift (M random: its gradient and the one it sends to a_{t-1}) */
static void v_ts(ModelConfig *c) { v_comp(c); c->token_shift = 1; }
static void v_ts_overlap_tail_vec(ModelConfig *c) { v_overlap_tail_vec(c); c->token_shift = 1; }
static void v_ts_deepseek(ModelConfig *c) { v_deepseek(c); c->token_shift = 1; }
static void v_ts_stag_shared(ModelConfig *c) { v_stag_shared(c); c->token_shift = 1; }


static const Variant variants[] = {
    {"full", v_full, 0, NULL}, {"full_untied_kv1", v_full_untied_g1, 0, NULL}, {"full_sink", v_sink_full, 0, NULL},
    {"scalar", v_comp, 0, NULL}, {"vector", v_vector, 0, NULL}, {"uniform", v_uniform, 0, NULL}, {"no_gate_bias", v_nobias, 0, NULL},
    {"kv_tied", v_tied, 0, NULL}, {"post_norm", v_postnorm, 0, NULL}, {"no_qk_norm", v_noqk, 0, NULL}, {"rope0", v_rope0, 0, NULL},
    {"rope4", v_rope4, 0, NULL}, {"tail", v_tail, 0, NULL}, {"deepseek", v_deepseek, 0, NULL}, {"attn_sink", v_sink, 0, NULL},
    {"overlap_w4s2", v_overlap, 0, NULL}, {"kv1_untied", v_kv1, 0, NULL}, {"overlap_tail_vector_postnorm", v_overlap_tail_vec, 0, NULL},
    {"shared", v_shared, 0, NULL}, {"shared_no_gate_bias", v_shared_nobias, 0, NULL}, {"shared_vector_tail_postnorm", v_shared_vec_tail_pn, 0, NULL},
    {"shared_overlap_kv_tied", v_shared_overlap_tied, 0, NULL},
    {"staggered_kv2", v_stag, 0, NULL}, {"staggered_kv4", v_stag_kv4, 0, NULL}, {"staggered_kv1", v_stag_kv1, 0, NULL},
    {"staggered_kv4_tail", v_stag_tail, 0, NULL}, {"staggered_overlap_vector_postnorm", v_stag_overlap_vec_pn, 0, NULL},
    {"staggered_overlap_tail_kv_tied", v_stag_overlap_tail_tied, 0, NULL}, {"staggered_sink_rope4", v_stag_sink_rope4, 0, NULL},
    {"staggered_shared_tail", v_stag_shared, 0, NULL}, {"staggered_deepseek", v_stag_deepseek, 0, NULL},
    {"coverage_scalar", v_comp, 0.5, NULL}, {"coverage_vector", v_cov_vec, 0.5, NULL}, {"coverage_kv1_tied", v_cov_kv1_tied, 0.5, NULL},
    {"coverage_staggered_kv2", v_stag, 0.5, NULL}, {"coverage_staggered_tail", v_stag_tail, 0.5, NULL},
    {"coverage_shared_staggered_overlap_vector_postnorm_tail", v_cov_all, 0.5, NULL},
    {"coverage_deepseek", v_deepseek, 0.5, NULL},
    {"jitter_scalar", v_comp, 0, SHIFT_S4}, {"jitter_vector_postnorm", v_postnorm, 0, SHIFT_S4B},
    {"jitter_overlap_tail_vector_postnorm", v_overlap_tail_vec, 0, SHIFT_S2}, {"jitter_deepseek", v_deepseek, 0, SHIFT_S2},
    {"jitter_attn_sink", v_sink, 0, SHIFT_S4B}, {"jitter_rope4", v_rope4, 0, SHIFT_S4}, {"jitter_kv_tied", v_tied, 0, SHIFT_S4},
    {"jitter_staggered_kv4_tail", v_stag_tail, 0, SHIFT_S4}, {"jitter_staggered_shared_tail", v_stag_shared, 0, SHIFT_S4B},
    {"token_shift", v_ts, 0, NULL}, {"token_shift_overlap_tail_vector_postnorm", v_ts_overlap_tail_vec, 0, NULL},
    {"token_shift_deepseek", v_ts_deepseek, 0, NULL}, {"token_shift_staggered_shared_tail", v_ts_stag_shared, 0, NULL},
    {"token_shift_coverage_jitter", v_ts, 0.5, SHIFT_S4},
    {"jitter_coverage_vector", v_cov_vec, 0.5, SHIFT_S4}, {"jitter_coverage_staggered_overlap_all", v_cov_all, 0.5, SHIFT_S2},
    {"schedule_window", v_sched_window, 0, NULL}, {"schedule_hca_tied_sink", v_sched_hca, 0, NULL},
    {"schedule_window_csa_hca", v_sched_mix, 0, NULL}, {"schedule_compressed_tail_full_window_hca", v_sched_mix_base, 0, NULL},
    {"schedule_hca_staggered_window_postnorm", v_sched_mix_stag, 0, NULL}, {"coverage_schedule_window_csa_hca", v_sched_mix, 0.5, NULL},
    {"schedule_csa_v4_geometry", v_sched_csa, 0, NULL}, {"schedule_csa_scalar_paper_s1_postnorm", v_sched_csa_scalar_s1, 0, NULL},
    {"schedule_csa_uniform_shared_w5s2", v_sched_csa_uniform_shared, 0, NULL},
    {"coverage_schedule_csa_v4_geometry", v_sched_csa, 0.5, NULL},
    {"coverage_schedule_csa_scalar_paper_s1_postnorm", v_sched_csa_scalar_s1, 0.5, NULL},
    {"jitter_multirate_w5_5_3_postnorm_tied_sink", tu_mr_w5_pn_tied, 0, SHIFT_MR15},
    {"jitter_multirate_staggered_kv4_w5_4_3_2_1_tail_vector", tu_mr_stag_g4_tail, 0, SHIFT_MR12},
    {"jitter_coverage_multirate_4_2", tu_mr, 0.5, SHIFT_S4},
    {"multirate_4_2", tu_mr, 0, NULL}, {"multirate_kv4_4_3_2_1_tail_vector", tu_mr_g4_tail_vec, 0, NULL},
    {"multirate_w5_5_3_postnorm_tied_sink", tu_mr_w5_pn_tied, 0, NULL},
    {"multirate_kv4_2_4_4_3_shared_tail", tu_mr_g4_shared_tail, 0, NULL},
    {"multirate_token_shift_rope4", tu_mr_ts_rope4, 0, NULL},
    {"multirate_staggered_kv4_w5_4_3_2_1_tail_vector", tu_mr_stag_g4_tail, 0, NULL},
    {"multirate_staggered_w5_5_3_postnorm_tied_sink", tu_mr_stag_w5, 0, NULL},
    {"coverage_multirate_staggered_kv4_tail_vector", tu_mr_stag_g4_tail, 0.5, NULL},
    {"coverage_multirate_4_2", tu_mr, 0.5, NULL}, {"coverage_multirate_kv4_tail_vector", tu_mr_g4_tail_vec, 0.5, NULL},
};

/* docs/spec.md §6.5, learned chunk boundaries (W 4, S 2 at T = 24): each with its ratio-loss weight lambda_r */
typedef struct { Variant v; double ratio; } BoundaryVariant;
static const BoundaryVariant bd_variants[] = {
    {{"boundaries_scalar_tail_ratio", tu_bd_tail, 0, NULL}, 0.5}, {{"boundaries_vector_window_postnorm", tu_bd_vec_pn, 0, NULL}, 0},
    {{"boundaries_tied_sink_ratio", tu_bd_tied_sink, 0, NULL}, 0.5}, {{"boundaries_uniform", tu_bd_uniform, 0, NULL}, 0},
    {{"boundaries_token_shift_rope4_ratio", tu_bd_ts, 0, NULL}, 0.5}, {{"boundaries_shared_tail", tu_bd_shared, 0, NULL}, 0},
};
#define BD_T 24

/* The checked objective: mean cross-entropy (+ the scaled penalty with a lambda, + the ratio loss of
 * learned boundaries weighted loss_scale * B * T = B T / (B T - 1), docs/spec.md §6.5). */
static double objective(Model *m, const int32_t *tok, const int32_t *tgt, int B, int T, double lambda, double ratio) {
    double ce = model_forward(m, tok, tgt, B, NULL);
    if (ratio > 0) ce += ratio * model_boundary_ratio(m, NULL) * B * T / (B * T - 1.0);
    return lambda > 0 ? ce + lambda * model_gate_coverage(m, B) * T / (B * T - 1.0) : ce;
}

/* PHASELAB_BF16_RESIDUAL_GRAD (docs/spec.md §1.1): a value other than 0 or 1 is refused by
 * model_create with one line; 1 rounds the residual gradient to act_t, which is fp32 on the CPU, so
 * the CPU's gradients are the same bits with and without it. */
static void check_bf16_residual_switch(const Backend *be) {
    ModelConfig cfg = tu_tiny_config();
    v_comp(&cfg);
    const int B = 2, T = 16;
    char err[ERR_LEN] = "";
    setenv("PHASELAB_BF16_RESIDUAL_GRAD", "2", 1);
    Model *bad = model_create(&cfg, be, B, T, err);
    check(!bad && strstr(err, "PHASELAB_BF16_RESIDUAL_GRAD=2: expected 0 or 1"), "bf16 residual switch: 2 is refused",
          "model %s, error '%s'", bad ? "built" : "refused", err);
    if (bad) model_free(bad);
    float *g[2] = {NULL, NULL};
    size_t n = 0;
    int32_t tok[32], tgt[32];
    tu_random_tokens(tok, B * T, cfg.vocab_size, 3);
    tu_random_tokens(tgt, B * T, cfg.vocab_size, 4);
    for (int on = 0; on < 2; on++) {
        if (on) setenv("PHASELAB_BF16_RESIDUAL_GRAD", "1", 1);
        else unsetenv("PHASELAB_BF16_RESIDUAL_GRAD");
        Model *m = model_create(&cfg, be, B, T, err);
        if (!check(m != NULL, on ? "bf16 residual switch: 1 builds" : "bf16 residual switch: unset builds", "%s", err)) break;
        tu_random_params(m, 42, 0.35);
        model_zero_grads(m);
        model_forward_backward(m, tok, tgt, B, 1.0 / (B * T), NULL);
        n = model_tensors(m)->n_floats;
        g[on] = malloc(sizeof(float) * n);
        memcpy(g[on], model_grads(m), sizeof(float) * n);
        model_free(m);
    }
    unsetenv("PHASELAB_BF16_RESIDUAL_GRAD");
    if (g[0] && g[1])
        check(!memcmp(g[0], g[1], sizeof(float) * n), "bf16 residual switch: no effect on the CPU backend (same gradient bits)",
              "the gradients differ");
    free(g[0]); free(g[1]);
}

/* One variant: the gradient of model_forward_backward against central differences of the objective, in
 * two random directions per tensor. ratio > 0: learned boundaries with that lambda_r. */
static void check_variant(const Backend *be, const Variant *v, size_t vi, double ratio, int T) {
    const int B = 2;
    {
        ModelConfig cfg = tu_tiny_config();
        v->apply(&cfg);
        char err[ERR_LEN];
        Model *m = model_create(&cfg, be, B, T, err);
        char name[160];
        snprintf(name, sizeof name, "gradcheck %s: model builds", v->name);
        if (!check(m != NULL, name, "%s", err)) return;
        tu_random_params(m, 100 + vi, 0.35);
        if (model_has_boundaries(m)) tu_set_boundary_bias(m, -0.5f);   /* natural and forced boundaries (checked below) */
        if (v->lambda > 0 && model_set_gate_coverage(m, v->lambda, err)) {
            check(0, name, "%s", err);
            model_free(m);
            return;
        }
        if (v->shift && model_set_grid_shift(m, v->shift, B, err)) {
            check(0, name, "%s", err);
            model_free(m);
            return;
        }
        int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
        tu_random_tokens(tok, B * T, cfg.vocab_size, 5 + vi);
        tu_random_tokens(tgt, B * T, cfg.vocab_size, 9 + vi);
        tgt[3] = -1;  /* an ignored target */
        if (ratio > 0 && model_set_boundary_ratio(m, ratio, err)) check(0, name, "%s", err);
        model_zero_grads(m);
        model_forward_backward(m, tok, tgt, B, 1.0 / (B * T - 1), NULL);
        if (model_has_boundaries(m)) {   /* docs/spec.md §6.5: natural and forced boundaries both occur; then hold them */
            int natural = 0, forced = 0;
            for (int L = 0; L < cfg.n_layers; L++) {
                const unsigned char *f = model_boundary_flags(m, L);
                const float *pr = model_boundary_probs(m, L);
                for (int n = 0; n < B * T; n++) { natural += f[n] && pr[n] >= 0.5f; forced += f[n] && pr[n] < 0.5f; }
            }
            snprintf(name, sizeof name, "gradcheck %s: natural and forced boundaries occur", v->name);
            check(natural > 0 && forced > 0, name, "natural %d, forced %d", natural, forced);
            snprintf(name, sizeof name, "gradcheck %s: boundaries held", v->name);
            check(model_hold_boundaries(m, 1) == 0, name, "model_hold_boundaries refused");
        }
        const TensorTable *tt = model_tensors(m);
        float *p = model_params(m), *g = model_grads(m);
        int bad = 0;
        double worst = 0;   /* largest |analytic - numeric| / max(|analytic|, |numeric|, 0.01) */
        char why[512] = "";
        uint64_t s = 77 + vi;
        for (int ti = 0; ti < tt->n; ti++) {
            const TensorInfo *t = &tt->t[ti];
            for (int dir = 0; dir < 2; dir++) {
                float *u = malloc(sizeof(float) * t->numel);
                double norm = 0, analytic = 0;
                for (size_t j = 0; j < t->numel; j++) { u[j] = (float)tu_normal(&s); norm += (double)u[j] * u[j]; }
                norm = sqrt(norm);
                for (size_t j = 0; j < t->numel; j++) { u[j] /= norm; analytic += (double)u[j] * g[t->offset + j]; }
                const double eps = getenv("GC_EPS") ? atof(getenv("GC_EPS")) : 5e-3;
                float *saved = malloc(sizeof(float) * t->numel);
                memcpy(saved, p + t->offset, sizeof(float) * t->numel);
                for (size_t j = 0; j < t->numel; j++) p[t->offset + j] = saved[j] + (float)eps * u[j];
                model_params_updated(m);
                double lp = objective(m, tok, tgt, B, T, v->lambda, ratio);
                for (size_t j = 0; j < t->numel; j++) p[t->offset + j] = saved[j] - (float)eps * u[j];
                model_params_updated(m);
                double lm = objective(m, tok, tgt, B, T, v->lambda, ratio);
                memcpy(p + t->offset, saved, sizeof(float) * t->numel);
                model_params_updated(m);
                double numeric = (lp - lm) / (2 * eps);
                double tol = 0.02 * fmax(fabs(analytic), fabs(numeric)) + 3e-4;
                double rel = fabs(analytic - numeric) / fmax(fmax(fabs(analytic), fabs(numeric)), 1e-2);
                if (rel > worst) worst = rel;
                if (fabs(analytic - numeric) > tol && !bad++)
                    snprintf(why, sizeof why, "%s: analytic %.6g vs numeric %.6g", t->name, analytic, numeric);
                free(u);
                free(saved);
            }
        }
        printf("# %s: largest relative error %.2e\n", v->name, worst);
        snprintf(name, sizeof name, "gradcheck %s: %d tensors", v->name, tt->n);
        check(bad == 0, name, "%d mismatches, first %s", bad, why);
        free(tok);
        free(tgt);
        model_free(m);
    }
}

int main(void) {
    const Backend *be = backend_cpu(2);
    const int T = getenv("GC_T") ? atoi(getenv("GC_T")) : 16;
    const char *only = getenv("GC_ONLY");   /* a subset while iterating */
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++)
        if (!only || strstr(variants[vi].name, only)) check_variant(be, &variants[vi], vi, 0.0, T);
    for (size_t k = 0; k < sizeof bd_variants / sizeof bd_variants[0]; k++)
        if (!only || strstr(bd_variants[k].v.name, only))
            check_variant(be, &bd_variants[k].v, sizeof variants / sizeof variants[0] + k, bd_variants[k].ratio, BD_T);
    if (!only) check_bf16_residual_switch(be);
    return check_exit_code();
}
