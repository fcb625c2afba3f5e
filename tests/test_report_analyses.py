"""tools/report on analysis.h5 files written here with h5py in the layout analysis/analysis_h5.c
writes (/KIND_NNN groups with kind, step, checkpoint attributes and the datasets of
analysis/analysis.c), checking that the report
- draws EVERY group of every kind, each in a file of its own named after the group, with the
  group and the checkpoint step in its section: a `--knockout all` map (knockout_000) is still
  there after a later `--knockout 1:0` (knockout_001), and a lookup probe group is drawn too;
- shows the absolute change A_ko - A_clean beside the relative change of a knockout, with numbers
  computed here from the arrays this test wrote (not by the code under test);
- reports a knockout whose clean accuracy is 0 with the reason its relative change is undefined,
  and a gate-cycling group without any measured accuracy with "Nothing to plot" and why;
- reads the sidecars ./train writes beside a busy analysis.h5 (analysis.pending-TIME-PID.h5, root
  attribute pending_for) and says so in the group's section; does not read the backup of a
  damaged file (analysis.damaged-TIME-PID.h5) but names it;
- skips an incomplete (dangling) group (no `signal` attribute, which ./train sets last, or a
  missing dataset) with a warning naming it, draws the rest and exits 1;
- exits 2 with one line for a directory whose analysis.h5 holds no group."""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_analyses")
REPORT = [sys.executable, os.path.join(ROOT, "tools", "report")]
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_analyses", f"h5py/matplotlib missing ({e})")
    finish()

shutil.rmtree(SCRATCH, ignore_errors=True)
L, G, P, S, STEP = 2, 2, 8, 4, 100
ck = os.path.join(SCRATCH, "runs", "run1", "checkpoints", f"step_{STEP:08d}")
os.makedirs(ck)
H5 = os.path.join(ck, "analysis.h5")
NAME = f"run1_step_{STEP:08d}"


def group(f, name, kind, attrs=(), complete=True, **data):
    g = f.create_group(name)
    g.attrs["NX_class"] = "NXdata"
    g.attrs["kind"] = kind
    g.attrs["checkpoint"] = ck
    g.attrs["step"] = np.int64(STEP)
    for k, v in dict(attrs).items():
        g.attrs[k] = v
    for k, v in data.items():
        g[k] = np.asarray(v, dtype=np.float64)
    if complete:
        g.attrs["signal"] = next(iter(data), "")       # what ah5_signal writes last
    return g


def mean(xs):
    xs = [float(x) for x in xs if x == x]
    return sum(xs) / len(xs)


# knockout_000: --knockout all, a model that retrieves: clean pp 50 +- 5 by residue, ip 20/30
clean = np.array([[50 + (5 if r % 2 else -5) for r in range(P)], [20 if r % 2 else 30 for r in range(P)]], dtype=float)
ko = np.empty((L, G, 2, P))
for l in range(L):
    for h in range(G):
        for p in range(2):
            ko[l, h, p] = clean[p] - 7.5 * (l * G + h) - np.arange(P) * 0.5
want0 = {}            # (l, h, p) -> (A_ko, delta, rel), worked out here in plain Python
rel_mean = np.empty((L, G, 2))
for l in range(L):
    for h in range(G):
        for p in range(2):
            a, c = mean(ko[l, h, p]), mean(clean[p])
            want0[l, h, p] = (a, a - c, 100 * (a - c) / c)
            rel_mean[l, h, p] = 100 * (a - c) / c
