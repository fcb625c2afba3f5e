/* Gate statistics (docs/spec.md §3.4) against their definition on hand-set gate parameters:
 * zero gate maps and biases give uniform weights (effective number W, flat profile 1); a large
 * bias on one offset gives one-hot weights (effective number 1, profile W at that offset);
 * mixed windows separate the static number exp(H(E[alpha])) from the per-window E[exp(H(alpha))].
 * The alphas come from the model's own forward pass, as in evaluation. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "trainer/evaluate.h"

static void set_tensor(Model *m, const char *name, float value, int hot_index, float hot_value) {
    const TensorTable *tt = model_tensors(m);
    int i = tensor_table_find(tt, name);
    float *p = model_params(m) + tt->t[i].offset;
    for (size_t j = 0; j < tt->t[i].numel; j++) p[j] = value;
    if (hot_index >= 0) p[hot_index] = hot_value;
}

/* Runs the model's forward pass and the gate statistics of layer 0 over its B x nW windows
 * (one KV head, c = 1): fills eff_static[0] and profile[W], returns the per-window mean of
 * exp(H(alpha)). */
static double model_gate_stats(Model *m, const int32_t *tok, int B, int nW, int W, float *eff_static, float *profile) {
    float alpha[B * nW * W];
    double sum_alpha[W], sum_eff[1] = {0};
    memset(sum_alpha, 0, sizeof sum_alpha);
    model_params_updated(m);
    model_forward(m, tok, NULL, B, NULL);
    model_gate_alphas(m, 0, 0, B, alpha);
    gate_stats_accumulate(alpha, B, nW, 1, W, 1, sum_alpha, sum_eff);
    gate_stats_finish(sum_alpha, (long)B * nW, 1, W, 1, eff_static, profile);
    return sum_eff[0] / (B * nW);
}

int main(void) {
    const Backend *be = backend_cpu(1);
    const int B = 2, T = 32, W = 8;
    ModelConfig cfg = tu_tiny_config();
    cfg.attention = ATTN_COMPRESSED;
    cfg.window = W;
    cfg.stride = W;
    cfg.n_kv_heads = 1;
    cfg.n_layers = 1;
    char err[ERR_LEN];
    Model *m = model_create(&cfg, be, B, T, err);
    if (!check(m != NULL, "model builds", "%s", err)) return check_exit_code();
    tu_random_params(m, 3, 0.3);
    int32_t tok[B * T];
    tu_random_tokens(tok, B * T, cfg.vocab_size, 1);
    const int nW = T / W;
    double sum_alpha[W], sum_eff[1];
    float eff_static[1], profile[W];

    /* zero gates: uniform */
    set_tensor(m, "model.layers.0.self_attn.compressor.k_gate.weight", 0, -1, 0);
    set_tensor(m, "model.layers.0.self_attn.compressor.k_gate.bias", 0, -1, 0);
    double eff_window = model_gate_stats(m, tok, B, nW, W, eff_static, profile);
    check(fabs(eff_static[0] - W) < 1e-4, "zero gates: static effective number = W", "%g", eff_static[0]);
    check(fabs(eff_window - W) < 1e-4, "zero gates: per-window effective number = W", "%g", eff_window);
    int flat = 1;
    for (int i = 0; i < W; i++) flat &= fabsf(profile[i] - 1.0f) < 1e-5f;
    check(flat, "zero gates: profile g(i) = 1 at every offset", "%g %g", profile[0], profile[W - 1]);

    /* one-hot bias at offset 3 */
    set_tensor(m, "model.layers.0.self_attn.compressor.k_gate.bias", 0, 3, 60.0f);
    eff_window = model_gate_stats(m, tok, B, nW, W, eff_static, profile);
    check(fabs(eff_static[0] - 1) < 1e-4, "one-hot bias: static effective number = 1", "%g", eff_static[0]);
    check(fabs(eff_window - 1) < 1e-4, "one-hot bias: per-window effective number = 1", "%g", eff_window);
    check(fabs(profile[3] - W) < 1e-3 && fabs(profile[2]) < 1e-3, "one-hot bias: profile W at offset 3, 0 elsewhere",
          "%g %g", profile[3], profile[2]);

    /* hand-made alphas: half the windows one-hot at 0, half at 1 -> E[alpha] = (1/2, 1/2, 0...) :
     * static exp(H) = 2, per-window exp(H) = 1 */
    float hand[4 * W];
    memset(hand, 0, sizeof hand);
    hand[0 * W + 0] = 1; hand[1 * W + 1] = 1; hand[2 * W + 0] = 1; hand[3 * W + 1] = 1;
    memset(sum_alpha, 0, sizeof sum_alpha); sum_eff[0] = 0;
    gate_stats_accumulate(hand, 1, 4, 1, W, 1, sum_alpha, sum_eff);
    gate_stats_finish(sum_alpha, 4, 1, W, 1, eff_static, profile);
    check(fabs(eff_static[0] - 2) < 1e-6 && fabs(sum_eff[0] / 4 - 1) < 1e-9,
          "mixed one-hot windows: static 2, per-window 1", "%g %g", eff_static[0], sum_eff[0] / 4);
    /* vector gates: channel-averaged */
    float vec[2 * W];          /* one window, W offsets, c = 2: channel 0 uniform, channel 1 one-hot */
    for (int i = 0; i < W; i++) { vec[i * 2] = 1.0f / W; vec[i * 2 + 1] = i == 5; }
    double sa2[W * 2];
    memset(sa2, 0, sizeof sa2); sum_eff[0] = 0;
    gate_stats_accumulate(vec, 1, 1, 1, W, 2, sa2, sum_eff);
    gate_stats_finish(sa2, 1, 1, W, 2, eff_static, profile);
    check(fabs(eff_static[0] - (W + 1) / 2.0) < 1e-5 && fabs(profile[5] - (1 + W) / 2.0) < 1e-5,
          "vector gates: averaged over channels", "%g %g", eff_static[0], profile[5]);
    model_free(m);
    return check_exit_code();
}
