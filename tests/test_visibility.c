/* Causality and visibility of the C model (docs/spec.md §2), on one-layer models so that
 * every influence is direct: changing the token at position p must leave every logit at t < p
 * bit-identical, and at t >= p it may change the logits only through a path docs/spec.md §2.5 allows:
 *   full attention: every t >= p;
 *   compressed: t = p, p in t's raw range (local window [t - n_local + 1, t] or tail
 *   (e_t, t]), or p inside a window j that t sees (jS <= p <= jS + W - 1 and jS + W - 1 <= t).
 * Allowed positions must change (random weights), forbidden ones must not change at all.
 * The expected sets are computed here from the docs/spec.md formulas, not from the model's code.
 * Staggered grids (docs/spec.md §2b) are checked per KV head g: the output projection columns of
 * every query head not reading g are zeroed, so the logits see attention only through g, whose
 * windows start at o_g = floor(g S / G) (window j: o_g + jS .. o_g + jS + W - 1, existing iff
 * its end <= T - 1, visible iff its end <= t; tail: e_t over g's own windows).
 * The rule's functions themselves (kernels/visibility.h) are checked against a brute-force
 * enumeration of the entry ends e_j = o + jS + W - 1 for every offset o in (-W, 2S) (docs/spec.md
 * §6.1: static offsets down to 1 - W, per-sequence shifts up to S - 1 on top of a stagger), and
 * DeepSeek-V4's CSA geometry (o = -S, W = 2S: visible iff j < (t+1) div S) in its own words.
 * Shifted sequences (phase jitter, docs/spec.md §6.2) are checked like staggered heads, with
 * o = o_g + u; one-layer csa schedules (docs/spec.md §5.4) with o = o_base = S - W < 0, whose first
 * windows are partial (window j pools only positions >= 0 of o + jS .. o + jS + W - 1). Multi-rate
 * strides (docs/spec.md §6.4) are checked per KV head like staggered grids, each head g with its own
 * stride S_g (window j: j S_g .. j S_g + W - 1). */
#include <stdio.h>
#include "tests/check.h"
#include "tests/model_testutil.h"

/* o, S: the grid offset and stride of the KV head the logits see (0 aligned; S_g with multi-rate
 * strides, docs/spec.md §6.4) */
static int allowed(const ModelConfig *c, int T, int p, int t, int o, int S) {
    if (t < p) return 0;
    if (t == p || c->attention == ATTN_FULL) return 1;
    int W = c->window, last_end = -1;
    for (int j = 0; o + j * S + W - 1 <= T - 1; j++) {
        int start = o + j * S, end = start + W - 1;
        if (end > t) break;
        last_end = end;
        if (start <= p && p <= end) return 1;                    /* through a visible entry */
    }
    if (c->local == LOCAL_WINDOW) return p >= t - c->n_local + 1;
    return p > last_end;                                         /* tail */
}

