"""The analyses of a layer schedule on a checkpoint (docs/spec.md §3.4, §3.7, §4.1, §4.2, §5.4, §5.5),
end to end on a window,csa,hca stack trained 10 steps (configs/test/tiny_stack.ini, T = 64):
- the training's gate statistics cover the csa and hca layers, each over its own W (the profile
  sums to W_l, NaN past it and for the window layer);
- plain --eval --probe stores each compressed kind's own phase fold: the counts equal the stored
  per-residue counts summed over r = phi (mod S_k) (numpy, not the code under test), and the
  Pearson chi-square of each fold recomputed from them;
- --knockout csa:all stores the kind's knockout; its fold by the csa phase is recomputed from the
  stored accuracies and prompt counts; --knockout all adds each kind knocked out whole (the csa one
  equal to csa:all's) and the layers' kinds; bad KIND targets are refused (exit 2, one line);
- --gate-cycle all --layers csa cycles the csa layer over its own period 4: the prediction of delta
  is the clean phase curve rolled by delta, delta 0 is the clean probe, a window layer or a delta
  past the period is refused;
- --indexer-stats counts, for every prompt, whether the indexer's top-k at the query holds an entry
  pooling t_K: n per phase equals the probe's prompts per phase (every t_K is in a visible entry
  here), the rates and Wilson intervals follow from the counts, each query sees nW(63) entries of
  which it selects k, so the counts by age are prompts x 1 and the selected ones sum to prompts x k;
- the grid offsets are pinned literally (docs/spec.md §5.4: o = S - W on csa layers, -4 for W8/S4;
  0 on hca layers), not read back from the stored attributes alone;
- a second stack whose csa layer is W7/S4 (paper maps: o = -3, so (t_K - o) mod 4 = (t_K + 3) mod 4
  differs from t_K mod 4 and from (t_K - 3) mod 4), evaluated on a thinned probe whose residues r
  hold 1, 3, 5, 7 prompts by r mod 4 (the plain probe's equal counts fold alike under any phase
  map): the csa fold's counts, the knockout's fold and the indexer's counts per phase follow
  (r + 3) mod 4, written out here;
- tools/report shows the kind folds, the kinds knocked out and the indexer table."""
import math
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("kind analyses", "h5py missing")
    finish()

