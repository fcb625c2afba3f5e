/* Learned chunk boundaries (model.boundaries = learned, docs/spec.md §6.5) on the CPU, checked
 * independently of the gradient check:
 *   - the ops boundary_decide and chunk_compressor_fwd against a plain double-precision loop written
 *     from the spec: p_t = sigmoid(w . a_t + c); the scan bd_t = 1 iff p_t >= 1/2 or the open chunk
 *     reached W tokens; entry j pools s_j..e_j, token t at slot i = W - 1 - (e_j - t), map m(i),
 *     bias b_{g,i}, softmax over the entry's tokens per channel (uniform: 1 / L), post-norm
 *     p' = p w / sqrt(mean p^2 + eps), E_j = sum alpha p' (1e-4 relative, floor 1e-3), the entry rows after n_b
 *     zero and the ends after n_b equal to T; for scalar, vector and uniform gates, paper and shared
 *     maps, post-norm on and off, W 4 / S 2 and W 6 / S 3;
 *   - identities of the whole model: with every boundary.bias at -100 no score reaches 1/2, every chunk
 *     is forced at W tokens and the per-token losses equal those of the grid model with window =
 *     stride = W and the same weights (every tensor but boundary.* maps 1:1); with +100 every token is
 *     its own entry (n_b = T) and the losses equal the grid model with window = stride = 1 (shared maps:
 *     one payload map; its gate bias is slot W - 1's, the slot of a one-token entry);
 *   - model_hold_boundaries: a held forward at the same weights gives the same losses bit for bit;
 *   - causality: a later token changes no earlier loss (check_causality);
 *   - a backend without Backend.boundaries (a stand-in: CPU and CUDA both have it) refuses the config at
 *     model_create with one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

enum { B = 2, T = 23, D = 10, G = 2, DH = 6 };

typedef struct { const char *name; int W, S, gate, shared, bias, post; } ChunkCase;
static const ChunkCase CASES[] = {
    {"scalar paper bias W4 S2", 4, 2, GATE_SCALAR, 0, 1, 0},
    {"vector paper bias post-norm W4 S2", 4, 2, GATE_VECTOR, 0, 1, 1},
    {"uniform paper post-norm W6 S3", 6, 3, GATE_UNIFORM, 0, 0, 1},
    {"vector shared no-bias W6 S3", 6, 3, GATE_VECTOR, 1, 0, 0},
};

static double rnd(uint64_t *s) { return tu_normal(s); }

static void check_case(const Backend *be, const ChunkCase *cc, double bias_shift) {
    const int W = cc->W, c = cc->gate == GATE_VECTOR ? DH : 1, M = cc->shared ? 1 : W, gated = cc->gate != GATE_UNIFORM;
    const double eps = 1e-6;
    uint64_t s = 1234 + W * 7 + cc->gate;
    float *a = malloc(sizeof(float) * B * T * D), *wbd = malloc(sizeof(float) * D), cbd = (float)bias_shift;
    float *gw = malloc(sizeof(float) * G * M * c * D), *gb = malloc(sizeof(float) * G * W * c);
    float *pw = malloc(sizeof(float) * G * M * DH * D), *post = malloc(sizeof(float) * DH);
    for (int i = 0; i < B * T * D; i++) a[i] = (float)rnd(&s);
    for (int i = 0; i < D; i++) wbd[i] = (float)(0.5 * rnd(&s));
    for (int i = 0; i < G * M * c * D; i++) gw[i] = (float)(0.4 * rnd(&s));
    for (int i = 0; i < G * W * c; i++) gb[i] = (float)rnd(&s);
    for (int i = 0; i < G * M * DH * D; i++) pw[i] = (float)(0.4 * rnd(&s));
    for (int i = 0; i < DH; i++) post[i] = (float)(1.0 + 0.2 * rnd(&s));
    float *prob = malloc(sizeof(float) * B * T), *prob_sg = malloc(sizeof(float) * B * T);
    uint8_t *flag = malloc(B * T);
    int32_t *ends = malloc(sizeof(int32_t) * B * T), count[B];
    float *entry = malloc(sizeof(float) * B * T * G * DH), *alpha = malloc(sizeof(float) * B * T * G * c);
    float *payload = malloc(sizeof(float) * B * T * G * DH), *rstd = malloc(sizeof(float) * B * T * G);
    for (int i = 0; i < B * T * G * DH; i++) entry[i] = 7.0f;    /* garbage: every row must be written */
    CompShape cs = {.B = B, .T = T, .D = D, .G = G, .d = DH, .window = W, .stride = cc->S, .n_windows = T,
                    .gate = cc->gate, .channels = c, .n_maps = M, .eps = (float)eps, .entry_ends = ends, .entry_count = count};
    be->boundary_decide(be->ctx, &cs, prob, prob_sg, flag, ends, count, (const act_t *)a, (const act_t *)wbd,
                        (const act_t *)&cbd, 0);
    be->chunk_compressor_fwd(be->ctx, &cs, (act_t *)entry, alpha, (act_t *)payload, cc->post ? rstd : NULL, (const act_t *)a,
                             gated ? (const act_t *)gw : NULL, gated && cc->bias ? (const act_t *)gb : NULL,
                             (const act_t *)pw, cc->post ? (const act_t *)post : NULL);
    /* the reference */
    double worst_p = 0, worst_e = 0;
    int bad_flags = 0, bad_ends = 0, natural = 0, forced = 0, zero_rows = 1;
    for (int b = 0; b < B; b++) {
        double pd[T];
        int e_ref[T], n = 0, open = 0;
        for (int t = 0; t < T; t++) {
            double q = bias_shift;
            for (int k = 0; k < D; k++) q += (double)wbd[k] * a[((size_t)b * T + t) * D + k];
            pd[t] = 1.0 / (1.0 + exp(-q));
            worst_p = fmax(worst_p, fabs(pd[t] - prob[b * T + t]));
            const int bd = pd[t] >= 0.5 || t - open + 1 == W;
            natural += bd && pd[t] >= 0.5;
            forced += bd && pd[t] < 0.5;
            bad_flags += bd != flag[b * T + t];
            if (bd) { e_ref[n++] = t; open = t + 1; }
        }
        bad_ends += n != count[b];
        for (int j = 0; j < T; j++) bad_ends += ends[b * T + j] != (j < n ? e_ref[j] : T);
        for (int j = 0; j < n; j++) {
            const int e = e_ref[j], s0 = j ? e_ref[j - 1] + 1 : 0, L = e - s0 + 1;
            for (int g = 0; g < G; g++) {
                double al[W][DH], pp[W][DH];   /* by token of the entry (index t - s0) */
                for (int t = s0; t <= e; t++) {
                    const int i = W - 1 - (e - t), m = cc->shared ? 0 : i;
                    const float *x = a + ((size_t)b * T + t) * D;
                    double p[DH], ss = 0;
                    for (int r = 0; r < DH; r++) {
                        p[r] = 0;
                        for (int k = 0; k < D; k++) p[r] += (double)pw[(((size_t)g * M + m) * DH + r) * D + k] * x[k];
                        ss += p[r] * p[r];
                    }
                    for (int r = 0; r < DH; r++) pp[t - s0][r] = cc->post ? p[r] * post[r] / sqrt(ss / DH + eps) : p[r];
                    for (int ch = 0; ch < c; ch++) {
                        double z = 0;
                        for (int k = 0; k < D; k++) z += (double)gw[(((size_t)g * M + m) * c + ch) * D + k] * x[k];
                        al[t - s0][ch] = gated ? z + (cc->bias ? gb[((size_t)g * W + i) * c + ch] : 0.0) : 0.0;
                    }
                }
                for (int ch = 0; ch < c; ch++) {
                    double mx = -INFINITY, sum = 0;
                    for (int k = 0; k < L; k++) mx = fmax(mx, al[k][ch]);
                    for (int k = 0; k < L; k++) sum += exp(al[k][ch] - mx);
                    for (int k = 0; k < L; k++) al[k][ch] = gated ? exp(al[k][ch] - mx) / sum : 1.0 / L;
                }
                for (int r = 0; r < DH; r++) {
                    double E = 0;
                    for (int k = 0; k < L; k++) E += al[k][c == 1 ? 0 : r] * pp[k][r];
                    const double got = entry[(((size_t)b * T + j) * G + g) * DH + r];
                    worst_e = fmax(worst_e, fabs(got - E) / fmax(fabs(E), 1e-3));
                }
            }
        }
        for (int j = n; j < T; j++)
            for (int x = 0; x < G * DH; x++) zero_rows &= entry[((size_t)b * T + j) * G * DH + x] == 0.0f;
    }
    char name[200];
    snprintf(name, sizeof name, "chunk compressor %s (score shift %+.1f): decisions, ends and counts = the scan", cc->name,
             bias_shift);
    check(bad_flags == 0 && bad_ends == 0 && worst_p < 1e-6, name, "%d flags, %d ends differ; p off by %.2e", bad_flags,
          bad_ends, worst_p);
    snprintf(name, sizeof name, "chunk compressor %s (score shift %+.1f): natural and forced boundaries", cc->name, bias_shift);
    check(natural > 0 && forced > 0, name, "natural %d, forced %d", natural, forced);
    snprintf(name, sizeof name, "chunk compressor %s (score shift %+.1f): entries = the double loop, rows after n_b zero",
             cc->name, bias_shift);
    check(worst_e < 1e-4 && zero_rows, name, "largest relative error %.2e, zero rows %d", worst_e, zero_rows);
    free(a); free(wbd); free(gw); free(gb); free(pw); free(post); free(prob); free(prob_sg); free(flag); free(ends);
    free(entry); free(alpha); free(payload); free(rstd);
}

