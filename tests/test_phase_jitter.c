/* Phase jitter (docs/spec.md §6.2): the per-sequence grid shift and what a shifted model computes.
 *   - u(seed, g) = splitmix64(seed + 0x9E3779B97F4A7C15 (g + 1)) mod S, re-derived here from the
 *     spec's words (not from trainer/phase_jitter.c): equal for 3 seeds x 200 samples x S in
 *     {2, 3, 8}; every residue drawn, none more than 1.5x its share over 4000 samples;
 *   - a batch of 2 shifted sequences gives each the token losses it has alone with its own
 *     shift (per-sequence offsets reach the right sequence; relative 1e-5);
 *   - the aligned grid shifted by u through KV head 1 equals the staggered grid's head 1 when
 *     o_1 = u (G = 2, S = 4: o_1 = 2), only that head feeding the output (o_proj columns of the
 *     other heads zeroed): the shifted compressor rows, entry RoPE positions o + jS and tail
 *     follow the one rule (relative 1e-5);
 *   - clearing the shifts gives back the unshifted model bit for bit (evaluation is unshifted);
 *   - a shift changes the losses (the test can see a shift that does nothing);
 *   - bad shifts are refused (u >= S, u < 0, full attention). */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "trainer/phase_jitter.h"

static uint64_t spec_splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double losses_of(Model *m, const int32_t *tok, const int32_t *tgt, int B, float *out) {
    return model_forward(m, tok, tgt, B, out);
}

/* Zeroes layer 0's o_proj columns of every query head outside KV head g's group, so that only KV
 * head g (its grid, entries and raw tokens) reaches the output of a 1-layer model. */
static void keep_only_kv_head(Model *m, const ModelConfig *c, int g) {
    const TensorTable *tt = model_tensors(m);
    float *P = model_params(m);
    const TensorInfo *wo = &tt->t[tensor_table_find(tt, "model.layers.0.self_attn.o_proj.weight")];
    const int Hd = c->n_heads * c->head_dim, group = c->n_heads / c->n_kv_heads;
    for (int row = 0; row < c->d_model; row++)
        for (int col = 0; col < Hd; col++)
            if (col / c->head_dim / group != g) P[wo->offset + (size_t)row * Hd + col] = 0.0f;
    model_params_updated(m);
}