tu.require_train()
ROOT = tu.ROOT
STACK = os.path.join(ROOT, "configs", "test", "tiny_stack.ini")
d, data = tu.scratch_with_corpus("test_kind_analyses")
rc, out = tu.run([STACK, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs", "run.name=stack"])
check(rc == 0 and "done: 10 steps" in out, "the window,csa,hca stack trains 10 steps", out[-600:])
ck = f"{d}/runs/stack/checkpoints/step_00000010"

# ---- gate statistics of every compressed layer of the stack (docs/spec.md §3.4) ----
with h5py.File(f"{d}/runs/stack/metrics.h5", "r") as f:
    prof = np.asarray(f["gates/profile"][()]) if "gates/profile" in f else None       # [n, L, G, 2, W]
    eff = np.asarray(f["gates/eff_static"][()]) if "gates/eff_static" in f else None  # [n, L, G, 2]
check(prof is not None and prof.shape[1:] == (3, 2, 2, 16), "gates: /gates/profile [n, 3 layers, 2 KV heads, 2, widest W 16]",
      f"{None if prof is None else prof.shape}")
if prof is not None and eff is not None:
    last = prof[-1]
    # the profile W E[alpha_i] sums to the layer's own W over its offsets (sum_i E[alpha_i] = 1); NaN past it
    check(np.isnan(last[0]).all() and np.isnan(eff[-1][0]).all(), "gates: the window layer has none (NaN)", f"{last[0]}")
    check(np.allclose(last[1][..., :8].sum(axis=-1), 8, atol=1e-3) and np.isnan(last[1][..., 8:]).all(),
          "gates: the csa layer's profile sums to its W 8 over offsets 0..7, NaN past them", f"{last[1]}")
    check(np.allclose(last[2].sum(axis=-1), 16, atol=1e-3), "gates: the hca layer's profile sums to its W 16", f"{last[2]}")
    check(((eff[-1][1] >= 1 - 1e-4) & (eff[-1][1] <= 8 + 1e-4)).all() and ((eff[-1][2] >= 1 - 1e-4) & (eff[-1][2] <= 16 + 1e-4)).all(),
          "gates: eff_static within 1..W of each layer", f"{eff[-1]}")
probe, calib = f"{d}/probe.bin", f"{d}/probe.calib.bin"
for path, seed, per in ((probe, 1, 8), (calib, 99, 4)):
    r = tu.subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", path, "--seed", str(seed),
                           "--per-residue", str(per), "--residues", "16", "--max-len", "64", "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"make-probe {os.path.basename(path)}", r.stderr[-300:])
H5 = f"{ck}/analysis.h5"


def last(kind):
    return last_in(H5, kind)


def last_in(path, kind):
    with h5py.File(path, "r") as f:
        name = sorted(k for k in f if k.startswith(kind + "_"))[-1]
        g = f[name]
        text = lambda v: v.decode() if isinstance(v, bytes) else v
        return {k: np.asarray(g[k][()]) for k in g}, {k: text(g.attrs[k]) for k in g.attrs}


def pearson_chi2(c, n):
    keep = n > 0
    c, n = c[keep].astype(float), n[keep].astype(float)
    C, N = c.sum(), n.sum()
    if C == 0 or C == N:
        return 0.0
    ec, ei = n * C / N, n * (N - C) / N
    return float(((c - ec) ** 2 / ec + ((n - c) - ei) ** 2 / ei).sum())


def one_line_error(args, want, name):
    rc, out = tu.run(["--eval", ck, "--probe", probe, "--out", H5] + args)
    line = [x for x in out.splitlines() if x.startswith("phaselab:")]
    check(rc == 2 and len(line) == 1 and want in line[0], name, f"rc {rc}: {out[-300:]}")


# ---- per-kind phase folds of the plain probe ----
rc, out = tu.run(["--eval", ck, "--probe", probe, "--out", H5])
check(rc == 0 and "by the csa layers' phase" in out and "by the hca layers' phase" in out,
      "--eval --probe prints each compressed kind's fold", out[-800:])
check(len(re.findall(r"worst phase \d+ \([\d.]+%, 95% Wilson interval \[[\d.]+, [\d.]+\], n = \d+\)", out)) == 4,
      "--eval --probe: each kind's worst phase with its Wilson interval and n (2 kinds x 2 protocols)", out[-800:])
g, a = last("probe")
check(str(a.get("kinds")) == "csa,hca", "probe group: kinds csa,hca (the window layer has no grid)", f"{a.get('kinds')}")
for kind in ("csa", "hca"):
    S, o = int(a[f"kind_{kind}_stride"]), int(a[f"kind_{kind}_grid_offset"])
    check(S == {"csa": 4, "hca": 16}[kind], f"probe group: {kind} stride", f"{S}")
    check(o == {"csa": -4, "hca": 0}[kind], f"probe group: {kind} grid offset (csa: S - W = 4 - 8)", f"{o}")
    tot, cor = g["total"], g["correct"]                      # [2, 16] by residue r = t_K mod 16
    want_t = np.zeros((2, S)); want_c = np.zeros((2, S))
    for r in range(tot.shape[1]):
        want_t[:, (r - o) % S] += tot[:, r]
        want_c[:, (r - o) % S] += cor[:, r]
    check(np.array_equal(g[f"kind_{kind}_total"], want_t) and np.array_equal(g[f"kind_{kind}_correct"], want_c),
          f"probe group: the {kind} fold sums the residues of each phase (r - o) mod {S}", f"{g[f'kind_{kind}_total']} vs {want_t}")
    chi = [pearson_chi2(want_c[p], want_t[p]) for p in range(2)]
    check(np.allclose(g[f"kind_{kind}_test"][:, 0], chi, rtol=1e-9, atol=1e-12),
          f"probe group: the {kind} fold's chi-square recomputed from its counts", f"{g[f'kind_{kind}_test'][:, 0]} vs {chi}")

# ---- knockout by kind ----
rc, out = tu.run(["--eval", ck, "--probe", probe, "--calib", calib, "--knockout", "csa:all", "--out", H5])
check(rc == 0 and "kind csa knocked out whole (2 KV heads at once)" in out, "--knockout csa:all runs", out[-600:])
g, a = last("knockout")
S = int(a["kind_csa_stride"])
ok = g["kind_acc"].shape == (1, 2, 16) and g["kind_csa_rel_change_phase"].shape == (2, S) and S == 4
check(ok, "knockout csa:all: kind_acc [1, 2, P] and kind_csa_rel_change_phase [2, 4]", f"{g['kind_acc'].shape}")
check(np.isnan(g["rel_change_mean"]).all(), "knockout csa:all: no single head knocked out (the [L, G] maps are NaN)", "")
if ok:
    with h5py.File(H5, "r") as f:
        pg = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
        tot = np.asarray(pg["total"][()])
    o = int(a["kind_csa_grid_offset"])
    check(o == -4, "knockout csa:all: the csa grid offset S - W = -4", f"{o}")
    want = np.full((2, S), np.nan)
    for p in range(2):
        ck_ = np.zeros(S); cc_ = np.zeros(S); nn = np.zeros(S)
        for r in range(16):
            ck_[(r - o) % S] += round(g["kind_acc"][0, p, r] * tot[p, r] / 100)
            cc_[(r - o) % S] += round(g["acc_clean"][p, r] * tot[p, r] / 100)
            nn[(r - o) % S] += tot[p, r]
        for s in range(S):
            if cc_[s] > 0:
                want[p, s] = 100 * (ck_[s] / nn[s] - cc_[s] / nn[s]) / (cc_[s] / nn[s])
    got = g["kind_csa_rel_change_phase"]
    check(np.array_equal(np.isnan(got), np.isnan(want)) and np.allclose(got[~np.isnan(got)], want[~np.isnan(want)]),
          "knockout csa:all: the change by csa phase recomputed from the stored accuracies and counts", f"{got} vs {want}")
kcsa = g["kind_acc"][0]
rc, out = tu.run(["--eval", ck, "--probe", probe, "--calib", calib, "--knockout", "all", "--out", H5])
check(rc == 0 and "per-head knockouts grouped by layer kind" in out, "--knockout all runs and groups the heads by kind", out[-600:])
g, a = last("knockout")
check(str(a.get("kinds")) == "window,csa,hca" and list(g["layer_kind"]) == [2, 3, 4] and g["kind_acc"].shape == (3, 2, 16),
      "knockout all: every kind knocked out whole, and each layer's kind", f"{a.get('kinds')} {g.get('layer_kind')}")
check(np.array_equal(g["kind_acc"][1], kcsa, equal_nan=True), "knockout all: its csa row equals --knockout csa:all", "")
check(np.isfinite(g["rel_change_mean"]).any() or np.isfinite(g["acc"]).any(), "knockout all: the per-head sweep is kept", "")
# a probe whose residues the hca stride 16 does not divide: that kind's fold is undefined, and says so
probe12, calib12 = f"{d}/probe12.bin", f"{d}/probe12.calib.bin"
for path, seed in ((probe12, 5), (calib12, 6)):
    r = tu.subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", path, "--seed", str(seed),
                           "--per-residue", "2", "--residues", "12", "--max-len", "64", "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"make-probe {os.path.basename(path)}", r.stderr[-300:])
rc, out = tu.run(["--eval", ck, "--probe", probe12, "--calib", calib12, "--knockout", "hca:all", "--out", f"{d}/ko12.h5"])
check(rc == 0 and "the probe's 12 residues are not a multiple of 16" in out and "not a multiple of 4" not in out,
      "--knockout hca:all with P = 12: the hca fold (S 16) says it is undefined", out[-600:])
one_line_error(["--knockout", "full:all"], "no full layer", "--knockout full:all on a stack without full layers: exit 2, one line")
one_line_error(["--knockout", "csa:9"], "KV head 0..1", "--knockout csa:9: exit 2 naming the KV heads")
one_line_error(["--knockout", "swa:all"], "KIND:all", "--knockout swa:all: exit 2 with the syntax")

# ---- gate cycling on the csa layer ----
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "all", "--layers", "csa", "--out", H5])
check(rc == 0 and "common period 4" in out, "--gate-cycle all --layers csa runs over the csa period", out[-600:])
g, a = last("gate_cycle")
check(list(g["delta"]) == [0, 1, 2, 3] and int(a["stride"]) == 4 and str(a.get("cycled_layers")) == "1:csa",
      "gate cycle: deltas 0..3, period 4, layer 1 (csa)", f"{g['delta']} {a.get('stride')} {a.get('cycled_layers')}")