/* Copies every tensor of src into dst by name (boundary.* have no twin); a gate bias of another shape
 * (dst W = 1) takes src's slot W - 1. */
static void copy_by_name(Model *dst, Model *src, int W) {
    const TensorTable *td = model_tensors(dst), *ts = model_tensors(src);
    float *ps = malloc(sizeof(float) * ts->n_floats), *pd = calloc(td->n_floats, sizeof(float));
    model_download_params(src, ps);
    for (int i = 0; i < td->n; i++) {
        const TensorInfo *t = &td->t[i];
        const int k = tensor_table_find(ts, t->name);
        if (k < 0) continue;
        const TensorInfo *u = &ts->t[k];
        if (u->numel == t->numel) memcpy(pd + t->offset, ps + u->offset, sizeof(float) * t->numel);
        else   /* gate bias [G, W, c] -> [G, 1, c] */
            for (int g = 0; g < (int)t->shape[0]; g++)
                for (int ch = 0; ch < (int)t->shape[2]; ch++)
                    pd[t->offset + (size_t)g * t->shape[2] + ch] = ps[u->offset + ((size_t)g * W + W - 1) * t->shape[2] + ch];
    }
    model_upload_params(dst, pd);
    free(ps);
    free(pd);
}

static double max_diff(const float *x, const float *y, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs((double)x[i] - y[i]));
    return w;
}

