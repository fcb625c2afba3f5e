/* The derived sizes of model/dims.h and the enum words of trainer/run_config.h.
 *
 * dims_of(cfg, T) against values worked out by hand from docs/spec.md §2 and §2b:
 *   nW = #{j : jS + W - 1 <= T - 1} = (T - W) / S + 1 (0 when T < W, 0 for full attention);
 *   tied K/V (one branch) iff kv_tied or compressor = deepseek; maps W | 2 | 1 for paper |
 *   deepseek | shared; channels head_dim for vector gates, else 1; staggered o_g = floor(g S / G).
 * Multi-rate strides (docs/spec.md §6.4): head g's windows (T - W) / S_g + 1 by hand, the buffers'
 * rows the most of them, the parser's refusals, and the probe's phase fold the lcm of the strides.
 * And each enum key's words: every word config_load accepts for a key is stored as a value v
 * with config_K_names[v] equal to that word (the one table the parser and the writers share). */
#include <stddef.h>
#include <string.h>
#include "tests/check.h"
#include "model/dims.h"
#include "trainer/run_config.h"
#include "common/errors.h"
#include "trainer/probe_eval.h"

static ModelConfig compressed(int W, int S) {
    Config c;
    config_defaults(&c);
    ModelConfig m = c.model;
    m.attention = ATTN_COMPRESSED;
    m.window = W;
    m.stride = S;
    m.head_dim = 32;
    m.n_kv_heads = 4;
    return m;
}

static void test_windows(void) {
    ModelConfig m = compressed(8, 4);
    ModelDims d = dims_of(&m, 256);
    check(d.compressed && d.n_windows == 63, "W8 S4 T256: 63 windows", "compressed %d n_windows %d", d.compressed,
          d.n_windows);
    d = dims_of(&m, 7);
    check(d.n_windows == 0, "T7 < W8: no window", "n_windows %d", d.n_windows);
    d = dims_of(&m, 8);
    check(d.n_windows == 1 && dims_head_windows(&d, 3) == 1, "T = W: one window", "n_windows %d head 3 %d",
          d.n_windows, dims_head_windows(&d, 3));
    m.attention = ATTN_FULL;
    m.grid = GRID_STAGGERED;   /* ignored: full attention has no windows */
    d = dims_of(&m, 256);
    check(!d.compressed && d.n_windows == 0 && d.grid == GRID_ALIGNED && dims_head_windows(&d, 2) == 0 &&
              d.visibility == VIS_FULL,
          "full attention: no windows, aligned, VIS_FULL", "n_windows %d grid %d head 2 %d visibility %d", d.n_windows,
          d.grid, dims_head_windows(&d, 2), d.visibility);
}

static void test_grid(void) {
    ModelConfig m = compressed(8, 8);
    m.grid = GRID_STAGGERED;
    ModelDims d = dims_of(&m, 256);
    /* G = 4, S = 8: o_g = 0, 2, 4, 6; windows (256 - o_g - 8) / 8 + 1 = 32, 31, 31, 31 */
    const int want_o[4] = {0, 2, 4, 6}, want_n[4] = {32, 31, 31, 31};
    int bad = 0;
    for (int g = 0; g < 4; g++) bad += dims_grid_offset(&d, g) != want_o[g] || dims_head_windows(&d, g) != want_n[g];
    check(!bad && d.n_windows == 32, "staggered G4 S8 T256: o_g and windows per head", "%d heads wrong, n_windows %d",
          bad, d.n_windows);
    m.grid = GRID_ALIGNED;
    d = dims_of(&m, 256);
    check(dims_grid_offset(&d, 3) == 0 && dims_head_windows(&d, 3) == 32, "aligned: o_g = 0, same windows",
          "o_3 %d windows %d", dims_grid_offset(&d, 3), dims_head_windows(&d, 3));
}

static void test_compressor_and_gate(void) {
    ModelConfig m = compressed(8, 4);
    ModelDims d = dims_of(&m, 64);
    check(!d.tied_kv && d.branches == 2 && d.n_maps == 8, "paper: separate K/V, W maps", "tied %d branches %d maps %d",
          d.tied_kv, d.branches, d.n_maps);
    m.kv_tied = 1;
    d = dims_of(&m, 64);
    check(d.tied_kv && d.branches == 1 && d.n_maps == 8, "kv_tied: one branch", "tied %d branches %d maps %d", d.tied_kv,
          d.branches, d.n_maps);
    m.kv_tied = 0;
    m.compressor = COMPRESSOR_DEEPSEEK;
    d = dims_of(&m, 64);
    check(d.tied_kv && d.branches == 1 && d.n_maps == 2, "deepseek: tied, 2 maps", "tied %d branches %d maps %d",
          d.tied_kv, d.branches, d.n_maps);
    m.compressor = COMPRESSOR_SHARED;
    d = dims_of(&m, 64);
    check(!d.tied_kv && d.n_maps == 1, "shared: 1 map", "tied %d maps %d", d.tied_kv, d.n_maps);
    const int gates[3] = {GATE_SCALAR, GATE_VECTOR, GATE_UNIFORM}, want_c[3] = {1, 32, 1}, want_gated[3] = {1, 1, 0};
    for (int i = 0; i < 3; i++) {
        m.gate = gates[i];
        d = dims_of(&m, 64);
        char name[64];
        snprintf(name, sizeof name, "gate %d: channels %d, gated %d", gates[i], want_c[i], want_gated[i]);
        check(d.channels == want_c[i] && d.gated == want_gated[i], name, "channels %d gated %d", d.channels, d.gated);
    }
    m.local = LOCAL_TAIL;
    check(dims_of(&m, 64).visibility == VIS_TAIL, "local = tail: VIS_TAIL", "visibility %d", dims_of(&m, 64).visibility);
    m.local = LOCAL_WINDOW;
    check(dims_of(&m, 64).visibility == VIS_WINDOW, "local = window: VIS_WINDOW", "visibility %d",
          dims_of(&m, 64).visibility);
}