clean = g["acc_phase"][0]
check(all(np.array_equal(g["predicted_phase"][k], np.roll(clean, k, axis=1), equal_nan=True) for k in range(4)),
      "gate cycle: the prediction of delta is the clean phase curve rolled by delta", "")
with h5py.File(H5, "r") as f:
    pg = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
    pacc = np.asarray(pg["acc"][()])
check(np.array_equal(g["acc"][0], pacc, equal_nan=True), "gate cycle: delta 0 is the plain probe's accuracy", "")
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "4", "--layers", "csa", "--out", H5])
g4, _ = last("gate_cycle")
check(rc == 0 and np.array_equal(g4["acc"][0], pacc, equal_nan=True), "gate cycle: delta 4 (the period) is the identity", out[-300:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "--layers", "hca", "--out", H5])
g1, _ = last("gate_cycle")
check(rc == 0 and g1["acc_phase"].shape == (1, 2, 16), "gate cycle: --layers hca folds by the hca period 16", out[-300:])
one_line_error(["--gate-cycle", "1", "--layers", "0"], "layer 0 is a window layer", "--gate-cycle on a window layer: exit 2, one line")
one_line_error(["--gate-cycle", "5", "--layers", "csa"], "0..4", "--gate-cycle 5 past the csa period: exit 2")

