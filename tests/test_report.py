"""tools/report on a sweep of two synthetic runs: metrics.h5 files written here with h5py in the
layout of DESIGN.md (root attributes config and code_version; /train, /val, /probe, and /gates
for the compressed run only), then the report's files must exist and its CSV and Markdown must
hold exactly the numbers of the last rows of the HDF5 files."""
import csv
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report", f"h5py/matplotlib missing ({e})")
    finish()

shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
P, L, G, W = 24, 2, 2, 8
rng = np.random.default_rng(3)


def write_run(name, attention, seed):
    d = os.path.join(SCRATCH, "sweep", name)
    os.makedirs(d)
    r = np.random.default_rng(seed)
    cfg = (f"[model]\nattention = {attention}\nn_kv_heads = {G}\nn_layers = {L}\n" +
           (f"window = {W}\nstride = 8\n" if attention == "compressed" else "") + f"[run]\nname = {name}\n")
    truth = {}
    with h5py.File(os.path.join(d, "metrics.h5"), "w") as f:
        f.attrs["config"] = cfg
        f.attrs["code_version"] = "test"
        steps = np.arange(10, 110, 10, dtype=np.int64)
        g = f.create_group("train")
        g["step"] = steps
        g["tokens"] = steps * 4096
        g["loss"] = 5.0 - np.log(steps) * 0.3 + r.random(len(steps)) * 0.01
        for k in ("lr", "grad_norm", "tokens_per_sec", "mfu"):
            g[k] = r.random(len(steps))
        vs = np.array([50, 100], dtype=np.int64)
        g = f.create_group("val")
        g["step"] = vs
        g["loss"] = r.random(2) + 3.0
        g["loss_by_residue"] = r.random((2, P)) + 3.0
        g = f.create_group("probe")
        g["step"] = vs
        for p in ("pp", "ip"):
            acc = r.random((2, P)) * 100
            if name == "b_full" and p == "ip":
                acc[:] = np.nan
            g[f"acc_{p}"] = acc
            with np.errstate(all="ignore"):
                g[f"mean_{p}"] = np.nanmean(acc, axis=1) if not np.isnan(acc).all() else np.full(2, np.nan)
                g[f"worst_{p}"] = np.min(acc, axis=1)
                g[f"best_{p}"] = np.max(acc, axis=1)
                g[f"gap_{p}"] = np.max(acc, axis=1) - np.min(acc, axis=1)
            for s in ("chi2", "p", "chi2_phase", "p_phase"):
                g[f"{s}_{p}"] = r.random(2) * (30 if s.startswith("chi2") else 1)
        if attention == "compressed":
            g = f.create_group("gates")
            g["step"] = vs
            g["eff_static"] = r.random((2, L, G, 2)).astype(np.float32)
            g["eff_window"] = r.random((2, L, G, 2)).astype(np.float32)
            g["profile"] = r.random((2, L, G, 2, W)).astype(np.float32)
        truth["step"] = int(steps[-1])
        truth["val_loss"] = float(f["val/loss"][-1])
        for p in ("pp", "ip"):
            for s in ("mean", "worst", "best", "gap", "chi2", "p", "chi2_phase", "p_phase"):
                truth[f"{s}_{p}"] = float(f[f"probe/{s}_{p}"][-1])
    return truth


truth = {"a_w8s8": write_run("a_w8s8", "compressed", 1), "b_full": write_run("b_full", "full", 2)}
out = os.path.join(SCRATCH, "out")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "sweep"), "--out", out],
                   capture_output=True, text=True)
check(r.returncode == 0, "report_runs", r.stderr.strip()[-500:])
for fn in ("report.md", "report.csv", "probe_by_residue.png", "val_loss_by_residue.png", "loss_curves.png",
           "gates_a_w8s8.png"):
    p = os.path.join(out, fn)
    check(os.path.exists(p) and os.path.getsize(p) > 0, f"writes_{fn}", "missing or empty")
check(not os.path.exists(os.path.join(out, "gates_b_full.png")), "no_gate_plot_for_full_attention")

same = lambda a, b: (math.isnan(a) and math.isnan(b)) or a == b
rows = {}
if os.path.exists(os.path.join(out, "report.csv")):
    with open(os.path.join(out, "report.csv")) as fh:
        rows = {row["run"]: row for row in csv.DictReader(fh)}
check(sorted(rows) == ["a_w8s8", "b_full"], "csv_one_row_per_run", f"{sorted(rows)}")
for name, t in truth.items():
    row = rows.get(name, {})
    bad = [k for k, v in t.items() if k != "step" and not same(float(row.get(k, "nan")), v)]
    if str(row.get("step")) != str(t["step"]):
        bad.append("step")
    check(not bad, f"csv_exact_numbers_{name}", f"differ: {bad}")
check(rows.get("b_full", {}).get("attention") == "full" and rows.get("a_w8s8", {}).get("window") == "8",
      "csv_reads_config_attribute", f"{rows.get('b_full', {}).get('attention')}")

md = open(os.path.join(out, "report.md")).read() if os.path.exists(os.path.join(out, "report.md")) else ""
cells = {}
for line in md.splitlines():
    parts = [c.strip() for c in line.strip().strip("|").split("|")]
    if parts and parts[0] in truth:
        cells[parts[0]] = parts
for name, t in truth.items():
    c = cells.get(name)
    if c is None:
        check(False, f"markdown_numbers_{name}", "row missing")
        continue
    # columns: run, attention, W/S, KV, step, val loss, pp mean worst best gap, ip mean worst best gap
    want = [str(t["step"]), f"{t['val_loss']:.4f}"] + \
           [("–" if math.isnan(t[f"{s}_{p}"]) else f"{t[f'{s}_{p}']:.2f}") for p in ("pp", "ip")
            for s in ("mean", "worst", "best", "gap")]
    check(c[4:4 + len(want)] == want, f"markdown_numbers_{name}", f"{c[4:4 + len(want)]} != {want}")
    want_p = [("–" if math.isnan(t[f"{s}_{p}"]) else f"{t[f'{s}_{p}']:.3g}") for p in ("pp", "ip") for s in ("p", "p_phase")]
    check(c[4 + len(want):] == want_p, f"markdown_phase_test_{name}", f"{c[4 + len(want):]} != {want_p}")

r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "sweep", "a_w8s8")],
                   capture_output=True, text=True)
check(r.returncode == 0 and os.path.exists(os.path.join(SCRATCH, "sweep", "a_w8s8", "report.csv")),
      "report_single_run_dir", r.stderr.strip()[-300:])
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "nothing")],
                   capture_output=True, text=True)
check(r.returncode != 0 and "nothing" in r.stderr, "report_missing_dir_error", r.stderr.strip())
finish()