/* Every word of key `key` loads as a value whose table entry is that word. The words are
 * written here by hand (docs/spec.md / the INI documentation), not taken from the table. */
static void words_round_trip(const char *key, const char *const *words, int n, const char *const *table,
                             size_t field_offset) {
    for (int i = 0; i < n; i++) {
        char o1[64], o2[] = "model.attention=compressed", o3[] = "model.window=8", o4[] = "model.stride=4";
        snprintf(o1, sizeof o1, "model.%s=%s", key, words[i]);
        char *ov[4] = {o2, o3, o4, o1};
        Config c;
        char err[ERR_LEN] = "";
        int rc = config_load(&c, NULL, 4, ov, err);
        int v = rc ? -1 : *(const int *)((const char *)&c.model + field_offset);
        char name[96];
        snprintf(name, sizeof name, "names: %s = %s loads as value %d, spelled back the same", key, words[i], i);
        check(rc == 0 && v == i && table[v] && !strcmp(table[v], words[i]), name, "rc %d (%s) value %d word '%s'", rc,
              err, v, v >= 0 && table[v] ? table[v] : "(none)");
    }
    char name[64];
    snprintf(name, sizeof name, "names: %s has exactly %d words", key, n);
    check(table[n] == NULL, name, "the table has more than %d words", n);
}

static void test_names(void) {
    const char *attention[] = {"full", "compressed"}, *gate[] = {"scalar", "vector", "uniform"},
               *local[] = {"window", "tail"}, *compressor[] = {"paper", "deepseek", "shared"},
               *grid[] = {"aligned", "staggered"};
    words_round_trip("attention", attention, 2, config_attention_names, offsetof(ModelConfig, attention));
    words_round_trip("gate", gate, 3, config_gate_names, offsetof(ModelConfig, gate));
    words_round_trip("local", local, 2, config_local_names, offsetof(ModelConfig, local));
    /* deepseek needs window = 2 * stride: 8 / 4 above */
    words_round_trip("compressor", compressor, 3, config_compressor_names, offsetof(ModelConfig, compressor));
    words_round_trip("grid", grid, 2, config_grid_names, offsetof(ModelConfig, grid));
}

static void test_multirate(void) {
    ModelConfig m = compressed(8, 6);
    snprintf(m.head_strides, sizeof m.head_strides, " 8, 6,8 ,6");
    ModelDims d = dims_of(&m, 256);
    /* by hand: S 8: (256 - 8) / 8 + 1 = 32; S 6: (256 - 8) / 6 + 1 = 42 */
    check(d.multirate && dims_head_stride(&d, 0) == 8 && dims_head_stride(&d, 1) == 6 && dims_head_stride(&d, 3) == 6 &&
          dims_head_windows(&d, 0) == 32 && dims_head_windows(&d, 1) == 42 && dims_head_windows(&d, 2) == 32 &&
          d.n_windows == 42 && dims_windows_at(&d, 256) == 42 && dims_windows_at(&d, 20) == 3,
          "multirate 8,6,8,6 at T 256: 32 / 42 windows per head, 42 buffer rows",
          "strides %d %d, windows %d %d, rows %d, at 20: %d", dims_head_stride(&d, 0), dims_head_stride(&d, 1),
          dims_head_windows(&d, 0), dims_head_windows(&d, 1), d.n_windows, dims_windows_at(&d, 20));
    check(probe_phase_fold(&m) == 24, "multirate 8,6,8,6: phase fold lcm 24", "%d", probe_phase_fold(&m));
    snprintf(m.head_strides, sizeof m.head_strides, "8,7,8,6");
    check(probe_phase_fold(&m) == 168, "multirate 8,7,8,6: phase fold lcm 168", "%d", probe_phase_fold(&m));
    ModelConfig w = compressed(16, 13);
    snprintf(w.head_strides, sizeof w.head_strides, "16,15,14,13");
    check(probe_phase_fold(&w) == 13, "multirate 16,15,14,13: lcm 21840 beyond the probe's 256 residues, fold the smallest stride",
          "%d", probe_phase_fold(&w));
    ModelConfig a = compressed(8, 6);
    ModelDims da = dims_of(&a, 256);
    check(!da.multirate && dims_head_strides(&da) == NULL && dims_head_stride(&da, 3) == 6 && da.n_windows == 42,
          "no head_strides: every head the stride, no stride array", "multirate %d", da.multirate);
    struct { const char *text; int G, S; const char *want; } bad[] = {
        {"8,6,8", 4, 6, "one stride per KV head"}, {"8,x,8,6", 4, 6, "item 2 is not a positive integer"},
        {"8,6,,6", 4, 6, "item 3"}, {"8,6,8,6,", 4, 6, "item 5"}, {"9,6,8,6", 4, 6, "1..window"},
        {"8,6,8,6", 4, 8, "smallest head stride (6)"}, {"8;6;8;6", 4, 6, "expected a comma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ModelConfig b = compressed(8, bad[i].S);
        b.n_kv_heads = bad[i].G;
        snprintf(b.head_strides, sizeof b.head_strides, "%s", bad[i].text);
        int hs[HEAD_STRIDES_MAX];
        char err[ERR_LEN] = "";
        check(config_head_strides(&b, hs, err) < 0 && strstr(err, bad[i].want), "head_strides refused", "'%s': '%s'",
              bad[i].text, err);
    }
}

int main(void) {
    test_multirate();
    test_windows();
    test_grid();
    test_compressor_and_gate();
    test_names();
    return check_exit_code();
}