# ---- the indexer's selection by phase ----
rc, out = tu.run(["--eval", ck, "--probe", probe, "--indexer-stats", "--out", H5])
check(rc == 0 and "homogeneity across phases" in out, "--indexer-stats runs", out[-600:])
g, a = last("indexer")
W, S, o, nW, k = (int(x) for x in g["geometry"][0])
check((W, S, o, k) == (8, 4, -4, 4) and list(g["indexer_layer"]) == [1], "indexer: layer 1, W8/S4, o = S - W = -4, top-4", f"{g['geometry']}")
with h5py.File(H5, "r") as f:
    pg = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
    tot = np.asarray(pg["total"][()])
want_n = np.zeros((2, S))
for r in range(16):
    want_n[:, (r - o) % S] += tot[:, r]
n_q = sum(1 for j in range(nW) if o + j * S + W - 1 <= 63)                    # entries visible to q = 63
check(np.array_equal(g["n"][0], want_n) and g["uncounted"].sum() == 0,
      "indexer: every prompt counted once, at its key's phase (t_K - o) mod S", f"{g['n'][0]} vs {want_n}")
hits, n = g["hits"][0], g["n"][0]
check(np.allclose(g["rate"][0], 100 * hits / n) and (hits <= n).all(), "indexer: rate = 100 hits / n", "")
z = 1.959963984540054
ph = hits / n
cen = (ph + z * z / (2 * n)) / (1 + z * z / n)
half = z * np.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
check(np.allclose(g["rate_lo"][0], 100 * np.maximum(0, cen - half)) and np.allclose(g["rate_hi"][0], 100 * np.minimum(1, cen + half)),
      "indexer: the Wilson interval of each phase from its counts", "")
chi = [pearson_chi2(hits[p], n[p]) for p in range(2)]
check(np.allclose(g["phase_test"][0][:, 0], chi), "indexer: the homogeneity chi-square recomputed from the counts",
      f"{g['phase_test'][0][:, 0]} vs {chi}")
prompts = int(tot.sum())
check(np.array_equal(g["age_visible"][0][:n_q], np.full(n_q, prompts)) and g["age_visible"][0][n_q:].sum() == 0,
      f"indexer: each of the {prompts} queries sees the {n_q} entries ages 0..{n_q - 1}", f"{g['age_visible'][0]}")
check(g["age_selected"][0].sum() == prompts * min(k, n_q), f"indexer: each query selects min(k, n_q) = {min(k, n_q)}",
      f"{g['age_selected'][0].sum()}")
check(((g["chance"][0] > 0) & (g["chance"][0] < 100)).all(), "indexer: the chance rate lies in (0, 100)", f"{g['chance'][0]}")
rc, out = tu.run(["--eval", ck, "--probe", probe, "--indexer-stats", "--out", H5, "model.csa_topk=0"])
line = [x for x in out.splitlines() if x.startswith("phaselab:")]
check(rc == 2 and line and "no lightning indexer" in line[-1], "--indexer-stats without an indexer: exit 2, one line", out[-300:])