int main(void) {
    /* the shift function */
    int bad = 0;
    const uint64_t seeds[] = {0, 42, 0xFFFFFFFFFFFFFFFFull};
    const int Ss[] = {2, 3, 8};
    for (int a = 0; a < 3; a++)
        for (int c = 0; c < 3; c++)
            for (uint64_t g = 0; g < 200; g++) {
                int want = (int)(spec_splitmix64(seeds[a] + 0x9E3779B97F4A7C15ull * (g + 1)) % (uint64_t)Ss[c]);
                bad += phase_jitter_shift(seeds[a], g, Ss[c]) != want;
            }
    check(bad == 0 && phase_jitter_shift(42, 7, 1) == 0, "phase_jitter_shift = the spec's splitmix64 formula", "%d differ", bad);
    long count[8] = {0};
    for (uint64_t g = 0; g < 4000; g++) count[phase_jitter_shift(42, g, 8)]++;
    int spread_ok = 1;
    for (int r = 0; r < 8; r++) spread_ok &= count[r] > 0 && count[r] < 1.5 * 4000 / 8;
    check(spread_ok, "phase_jitter_shift draws every residue mod 8 about evenly", "counts %ld %ld %ld %ld %ld %ld %ld %ld",
          count[0], count[1], count[2], count[3], count[4], count[5], count[6], count[7]);

    const Backend *be = backend_cpu(1);
    char err[ERR_LEN];
    const int T = 29;
    /* a batch of 2 shifted sequences = each alone */
    struct { const char *name; int W, S, local, G, grid; int32_t u[2]; const char *head_strides; } cases[] = {
        {"W4 S4 window", 4, 4, LOCAL_WINDOW, 2, GRID_ALIGNED, {3, 1}, ""},
        {"W6 S3 tail", 6, 3, LOCAL_TAIL, 2, GRID_ALIGNED, {2, 0}, ""},
        {"staggered G4 W4 S4 tail", 4, 4, LOCAL_TAIL, 4, GRID_STAGGERED, {1, 3}, ""},
        /* multi-rate strides 8, 6: u in [0, 24), head 0 by u mod 8 (7, 3), head 1 by u mod 6 (1, 1) */
        {"multirate 8,6 W8 tail", 8, 6, LOCAL_TAIL, 2, GRID_ALIGNED, {7, 19}, "8,6"},
        {"multirate staggered 8,6 W8 window", 8, 6, LOCAL_WINDOW, 2, GRID_STAGGERED, {13, 22}, "8,6"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ModelConfig cfg = tu_tiny_config();
        cfg.attention = ATTN_COMPRESSED;
        cfg.window = cases[ci].W; cfg.stride = cases[ci].S; cfg.local = cases[ci].local;
        cfg.n_kv_heads = cases[ci].G; cfg.grid = cases[ci].grid;
        snprintf(cfg.head_strides, sizeof cfg.head_strides, "%s", cases[ci].head_strides);
        Model *m2 = model_create(&cfg, be, 2, T, err), *m1 = model_create(&cfg, be, 1, T, err);
        char name[160];
        snprintf(name, sizeof name, "jitter batch %s: models build", cases[ci].name);
        if (!check(m1 && m2, name, "%s", err)) { model_free(m1); model_free(m2); continue; }
        tu_random_params(m2, 40 + ci, 0.4);
        float *host = malloc(sizeof(float) * model_tensors(m2)->n_floats);
        model_download_params(m2, host);
        model_upload_params(m1, host);
        free(host);
        int32_t tok[2 * T], tgt[2 * T];
        tu_random_tokens(tok, 2 * T, cfg.vocab_size, 3 + ci);
        tu_random_tokens(tgt, 2 * T, cfg.vocab_size, 5 + ci);
        float l2[2 * T], l1[2 * T], l0[2 * T];
        losses_of(m2, tok, tgt, 2, l0);                                   /* unshifted */
        model_set_grid_shift(m2, cases[ci].u, 2, err);
        losses_of(m2, tok, tgt, 2, l2);
        for (int b = 0; b < 2; b++) {
            model_set_grid_shift(m1, &cases[ci].u[b], 1, err);
            losses_of(m1, tok + b * T, tgt + b * T, 1, l1 + b * T);
        }
        double worst = 0;
        int moved = 0;
        for (int i = 0; i < 2 * T; i++) {
            worst = fmax(worst, fabs(l2[i] - l1[i]) / fmax(fabs(l1[i]), 1e-3));
            moved += l2[i] != l0[i];
        }
        snprintf(name, sizeof name, "jitter batch %s: each sequence as alone with its shift", cases[ci].name);
        check(worst <= 1e-5, name, "largest relative difference %.3g", worst);
        snprintf(name, sizeof name, "jitter batch %s: the shift changes the losses", cases[ci].name);
        check(moved > 0, name, "no loss changed");
        float lc[2 * T];
        model_set_grid_shift(m2, NULL, 0, err);
        losses_of(m2, tok, tgt, 2, lc);
        snprintf(name, sizeof name, "jitter batch %s: cleared shifts = unshifted bit for bit", cases[ci].name);
        check(memcmp(lc, l0, sizeof lc) == 0, name, "losses differ");
        model_free(m1);
        model_free(m2);
    }

    /* aligned + shift u == staggered head with o_1 = u, through KV head 1 only */
    for (int local = LOCAL_WINDOW; local <= LOCAL_TAIL; local++) {
        ModelConfig ca = tu_tiny_config();
        ca.attention = ATTN_COMPRESSED; ca.n_layers = 1; ca.local = local; ca.rope_dims = 8;   /* W4 S4, G2 */
        ModelConfig cs = ca;
        cs.grid = GRID_STAGGERED;                                     /* o_1 = floor(1 * 4 / 2) = 2 */
        Model *ma = model_create(&ca, be, 1, T, err), *ms = model_create(&cs, be, 1, T, err);
        if (!check(ma && ms, "jitter = staggered head: models build", "%s", err)) { model_free(ma); model_free(ms); continue; }
        tu_random_params(ma, 77, 0.4);
        keep_only_kv_head(ma, &ca, 1);
        const TensorTable *tt = model_tensors(ma);
        float *host = malloc(sizeof(float) * tt->n_floats);
        model_download_params(ma, host);
        model_upload_params(ms, host);
        free(host);
        const int32_t u = 2;
        model_set_grid_shift(ma, &u, 1, err);
        int32_t tok[T];
        tu_random_tokens(tok, T, ca.vocab_size, 11);
        float ha[T * 16], hs[T * 16];
        model_debug_final_hidden(ma, tok, 1, ha);
        model_debug_final_hidden(ms, tok, 1, hs);
        double worst = 0, mx = 0;
        for (int i = 0; i < T * 16; i++) { worst = fmax(worst, fabs(ha[i] - hs[i])); mx = fmax(mx, fabs(hs[i])); }
        char name[160];
        snprintf(name, sizeof name, "jitter u = 2 on the aligned grid = staggered KV head 1 (o_1 = 2), local = %s",
                 local == LOCAL_TAIL ? "tail" : "window");
        check(worst <= 1e-5 * mx, name, "largest difference %.3g of %.3g", worst, mx);
        model_free(ma);
        model_free(ms);
    }

    /* multi-rate strides 8, 6 (docs/spec.md §6.2): KV head g's grid moves by u mod S_g. Through head 1
     * only (S = 6) u = 7 is u = 1 and u = 9 is not; through head 0 only (S = 8) u = 9 is u = 1 and
     * u = 7 is not (a wrong stride in the reduction fails one of the four). */
    for (int head = 0; head < 2; head++) {
        ModelConfig cm = tu_tiny_config();
        cm.attention = ATTN_COMPRESSED; cm.n_layers = 1; cm.local = LOCAL_TAIL; cm.rope_dims = 8;
        cm.window = 8; cm.stride = 6;
        snprintf(cm.head_strides, sizeof cm.head_strides, "8,6");
        Model *mm = model_create(&cm, be, 1, T, err);
        if (!check(mm != NULL, "jitter multirate per head: model builds", "%s", err)) continue;
        tu_random_params(mm, 91 + head, 0.4);
        keep_only_kv_head(mm, &cm, head);
        int32_t tok[T];
        tu_random_tokens(tok, T, cm.vocab_size, 17 + head);
        const int32_t us[3] = {1, 7, 9};
        float h[3][T * 16];
        double mx = 0;
        for (int k = 0; k < 3; k++) {
            check(model_set_grid_shift(mm, &us[k], 1, err) == 0, "jitter multirate: u in [0, 24) accepted", "u %d: %s", us[k], err);
            model_debug_final_hidden(mm, tok, 1, h[k]);
        }
        double d7 = 0, d9 = 0;
        for (int i = 0; i < T * 16; i++) {
            d7 = fmax(d7, fabs(h[1][i] - h[0][i]));
            d9 = fmax(d9, fabs(h[2][i] - h[0][i]));
            mx = fmax(mx, fabs(h[0][i]));
        }
        const double same = head == 1 ? d7 : d9, other = head == 1 ? d9 : d7;
        char name[160];
        snprintf(name, sizeof name, "jitter multirate 8,6 through KV head %d (S = %d): u = %d is u = 1", head, head ? 6 : 8,
                 head ? 7 : 9);
        check(same <= 1e-6 * mx, name, "largest difference %.3g of %.3g", same, mx);
        snprintf(name, sizeof name, "jitter multirate 8,6 through KV head %d (S = %d): u = %d moves the grid", head,
                 head ? 6 : 8, head ? 9 : 7);
        check(other > 1e-4 * mx, name, "largest difference %.3g of %.3g", other, mx);
        const int32_t edge = 24;
        check(model_set_grid_shift(mm, &edge, 1, err) != 0 && strstr(err, "lcm"), "jitter multirate: u >= lcm 24 refused",
              "%s", err);
        check(model_grid_shift_period(mm) == 24, "jitter multirate: shift period = lcm(8, 6) = 24", "%d",
              model_grid_shift_period(mm));
        model_free(mm);
    }

    /* refusals */
    ModelConfig cfg = tu_tiny_config();
    Model *mf = model_create(&cfg, be, 2, T, err);
    int32_t ok[2] = {1, 0}, big[2] = {0, 4}, neg[2] = {-1, 0};
    check(mf && model_set_grid_shift(mf, ok, 2, err) != 0 && strstr(err, "compressed"), "jitter: full attention refused", "%s", err);
    model_free(mf);
    cfg.attention = ATTN_COMPRESSED;
    Model *mc = model_create(&cfg, be, 2, T, err);
    check(mc && model_set_grid_shift(mc, big, 2, err) != 0 && strstr(err, "stride"), "jitter: u >= stride refused", "%s", err);
    check(mc && model_set_grid_shift(mc, neg, 2, err) != 0, "jitter: u < 0 refused", "%s", err);
    check(mc && model_set_grid_shift(mc, ok, 3, err) != 0, "jitter: more sequences than max_batch refused", "%s", err);
    model_free(mc);
    return check_exit_code();
}
