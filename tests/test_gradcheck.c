/* Finite-difference gradient check of every parameter tensor (the input embedding included)
 * for full attention and every compressed-attention variant of SPEC.md section 2, on tiny
 * shapes. For each tensor and two random unit directions u, the analytic directional derivative
 * g.u must match (L(p + eps u) - L(p - eps u)) / (2 eps) to 2% (+ a small absolute floor for
 * fp32 noise): a wrong sign or a missed term in any tensor's gradient fails. */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

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
static void v_kv1(ModelConfig *c) { v_comp(c); c->n_kv_heads = 1; c->tie_embeddings = 0; }
static void v_overlap_tail_vec(ModelConfig *c) { v_overlap(c); c->local = LOCAL_TAIL; c->gate = GATE_VECTOR; c->post_norm = 1; }

static const Variant variants[] = {
    {"full", v_full}, {"full_untied_kv1", v_full_untied_g1}, {"full_sink", v_sink_full},
    {"scalar", v_comp}, {"vector", v_vector}, {"uniform", v_uniform}, {"no_gate_bias", v_nobias},
    {"kv_tied", v_tied}, {"post_norm", v_postnorm}, {"no_qk_norm", v_noqk}, {"rope0", v_rope0},
    {"rope4", v_rope4}, {"tail", v_tail}, {"deepseek", v_deepseek}, {"attn_sink", v_sink},
    {"overlap_w4s2", v_overlap}, {"kv1_untied", v_kv1}, {"overlap_tail_vector_postnorm", v_overlap_tail_vec},
};

int main(void) {
    const Backend *be = backend_cpu(2);
    const int B = 2, T = getenv("GC_T") ? atoi(getenv("GC_T")) : 16;
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        ModelConfig cfg = tu_tiny_config();
        variants[vi].apply(&cfg);
        char err[ERR_LEN];
        Model *m = model_create(&cfg, be, B, T, err);
        char name[160];
        snprintf(name, sizeof name, "gradcheck %s: model builds", variants[vi].name);
        if (!check(m != NULL, name, "%s", err)) continue;
        tu_random_params(m, 100 + vi, 0.35);
        int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
        tu_random_tokens(tok, B * T, cfg.vocab_size, 5 + vi);
        tu_random_tokens(tgt, B * T, cfg.vocab_size, 9 + vi);
        tgt[3] = -1;  /* an ignored target */
        model_zero_grads(m);
        model_forward_backward(m, tok, tgt, B, 1.0 / (B * T - 1), NULL);
        const TensorTable *tt = model_tensors(m);
        float *p = model_params(m), *g = model_grads(m);
        int bad = 0;
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
                double lp = model_forward(m, tok, tgt, B, NULL);
                for (size_t j = 0; j < t->numel; j++) p[t->offset + j] = saved[j] - (float)eps * u[j];
                model_params_updated(m);
                double lm = model_forward(m, tok, tgt, B, NULL);
                memcpy(p + t->offset, saved, sizeof(float) * t->numel);
                model_params_updated(m);
                double numeric = (lp - lm) / (2 * eps);
                double tol = 0.02 * fmax(fabs(analytic), fabs(numeric)) + 3e-4;
                if (fabs(analytic - numeric) > tol && !bad++)
                    snprintf(why, sizeof why, "%s: analytic %.6g vs numeric %.6g", t->name, analytic, numeric);
                free(u);
                free(saved);
            }
        }
        snprintf(name, sizeof name, "gradcheck %s: %d tensors", variants[vi].name, tt->n);
        check(bad == 0, name, "%d mismatches, first %s", bad, why);
        free(tok);
        free(tgt);
        model_free(m);
    }
    return check_exit_code();
}
