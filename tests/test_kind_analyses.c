/* The per-kind analyses of a layer schedule (docs/spec.md §3.7, §4.1, §4.2, §5.4, §5.5), checked
 * against hand-built cases and enumerations, never against the code under test:
 *   - indexer_query_stats: the visible entries holding a key position and the hit, against a
 *     brute-force walk over each entry's W pooled positions and its end (e_j <= q), for W8/S4 at
 *     o = 0 and o = -4 (V4's csa geometry) and W16/S16, every q and p < 64; two hand cases;
 *   - indexer_chance_hit against counting the k-subsets of n that meet a fixed h-subset;
 *   - gate_cycle_apply on a window,csa,hca stack (csa W4/S2 deepseek, hca W4/S4 shared) whose
 *     parameters are their own indices: each block of S slots of a gate bias rolls within itself,
 *     maps shared by a block or a window stay, every other float stays (expected indices written out);
 *   - gate_cycle_check's common period and its refusals, gate_cycle_layers' kind names;
 *   - knockout_parse_target's masks for KIND:all and KIND:H, and its errors;
 *   - probe_kind_folds: counts folded by each kind's own stride, and the chi-square by hand; the
 *     offsets pinned literally (csa o = S - W, docs/spec.md §5.4; hca 0), and a csa layer W7/S4
 *     (paper maps) with o = -3, whose phase (r + 3) mod 4 differs from r mod 4 (o ignored) and from
 *     (r - 3) mod 4 (o's sign flipped) (expected sums written out);
 *   - kind_fold_geometry: (S, o) of a compressed kind, 8 and 0 for a kind without a grid, -1 for
 *     a kind the schedule lacks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/check.h"
#include "tests/model_testutil.h"
#include "analysis/indexer_stats.h"
#include "analysis/interventions.h"
#include "model/layer_kinds.h"
#include "model/tensors.h"
#include "trainer/kind_fold.h"

static void check_indexer_enumeration(int W, int S, int o) {
    const int T = 64, nW = T - o >= W ? (T - o - W) / S + 1 : 0;
    uint8_t sel[64];
    int bad = 0, cases = 0;
    for (int q = 0; q < T && !bad; q++)
        for (int p = 0; p <= q && !bad; p++) {
            for (int j = 0; j < nW; j++) sel[j] = (uint8_t)((j * 7 + q) % 3 == 0);   /* an arbitrary selection */
            int visible = 0, holding = 0, hit = -1, selected = 0;
            for (int j = 0; j < nW; j++) {
                int end = o + j * S + W - 1;
                if (end > q) continue;                     /* not visible to q */
                visible++;
                selected += sel[j];
                for (int i = 0; i < W; i++)
                    if (o + j * S + i == p) {
                        holding++;
                        if (hit < 0) hit = 0;
                        if (sel[j]) hit = 1;
                    }
            }
            IndexerGeom g = {W, S, o, nW, 4};
            IndexerQuery r = indexer_query_stats(&g, sel, q, p);
            cases++;
            if (r.n_visible != visible || r.n_holding != holding || r.hit != hit || r.n_selected != selected) {
                printf("# W%d S%d o%d q %d p %d: got visible %d holding %d hit %d selected %d, expected %d %d %d %d\n", W, S, o, q, p,
                       r.n_visible, r.n_holding, r.hit, r.n_selected, visible, holding, hit, selected);
                bad = 1;
            }
        }
    check(!bad, "indexer: holding entries and hits equal the enumeration of every entry's pooled positions", "W%d S%d o%d (%d cases)", W, S, o, cases);
}