rel_phase = np.tile(np.arange(S, dtype=float), (L, G, 2, 1)) - 3.0
# knockout_001: --knockout 1:0 on a model at 0%: the relative change is NaN (analysis.c's rel_change)
ko1 = np.full((L, G, 2, P), np.nan)
ko1[1, 0, 0] = 12.5
ko1[1, 0, 1] = 0.0
with h5py.File(H5, "w") as f:
    f.attrs["NX_class"] = "NXroot"
    f.attrs["creator"] = "phaselab"
    group(f, "knockout_000", "knockout", dict(knockout="all", grid="aligned", calibration="calib.bin"),
          acc_clean=clean, acc=ko, rel_change=np.zeros((L, G, 2, P)), rel_change_phase=rel_phase,
          rel_change_mean=rel_mean, grid_offset=np.zeros(G))
    group(f, "knockout_001", "knockout", dict(knockout="1:0", grid="aligned"),
          acc_clean=np.zeros((2, P)), acc=ko1, rel_change=np.full((L, G, 2, P), np.nan),
          rel_change_phase=np.full((L, G, 2, S), np.nan), rel_change_mean=np.full((L, G, 2), np.nan),
          grid_offset=np.zeros(G))
    group(f, "gate_cycle_000", "gate_cycle", dict(layers="all"), delta=[1, 2], acc_phase=np.full((2, 2, S), np.nan),
          predicted_phase=np.full((2, 2, S), np.nan), correlation=np.full((2, 2), np.nan))
    group(f, "probe_000", "probe", dict(layout="lookup", probe="probe.bin"), acc=np.tile(np.linspace(10, 80, P), (2, 1)),
          total=np.full((2, P), 4.0), phase_test=np.full((2, 4), 0.5))
    group(f, "filler_sweep_000", "filler_sweep", dict(a=81, b=82, stride=4, peak_period=4.0, sign_flips=3),
          L=np.arange(16), p_a=np.linspace(0.1, 0.2, 16), p_b=np.linspace(0.2, 0.1, 16),
          diff=np.linspace(-0.1, 0.1, 16))
# a sidecar (the same layout, its one group numbered 000) and a damaged file's backup (not HDF5)
SIDE = "analysis.pending-20261204T053000Z-4242.h5"
with h5py.File(os.path.join(ck, SIDE), "w") as f:
    f.attrs["pending_for"] = os.path.realpath(H5)
    group(f, "knockout_000", "knockout", dict(knockout="0:1", grid="aligned"), acc_clean=clean, acc=ko,
          rel_change=np.zeros((L, G, 2, P)), rel_change_phase=rel_phase, rel_change_mean=rel_mean, grid_offset=np.zeros(G))
DAMAGED = os.path.join(ck, "analysis.damaged-20261204T053000Z-4242.h5")
open(DAMAGED, "wb").write(b"not HDF5" * 64)

out = os.path.join(SCRATCH, "out")
r = subprocess.run(REPORT + [os.path.join(SCRATCH, "runs"), "--out", out], capture_output=True, text=True, timeout=300)
check(r.returncode == 0 and "Traceback" not in r.stderr, "report_every_group_exit_0", r.stderr[-600:])
files = {f"knockout_{NAME}_knockout_000.png", f"knockout_{NAME}_knockout_001.png",
         f"probe_{NAME}_probe_000.png", f"filler_sweep_{NAME}_filler_sweep_000.png", "analysis.md"}
have = set(os.listdir(out)) if os.path.isdir(out) else set()
check(files <= have, "report_draws_each_group_in_its_own_file", f"missing {sorted(files - have)}; have {sorted(have)}")
check(not any(f.startswith(".") or f.endswith(".tmp") for f in have), "report_leaves_no_temporary_files", str(sorted(have)))
md = open(os.path.join(out, "analysis.md")).read() if "analysis.md" in have else ""


def section(title):
    """The analysis.md section whose heading contains title."""
    parts = md.split("\n## ")
    hits = [p for p in parts if p and title in p.splitlines()[0]]
    return hits[0] if len(hits) == 1 else ""


s0 = section(f"{NAME}: KV-head knockout all (/knockout_000, step {STEP})")
s1 = section(f"{NAME}: KV-head knockout 1:0 (/knockout_001, step {STEP})")
check(s0 and s1, "report_knockout_all_survives_a_later_knockout", md[:800])
# the knockout_000 rows: A_ko, absolute change (points), relative change, then the phases, per protocol
bad = []
for l in range(L):
    for h in range(G):
        cells = []
        for p in range(2):
            a, d, rel = want0[l, h, p]
            cells += [f"{a:.1f}", f"{d:.1f}", f"{rel:.1f}"] + [f"{rel_phase[l, h, p, s]:.1f}" for s in range(S)]
        line = f"| {l}:{h} | " + " | ".join(cells) + " |"
        if line not in s0:
            bad.append(line)