/* Brute force over entry ends: counts and ranges of docs/spec.md §6.1 enumerated, not solved. */
static void rule_checks(void) {
    const int T = 29;
    int cases = 0, bad = 0;
    char why[256] = "";
    for (int W = 1; W <= 9; W++)
        for (int S = 1; S <= W; S++)
            for (int o = 1 - W; o < 2 * S; o++)
                for (int vis = VIS_FULL; vis <= VIS_TAIL; vis++)
                    for (int n_local = 1; n_local <= 3; n_local += 2) {
                        int nW = 0;                                  /* entries that exist */
                        while (o + nW * S + W - 1 <= T - 1) nW++;
                        int got_nW = vis_n_windows(T, W, S, o), err = got_nW != nW;
                        for (int j = 0; j < nW; j++) {
                            int start = o + j * S, first = start < 0 ? -start : 0;
                            err |= vis_entry_end(j, W, S, o) != start + W - 1 || vis_first_query_of_entry(j, W, S, o) != start + W - 1 ||
                                   vis_window_first_slot(j, S, o) != first;
                        }
                        int max_raw = 0;
                        for (int t = 0; t < T; t++) {
                            int n = 0;
                            for (int j = 0; j < nW; j++)
                                if (o + j * S + W - 1 <= t) n = j + 1;
                            int lo = vis == VIS_FULL ? 0 : vis == VIS_WINDOW ? (t - n_local + 1 > 0 ? t - n_local + 1 : 0)
                                   : (n > 0 ? o + (n - 1) * S + W : 0);
                            VisQueryView v = vis_query_view(vis, t, W, S, o, nW, n_local);
                            err |= v.n_entries != n || v.raw_lo != lo || vis_n_entries(t, W, S, o, nW) != n;
                            /* the closing entry of t in an unbounded sequence (the decoder's view) */
                            int close_any = -1;
                            for (int j = 0; o + j * S + W - 1 <= t; j++) if (o + j * S + W - 1 == t) close_any = j;
                            err |= vis_entry_closing_at(t, W, S, o) != close_any;
                            if (vis == VIS_TAIL && t - lo + 1 > max_raw) max_raw = t - lo + 1;
                        }
                        if (vis == VIS_TAIL && T >= o + W - 1 + S) err |= max_raw > vis_tail_max_raw(W, S, o);
                        /* inverse: the last query that sees raw token k */
                        for (int k = 0; k < T; k++) {
                            int last = k - 1;                        /* none: the empty range [k, k-1] */
                            for (int t = k; t < T; t++) {
                                VisQueryView v = vis_query_view(vis, t, W, S, o, nW, n_local);
                                if (v.raw_lo <= k) last = t;
                            }
                            err |= vis_last_query_of_raw(vis, k, T, W, S, o, n_local, nW) != last;
                        }
                        cases++;
                        if (err && !bad++) snprintf(why, sizeof why, "W %d S %d o %d visibility %d n_local %d", W, S, o, vis, n_local);
                    }
    check(bad == 0, "visibility rule = enumeration of entry ends, offsets 1-W .. 2S-1", "%d of %d cases wrong, first %s",
          bad, cases, why);
    /* DeepSeek-V4 CSA (W = 8, S = 4): entry j pools 4j-4 .. 4j+3, the first one partial, and is
     * visible to t iff j < (t+1) div 4 */
    int v4bad = 0;
    const int W = 8, S = 4, o = vis_entry_offset(GRID_ALIGNED, 0, S, 1, S - W, 0);
    for (int t = 0; t < 64; t++) v4bad += vis_n_entries(t, W, S, o, 1000) != (t + 1) / 4;
    for (int j = 0; j < 8; j++) v4bad += o + j * S != 4 * j - 4 || vis_window_first_slot(j, S, o) != (j == 0 ? 4 : 0);
    check(v4bad == 0 && vis_n_windows(64, W, S, o) == 16, "DeepSeek-V4 CSA geometry through o_base = S - W",
          "%d mismatches, %d windows at T = 64", v4bad, vis_n_windows(64, W, S, o));
    /* a shape with no grid (full attention may leave W = S = 0): no windows, and no division by
     * zero (the CUDA dK/dV plan calls this for every shape; an H200 run died of SIGFPE there) */
    check(vis_n_windows(256, 0, 0, 0) == 0 && vis_n_windows(256, 8, 0, 0) == 0 && vis_n_windows(256, 0, 8, 0) == 0,
          "vis_n_windows: no grid (W or S = 0) has no windows", "%d", vis_n_windows(256, 8, 0, 0));
    /* the offset is one sum: base + stagger + shift */
    check(vis_entry_offset(GRID_STAGGERED, 3, 8, 4, -2, 5) == -2 + 6 + 5 && vis_entry_offset(GRID_ALIGNED, 3, 8, 4, 0, 0) == 0,
          "vis_entry_offset = o_base + o_g + u_b", "%d", vis_entry_offset(GRID_STAGGERED, 3, 8, 4, -2, 5));
}

