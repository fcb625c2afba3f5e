"""tools/report's knockout and gate-cycling groups averaged over the seeds of a variant (analysis.md),
on three finished seeds of a layer stack whose checkpoints' analysis.h5 files are written here with
h5py in the layout of analysis/analysis.c:
  - layer kinds knocked out whole (`--knockout csa:all`, `--knockout hca:all`: the per-head maps are
    NaN, the result is in kind_acc_mean and kind_<k>_rel_change_phase) are averaged: per protocol n,
    the mean and Student-t 95% interval over seeds of A_ko, of Δ = A_ko - A_clean and of 100 Δ / A_clean
    and of the relative change by the kind's phase, worked out here; each section's heading names
    its target (csa:all, hca:all), so the two differ;
  - groups are averaged only when they share the probe (probe_sha256), the calibration set
    (calibration_sha256) and the ./train overrides (attribute `overrides`; absent in older files:
    none): a seed evaluated on another probe, calibrated on another set or run with
    model.stride=2 is averaged apart, and analysis.md says so.
Scratch: build/scratch/test_report_pooled/."""
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
from fakerun import write_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_pooled")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_pooled", f"h5py/matplotlib missing ({e})")
    finish()

T975 = {1: 12.7062047, 2: 4.3026527}      # checked in test_report_stats
L, G, P, STEP = 2, 2, 8, 600
KS = {"csa": 4, "hca": 8}                 # kind -> S
PROBE_A, PROBE_B = "a" * 64, "b" * 64
CAL_A, CAL_B = "c" * 64, "d" * 64
shutil.rmtree(SCRATCH, ignore_errors=True)
SWEEP = os.path.join(SCRATCH, "sweep")
# per seed: clean accuracy (pp, ip), per kind (A_ko pp, A_ko ip, rel by phase pp row base)
CLEAN = {1: (40.0, 20.0), 2: (50.0, 25.0), 3: (60.0, 40.0)}
KO = {"csa": {1: (4.0, 2.0), 2: (10.0, 5.0), 3: (3.0, 1.0)}, "hca": {1: (39.0, 21.0), 2: (52.0, 24.0), 3: (57.0, 41.0)}}


def phase_row(kind, seed, p):
    return np.arange(KS[kind], dtype=float) * (seed + p) - 10.0 * seed


def group(f, name, kind, attrs, **data):
    g = f.create_group(name)
    g.attrs.update({"NX_class": "NXdata", "kind": kind, "step": np.int64(STEP), "checkpoint": f.filename})
    for k, v in attrs.items():
        g.attrs[k] = v
    for k, v in data.items():
        g[k] = np.asarray(v, dtype=float)
    g.attrs["signal"] = next(iter(data))


for seed in (1, 2, 3):
    name = f"v4-seed{seed}"
    d = os.path.join(SWEEP, name)
    ck = os.path.join(d, "checkpoints", f"step_{STEP:08d}")
    os.makedirs(ck)
    cfg = f"[model]\nattention = full\nn_kv_heads = {G}\nlayer_attention = csa,hca\ncsa_stride = 4\nhca_stride = 8\n" \
          f"[train]\nsteps = {STEP}\nseed = {seed}\n[run]\nname = {name}\n"
    write_run(d, cfg, np.full(P, 50.0), [STEP])
    clean = np.array([np.full(P, CLEAN[seed][0]), np.full(P, CLEAN[seed][1])])
    nan4 = np.full((L, G, 2, P), np.nan)
    with h5py.File(os.path.join(ck, "analysis.h5"), "w") as f:
        for i, kind in enumerate(KS):                        # --knockout csa:all, then hca:all
            a = KO[kind][seed]
            attrs = {"knockout": f"{kind}:all", "grid": "aligned", "kinds": kind, f"kind_{kind}_stride": KS[kind],
                     f"kind_{kind}_grid_offset": -4 if kind == "csa" else 0, "probe_sha256": PROBE_A,
                     "calibration_sha256": CAL_A}
            group(f, f"knockout_{i:03d}", "knockout", attrs, rel_change_mean=np.full((L, G, 2), np.nan),
                  rel_change_phase=np.full((L, G, 2, P), np.nan), acc=nan4, acc_clean=clean,
                  kind_acc=np.array([[np.full(P, a[0]), np.full(P, a[1])]]), kind_acc_mean=np.array([a]),
                  kind_rel_change_mean=np.array([[100 * (a[p] - CLEAN[seed][p]) / CLEAN[seed][p] for p in range(2)]]),
                  **{f"kind_{kind}_rel_change_phase": np.array([phase_row(kind, seed, p) for p in range(2)])})
        # --knockout 0:0: seed 3 on another probe; --knockout 1:0: seed 1 calibrated on another set
        for num, target, odd, attr in ((2, "0:0", 3, "probe_sha256"), (3, "1:0", 1, "calibration_sha256")):
            acc = nan4.copy()
            l_, h_ = int(target[0]), int(target[2])
            acc[l_, h_] = clean - 5.0 * seed
            attrs = {"knockout": target, "grid": "aligned", "probe_sha256": PROBE_A, "calibration_sha256": CAL_A}
            attrs[attr] = (PROBE_B if attr == "probe_sha256" else CAL_B) if seed == odd else attrs[attr]
            group(f, f"knockout_{num:03d}", "knockout", attrs, rel_change_mean=np.full((L, G, 2), np.nan),
                  rel_change_phase=np.full((L, G, 2, P), np.nan), acc=acc, acc_clean=clean)
        # --gate-cycle all: seed 1 written before the overrides attribute existed, seed 3 ran with model.stride=2
        attrs = {"layers": "all", "probe_sha256": PROBE_A}
        if seed > 1:
            attrs["overrides"] = "model.stride=2" if seed == 3 else ""
        group(f, "gate_cycle_000", "gate_cycle", attrs, acc_phase=np.full((4, 2, 4), 10.0 * seed),
              predicted_phase=np.full((4, 2, 4), 10.0), delta=np.arange(4), correlation=np.full((4, 2), 0.1 * seed))

