"""The measurements of learned chunk boundaries (docs/spec.md §6.5), end to end on a tiny run
(configs/test/tiny.ini with model.boundaries = learned, W 8, S 4, 10 steps, an evaluation with the
probe at step 10):
- /boundaries in metrics.h5 (trainer/boundary_stats.h) against identities and against the
  validation tokens read here from the shard (numpy, not the code under test): every counted
  position is in a complete chunk or unpooled (sum_k (k+1) hist_k + unpooled = positions = windows
  x T), the histogram sums to the boundaries, the rate is boundaries / positions, the class shares
  of all tokens equal the shares in the validation windows, the adjacent (key, value) pairs are
  those of the windows, each boundary's class shares sum to 1, every interval holds its estimate;
- the gate profile of a learned layer (the mean weight of each slot of the entries) sums to W;
- /probe_chunk (trainer/chunk_phase.h): each layer's prompts by chunk phase sum to the probe's
  prompts per protocol, accuracies are correct / total of /probe's counts, and plain --eval --probe
  of the checkpoint prints and stores the same counts in analysis.h5 (chunk_total) with each bin's
  95% Wilson interval (chunk_acc_lo, chunk_acc_hi) with the boundary
  statistics as a subgroup of the evaluation (the same numbers as the run's last /boundaries row);
- every fold by position mod S of a learned model (probe test, validation loss, knockout, --score,
  the run's log) says that it is the position, not a grid phase;
- a grid model writes neither group, and its folds carry no such note;
- tools/report marks a learned run's fold by t_K mod S as the position and reports its probe by
  chunk phase per layer (worst bin with its Wilson interval and n)."""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("boundary analyses", "h5py missing")
    finish()

tu.require_train()
d, data = tu.scratch_with_corpus("test_boundary_analyses")
probe = f"{d}/probe.bin"
r = tu.subprocess.run([sys.executable, os.path.join(tu.ROOT, "tools", "make-probe"), "--synthetic", "--out", probe, "--seed", "1",
                       "--per-residue", "8", "--residues", "16", "--max-len", "64", "--quiet"], capture_output=True, text=True)
check(r.returncode == 0, "make-probe", r.stderr[-300:])
W, S, T = 8, 4, 64
common = [f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs", "eval.residues=16",
          f"eval.probe={probe}", "train.steps=10", "eval.every=10", "checkpoint.every=10"]
rc, out = tu.run([tu.TINY, "run.name=bd", f"model.window={W}", f"model.stride={S}", "model.boundaries=learned"] + common)
check(rc == 0 and "done: 10 steps" in out and "eval step 10 | boundaries layer 0: rate" in out,
      "a learned-boundary run trains 10 steps and logs its boundaries", out[-800:])


def wilson(k, n, z=1.959963984540054):
    p = k / n
    c, h = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * (c - h), 100 * (c + h)


# the run log states the worst residue's and the worst chunk slot's 95% Wilson interval and n
lines = []
for pat in (r"probe step 10 \| prefix padding: mean [\d.]+% worst ([\d.]+)% \[([\d.]+), ([\d.]+)\] \(r=\d+, n = (\d+)\)",
            r"chunk phase, layer 0 \(prefix padding\): worst slot \d+ ([\d.]+)% \[([\d.]+), ([\d.]+)\] \(n = (\d+)\)"):
    m = re.search(pat, out)
    ok = m is not None
    if ok:
        a, lo, hi, n = float(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))
        wlo, whi = wilson(round(a * n / 100), n)
        ok = abs(lo - wlo) < 0.06 and abs(hi - whi) < 0.06
    lines.append(ok)
check(all(lines), "the run log's probe lines give the worst residue's and the worst chunk slot's Wilson interval and n",
      f"{lines}: " + "\n".join(x for x in out.splitlines() if "probe step 10" in x))


def read_tokens(path):
    raw = open(path, "rb").read()
    bpt = int.from_bytes(raw[12:16], "little")
    return np.frombuffer(raw[1024:], dtype="<u2" if bpt == 2 else "<u4").astype(np.int64)


