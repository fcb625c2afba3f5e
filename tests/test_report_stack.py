"""tools/report on a sweep of layer stacks (model.layer_attention, docs/spec.md §5), checked against
numbers computed here:
  - a stack with a compressed kind is attention "stack" (never a full-attention control, never given
    the paper's full-attention gap), its fold period is the lcm of its kinds' strides; a schedule of
    full layers only is a control; a window-only stack has no grid;
  - its control is the full-attention group closest in config (the 4-layer stack control, not a
    2-layer `full` beside it in the same sweep);
  - report_kinds.csv / report.md fold each seed's last /probe/acc_pp row by each compressed kind's
    phase (r - o) mod S with the grid offset o the checkpoint's config.json records
    (phaselab.layer_grid_base): here the csa layers carry o = -3, so a fold that ignored o would put
    the weak phase at 1 instead of 0; worst phase and gap with their Student-t interval over seeds.
Scratch: build/scratch/test_report_stack/."""
import csv
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_stack")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_stack", f"h5py/matplotlib missing ({e})")
    finish()

T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463}   # Student-t 0.975 quantiles (checked in test_report_stats)
P = 32
KINDS = ("csa_window = 7\ncsa_stride = 4\ncsa_compressor = deepseek\nhca_window = 32\nhca_stride = 32\n"
         "attn_sink = true\nkv_tied = true\n")
STACK = "attention = full\nn_layers = 4\nn_kv_heads = 4\n" + KINDS
# variant -> (model lines, layer_grid_base of the checkpoint or None, per seed (weak residues' accuracy))
VARIANTS = {
    "v4": (STACK + "layer_attention = window,window,csa,hca\n", [0, 0, -3, 0], [40.0, 50.0, 30.0]),
    "v4_csa": (STACK + "layer_attention = csa*4\n", [-3, -3, -3, -3], [20.0, 35.0]),
    "v4_window": (STACK + "layer_attention = window*4\n", None, [5.0, 6.0]),
    "v4_full": (STACK + "layer_attention = full*4\n", [0, 0, 0, 0], [97.0, 98.0]),
    "full": ("attention = full\nn_layers = 2\nn_kv_heads = 4\n", None, [99.0, 99.5]),
    # a one-kind schedule of the model's own compressed attention is that model, not a stack
    "c2": ("attention = compressed\nn_layers = 2\nn_kv_heads = 4\nwindow = 8\nstride = 8\n"
           "layer_attention = compressed*2\n", None, [50.0, 60.0]),
}
HIGH = 90.0


def acc_row(weak):
    """A(r) = 90 except the residues r = 1 (mod 4) at `weak`: phase (r - o) mod 4 = 0 with o = -3."""
    a = np.full(P, HIGH)
    a[np.arange(P) % 4 == 1] = weak
    return a


shutil.rmtree(SCRATCH, ignore_errors=True)
SWEEP = os.path.join(SCRATCH, "sweep")
for v, (model, bases, seeds) in VARIANTS.items():
    for seed, weak in enumerate(seeds, 1):
        name = f"{v}-seed{seed}"
        d = os.path.join(SWEEP, name)
        os.makedirs(d)
        cfg = f"[model]\nd_model = 32\n{model}\n[train]\nsteps = 600\nseed = {seed}\n[run]\nname = {name}\n"
        open(os.path.join(d, "config.ini"), "w").write(cfg)
        with h5py.File(os.path.join(d, "metrics.h5"), "w") as f:
            f.attrs["config"] = cfg
            f.create_group("train")["step"] = np.array([600], dtype=np.int64)
            f["train"]["loss"] = np.array([0.5])
            f.create_group("val")["step"] = np.array([600], dtype=np.int64)
            f["val"]["loss"] = np.array([0.5])
            g = f.create_group("probe")
            g["step"] = np.array([600], dtype=np.int64)
            for p in ("pp", "ip"):
                rows = acc_row(weak)[None, :]
                g[f"acc_{p}"] = rows
                for s, fn in (("mean", np.mean), ("worst", np.min), ("best", np.max)):
                    g[f"{s}_{p}"] = fn(rows, axis=1)
                g[f"gap_{p}"] = rows.max(axis=1) - rows.min(axis=1)
        if bases is not None:
            ck = os.path.join(d, "checkpoints", "step_00000600")
            os.makedirs(ck)
            json.dump({"phaselab": {"layer_grid_base": bases}}, open(os.path.join(ck, "config.json"), "w"))

OUT = os.path.join(SCRATCH, "out")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP, "--out", OUT,
                    "--prompts-per-residue", "500"], capture_output=True, text=True)
check(r.returncode == 0, "report_runs_on_a_stack_sweep", (r.stdout + r.stderr)[-800:])
groups = {row["group"]: row for row in csv.DictReader(open(os.path.join(OUT, "report_groups.csv")))} \
    if r.returncode == 0 else {}