int main(void) {
    rule_checks();
    const Backend *be = backend_cpu(1);
    const int T = 24, V = 23;
    struct { const char *name; int attention, W, S, local, n_local, grid, G, shift, csa; const char *strides; } cases[] = {
        {"full", ATTN_FULL, 4, 4, LOCAL_WINDOW, 3, GRID_ALIGNED, 2, 0, 0, NULL},
        {"W4 S4 window", ATTN_COMPRESSED, 4, 4, LOCAL_WINDOW, 3, GRID_ALIGNED, 2, 0, 0, NULL},
        {"W4 S4 tail", ATTN_COMPRESSED, 4, 4, LOCAL_TAIL, 3, GRID_ALIGNED, 2, 0, 0, NULL},
        {"W6 S2 window (overlap)", ATTN_COMPRESSED, 6, 2, LOCAL_WINDOW, 3, GRID_ALIGNED, 2, 0, 0, NULL},
        {"W6 S2 tail (overlap)", ATTN_COMPRESSED, 6, 2, LOCAL_TAIL, 3, GRID_ALIGNED, 2, 0, 0, NULL},
        {"W5 S3 window n_local 1", ATTN_COMPRESSED, 5, 3, LOCAL_WINDOW, 1, GRID_ALIGNED, 2, 0, 0, NULL},
        {"staggered G4 W4 S4 window", ATTN_COMPRESSED, 4, 4, LOCAL_WINDOW, 3, GRID_STAGGERED, 4, 0, 0, NULL},
        {"staggered G4 W4 S4 tail", ATTN_COMPRESSED, 4, 4, LOCAL_TAIL, 3, GRID_STAGGERED, 4, 0, 0, NULL},
        {"staggered G2 W6 S3 tail (overlap)", ATTN_COMPRESSED, 6, 3, LOCAL_TAIL, 3, GRID_STAGGERED, 2, 0, 0, NULL},
        {"staggered G4 W5 S3 window n_local 1", ATTN_COMPRESSED, 5, 3, LOCAL_WINDOW, 1, GRID_STAGGERED, 4, 0, 0, NULL},
        {"staggered G4 W7 S7 tail (head 3 has fewer windows)", ATTN_COMPRESSED, 7, 7, LOCAL_TAIL, 2, GRID_STAGGERED, 4, 0, 0, NULL},
        /* docs/spec.md §6.2: the sequence's grid shifted by u (phase jitter): o = o_g + u */
        {"shift 3 W4 S4 tail", ATTN_COMPRESSED, 4, 4, LOCAL_TAIL, 3, GRID_ALIGNED, 2, 3, 0, NULL},
        {"shift 1 W6 S2 window (overlap)", ATTN_COMPRESSED, 6, 2, LOCAL_WINDOW, 3, GRID_ALIGNED, 2, 1, 0, NULL},
        {"shift 2 W5 S3 tail", ATTN_COMPRESSED, 5, 3, LOCAL_TAIL, 1, GRID_ALIGNED, 2, 2, 0, NULL},
        {"shift 3 staggered G4 W4 S4 tail", ATTN_COMPRESSED, 4, 4, LOCAL_TAIL, 3, GRID_STAGGERED, 4, 3, 0, NULL},
        {"shift 6 W7 S7 tail (T - u not a multiple of S)", ATTN_COMPRESSED, 7, 7, LOCAL_TAIL, 2, GRID_ALIGNED, 1, 6, 0, NULL},
        /* docs/spec.md §5.4, §6.1: a one-layer csa schedule on DeepSeek-V4's geometry, o = S - W < 0
     * (partial first windows: window 0 pools only positions 0 .. o + W - 1) */
    {"csa W8 S4 (V4: o = -4) window n_local 3", ATTN_COMPRESSED, 8, 4, LOCAL_WINDOW, 3, GRID_ALIGNED, 2, 0, 1, NULL},
    {"csa W4 S2 (o = -2) window n_local 1", ATTN_COMPRESSED, 4, 2, LOCAL_WINDOW, 1, GRID_ALIGNED, 2, 0, 1, NULL},
    {"csa W5 S1 paper maps (o = -4) window n_local 2", ATTN_COMPRESSED, 5, 1, LOCAL_WINDOW, 2, GRID_ALIGNED, 1, 0, 1, NULL},
        /* docs/spec.md §6.4: a stride per KV head (S = the smallest) */
        {"multirate G2 W4 S 4,2 tail", ATTN_COMPRESSED, 4, 2, LOCAL_TAIL, 3, GRID_ALIGNED, 2, 0, 0, "4,2"},
        {"multirate G4 W6 S 6,4,3,5 tail", ATTN_COMPRESSED, 6, 3, LOCAL_TAIL, 2, GRID_ALIGNED, 4, 0, 0, "6,4,3,5"},
        {"multirate G4 W5 S 1,5,2,3 window n_local 2", ATTN_COMPRESSED, 5, 1, LOCAL_WINDOW, 2, GRID_ALIGNED, 4, 0, 0, "1,5,2,3"},
        {"multirate staggered G4 W6 S 6,4,3,5 tail (o = 0, 1, 1, 3)", ATTN_COMPRESSED, 6, 3, LOCAL_TAIL, 2, GRID_STAGGERED, 4, 0, 0, "6,4,3,5"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ModelConfig cfg = tu_tiny_config();
        cfg.n_layers = 1;
        cfg.attention = cases[ci].attention;
        cfg.window = cases[ci].W;
        cfg.stride = cases[ci].S;
        cfg.local = cases[ci].local;
        cfg.n_local = cases[ci].n_local;
        cfg.grid = cases[ci].grid;
        cfg.n_kv_heads = cases[ci].G;
        if (cases[ci].strides) snprintf(cfg.head_strides, sizeof cfg.head_strides, "%s", cases[ci].strides);
        if (cases[ci].csa) {            /* the csa kind with these W and S (its own keys; the base keys for allowed()) */
            tu_schedule(&cfg, 1, "csa");
            cfg.csa_window = cases[ci].W;
            cfg.csa_stride = cases[ci].S;
            cfg.csa_compressor = cases[ci].W == 2 * cases[ci].S ? COMPRESSOR_DEEPSEEK : COMPRESSOR_PAPER;
        }
        /* aligned: all heads at once (o = 0); staggered and multi-rate: one KV head at a time */
        int heads = cfg.grid == GRID_STAGGERED || cases[ci].strides ? cfg.n_kv_heads : 1;
        for (int kv = 0; kv < heads; kv++) {
            char err[ERR_LEN];
            Model *m = model_create(&cfg, be, 1, T, err);
            if (!check(m != NULL, cases[ci].name, "%s", err)) continue;
            tu_random_params(m, 7 + ci, 0.4);
            const int32_t u = cases[ci].shift;
            if (u && !check(model_set_grid_shift(m, &u, 1, err) == 0, cases[ci].name, "%s", err)) { model_free(m); continue; }
            int o = u + (cases[ci].csa ? cfg.stride - cfg.window : 0);    /* docs/spec.md §6.1: o = o_base + o_g + u */
            int S = cfg.stride;                                           /* KV head kv's stride, from the case's text */
            if (cases[ci].strides) {
                const char *q = cases[ci].strides;
                for (int g = 0; g < kv; g++) q = strchr(q, ',') + 1;
                S = atoi(q);
            }
            if (heads > 1) {
                o = cfg.grid == GRID_STAGGERED ? kv * S / cfg.n_kv_heads + u : u;   /* docs/spec.md §2b: floor(g S / G) (§6.4: S_g) */
                const TensorTable *tt = model_tensors(m);
                const TensorInfo *wo = &tt->t[tensor_table_find(tt, "model.layers.0.self_attn.o_proj.weight")];
                float *P = model_params(m) + wo->offset;                  /* [D, H*d] */
                const int Hd = cfg.n_heads * cfg.head_dim, group = cfg.n_heads / cfg.n_kv_heads;
                for (int row = 0; row < cfg.d_model; row++)
                    for (int col = 0; col < Hd; col++)
                        if (col / cfg.head_dim / group != kv) P[(size_t)row * Hd + col] = 0.0f;
                model_params_updated(m);
            }
            int32_t tok[T], tok2[T];
            tu_random_tokens(tok, T, V, 3 + ci);
            float h1[T * 16], h2[T * 16];
            model_debug_final_hidden(m, tok, 1, h1);
            int wrong = 0;
            char why[256] = "";
            for (int p = 0; p < T; p++) {
                memcpy(tok2, tok, sizeof tok);
                tok2[p] = (tok[p] + 5) % V;
                model_debug_final_hidden(m, tok2, 1, h2);
                for (int t = 0; t < T; t++) {
                    int changed = memcmp(h1 + t * 16, h2 + t * 16, sizeof(float) * 16) != 0;
                    if (changed != allowed(&cfg, T, p, t, o, S)) {
                        if (!wrong++)
                            snprintf(why, sizeof why, "token %d -> position %d: %s", p, t,
                                     changed ? "changed without an allowed path" : "unchanged despite a path");
                    }
                }
            }
            char name[160];
            if (heads > 1) snprintf(name, sizeof name, "visibility %s, KV head %d (o = %d, S = %d)", cases[ci].name, kv, o, S);
            else snprintf(name, sizeof name, "visibility %s", cases[ci].name);
            check(wrong == 0, name, "%d wrong (p, t) pairs, first %s", wrong, why);
            model_free(m);
        }
    }
    return check_exit_code();
}