val = read_tokens(sorted(os.path.join(data, n) for n in os.listdir(data) if n.startswith("val_"))[0])
with h5py.File(f"{d}/runs/bd/metrics.h5", "r") as f:
    b = {k: np.asarray(f["boundaries"][k][()]) for k in f["boundaries"]}
    prof = np.asarray(f["gates/profile"][()])
    pc = {k: np.asarray(f["probe_chunk"][k][()]) for k in f["probe_chunk"]}
n_win = int(b["positions"][-1][0]) // T
windows = np.stack([val[k * T:(k + 1) * T] for k in range(n_win)])          # the inputs of each validation window
check(n_win >= 1 and (b["positions"][-1] == n_win * T).all(), "boundaries: positions = windows x T in every layer",
      f"{b['positions'][-1]}")
lengths = np.arange(1, W + 1)
covered = (b["chunk_length_hist"][-1] * lengths).sum(axis=1) + b["unpooled"][-1]
check((covered == b["positions"][-1]).all(), "boundaries: every position is in a complete chunk or unpooled",
      f"{covered} vs {b['positions'][-1]}")
check((b["chunk_length_hist"][-1].sum(axis=1) == b["boundaries"][-1]).all(), "boundaries: the histogram sums to the boundaries",
      f"{b['chunk_length_hist'][-1]}")
check(np.allclose(b["boundary_rate"][-1], b["boundaries"][-1] / b["positions"][-1]), "boundaries: rate = boundaries / positions",
      f"{b['boundary_rate'][-1]}")
cls = np.select([(windows >= 16) & (windows < 80), (windows >= 80) & (windows < 208), windows >= 208, windows == 0],
                [0, 1, 2, 3], 4)
want_chance = np.array([(cls == c).mean() for c in range(5)])
check(np.allclose(b["class_chance"][-1], want_chance), "boundaries: class shares of all tokens = the validation windows'",
      f"{b['class_chance'][-1]} vs {want_chance}")
pairs = int(((cls[:, :-1] == 0) & (cls[:, 1:] == 1)).sum())
check((b["record_split_n"][-1] == pairs).all(), "boundaries: the adjacent (key, value) pairs are the windows'",
      f"{b['record_split_n'][-1]} vs {pairs}")
check(np.allclose(b["class_rate"][-1].sum(axis=1), 1.0), "boundaries: each layer's class shares of the boundaries sum to 1",
      f"{b['class_rate'][-1]}")
for name, lo, hi in (("forced_fraction", "forced_lo", "forced_hi"), ("record_split", "record_split_lo", "record_split_hi")):
    v = b[name][-1]
    check(((b[lo][-1] <= v + 1e-12) & (v <= b[hi][-1] + 1e-12)).all(), f"boundaries: {name} inside its Wilson interval",
          f"{b[lo][-1]} {v} {b[hi][-1]}")
check(np.allclose(np.nansum(prof[-1][:, :, :, :W], axis=-1), W, atol=1e-3),
      "gates: the profile of learned entries (mean weight per slot) sums to W", f"{prof[-1][0, 0]}")
n_pp = 8 * 16
check(pc["total_pp"][-1].shape == (2, W + 1) and (pc["total_pp"][-1].sum(axis=1) == n_pp).all() and
      (pc["total_ip"][-1].sum(axis=1) == n_pp).all(),
      "probe_chunk: each layer's prompts by chunk phase sum to the probe's prompts per protocol", f"{pc['total_pp'][-1]}")

ck = f"{d}/runs/bd/checkpoints/step_00000010"
rc, out = tu.run(["--eval", ck, "--probe", probe])
check(rc == 0 and "by chunk phase of the key" in out, "--eval --probe prints the chunk-phase table", out[-600:])
with h5py.File(f"{ck}/analysis.h5", "r") as f:
    g = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
    tot = np.asarray(g["chunk_total"][()])
    cor = np.asarray(g["chunk_correct"][()])
    acc = np.asarray(g["chunk_acc"][()])
    gb = {k: np.asarray(g["boundaries"][k][()]) for k in g["boundaries"]} if "boundaries" in g else {}
