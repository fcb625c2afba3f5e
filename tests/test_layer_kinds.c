/* The per-layer attention schedule (model/layer_kinds.h, docs/spec.md §5):
 *   - parsing: kinds, KIND*N, exactly n_layers, and one clear error for each malformed list;
 *   - layer_config: each kind's attention, W, S, gate, compressor, local and grid;
 *   - against independent models built without a schedule: a `window` stack whose n_local covers
 *     the whole sequence gives full attention's logits bit for bit; an all-`hca` stack gives the
 *     logits of the plain compressed model with the same W, S, gate and compressor (same tensor
 *     table, same parameters) bit for bit; a one-kind `compressed` schedule is the model without
 *     a schedule (same table, same logits);
 *   - the static grid offset (docs/spec.md §5.4, §6.1): a csa layer's dims have o_base = S - W (V4:
 *     entry j pools jS - 4 .. jS + 3, visible iff j < (t + 1) div 4 at W8/S4) and one more entry than the
 *     aligned grid when S divides T; every other kind 0;
 *   - a window layer differs from full attention once the sequence is longer than n_local (the
 *     mask is in effect), and the FLOP count of a schedule is the sum of its layers'. */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "model/layer_kinds.h"
#include "model/dims.h"
#include "trainer/probe_eval.h"

static int parse_fails(int n_layers, const char *text, const char *want) {
    ModelConfig c = tu_tiny_config();
    c.n_layers = n_layers;
    snprintf(c.layer_attention, sizeof c.layer_attention, "%s", text);
    char err[ERR_LEN] = "";
    int rc = layer_schedule_parse(&c, NULL, err);
    printf("# \"%s\" (%d layers): %s\n", text, n_layers, rc ? err : "accepted");
    return rc != 0 && strstr(err, want) != NULL;
}

/* logits [B*T*V] of cfg's model with parameters of seed (random, std 0.35) over tokens */
static float *logits_of(const ModelConfig *cfg, int B, int T, const int32_t *tok, uint64_t seed, size_t *n_params) {
    char err[ERR_LEN];
    Model *m = model_create(cfg, backend_cpu(1), B, T, err);
    if (!m) { printf("# model_create: %s\n", err); return NULL; }
    tu_random_params(m, seed, 0.35);
    float *hidden = malloc(sizeof(float) * (size_t)B * T * cfg->d_model);
    model_debug_final_hidden(m, tok, B, hidden);
    if (n_params) *n_params = model_tensors(m)->n_params;
    model_free(m);
    return hidden;
}

static int same(const float *a, const float *b, size_t n) { return a && b && !memcmp(a, b, n * sizeof(float)); }