out = os.path.join(SCRATCH, "out")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP, "--out", out], capture_output=True, text=True)
check(r.returncode == 0 and "Traceback" not in r.stderr, "report_runs", r.stderr[-800:])
md = open(os.path.join(out, "analysis.md")).read() if os.path.exists(os.path.join(out, "analysis.md")) else ""


def section(title):
    hits = [p for p in md.split("\n## ") if p and title in p.splitlines()[0]]
    return hits[0] if len(hits) == 1 else ""


def ci(vals):
    n = len(vals)
    m = sum(vals) / n
    h = T975[n - 1] * math.sqrt(sum((x - m) ** 2 for x in vals) / (n - 1)) / math.sqrt(n)
    return f"{m:.1f} [{m - h:.1f}, {m + h:.1f}]"


for kind in KS:
    sec = section(f"v4: layer kinds knocked out whole ({kind}:all) averaged over seeds (step {STEP})")
    check(bool(sec) and "n = 3 runs: v4-seed1, v4-seed2, v4-seed3" in sec, f"kind_knockout_{kind}_all_pooled_with_its_heading",
          md[-1500:] if not sec else sec[:300])
    for p, proto in enumerate(("pp", "ip")):
        ko = [KO[kind][s][p] for s in (1, 2, 3)]
        dl = [KO[kind][s][p] - CLEAN[s][p] for s in (1, 2, 3)]
        rl = [100 * (KO[kind][s][p] - CLEAN[s][p]) / CLEAN[s][p] for s in (1, 2, 3)]
        ph = [ci([phase_row(kind, s, p)[x] for s in (1, 2, 3)]) for x in range(KS[kind])]
        want = f"| {proto} | 3 | {ci(ko)} | {ci(dl)} | {ci(rl)} | " + " | ".join(ph) + " |"
        check(want in sec, f"kind_knockout_{kind}_all_{proto}_mean_interval_n", f"want {want!r} in\n{sec[:1200]}")
heads = [ln for ln in md.splitlines() if ln.startswith("## v4:")]
check(len(heads) == len(set(heads)), "pooled_headings_are_distinct", "\n".join(heads))

s00 = section("v4: KV-head knockout 0:0 averaged over seeds")
check("n = 2 runs: v4-seed1, v4-seed2." in s00, "knockout_other_probe_not_averaged_together", s00[:300] or "\n".join(heads))
s10 = section("v4: KV-head knockout 1:0 averaged over seeds")
check("n = 2 runs: v4-seed2, v4-seed3." in s10, "knockout_other_calibration_not_averaged_together", s10[:300] or "\n".join(heads))
sgc = section("v4: gate cycling (layers all) averaged over seeds")
check("n = 2 runs: v4-seed1, v4-seed2." in sgc, "gate_cycle_other_overrides_not_averaged_together_absent_is_none",
      sgc[:300] or "\n".join(heads))
split = section("v4: knockout 0:0 at step 600: seeds analysed with different inputs, averaged apart")
check(f"- probe {PROBE_A[:12]}: v4-seed1, v4-seed2 (n = 2)" in split and
      f"- probe {PROBE_B[:12]}: v4-seed3 (n = 1), one seed: not averaged" in split, "split_by_probe_said_in_analysis_md",
      split[:800] or "\n".join(heads))
split = section("v4: gate_cycle all at step 600: seeds analysed with different inputs, averaged apart")
check("- overrides none: v4-seed1, v4-seed2 (n = 2)" in split and "- overrides model.stride=2: v4-seed3 (n = 1)" in split,
      "split_by_overrides_said_in_analysis_md", split[:800] or "\n".join(heads))
split = section("v4: knockout 1:0 at step 600: seeds analysed with different inputs, averaged apart")
check(f"- calibration {CAL_B[:12]}: v4-seed1 (n = 1)" in split, "split_by_calibration_said_in_analysis_md", split[:800])
finish()