# ---- a csa layer whose grid offset is not a multiple of its stride: W7/S4 paper, o = -3 ----
def thin_probe(src, dst, keep):
    """dst: src's prompts (data/probe.h: 256-byte header, 32-byte records, u32 tokens) with only the
    first keep(r) of each (protocol, residue r), their tokens re-packed."""
    raw = open(src, "rb").read()
    n = struct.unpack_from("<I", raw, 16)[0]
    recs = [struct.unpack_from("<IIIIIIQ", raw, 256 + 32 * i) for i in range(n)]
    tok0 = 256 + 32 * n
    seen, table, toks, off = {}, bytearray(), bytearray(), 0
    for (proto, r, tk, ans, length, idx, o) in recs:
        seen[proto, r] = seen.get((proto, r), 0) + 1
        if seen[proto, r] > keep(r):
            continue
        table += struct.pack("<IIIIIIQ", proto, r, tk, ans, length, idx, off)
        toks += raw[tok0 + 4 * o: tok0 + 4 * (o + length)]
        off += length
    head = bytearray(raw[:256])
    struct.pack_into("<I", head, 16, len(table) // 32)
    struct.pack_into("<Q", head, 32, off)
    struct.pack_into("<I", head, 124, 0)                      # prompts per residue: unknown (not equal)
    open(dst, "wb").write(bytes(head) + bytes(table) + bytes(toks))


thin = f"{d}/probe.thin.bin"
thin_probe(probe, thin, lambda r: 1 + 2 * (r % 4))
rc, out = tu.run([STACK, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs", "run.name=w7",
                  "model.csa_window=7", "model.csa_compressor=paper", f"eval.probe={thin}"])
check(rc == 0 and "done: 10 steps" in out, "the stack with a csa W7/S4 layer (paper maps) trains 10 steps", out[-600:])
check("csa layers' phase (t_K - (-3)) mod 4 (prefix padding): worst phase" in out and
      "hca layers' phase (t_K - (0)) mod 16 (prefix padding): worst phase" in out,
      "W7: the training's probe logs each kind's own fold", out[-900:])
ck7 = f"{d}/runs/w7/checkpoints/step_00000010"
H7 = f"{ck7}/analysis.h5"
tot7 = np.zeros((2, 16))
for r in range(16):
    tot7[:, r] = 1 + 2 * (r % 4)                                 # the thinned probe's prompts per residue


def fold_w7(x):
    """[2, 16] by residue r -> [2, 4] by the csa phase (r - (-3)) mod 4 = (r + 3) mod 4"""
    y = np.zeros((2, 4))
    for r in range(16):
        y[:, (r + 3) % 4] += x[:, r]
    return y


want_t7 = fold_w7(tot7)
# ---- the training's probe folded by kind: /probe_kinds (docs/spec.md §5.5) ----
with h5py.File(f"{d}/runs/w7/metrics.h5", "r") as f:
    pk = {k: np.asarray(f["probe_kinds"][k][()]) for k in f["probe_kinds"]} if "probe_kinds" in f else {}
    acc_r = np.asarray(f["probe/acc_pp"][()])[-1]                 # [16] by residue, percent
check(sorted(pk) == sorted(["step"] + [f"{a}_{p}_{k}" for a in ("acc", "total", "p") for p in ("pp", "ip") for k in ("csa", "hca")]),
      "W7: /probe_kinds holds acc, total, p per protocol for the csa and hca kinds (no window kind)", f"{sorted(pk)}")
if pk:
    cor_r = np.round(acc_r * tot7[0] / 100)                     # right prompts by residue, from /probe
    check(np.array_equal(pk["total_pp_csa"][-1], want_t7[0]) and np.array_equal(pk["total_pp_hca"][-1], tot7[0]),
          "W7: /probe_kinds counts fold residue r into (r + 3) mod 4 (csa) and r mod 16 (hca)",
          f"{pk['total_pp_csa'][-1]} {pk['total_pp_hca'][-1]}")
    want_acc = 100 * fold_w7(np.stack([cor_r, cor_r]))[0] / want_t7[0]
    check(np.allclose(pk["acc_pp_csa"][-1], want_acc), "W7: /probe_kinds csa accuracy = its folded right / prompts",
          f"{pk['acc_pp_csa'][-1]} vs {want_acc}")
    check(0 <= pk["p_pp_csa"][-1] <= 1 and 0 <= pk["p_pp_hca"][-1] <= 1, "W7: /probe_kinds phase-test p-values in [0, 1]",
          f"{pk['p_pp_csa'][-1]} {pk['p_pp_hca'][-1]}")
check(not np.array_equal(want_t7, tot7[:, :4] * 4) and not np.array_equal(want_t7, np.roll(want_t7, 2, axis=1)),
      "W7: the thinned probe tells (r + 3) mod 4 from r mod 4 and from (r - 3) mod 4", f"{want_t7}")
rc, out = tu.run(["--eval", ck7, "--probe", thin, "--out", H7])
check(rc == 0 and "by the csa layers' phase (t_K - (-3)) mod 4" in out, "W7: --eval --probe folds by (t_K + 3) mod 4", out[-600:])
with h5py.File(H7, "r") as f:
    g7 = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
    a7 = dict(g7.attrs)
    got_t, got_c, cor7, pt7 = (np.asarray(g7[k][()]) for k in ("kind_csa_total", "kind_csa_correct", "correct", "total"))
check(int(a7["kind_csa_stride"]) == 4 and int(a7["kind_csa_grid_offset"]) == -3, "W7: probe group csa S 4, o = S - W = -3",
      f"{a7.get('kind_csa_stride')} {a7.get('kind_csa_grid_offset')}")
check(np.array_equal(pt7, tot7), "W7: the probe counts 1, 3, 5, 7 prompts by r mod 4", f"{pt7}")
check(np.array_equal(got_t, want_t7) and np.array_equal(got_c, fold_w7(cor7)),
      "W7: the csa fold sums each residue r into phase (r + 3) mod 4", f"{got_t} vs {want_t7}")
rc, out = tu.run(["--eval", ck7, "--probe", thin, "--calib", calib, "--knockout", "csa:all", "--out", H7])
g, a = last_in(H7, "knockout")
check(rc == 0 and int(a["kind_csa_grid_offset"]) == -3, "W7: --knockout csa:all stores o = -3", out[-400:])
if rc == 0:
    ck_ = fold_w7(np.round(g["kind_acc"][0] * tot7 / 100))
    cc_ = fold_w7(np.round(g["acc_clean"] * tot7 / 100))
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(cc_ > 0, 100 * (ck_ / want_t7 - cc_ / want_t7) / (cc_ / want_t7), np.nan)
    got = g["kind_csa_rel_change_phase"]
    check(np.array_equal(np.isnan(got), np.isnan(want)) and np.allclose(got[~np.isnan(got)], want[~np.isnan(want)]),
          "W7: the knockout's change by csa phase folds by (r + 3) mod 4", f"{got} vs {want}")
rc, out = tu.run(["--eval", ck7, "--probe", thin, "--indexer-stats", "--out", H7])
g, a = last_in(H7, "indexer")
W, S, o, nW, k = (int(x) for x in g["geometry"][0])
check(rc == 0 and (W, S, o) == (7, 4, -3), "W7: indexer geometry W7/S4, o = -3", f"{g['geometry']}")
check(np.array_equal(g["n"][0], want_t7) and g["uncounted"].sum() == 0, "W7: the indexer counts each prompt at phase (t_K + 3) mod 4",
      f"{g['n'][0]} vs {want_t7}")

# ---- the report ----
try:
    import matplotlib  # noqa: F401
    have_mpl = True
except ImportError:
    have_mpl = False
if have_mpl:
    rep = f"{d}/report"
    r = tu.subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), f"{d}/runs/stack", "--out", rep], capture_output=True, text=True,
                          timeout=600)
    md = open(f"{rep}/analysis.md").read() if os.path.exists(f"{rep}/analysis.md") else ""
    check("**csa layers** (S = 4" in md and "**hca layers** (S = 16" in md, "report: the probe's per-kind folds", md[:400])
    check("layer kinds knocked out whole" in md and "indexer selection by phase" in md,
          "report: the kinds knocked out and the indexer's selection", r.stderr[-400:])
    check(os.path.isdir(rep) and any(x.startswith("indexer_") and x.endswith(".png") for x in os.listdir(rep)),
          "report: the indexer figure", r.stderr[-400:])
else:
    skip("report: kind tables", "matplotlib missing")
finish()
