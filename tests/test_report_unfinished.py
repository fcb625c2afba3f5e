"""tools/report pools only finished runs over seeds, checked on a fake sweep (metrics.h5 written
here in the layout of trainer/metrics.h, train.steps = 60 in every config.ini):
  - seeds 1-3 finished: /train, /val and /probe end at step 60;
  - seed 4 was killed at train step 28: its last /val and /probe rows are from step 20;
  - seed 5 was killed during its final evaluation: /train and /val reached 60, /probe only step 40.
report_groups.csv must pool seeds 1-3 only (n 3, the mean and Student-t interval of their gaps
worked out here), with final step 60; report.md must list seeds 4 and 5 as
"not finished (last evaluation at step 20 of 60): not pooled" (seed 5: step 40); report.csv's step
is the step of the values (20 and 40) and its pooled column says why.
Scratch: build/scratch/test_report_unfinished/."""
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
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_unfinished")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_unfinished", f"h5py/matplotlib missing ({e})")
    finish()

T975_2 = 4.3026527          # t(0.975, 2), checked in test_report_stats
P = 24
shutil.rmtree(SCRATCH, ignore_errors=True)
SWEEP = os.path.join(SCRATCH, "sweep")
# seed -> (train steps, val steps, probe steps, gap of the last probe row)
SEEDS = {1: ([20, 40, 60], [20, 40, 60], [20, 40, 60], 10.0), 2: ([20, 40, 60], [20, 40, 60], [20, 40, 60], 14.0),
         3: ([20, 40, 60], [20, 40, 60], [20, 40, 60], 15.0), 4: ([20, 28], [20], [20], 60.0),
         5: ([20, 40, 60], [20, 40, 60], [20, 40], 70.0)}
for seed, (ts, vs, ps, gap) in SEEDS.items():
    name = f"w8s8-seed{seed}"
    cfg = (f"[model]\nattention = compressed\nn_kv_heads = 2\nwindow = 8\nstride = 8\n[train]\nsteps = 60\nseed = {seed}\n"
           f"[run]\nname = {name}\n")
    rows = np.full((len(ps), P), 90.0)
    rows[-1, 0] = 90.0 - gap                       # the last row: gap = `gap`
    write_run(os.path.join(SWEEP, name), cfg, rows, ts, vs, ps, val_loss=1.0 + seed)

out = os.path.join(SCRATCH, "out")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP, "--out", out], capture_output=True, text=True)
check(r.returncode == 0, "report_runs", r.stderr[-500:])
groups = {g["group"]: g for g in csv.DictReader(open(os.path.join(out, "report_groups.csv")))} if r.returncode == 0 else {}
g = groups.get("w8s8", {})
gaps = [SEEDS[s][3] for s in (1, 2, 3)]
m = sum(gaps) / 3
h = T975_2 * math.sqrt(sum((x - m) ** 2 for x in gaps) / 2) / math.sqrt(3)
check(g.get("n") == "3" and g.get("runs") == "w8s8-seed1 w8s8-seed2 w8s8-seed3" and g.get("final_steps") == "60",
      "only_finished_seeds_are_pooled", f"n {g.get('n')}, runs {g.get('runs')!r}, final steps {g.get('final_steps')!r}")
check(g and all(abs(float(g[k]) - w) < 1e-6 for k, w in (("gap_pp_mean", m), ("gap_pp_lo", m - h), ("gap_pp_hi", m + h))),
      "pooled_gap_is_the_finished_seeds", f"{[g.get(k) for k in ('gap_pp_mean', 'gap_pp_lo', 'gap_pp_hi')]} want {m, m - h, m + h}")
check(abs(float(g.get("val_loss_mean", "nan")) - 3.0) < 1e-12, "pooled_val_loss_is_the_finished_seeds",
      f"{g.get('val_loss_mean')} want 3.0 (seeds 1-3: 2, 3, 4)")
md = open(os.path.join(out, "report.md")).read() if r.returncode == 0 else ""
for s, x in ((4, 20), (5, 40)):
    check(f"- w8s8-seed{s} (w8s8): not finished (last evaluation at step {x} of 60): not pooled" in md,
          f"markdown_lists_unfinished_seed{s}", md[-800:])
rows = {x["run"]: x for x in csv.DictReader(open(os.path.join(out, "report.csv")))} if r.returncode == 0 else {}
check([rows.get(f"w8s8-seed{s}", {}).get("step") for s in range(1, 6)] == ["60", "60", "60", "20", "40"],
      "csv_step_is_the_step_of_the_values", str({k: v.get("step") for k, v in rows.items()}))
check(rows.get("w8s8-seed1", {}).get("pooled") == "yes" and
      rows.get("w8s8-seed5", {}).get("pooled") == "not finished (last evaluation at step 40 of 60)",
      "csv_pooled_column", str({k: v.get("pooled") for k, v in rows.items()}))
# a report of one run that has not finished (still training, or stopped) draws it, labelled as
# such, with no test; a second report into the same --out keeps its figures (none is "stale")
ONE = os.path.join(SCRATCH, "one")
os.makedirs(ONE)
shutil.copytree(os.path.join(SWEEP, "w8s8-seed4"), os.path.join(ONE, "w8s8-seed4"))
out1 = os.path.join(SCRATCH, "out1")
figs = ("loss_curves.png", "probe_by_residue.png")
r1 = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), ONE, "--out", out1], capture_output=True, text=True)
r2 = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), ONE, "--out", out1], capture_output=True, text=True)
md1 = open(os.path.join(out1, "report.md")).read() if r2.returncode == 0 else ""
check(r1.returncode == 0 and r2.returncode == 0 and all(os.path.isfile(os.path.join(out1, f)) for f in figs)
      and "w8s8 (not finished)" in md1 and "removed, left from an earlier report" not in r2.stderr,
      "an unfinished run alone: its curves drawn, labelled (not finished), kept by a second report",
      f"rc {r1.returncode}/{r2.returncode}: {sorted(os.listdir(out1)) if os.path.isdir(out1) else None} {r2.stderr[-400:]}")
finish()