check(not bad and s0, "report_knockout_absolute_beside_relative", f"rows not found: {bad[:2]} in\n{s0[:900]}")
check(f"pp {mean(clean[0]):.2f}%" in s0 and f"ip {mean(clean[1]):.2f}%" in s0, "report_knockout_states_clean_mean", s0[:500])
# knockout_001: clean accuracy 0: the relative change is undefined and the report says why
check("the clean accuracy is 0 at every residue" in s1 and "| 1:0 | 12.5 | 12.5 | – |" in s1,
      "report_zero_accuracy_knockout_reported_with_reason", s1[:900])
check("/knockout_001" in r.stderr and "clean accuracy is 0" in r.stderr, "report_zero_accuracy_knockout_noted_on_stderr",
      r.stderr[-600:])
sg = section(f"(/gate_cycle_000, step {STEP})")
check("Nothing to plot: no protocol has a measured accuracy" in sg, "report_gate_cycle_without_data_says_why", sg[:400])
check(f"gate_cycle_{NAME}_gate_cycle_000.png" not in have, "report_no_empty_plot_for_a_group_without_data")
side_png = f"knockout_{NAME}_pending-20261204T053000Z-4242_knockout_000.png"
ss = section(f"{NAME}_pending-20261204T053000Z-4242: KV-head knockout 0:1")
check(side_png in have and "a sidecar" in ss and os.path.realpath(H5) in ss, "report_reads_sidecar_groups",
      f"{sorted(have)}\n{ss[:400]}")
check(DAMAGED in r.stderr and "not read" in r.stderr, "report_names_but_does_not_read_a_damaged_backup", r.stderr[-400:])
sp = section(f"(/probe_000, step {STEP})")
check("lookup probe" in sp and "| pp | 10.0 |" in sp, "report_draws_lookup_probe_group", sp[:400])

# a dangling group (an analysis killed while writing: attributes, no datasets) is skipped with a
# warning naming it; the other groups are still drawn; exit 1, the last line says what was skipped
with h5py.File(H5, "a") as f:
    group(f, "knockout_002", "knockout", dict(knockout="0:1"), complete=False)
    group(f, "knockout_003", "knockout", dict(knockout="1:1"), rel_change_mean=rel_mean)   # signal set, datasets missing
out2 = os.path.join(SCRATCH, "out2")
r = subprocess.run(REPORT + [os.path.join(SCRATCH, "runs"), "--out", out2], capture_output=True, text=True, timeout=300)
last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
check(r.returncode == 1 and "Traceback" not in r.stderr and "/knockout_002: skipped" in r.stderr and "/knockout_003: skipped"
      in r.stderr and "knockout_002" in last and "knockout_003" in last and "skipped 2 analysis groups" in last,
      "report_dangling_group_skipped_exit_1", r.stderr[-600:])
check(os.path.exists(os.path.join(out2, f"knockout_{NAME}_knockout_000.png")) and
      os.path.exists(os.path.join(out2, f"knockout_{NAME}_knockout_001.png")), "report_dangling_group_keeps_the_others")

# an analysis.h5 without any group: nothing to report, exit 2, one line
empty = os.path.join(SCRATCH, "empty", "ck")
os.makedirs(empty)
with h5py.File(os.path.join(empty, "analysis.h5"), "w") as f:
    f.attrs["creator"] = "phaselab"
r = subprocess.run(REPORT + [os.path.dirname(empty)], capture_output=True, text=True, timeout=300)
check(r.returncode == 2 and "nothing to report" in r.stderr and "Traceback" not in r.stderr,
      "report_empty_analysis_file_is_not_success", f"exit {r.returncode}: {r.stderr[-300:]}")
finish()
