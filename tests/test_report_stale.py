"""tools/report into a directory that holds an earlier report removes the earlier report's files it
does not write this time, and nothing else. A first sweep (a layer stack with an analysis.h5 holding
a knockout and a gate-cycling group, written here with h5py) is reported into OUT: report_kinds.csv,
analysis.md, the knockout and gate-cycling PNGs and gates_RUN.png are there. A second sweep (one plain
compressed run without /gates and without analyses) is reported into the same OUT: those files must
be gone, the second report's own files there, and the files the report does not own (notes.txt,
my_plot.png, knockout_notes.txt, a directory named like a report file) untouched.
Scratch: build/scratch/test_report_stale/."""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
from fakerun import write_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_stale")
REPORT = [sys.executable, os.path.join(ROOT, "tools", "report")]
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_stale", f"h5py/matplotlib missing ({e})")
    finish()

shutil.rmtree(SCRATCH, ignore_errors=True)
P, S, L, G = 8, 4, 2, 2


def write_sweep_run(sweep, name, model, gates=False):
    d = os.path.join(SCRATCH, sweep, name)
    cfg = f"[model]\nn_layers = {L}\nn_kv_heads = {G}\n{model}[train]\nsteps = 10\n[run]\nname = {name}\n"
    metrics = write_run(d, cfg, np.linspace(20, 90, P), [10])
    if gates:
        with h5py.File(metrics, "a") as f:
            f["gates/step"] = np.array([10], dtype=np.int64)
            f["gates/profile"] = np.ones((1, L, G, 2, 8))
    return d


d = write_sweep_run("sweep1", "stack-seed1", "attention = full\nlayer_attention = csa,hca\ncsa_stride = 4\nhca_stride = 8\n",
              gates=True)
ck = os.path.join(d, "checkpoints", "step_00000010")
os.makedirs(ck)
with h5py.File(os.path.join(ck, "analysis.h5"), "w") as f:
    g = f.create_group("knockout_000")
    g.attrs.update({"kind": "knockout", "step": np.int64(10), "knockout": "0:0", "grid": "aligned"})
    acc = np.full((L, G, 2, P), np.nan)
    acc[0, 0] = 10.0
    g["acc"], g["acc_clean"] = acc, np.full((2, P), 50.0)
    g["rel_change_mean"], g["rel_change_phase"] = np.full((L, G, 2), -80.0), np.full((L, G, 2, S), -80.0)
    g.attrs["signal"] = "rel_change_mean"
    g = f.create_group("gate_cycle_000")
    g.attrs.update({"kind": "gate_cycle", "step": np.int64(10), "layers": "all"})
    g["delta"], g["acc_phase"] = np.arange(S), np.full((S, 2, S), 40.0)
    g["predicted_phase"], g["correlation"] = np.full((S, 2, S), 40.0), np.full((S, 2), 0.5)
    g.attrs["signal"] = "acc_phase"
write_sweep_run("sweep2", "w8s8-seed1", "attention = compressed\nwindow = 8\nstride = 4\n")

out = os.path.join(SCRATCH, "out")
r1 = subprocess.run(REPORT + [os.path.join(SCRATCH, "sweep1"), "--out", out], capture_output=True, text=True)
first = set(os.listdir(out)) if os.path.isdir(out) else set()
STALE = {"report_kinds.csv", "analysis.md", "gates_stack-seed1.png",
         "knockout_stack-seed1_step_00000010_knockout_000.png", "gate_cycle_stack-seed1_step_00000010_gate_cycle_000.png"}
check(r1.returncode == 0 and STALE <= first, "first_report_writes_the_files", f"missing {sorted(STALE - first)}; {r1.stderr[-400:]}")
OTHERS = ["notes.txt", "my_plot.png", "knockout_notes.txt"]
for fn in OTHERS:
    open(os.path.join(out, fn), "w").write("not the report's\n")
os.makedirs(os.path.join(out, "gates_dir.png"))
r2 = subprocess.run(REPORT + [os.path.join(SCRATCH, "sweep2"), "--out", out], capture_output=True, text=True)
second = set(os.listdir(out)) if os.path.isdir(out) else set()
check(r2.returncode == 0 and {"report.md", "report.csv", "report_groups.csv", "report_tests.csv"} <= second,
      "second_report_writes_its_files", r2.stderr[-400:])
check(not (STALE & second), "stale_outputs_of_the_earlier_report_removed", f"left: {sorted(STALE & second)}")
check(all(fn in second for fn in OTHERS + ["gates_dir.png"]) and
      open(os.path.join(out, "notes.txt")).read() == "not the report's\n", "files_the_report_does_not_own_are_kept",
      f"{sorted(second)}")
rows = open(os.path.join(out, "report.csv")).read() if "report.csv" in second else ""
check("w8s8-seed1" in rows and "stack-seed1" not in rows, "report_csv_is_the_second_sweeps", rows[:300])
finish()