int main(void) {
    /* parsing */
    {
        ModelConfig c = tu_tiny_config();
        tu_schedule(&c, 6, "window*2,csa,hca,csa,full");
        int k[6];
        char err[ERR_LEN];
        int rc = layer_schedule_parse(&c, k, err);
        check(rc == 0 && k[0] == KIND_WINDOW && k[1] == KIND_WINDOW && k[2] == KIND_CSA && k[3] == KIND_HCA &&
                  k[4] == KIND_CSA && k[5] == KIND_FULL, "schedule: window*2,csa,hca,csa,full parses to its 6 kinds",
              "rc %d %s", rc, err);
        check(layer_schedule_mixed(&c), "schedule: a mixed schedule is reported mixed", "not mixed");
        ModelConfig one = tu_tiny_config();
        one.attention = ATTN_COMPRESSED;
        snprintf(one.layer_attention, sizeof one.layer_attention, "compressed*2");
        check(!layer_schedule_mixed(&one), "schedule: compressed*2 on a compressed model is not mixed", "mixed");
        ModelConfig l = layer_config(&c, 2), h = layer_config(&c, 3), w = layer_config(&c, 0), f = layer_config(&c, 5);
        check(l.attention == ATTN_COMPRESSED && l.window == 4 && l.stride == 2 && l.gate == GATE_VECTOR &&
                  l.compressor == COMPRESSOR_DEEPSEEK && l.local == LOCAL_WINDOW, "schedule: a csa layer's config", "W%d S%d", l.window, l.stride);
        check(h.attention == ATTN_COMPRESSED && h.window == 4 && h.stride == 4 && h.compressor == COMPRESSOR_SHARED,
              "schedule: an hca layer's config", "W%d S%d", h.window, h.stride);
        check(w.attention == ATTN_WINDOW && config_visibility(&w) == VIS_WINDOW && f.attention == ATTN_FULL,
              "schedule: window and full layers' attention", "%d %d", w.attention, f.attention);
    }
    {   /* the static grid offset: csa layers only */
        ModelConfig c = tu_tiny_config();
        tu_schedule(&c, 5, "window,csa,hca,full,compressed");
        c.attention = ATTN_FULL;
        c.csa_window = 8; c.csa_stride = 4;
        int bad = 0;
        for (int L = 0; L < 5; L++) {
            ModelConfig l = layer_config(&c, L);
            const ModelDims dm = dims_of(&l, 64);
            bad += dm.grid_base != (L == 1 ? 4 - 8 : 0);
        }
        ModelConfig l = layer_config(&c, 1);
        const ModelDims dm = dims_of(&l, 64);
        int v4 = 0;   /* entry j ends at 4j + 3: 16 entries at T 64 (the aligned grid has 15), j < (t + 1) / 4 visible */
        for (int t = 0; t < 64; t++) v4 += vis_n_entries(t, 8, 4, dims_grid_offset(&dm, 0), dm.n_windows) != (t + 1) / 4;
        check(bad == 0 && dm.n_windows == 16 && v4 == 0, "schedule: csa layers get o_base = S - W (V4 geometry), other kinds 0",
              "%d kinds wrong, %d entries at T 64, %d queries wrong", bad, dm.n_windows, v4);
        ModelConfig plain = tu_tiny_config();
        plain.attention = ATTN_COMPRESSED;
        check(dims_of(&plain, 16).grid_base == 0, "schedule: a model without a schedule has o_base 0", "%d",
              dims_of(&plain, 16).grid_base);
    }
    check(parse_fails(3, "window,csa", "names 2 layers"), "schedule: too few kinds refused", "accepted");
    check(parse_fails(2, "window,csa,hca", "names 3 layers"), "schedule: too many kinds refused", "accepted");
    check(parse_fails(2, "window,sliding", "item 2 \"sliding\""), "schedule: an unknown kind refused, naming the item", "accepted");
    check(parse_fails(2, "window*", "KIND*N"), "schedule: KIND* without N refused", "accepted");
    check(parse_fails(2, "window*0,full*2", "KIND*N"), "schedule: KIND*0 refused", "accepted");
    check(parse_fails(2, "window*1x,full", "KIND*N"), "schedule: KIND*1x refused", "accepted");
    check(parse_fails(2, "window,,full", "item 2"), "schedule: an empty item refused", "accepted");
    check(parse_fails(2, "Window,full", "item 1"), "schedule: kinds are lower case", "accepted");

    const int B = 2, T = 12, V = 23;
    int32_t tok[2 * 12];
    tu_random_tokens(tok, B * T, V, 3);
    size_t N = (size_t)B * T * 16, pa = 0, pb = 0;
    {   /* window with n_local >= T is full attention */
        ModelConfig full = tu_tiny_config(), win = tu_tiny_config();
        tu_schedule(&win, 2, "window*2");
        win.n_local = T;
        float *a = logits_of(&full, B, T, tok, 7, &pa), *b = logits_of(&win, B, T, tok, 7, &pb);
        check(pa == pb && same(a, b, N), "schedule: window*2 with n_local = T equals full attention bit for bit",
              "params %zu vs %zu or hidden states differ", pa, pb);
        win.n_local = 3;
        float *c = logits_of(&win, B, T, tok, 7, NULL);
        check(c && !same(a, c, N), "schedule: window*2 with n_local 3 < T differs from full attention", "equal");
        free(a); free(b); free(c);
    }
    {   /* hca layers are the plain compressed model with the hca keys */
        ModelConfig plain = tu_tiny_config(), hca = tu_tiny_config();
        plain.attention = ATTN_COMPRESSED; plain.window = 4; plain.stride = 4; plain.gate = GATE_VECTOR;
        plain.compressor = COMPRESSOR_SHARED; plain.kv_tied = 1; plain.attn_sink = 1;
        tu_schedule(&hca, 2, "hca*2");
        hca.kv_tied = 1; hca.attn_sink = 1;
        hca.window = 8; hca.stride = 2; hca.gate = GATE_SCALAR;   /* the base keys do not reach hca layers */
        float *a = logits_of(&plain, B, T, tok, 9, &pa), *b = logits_of(&hca, B, T, tok, 9, &pb);
        check(pa == pb && same(a, b, N), "schedule: hca*2 equals compressed W4/S4 vector shared bit for bit",
              "params %zu vs %zu or hidden states differ", pa, pb);
        free(a); free(b);
    }
    {   /* a one-kind compressed schedule is the model without one */
        ModelConfig plain = tu_tiny_config(), one = tu_tiny_config();
        plain.attention = one.attention = ATTN_COMPRESSED;
        plain.local = one.local = LOCAL_TAIL;
        snprintf(one.layer_attention, sizeof one.layer_attention, "compressed*2");
        float *a = logits_of(&plain, B, T, tok, 11, &pa), *b = logits_of(&one, B, T, tok, 11, &pb);
        check(pa == pb && same(a, b, N), "schedule: compressed*2 equals the model without a schedule bit for bit",
              "params %zu vs %zu or hidden states differ", pa, pb);
        free(a); free(b);
    }
    {   /* FLOPs: the sum of the layers' */
        ModelConfig c = tu_tiny_config();
        tu_schedule(&c, 3, "window,csa,hca");
        double sum = 0;
        for (int L = 0; L < 3; L++) { ModelConfig l = layer_config(&c, L); sum += model_layer_flops_per_token(&l, 16); }
        double want = 6.0 * (sum + 16.0 * 23.0), got = model_flops_per_token(&c, 16);
        check(fabs(got - want) <= 1e-9 * want, "schedule: FLOPs per token are the sum of the layers'", "%g vs %g", got, want);
        /* window layer: n_local keys per query once t >= n_local, against t + 1 for full */
        ModelConfig w = layer_config(&c, 0), f = w;
        f.attention = ATTN_FULL;
        const double H = c.n_heads, d = c.head_dim, n = c.n_local;
        double keys_w = 0, keys_f = 0;
        for (int t = 0; t < 16; t++) { keys_w += t < n ? t + 1 : n; keys_f += t + 1; }
        double diff = model_layer_flops_per_token(&f, 16) - model_layer_flops_per_token(&w, 16);
        check(fabs(diff - 2.0 * H * d * (keys_f - keys_w) / 16) < 1e-9, "schedule: a window layer counts n_local keys per query",
              "difference %g", diff);
    }
    {   /* the probe's phase fold: the lcm of the compressed layers' strides */
        ModelConfig c = tu_tiny_config(), w = tu_tiny_config(), p = tu_tiny_config();
        tu_schedule(&c, 3, "window,csa,hca");            /* S 2 and 4 */
        c.hca_window = c.hca_stride = 3;                   /* S 2 and 3: 6 */
        tu_schedule(&w, 2, "window,full");
        p.attention = ATTN_COMPRESSED; p.stride = 4;
        check(probe_phase_fold(&c) == 6 && probe_phase_fold(&w) == 8 && probe_phase_fold(&p) == 4,
              "schedule: the probe folds by the lcm of the compressed layers' strides (8 without any)", "%d %d %d",
              probe_phase_fold(&c), probe_phase_fold(&w), probe_phase_fold(&p));
    }
    return check_exit_code();
}