static void check_identities(const Backend *be) {
    const int TT = 24;
    int32_t tok[B * 24], tgt[B * 24];
    tu_random_tokens(tok, B * TT, 23, 11);
    tu_random_tokens(tgt, B * TT, 23, 12);
    float lbd[B * 24], lgrid[B * 24], lheld[B * 24];
    char err[ERR_LEN];
    for (int sign = -1; sign <= 1; sign += 2) {
        ModelConfig lc = tu_tiny_config();
        tu_bd(&lc);                         /* W 4, S 2 */
        lc.gate = GATE_VECTOR;
        lc.post_norm = 1;
        lc.local = LOCAL_TAIL;
        if (sign > 0) lc.compressor = COMPRESSOR_SHARED;
        ModelConfig gc = lc;
        gc.boundaries = BOUNDARIES_GRID;
        gc.window = gc.stride = sign < 0 ? lc.window : 1;
        Model *ml = model_create(&lc, be, B, TT, err), *mg = ml ? model_create(&gc, be, B, TT, err) : NULL;
        if (!check(ml && mg, sign < 0 ? "identity bias -100: models build" : "identity bias +100: models build", "%s", err)) {
            model_free(ml);
            return;
        }
        tu_random_params(ml, 77, 0.35);
        tu_set_boundary_bias(ml, (float)(100 * sign));
        copy_by_name(mg, ml, lc.window);
        model_forward(ml, tok, tgt, B, lbd);
        model_forward(mg, tok, tgt, B, lgrid);
        int all = 1, Bx, Tx;
        for (int L = 0; L < lc.n_layers; L++) {
            const unsigned char *f = model_boundary_flags(ml, L);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < TT; t++) all &= f[b * TT + t] == (sign > 0 ? 1 : (t % lc.window == lc.window - 1));
        }
        check(all && model_boundary_batch(ml, &Bx, &Tx) == 0 && Bx == B && Tx == TT,
              sign < 0 ? "identity bias -100: every chunk forced at W tokens" : "identity bias +100: every token its own entry",
              "flags differ");
        const double dif = max_diff(lbd, lgrid, B * TT);
        check(dif < 2e-5, sign < 0 ? "identity bias -100: losses = the grid model W = S = 4 (same weights)"
                                   : "identity bias +100: losses = the grid model W = S = 1, shared maps (same weights)",
              "largest difference %.3g", dif);
        if (sign < 0) {   /* a held forward at the same weights: the same bits */
            check(model_hold_boundaries(ml, 1) == 0, "hold: accepted after a forward", "refused");
            model_forward(ml, tok, tgt, B, lheld);
            check(!memcmp(lheld, lbd, sizeof lbd), "hold: the held forward gives the same losses bit for bit", "differ");
            model_hold_boundaries(ml, 0);
            check(model_hold_boundaries(mg, 1) != 0 && !model_has_boundaries(mg) && model_boundary_flags(mg, 0) == NULL,
                  "grid model: no boundaries, no hold", "the grid model claims boundaries");
        }
        model_free(ml);
        model_free(mg);
    }
}

