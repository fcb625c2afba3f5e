"""tools/report's control of a variant ("variant vs control") is the full-attention variant with the
same KV head count AND the same training length and probe (train.steps, eval.residues, data.seq_len,
eval.probe). A fake sweep (metrics.h5 written here in the layout of trainer/metrics.h):
  - w8s8 (2 KV heads, 60 steps, P = 8) beside full_short (2 KV heads, 10 steps, a P = 6 probe):
    no control; report_groups.csv's control is empty, report_tests.csv has no test of w8s8 against
    full_short, and report.md says why (train.steps 10 not 60, eval.residues 6 not 8);
  - w8s8_kv4 (4 KV heads, 60 steps, P = 8) beside full_kv4 (the same steps and probe): its control
    is full_kv4, tested (Welch's t of the pp gap worked out here).
Scratch: build/scratch/test_report_controls/."""
import csv
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
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_controls")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_controls", f"h5py/matplotlib missing ({e})")
    finish()

shutil.rmtree(SCRATCH, ignore_errors=True)
SWEEP = os.path.join(SCRATCH, "sweep")
COMP = "attention = compressed\nwindow = 8\nstride = 8\n"
# variant -> (model lines, train.steps, P, probe file, gaps of the seeds)
VARIANTS = {"w8s8": (COMP + "n_kv_heads = 2\n", 60, 8, "probe_p8.bin", [80.0, 85.0, 90.0]),
            "full_short": ("attention = full\nn_kv_heads = 2\n", 10, 6, "probe_p6.bin", [1.0, 2.0, 4.0]),
            "w8s8_kv4": (COMP + "n_kv_heads = 4\n", 60, 8, "probe_p8.bin", [50.0, 55.0, 70.0]),
            "full_kv4": ("attention = full\nn_kv_heads = 4\n", 60, 8, "probe_p8.bin", [2.0, 3.0, 7.0])}
for v, (model, steps, P, probe, gaps) in VARIANTS.items():
    for seed, gap in enumerate(gaps, 1):
        name = f"{v}-seed{seed}"
        cfg = (f"[model]\n{model}[data]\nseq_len = 256\n[train]\nsteps = {steps}\nseed = {seed}\n"
               f"[eval]\nresidues = {P}\nprobe = runs/data/{probe}\n[run]\nname = {name}\n")
        row = np.full(P, 95.0)
        row[0] -= gap
        write_run(os.path.join(SWEEP, name), cfg, row, [steps])

out = os.path.join(SCRATCH, "out")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP, "--out", out], capture_output=True, text=True)
check(r.returncode == 0, "report_runs", r.stderr[-500:])
groups = {g["group"]: g for g in csv.DictReader(open(os.path.join(out, "report_groups.csv")))} if r.returncode == 0 else {}
tests = list(csv.DictReader(open(os.path.join(out, "report_tests.csv")))) if r.returncode == 0 else []
md = open(os.path.join(out, "report.md")).read() if r.returncode == 0 else ""
check(groups.get("w8s8", {}).get("control") == "", "no_control_trained_or_probed_otherwise",
      f"control of w8s8: {groups.get('w8s8', {}).get('control')!r}")
check(not [t for t in tests if t["a"] == "w8s8" and t["b"] == "full_short"], "no_test_against_a_mismatched_control",
      str([(t["a"], t["b"], t["metric"], t["reject_holm_5pct"]) for t in tests if t["a"] == "w8s8"]))
check("- w8s8: no full-attention variant with 2 KV heads was trained and evaluated alike (full_short: train.steps 10 "
      "(not 60), eval.residues 6 (not 8), eval.probe runs/data/probe_p6.bin (not runs/data/probe_p8.bin))" in md,
      "markdown_says_why_there_is_no_control", md[md.find("Variants without"):][:600])
check(groups.get("w8s8_kv4", {}).get("control") == "full_kv4", "matching_control_is_kept",
      f"{groups.get('w8s8_kv4', {}).get('control')!r}")
a, b = VARIANTS["w8s8_kv4"][4], VARIANTS["full_kv4"][4]
ma, mb = sum(a) / 3, sum(b) / 3
va, vb = (sum((x - ma) ** 2 for x in a) / 2), (sum((x - mb) ** 2 for x in b) / 2)
t_want = (ma - mb) / math.sqrt(va / 3 + vb / 3)
got = [t for t in tests if t["a"] == "w8s8_kv4" and t["b"] == "full_kv4" and t["metric"] == "gap_pp"]
check(len(got) == 1 and got[0]["comparison"] == "variant vs control" and abs(float(got[0]["t"]) - t_want) < 1e-9,
      "matching_control_is_tested", f"{got} want t {t_want}")
finish()