check(np.array_equal(tot[0], pc["total_pp"][-1]) and np.array_equal(tot[1], pc["total_ip"][-1]),
      "--eval stores the training's chunk-phase counts (same checkpoint, same prompts)", f"{tot} vs {pc['total_pp'][-1]}")
with np.errstate(invalid="ignore", divide="ignore"):
    want_acc = np.where(tot > 0, 100 * cor / tot, np.nan)
check(np.array_equal(np.isnan(acc), np.isnan(want_acc)) and np.allclose(acc[~np.isnan(acc)], want_acc[~np.isnan(want_acc)]),
      "--eval: chunk accuracy = 100 correct / total, NaN where no prompt", f"{acc}")
with h5py.File(f"{ck}/analysis.h5", "r") as f:
    g = f[sorted(k for k in f if k.startswith("probe_"))[-1]]
    lo = np.asarray(g["chunk_acc_lo"][()]) if "chunk_acc_lo" in g else None
    hi = np.asarray(g["chunk_acc_hi"][()]) if "chunk_acc_hi" in g else None


def wilson(k, n, z=1.959963984540054):      # docs/spec.md §3.6, in percent
    with np.errstate(invalid="ignore", divide="ignore"):
        ph = k / n
        c = (ph + z * z / (2 * n)) / (1 + z * z / n)
        h = z * np.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return np.where(n > 0, 100 * np.maximum(0, c - h), np.nan), np.where(n > 0, 100 * np.minimum(1, c + h), np.nan)


wlo, whi = wilson(cor, tot)
check(lo is not None and hi is not None and np.allclose(lo, wlo, equal_nan=True) and np.allclose(hi, whi, equal_nan=True),
      "--eval stores each chunk phase's 95% Wilson interval (chunk_acc_lo, chunk_acc_hi)", f"{lo} vs {wlo}")
rows = [x for x in out.splitlines() if x.startswith("  prefix padding       layer  0:")]
want = " ".join(f"{k}: {acc[0, 0, k]:.1f} [{wlo[0, 0, k]:.1f}, {whi[0, 0, k]:.1f}] ({int(tot[0, 0, k])})"
                for k in range(W) if tot[0, 0, k] > 0)
check(len(rows) == 1 and want in rows[0], "--eval prints each chunk phase's accuracy with its Wilson interval and n",
      f"{rows} vs {want}")
check(gb and np.array_equal(gb["chunk_length_hist"], b["chunk_length_hist"][-1]) and np.allclose(gb["boundary_rate"], b["boundary_rate"][-1]),
      "--eval stores the boundary statistics of its validation (= the run's last /boundaries row)", f"{sorted(gb)}")

# A learned model has no grid: every fold by position mod S says so (probe_fold_note), never silently
# labelled as a phase: the probe's test, the validation loss, the knockout, --score and the run's log.
NOTE = "position only: learned boundaries have no grid"
probe_line = [x for x in out.splitlines() if "phase-effect test: across residues" in x]
val_line = [x for x in out.splitlines() if x.startswith("by phase t mod")]
check(probe_line and all(f"by phase t_K mod {S} ({NOTE}" in x for x in probe_line) and val_line and NOTE in val_line[0],
      "--eval --probe of a learned model: the t mod S folds say they are the position, not a grid phase", out[-900:])
log = open(f"{d}/runs/bd/log.txt").read()
check(f"across phases t mod {S} ({NOTE}" in log, "the run's log: the validation fold by t mod S says it is the position", log[-600:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "0:0", "--out", f"{d}/ko.h5"])
check(rc == 0 and f"relative change by phase t_K mod {S} ({NOTE}" in out,
      "--knockout of a learned model: the fold by t_K mod S says it is the position", out[-600:])