static long binom(int n, int k) {
    long r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

int main(void) {
    char err[ERR_LEN];
    /* ---- indexer selection ---- */
    check_indexer_enumeration(8, 4, 0);
    check_indexer_enumeration(8, 4, -4);
    check_indexer_enumeration(16, 16, 0);
    {   /* q 63, key at 25, W8/S4: o 0 -> entries 5 (20..27) and 6 (24..31) of 15; o -4 -> 6 (20..27), 7 (24..31) of 16 */
        uint8_t sel[16] = {0};
        sel[6] = 1;
        IndexerGeom a = {8, 4, 0, 15, 4}, b = {8, 4, -4, 16, 4};
        IndexerQuery ra = indexer_query_stats(&a, sel, 63, 25), rb = indexer_query_stats(&b, sel, 63, 25);
        check(ra.n_visible == 15 && ra.n_holding == 2 && ra.hit == 1, "indexer: o 0, key 25 held by entries 5 and 6, 6 selected: a hit",
              "%d %d %d", ra.n_visible, ra.n_holding, ra.hit);
        check(rb.n_visible == 16 && rb.n_holding == 2 && rb.hit == 1, "indexer: o -4, key 25 held by entries 6 and 7 of 16 visible",
              "%d %d %d", rb.n_visible, rb.n_holding, rb.hit);
        sel[6] = 0, sel[8] = 1;
        rb = indexer_query_stats(&b, sel, 63, 25);
        check(rb.hit == 0, "indexer: only entry 8 selected: a miss", "%d", rb.hit);
        rb = indexer_query_stats(&b, sel, 30, 28);        /* entries ending <= 30: j <= 7 (end 4j+3); 28 is in 7 (24..31: end 31 > 30) and 8 */
        check(rb.n_visible == 7 && rb.n_holding == 0 && rb.hit == -1, "indexer: a key in no visible entry is not counted",
              "%d %d %d", rb.n_visible, rb.n_holding, rb.hit);
        check(fabs(indexer_chance_hit(15, 4, 2) - 650.0 / 1365.0) < 1e-12, "indexer: chance 1 - C(13,4)/C(15,4) = 650/1365",
              "%.12f", indexer_chance_hit(15, 4, 2));
    }
    {   /* chance against counting subsets */
        int bad = 0;
        for (int n = 1; n <= 10 && !bad; n++)
            for (int k = 0; k <= n; k++)
                for (int h = 0; h <= n; h++) {
                    long meet = 0, all = 0;
                    for (unsigned m = 0; m < (1u << n); m++) {
                        if (__builtin_popcount(m) != k) continue;
                        all++;
                        meet += (m & ((1u << h) - 1)) != 0;
                    }
                    double want = (double)meet / all, got = indexer_chance_hit(n, k, h);
                    if (fabs(want - got) > 1e-12 || all != binom(n, k)) { printf("# n %d k %d h %d: %g vs %g\n", n, k, h, got, want); bad = 1; }
                }
        check(!bad, "indexer: chance equals the share of k-subsets meeting the h holding entries (n <= 10, every k, h)", "");
    }

    /* ---- gate cycling on a stack ---- */
    ModelConfig c = tu_tiny_config();
    tu_schedule(&c, 3, "window,csa,hca");          /* csa W4/S2 deepseek (2 maps), hca W4/S4 shared (1 map) */
    c.kv_tied = 1;
    int period = 0;
    check(gate_cycle_check(&c, NULL, "--gate-cycle", &period, err) == 0 && period == 4,
          "gate cycle: default layers of window,csa,hca (csa S2, hca S4): common period lcm = 4", "%d %s", period, err);
    int mask[3] = {1, 0, 0};
    check(gate_cycle_check(&c, mask, "--gate-cycle", NULL, err) != 0 && strstr(err, "layer 0 is a window layer"),
          "gate cycle: a window layer is refused by name", "%s", err);
    check(gate_cycle_layers(&c, "csa", mask, err) == 0 && mask[0] == 0 && mask[1] == 1 && mask[2] == 0, "gate cycle: --layers csa",
          "%d %d %d %s", mask[0], mask[1], mask[2], err);
    check(gate_cycle_check(&c, mask, "--gate-cycle", &period, err) == 0 && period == 2, "gate cycle: csa alone has period 2", "%d", period);
    check(gate_cycle_layers(&c, "2,csa", mask, err) == 0 && mask[0] == 0 && mask[1] == 1 && mask[2] == 1, "gate cycle: --layers 2,csa", "");
    check(gate_cycle_layers(&c, "swa", mask, err) != 0 && strstr(err, "'swa' is not a layer"), "gate cycle: an unknown kind is refused", "%s", err);
    check(gate_cycle_layers(&c, "full", mask, err) != 0 && strstr(err, "no full layer"), "gate cycle: a kind the schedule lacks is refused", "%s", err);
    check(gate_cycle_layers(&c, "1,,2", mask, err) != 0, "gate cycle: an empty item is refused", "%s", err);
    {
        TensorTable tt;
        if (tensor_table_build(&tt, &c, err)) { check(0, "tensor table of the stack", "%s", err); return 1; }
        float *x = malloc(sizeof(float) * tt.n_floats), *y = malloc(sizeof(float) * tt.n_floats);
        for (size_t i = 0; i < tt.n_floats; i++) x[i] = y[i] = (float)i;
        int rc = gate_cycle_apply(&tt, y, &c, 1, NULL, err);
        check(rc == 0, "gate cycle: applies to the stack", "%s", err);
        /* expected: csa bias [G 2, W 4, c 8]: slots (0 1)(2 3) swap within their blocks of S 2; hca bias
         * [2, 4, 8]: slot i takes slot (i - 1) mod 4; the maps ([G, 2, c, D] csa, [G, 1, c, D] hca) stay */
        const int csa_from[4] = {1, 0, 3, 2}, hca_from[4] = {3, 0, 1, 2};
        int moved_ok = 1;
        size_t changed = 0, expected_changed = 0;
        for (int l = 1; l <= 2; l++) {
            char name[TENSOR_NAME_LEN];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.compressor.k_gate.bias", l);
            int t = tensor_table_find(&tt, name);
            if (t < 0) { moved_ok = 0; printf("# %s missing\n", name); continue; }
            const TensorInfo *ti = &tt.t[t];
            for (int g = 0; g < 2; g++)
                for (int i = 0; i < 4; i++)
                    for (int ch = 0; ch < 8; ch++) {
                        size_t at = ti->offset + ((size_t)g * 4 + i) * 8 + ch;
                        int from = l == 1 ? csa_from[i] : hca_from[i];
                        size_t src = ti->offset + ((size_t)g * 4 + from) * 8 + ch;
                        if (y[at] != x[src]) moved_ok = 0;
                        expected_changed += from != i;
                    }
        }
        for (size_t i = 0; i < tt.n_floats; i++) changed += y[i] != x[i];
        check(moved_ok, "gate cycle: each gate bias's blocks of S slots roll by delta within themselves", "");
        check(changed == expected_changed && expected_changed == 2 * 8 * 4 + 2 * 8 * 4,
              "gate cycle: nothing else changes (the csa maps per half, the hca shared map, the window layer)", "%zu changed, %zu expected",
              changed, expected_changed);
        for (size_t i = 0; i < tt.n_floats; i++) y[i] = x[i];
        gate_cycle_apply(&tt, y, &c, 4, NULL, err);
        int same = !memcmp(x, y, sizeof(float) * tt.n_floats);
        check(same, "gate cycle: delta = the common period 4 is the identity", "");
        free(x), free(y);
        tensor_table_free(&tt);
    }

    /* ---- knockout targets ---- */
    {
        uint8_t m[6];
        int type, l, h, k;
        int rc = knockout_parse_target(&c, "csa:all", &type, &l, &h, &k, m, err);
        check(rc == 0 && type == KO_TARGET_KIND && k == KIND_CSA && !m[0] && !m[1] && m[2] && m[3] && !m[4] && !m[5],
              "knockout: csa:all = both KV heads of layer 1", "%s", err);
        rc = knockout_parse_target(&c, "hca:1", &type, &l, &h, &k, m, err);
        check(rc == 0 && type == KO_TARGET_KIND && k == KIND_HCA && h == 1 && !m[0] && !m[1] && !m[2] && !m[3] && !m[4] && m[5],
              "knockout: hca:1 = KV head 1 of layer 2", "%s", err);
        rc = knockout_parse_target(&c, "1:0", &type, &l, &h, &k, m, err);
        check(rc == 0 && type == KO_TARGET_HEAD && l == 1 && h == 0 && m[2] && !m[3], "knockout: 1:0 still one head", "%s", err);
        check(knockout_parse_target(&c, "all", &type, &l, &h, &k, m, err) == 0 && type == KO_TARGET_ALL, "knockout: all", "");
        check(knockout_parse_target(&c, "full:all", &type, &l, &h, &k, m, err) != 0 && strstr(err, "no full layer"),
              "knockout: a kind the schedule lacks is refused", "%s", err);
        check(knockout_parse_target(&c, "csa:2", &type, &l, &h, &k, m, err) != 0 && strstr(err, "KV head 0..1"),
              "knockout: a KV head out of range after a kind is refused", "%s", err);
        check(knockout_parse_target(&c, "swa:all", &type, &l, &h, &k, m, err) != 0 && strstr(err, "KIND:all"),
              "knockout: an unknown kind is refused with the syntax", "%s", err);
    }

    /* ---- per-kind folds ---- */
    {
        ProbeResult pr;
        probe_result_clear(&pr, 8);
        for (int r = 0; r < 8; r++) pr.total[0][r] = 10, pr.correct[0][r] = r;
        probe_result_finalize(&pr);
        KindFold kf[KIND_FOLD_MAX];
        int n = probe_kind_folds(&c, 16, &pr, kf);
        check(n == 2 && kf[0].kind == KIND_CSA && kf[0].S == 2 && kf[1].kind == KIND_HCA && kf[1].S == 4,
              "kind folds: csa (S 2) and hca (S 4), not the window layer", "%d", n);
        check(n == 2 && kf[0].o == -2 && kf[1].o == 0, "kind folds: csa W4/S2 o = S - W = -2, hca o = 0", "%d %d", kf[0].o, kf[1].o);
        if (n == 2) {
            check(kf[0].correct[0][0] == 12 && kf[0].correct[0][1] == 16 && kf[0].total[0][0] == 40 && kf[0].total[0][1] == 40,
                  "kind folds: csa by r mod 2: 0+2+4+6 = 12 and 1+3+5+7 = 16 of 40", "%ld %ld", kf[0].correct[0][0], kf[0].correct[0][1]);
            check(kf[1].correct[0][0] == 4 && kf[1].correct[0][1] == 6 && kf[1].correct[0][2] == 8 && kf[1].correct[0][3] == 10 &&
                      kf[1].total[0][3] == 20, "kind folds: hca by r mod 4: 4, 6, 8, 10 of 20", "");
            /* X^2 = 2 (2^2/14) + 2 (2^2/26): expected correct 14, wrong 26 */
            double want = 8.0 / 14 + 8.0 / 26;
            check(fabs(kf[0].test[0].chi2 - want) < 1e-12 && kf[0].test[0].df == 1, "kind folds: csa chi-square 8/14 + 8/26 (df 1)",
                  "%.12f vs %.12f", kf[0].test[0].chi2, want);
            check(isnan(kf[0].test[1].chi2), "kind folds: a protocol without prompts has no test", "%g", kf[0].test[1].chi2);
        }
        ModelConfig plain = tu_tiny_config();
        check(probe_kind_folds(&plain, 16, &pr, kf) == 0, "kind folds: none without a schedule", "");

        /* csa W7/S4 (paper maps): o = S - W = -3, phase (r + 3) mod 4 of r = 0..7 with correct(r) = r:
         * phase 0 <- r 1, 5 (6); 1 <- 2, 6 (8); 2 <- 3, 7 (10); 3 <- 0, 4 (4), each of 20 prompts (by
         * r mod 4: 4, 6, 8, 10; by (r - 3) mod 4: 10, 4, 6, 8) */
        ModelConfig c7 = c;
        c7.csa_window = 7, c7.csa_stride = 4, c7.csa_compressor = COMPRESSOR_PAPER;
        n = probe_kind_folds(&c7, 16, &pr, kf);
        check(n == 2 && kf[0].kind == KIND_CSA && kf[0].S == 4 && kf[0].o == -3, "kind folds: csa W7/S4 has S 4, o = S - W = -3",
              "%d: S %d o %d", n, kf[0].S, kf[0].o);
        if (n == 2) {
            const long want[4] = {6, 8, 10, 4};
            int same = 1;
            for (int s = 0; s < 4; s++) same &= kf[0].correct[0][s] == want[s] && kf[0].total[0][s] == 20;
            check(same, "kind folds: csa W7/S4 folds by (r + 3) mod 4: 6, 8, 10, 4 of 20", "%ld %ld %ld %ld", kf[0].correct[0][0],
                  kf[0].correct[0][1], kf[0].correct[0][2], kf[0].correct[0][3]);
        }
        int S = 0, o = 0, first = -1;
        check(kind_fold_geometry(&c7, KIND_CSA, 16, &S, &o, &first) == 1 && S == 4 && o == -3 && first == 1,
              "kind geometry: csa W7/S4 at layer 1: S 4, o -3", "S %d o %d first %d", S, o, first);
        check(kind_fold_geometry(&c7, KIND_HCA, 16, &S, &o, &first) == 1 && S == 4 && o == 0 && first == 2,
              "kind geometry: hca W4/S4 at layer 2: S 4, o 0", "S %d o %d first %d", S, o, first);
        check(kind_fold_geometry(&c7, KIND_WINDOW, 16, &S, &o, &first) == 0 && S == 8 && o == 0 && first == 0,
              "kind geometry: a window layer has no grid: S 8, o 0 by convention", "S %d o %d first %d", S, o, first);
        S = o = 77;
        check(kind_fold_geometry(&c7, KIND_FULL, 16, &S, &o, NULL) == -1 && S == 77 && o == 77,
              "kind geometry: a kind the schedule lacks: -1", "S %d o %d", S, o);
    }
    return check_exit_code();
}