/* Causality: changing the token at position k leaves every loss at t < k unchanged (the decisions, the
 * entries and their visibility use positions <= t only), for tail and window, tied and not. To 1e-5, not
 * bit for bit: the CPU attention takes a block of up to 32 queries with the entries its LAST query sees,
 * so a boundary after t inside t's block changes the GEMM's inner length (masked entries add exact zeros,
 * but the BLAS may sum in another order: seen 4.8e-7). A real leak moves a loss by far more. */
static void check_causality(const Backend *be) {
    const int TT = 24;
    char err[ERR_LEN];
    for (int v = 0; v < 2; v++) {
        ModelConfig lc = tu_tiny_config();
        tu_bd(&lc);
        if (v) { lc.local = LOCAL_TAIL; lc.kv_tied = 1; lc.gate = GATE_VECTOR; lc.token_shift = 1; }
        Model *m = model_create(&lc, be, B, TT, err);
        if (!check(m != NULL, "causality: model builds", "%s", err)) return;
        tu_random_params(m, 91 + v, 0.35);
        tu_set_boundary_bias(m, -0.3f);
        int32_t tok[B * 24], tgt[B * 24];
        tu_random_tokens(tok, B * TT, 23, 21 + v);
        tu_random_tokens(tgt, B * TT, 23, 22 + v);
        float l0[B * 24], l1[B * 24];
        model_forward(m, tok, tgt, B, l0);
        int bad = 0;
        double worst = 0;
        for (int k = 1; k < TT; k += 5) {
            int32_t t2[B * 24];
            memcpy(t2, tok, sizeof tok);
            for (int b = 0; b < B; b++) t2[b * TT + k] = (tok[b * TT + k] + 7) % 23;
            model_forward(m, t2, tgt, B, l1);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < k; t++) {
                    bad += fabs((double)l0[b * TT + t] - l1[b * TT + t]) > 1e-5;
                    worst = fmax(worst, fabs((double)l0[b * TT + t] - l1[b * TT + t]));
                }
        }
        check(bad == 0, v ? "causality: tail, tied, vector gates, token shift: a later token changes no earlier loss"
                          : "causality: window, scalar gates: a later token changes no earlier loss", "%d losses changed, by up to %.3g", bad, worst);
        model_free(m);
    }
}

/* A backend without learned boundaries (Backend.boundaries = 0; a stand-in copy of the CPU's, since CPU and
 * CUDA both have them) refuses such a model at model_create with one line naming the key; the CPU builds it. */
static void check_backend_refusal(const Backend *cpu) {
    Backend other = *cpu;
    other.name = "stand-in";
    other.boundaries = 0;
    ModelConfig lc = tu_tiny_config();
    tu_bd(&lc);
    char err[ERR_LEN] = "";
    Model *m = model_create(&lc, &other, B, 16, err);
    check(!m && strstr(err, "model.boundaries = learned") && strstr(err, "stand-in backend") && !strchr(err, '\n'),
          "a backend without Backend.boundaries refuses model.boundaries = learned with one line", "'%s'", err);
    model_free(m);
    m = model_create(&lc, cpu, B, 16, err);
    check(m && model_has_boundaries(m), "the CPU backend builds it", "%s", err);
    model_free(m);
}

int main(void) {
    const Backend *be = backend_cpu(2);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        check_case(be, &CASES[i], -0.3);
        check_case(be, &CASES[i], -0.8);
    }
    check_identities(be);
    check_causality(be);
    check_backend_refusal(be);
    return check_exit_code();
}