# ... and folds by the knocked-out layer's chunk slot of t_K: [L, G, 2, W + 1] changes, the slot counts
# of each layer the same as --eval's chunk-phase counts of the same probe
kg = None
if rc == 0:
    with h5py.File(f"{d}/ko.h5", "r") as f:
        g = f[sorted(k for k in f if k.startswith("knockout"))[-1]]
        kg = {k: np.asarray(g[k][()]) for k in ("rel_change_chunk", "chunk_n") if k in g}
ok = kg is not None and set(kg) == {"rel_change_chunk", "chunk_n"}
if ok:
    L_ = kg["chunk_n"].shape[0]
    ok = (kg["rel_change_chunk"].shape[0] == L_ and kg["rel_change_chunk"].shape[2:] == (2, W + 1)
          and kg["chunk_n"].shape == (L_, 2, W + 1) and np.array_equal(kg["chunk_n"][:, 0, :], tot[0, :L_, :]))
check(ok and "relative change by the knocked-out layer's chunk slot of t_K" in out,
      "--knockout of a learned model: by the knocked-out layer's chunk slot, with the slots' n (= --eval's counts)",
      f"{ {k: v.shape for k, v in (kg or {}).items()} } {out[-400:]}")
rc, out = tu.run(["--score", ck, "--input", sorted(os.path.join(data, n) for n in os.listdir(data) if n.startswith("val_"))[0],
                  "--out", f"{d}/score.h5"])
check(rc == 0 and NOTE in out, "--score of a learned model: the fold by t mod S says it is the position", out[-600:])

rc, out = tu.run([tu.TINY, "run.name=grid", f"model.window={W}", f"model.stride={S}"] + common)
rc2, out2 = tu.run(["--eval", f"{d}/runs/grid/checkpoints/step_00000010", "--probe", probe, "--out", f"{d}/grid.h5"])
check(rc2 == 0 and f"by phase t_K mod {S} chi2" in out2 and NOTE not in out2,
      "a grid model's folds carry no such note", out2[-600:])
with h5py.File(f"{d}/runs/grid/metrics.h5", "r") as f:
    names = set(f.keys())
check(rc == 0 and "boundaries" not in names and "probe_chunk" not in names, "a grid model writes neither /boundaries nor /probe_chunk",
      f"{sorted(names)}")

# tools/report: a learned run's fold by t_K mod S is marked as the position, and its own phase, the chunk
# phase of /probe_chunk, is reported per layer and protocol with the worst bin's Wilson interval and n
r = tu.subprocess.run([sys.executable, os.path.join(tu.ROOT, "tools", "report"), f"{d}/runs", "--out", f"{d}/report"],
                      capture_output=True, text=True)
md = open(f"{d}/report/report.md").read() if r.returncode == 0 else r.stderr
run_rows = {x.split(" | ")[0][2:]: x for x in md.splitlines() if x.startswith(("| bd | compressed |", "| grid | compressed |"))}
check(r.returncode == 0 and "| position: " in run_rows.get("bd", "") and "position:" not in run_rows.get("grid", "x"),
      "report: the learned run's fold column is marked as the position, the grid run's is not", f"{run_rows}")
acc0, tot0 = pc["acc_pp"][-1][0], pc["total_pp"][-1][0]
pooled = [k for k in range(W) if tot0[k] > 0]
w = min(pooled, key=lambda k: (acc0[k], k))
wl, wh = wilson(np.array(round(acc0[w] * tot0[w] / 100)), np.array(tot0[w]))
want = f"| bd | 0 | pp | {int(tot0.sum())} | {w} | {acc0[w]:.1f} [{float(wl):.1f}, {float(wh):.1f}] ({int(tot0[w])}) |"
check("## Learned chunk boundaries: the probe by chunk phase" in md and want in md and "| grid | 0 |" not in md,
      "report: the learned run's probe by chunk phase (worst bin, Wilson interval, n), not the grid run's", f"{want}\n{md[-1500:]}")
finish()