for v, att, stride in (("v4", "stack", "32"), ("v4_csa", "stack", "4"), ("v4_window", "stack", ""),
                       ("v4_full", "full", ""), ("full", "full", ""), ("c2", "compressed", "8")):
    g = groups.get(v, {})
    check(g.get("attention") == att and g.get("stride") == stride, f"{v}_is_{att}_fold_{stride or 'none'}",
          f"{g.get('attention')} {g.get('stride')}")
for v in ("v4", "v4_csa", "v4_window"):
    g = groups.get(v, {})
    check(g.get("control") == "v4_full" and g.get("paper_gap_pp", "") == "", f"{v}_control_is_the_stack_control",
          f"control {g.get('control')}, paper gap {g.get('paper_gap_pp')}")


def interval(vals):
    n, m = len(vals), sum(vals) / len(vals)
    sd = math.sqrt(sum((x - m) ** 2 for x in vals) / (n - 1))
    h = T975[n - 1] * sd / math.sqrt(n)
    return m, m - h, m + h


kinds_path = os.path.join(OUT, "report_kinds.csv")
kinds = {(row["group"], row["kind"]): row for row in csv.DictReader(open(kinds_path))} if os.path.exists(kinds_path) else {}
check(set(kinds) == {("v4", "csa"), ("v4", "hca"), ("v4_csa", "csa")}, "kinds_csv_has_each_stacks_compressed_kinds",
      str(sorted(kinds)))
for (v, k), (S, o, layers) in {("v4", "csa"): (4, -3, "2"), ("v4", "hca"): (32, 0, "3"), ("v4_csa", "csa"): (4, -3, "0 1 2 3")}.items():
    row = kinds.get((v, k), {})
    weak = VARIANTS[v][2]
    # csa (S 4, o -3): phase 0 holds residues 1, 5, ..., 29 (all weak): worst = weak, gap = 90 - weak, by
    # phase (weak, 90, 90, 90); hca (S 32, o 0): phase r is residue r: worst = weak at phase 1
    want_weakest = 0 if k == "csa" else 1
    want = [interval(weak), interval([HIGH - w for w in weak])]
    got = [[float(row.get(f"{m}_pp_{x}", "nan")) for x in ("mean", "lo", "hi")] for m in ("worst", "gap")]
    ok = all(abs(a - b) < 1e-6 for w, g in zip(want, got) for a, b in zip(w, g))   # the t table has 7 decimals
    check(ok and row.get("stride") == str(S) and row.get("grid_offset") == str(o) and row.get("grid_offset_recorded") == "1"
          and row.get("layers") == layers and row.get("n") == str(len(weak)) and row.get("weakest_phase") == str(want_weakest),
          f"{v}_{k}_fold_by_its_phase_with_its_offset", f"{row}; want {want}")
    if k == "csa":
        bp = [float(x) for x in row.get("acc_pp_by_phase", "").split()]
        check(len(bp) == 4 and abs(bp[0] - sum(weak) / len(weak)) < 1e-9 and all(abs(x - HIGH) < 1e-9 for x in bp[1:]),
              f"{v}_csa_accuracy_by_phase", str(bp))
md = open(os.path.join(OUT, "report.md")).read() if r.returncode == 0 else ""
check("Layer stacks: the probe folded by each compressed kind's phase" in md and
      "| v4 | csa | 4 | -3 | 2 | 3 |" in md and "window,window,csa,hca (fold 32)" in md, "report_md_shows_the_kind_folds",
      md[-1500:])

# without a checkpoint recording the offsets the fold uses o = 0 and says so
shutil.rmtree(os.path.join(SWEEP, "v4_csa-seed1", "checkpoints"))
shutil.rmtree(os.path.join(SWEEP, "v4_csa-seed2", "checkpoints"))
OUT2 = os.path.join(SCRATCH, "out2")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP, "--out", OUT2,
                    "--prompts-per-residue", "500"], capture_output=True, text=True)
rows = {(x["group"], x["kind"]): x for x in csv.DictReader(open(os.path.join(OUT2, "report_kinds.csv")))} \
    if r.returncode == 0 else {}
row = rows.get(("v4_csa", "csa"), {})
md = open(os.path.join(OUT2, "report.md")).read() if r.returncode == 0 else ""
check(row.get("grid_offset") == "0" and row.get("grid_offset_recorded") == "0" and row.get("weakest_phase") == "1" and
      "0 (not recorded: 0)" in md, "unrecorded_offset_is_zero_and_marked", str(row))
# a sweep without stacks writes no report_kinds.csv
SWEEP3 = os.path.join(SCRATCH, "sweep3")
os.makedirs(SWEEP3)
for s in ("full-seed1", "full-seed2"):
    shutil.copytree(os.path.join(SWEEP, s), os.path.join(SWEEP3, s))
OUT3 = os.path.join(SCRATCH, "out3")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), SWEEP3, "--out", OUT3], capture_output=True, text=True)
check(r.returncode == 0 and not os.path.exists(os.path.join(OUT3, "report_kinds.csv")), "no_stack_no_kinds_csv",
      (r.stdout + r.stderr)[-500:])
finish()
