"""tools/report on a sweep of two synthetic runs: metrics.h5 files written here with h5py in the
layout of trainer/metrics.h (root attributes config and code_version; /train, /val, /probe, and /gates
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


def write_run(name, attention, seed, sweep="sweep", kv=None, acc_fn=None):
    d = os.path.join(SCRATCH, sweep, name)
    os.makedirs(d)
    r = np.random.default_rng(seed)
    cfg = (f"[model]\nattention = {attention}\nn_kv_heads = {kv or G}\nn_layers = {L}\n" +
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
            acc = r.random((2, P)) * 100 if acc_fn is None else np.array([acc_fn(np.arange(P))] * 2)
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
        if attention == "compressed":   # the uncertainty group of docs/spec.md §4.8 (only this run has it)
            g = f.create_group("val_stats")
            g["step"] = vs
            g["windows"] = np.array([128, 128], dtype=np.int64)
            g["loss_se"] = np.array([0.0123, 0.0234])
            g["loss_se_by_residue"] = r.random((2, P)) * 0.1
            g["loss_by_phase"] = np.array([np.arange(8) * 0.1 + 3.0] * 2)
            g["loss_se_by_phase"] = np.full((2, 8), 0.05)
            for k, v in (("F_residue", 1.5), ("df1_residue", 23), ("df2_residue", 105), ("p_residue", 0.0812),
                         ("F_phase", 9.25), ("df1_phase", 7), ("df2_phase", 121), ("p_phase", 3e-9)):
                g[k] = np.array([v, v], dtype=float)
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
        ACC[name] = np.array(f["probe/acc_pp"][-1])
    return truth


ACC = {}   # last probe/acc_pp row of each run, for the fold-by-phase check


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
check(os.path.exists(os.path.join(out, "val_loss_by_phase.png")), "writes_val_loss_by_phase.png (a run with /val_stats)",
      "missing")
md_text = open(os.path.join(out, "report.md")).read()
vrow = [ln for ln in md_text.splitlines() if ln.startswith("| a_w8s8 | 100 | 128 |")]
check(len(vrow) == 1 and "| 0.0234 |" in vrow[0] and "1.5 (23, 105)" in vrow[0] and "9.25 (7, 121)" in vrow[0]
      and "3.000±0.050" in vrow[0] and not any(ln.startswith("| b_full | 100 | 128 |") for ln in md_text.splitlines()),
      "markdown_val_stats: loss SE, n windows, both F tests (df) and the loss by phase +- SE of the last /val_stats row; "
      "a run without /val_stats has no row", f"{vrow}")

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
        cells.setdefault(parts[0], parts)      # the per-run table comes first (the by-variant table repeats the name)
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
    chi2 = "–" if math.isnan(t["chi2_pp"]) else f"{t['chi2_pp']:.1f}"
    check(c[4 + len(want):4 + len(want) + 5] == [chi2] + want_p, f"markdown_phase_test_{name}",
          f"{c[4 + len(want):4 + len(want) + 5]} != {[chi2] + want_p}")
    # fold by phase (S = 8 for both: the compressed run's stride, and 8 for full attention), computed
    # here from the HDF5 row: mean of A(r) over r = j (mod 8); no period check without the counts;
    # the paper's figure: full attention 3-6, W8/S8 with 2 KV heads none.
    fold = " ".join(f"{np.mean(ACC[name][j::8]):.1f}" for j in range(8))
    paper = "3-6" if name == "b_full" else "–"
    check(c[4 + len(want) + 5:] == [fold, "–", paper], f"markdown_fold_period_paper_{name}",
          f"{c[4 + len(want) + 5:]} != {[fold, '–', paper]}")

# The period check and the paper's figure on a second sweep: two seeds of a W8/S8 1-KV variant whose
# accuracy has period 8 exactly (residues r, r+8, r+16 equal) and one with random accuracies.
write_run("w8s8_kv1-seed1", "compressed", 5, "sweep2", kv=1, acc_fn=lambda r: np.where(r % 8 == 3, 100.0, 2.0))
write_run("w8s8_kv1-seed2", "compressed", 6, "sweep2", kv=1, acc_fn=lambda r: np.where(r % 8 == 5, 96.0, 1.0))
write_run("noise-seed1", "compressed", 7, "sweep2", kv=3)   # another config: a variant of its own
out2 = os.path.join(SCRATCH, "out2")
r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "sweep2"), "--out", out2,
                    "--prompts-per-residue", "500"], capture_output=True, text=True)
rows2 = {row["run"]: row for row in csv.DictReader(open(os.path.join(out2, "report.csv")))} if r.returncode == 0 else {}
check(rows2.get("w8s8_kv1-seed1", {}).get("period_pp") == "1.0" and rows2.get("w8s8_kv1-seed2", {}).get("period_pp") == "1.0"
      and rows2.get("noise-seed1", {}).get("period_pp") == "0.0", "csv_period_check",
      str({k: v.get("period_pp") for k, v in rows2.items()}) + r.stderr[-300:])
check(rows2.get("w8s8_kv1-seed1", {}).get("paper_gap_pp") == "75.3 (1 KV)" and
      rows2.get("w8s8_kv1-seed1", {}).get("variant") == "w8s8_kv1" and
      rows2.get("w8s8_kv1-seed1", {}).get("fold_pp") == "2.0 2.0 2.0 100.0 2.0 2.0 2.0 2.0", "csv_paper_variant_fold",
      str(rows2.get("w8s8_kv1-seed1")))
md2 = open(os.path.join(out2, "report.md")).read() if r.returncode == 0 else ""
check("| w8s8_kv1 | 2 | " in md2 and "| noise | 1 | " in md2, "markdown_by_variant_table", md2[-500:])
check(all(os.path.exists(os.path.join(out2, f)) for f in ("probe_by_variant.png", "probe_folded_by_variant.png")),
      "writes_by_variant_plots")

r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "sweep", "a_w8s8")],
                   capture_output=True, text=True)
check(r.returncode == 0 and os.path.exists(os.path.join(SCRATCH, "sweep", "a_w8s8", "report.csv")),
      "report_single_run_dir", r.stderr.strip()[-300:])
# The prompts per residue come from the run's probe (its header, data/probe.h), eval.probe relative to the
# working directory in the checkpoint's state.json: a probe of N = 4 whose residues 0..7 score 4 of 4 and
# the others 0 of 4 has no period-8 structure at N = 4 (Wilson [51, 100] against [0, 49]), but would have
# at the N = 1 a wrong option claims ([21, 100] against [0, 79]): that option is refused, naming both.
REPORT = [sys.executable, os.path.join(ROOT, "tools", "report")]
probe4 = os.path.join(SCRATCH, "probe4.bin")
mk = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", probe4,
                     "--per-residue", "4", "--quiet"], capture_output=True, text=True)
write_run("w8s8_kv1-seed1", "compressed", 5, "sweep3", kv=1, acc_fn=lambda r: np.where(r < 8, 100.0, 0.0))
d3 = os.path.join(SCRATCH, "sweep3", "w8s8_kv1-seed1")
with h5py.File(os.path.join(d3, "metrics.h5"), "a") as f:
    f.attrs["config"] = f.attrs["config"] + "[eval]\nresidues = 24\nprobe = probe4.bin\n"
os.makedirs(os.path.join(d3, "checkpoints", "step_00000100"))
open(os.path.join(d3, "checkpoints", "step_00000100", "state.json"), "w").write('{"working_dir": "%s"}' % SCRATCH)


def period3(*opt):
    out3 = os.path.join(SCRATCH, "out3")
    r = subprocess.run(REPORT + [os.path.join(SCRATCH, "sweep3"), "--out", out3, *opt], cwd=ROOT, capture_output=True, text=True)
    rows = {row["run"]: row for row in csv.DictReader(open(os.path.join(out3, "report.csv")))} if r.returncode == 0 else {}
    return r, rows.get("w8s8_kv1-seed1", {}).get("period_pp")


r, per = period3()
check(mk.returncode == 0 and r.returncode == 0 and per == "0.0", "period_uses_the_probes_prompts_per_residue",
      f"period_pp {per!r}; {mk.stderr[-200:]} {r.stderr[-300:]}")
r, per = period3("--prompts-per-residue", "4")
check(r.returncode == 0 and per == "0.0", "prompts_per_residue_option_agreeing_with_the_probe", f"{per!r} {r.stderr[-300:]}")
r, per = period3("--prompts-per-residue", "1")
err = r.stderr.strip()
check(r.returncode == 2 and "\n" not in err and "--prompts-per-residue 1" in err and "records 4 prompts per residue" in err
      and probe4 in err, "prompts_per_residue_option_contradicting_the_probe_refused", err)
for bad in ("0", "-2"):
    r = subprocess.run(REPORT + [os.path.join(SCRATCH, "sweep3"), "--prompts-per-residue", bad], capture_output=True, text=True)
    check(r.returncode == 2 and "--prompts-per-residue" in r.stderr, f"prompts_per_residue_{bad}_refused", r.stderr.strip())

# A synthetic run (P 24, vocabulary 256) and a real-text run (P 8, vocabulary 151936) in one directory:
# one note naming the two groups (stderr and report.md), and each P on a residue axis of its own (the
# residue plots get a row of panels per P: twice the height of a one-P report's).
def write_small(sweep, name, cfg, P_):
    d = os.path.join(SCRATCH, sweep, name)
    os.makedirs(d)
    with h5py.File(os.path.join(d, "metrics.h5"), "w") as f:
        f.attrs["config"] = cfg + f"[run]\nname = {name}\n"
        for grp in ("train", "val", "probe"):
            f.create_group(grp)["step"] = np.array([100], dtype=np.int64)
        f["train/loss"] = np.array([1.0])
        f["val/loss"] = np.array([1.0])
        f["val/loss_by_residue"] = np.linspace(1, 2, P_)[None, :]
        for p in ("pp", "ip"):
            f[f"probe/acc_{p}"] = np.linspace(10, 90, P_)[None, :]


def png_height(path):
    return int.from_bytes(open(path, "rb").read()[20:24], "big") if os.path.exists(path) else 0


write_small("mixed", "synth", "[model]\nattention = full\nvocab_size = 256\n[eval]\nresidues = 24\n", 24)
write_small("mixed", "qwen", "[model]\nattention = full\nvocab_size = 151936\n[eval]\nresidues = 8\n"
            "[data]\ntokenizer = data/qwen3/tokenizer.json\n", 8)
write_small("alike", "synth", "[model]\nattention = full\nvocab_size = 256\n[eval]\nresidues = 24\n", 24)
heights = {}
for sw in ("mixed", "alike"):
    r = subprocess.run(REPORT + [os.path.join(SCRATCH, sw), "--out", os.path.join(SCRATCH, f"out_{sw}")],
                       capture_output=True, text=True)
    heights[sw] = (png_height(os.path.join(SCRATCH, f"out_{sw}", "probe_by_residue.png")),
                   png_height(os.path.join(SCRATCH, f"out_{sw}", "val_loss_by_residue.png")))
    md = open(os.path.join(SCRATCH, f"out_{sw}", "report.md")).read() if r.returncode == 0 else ""
    notes = [l for l in r.stderr.splitlines() if "different probes or vocabularies" in l]
    if sw == "mixed":
        want = ("P 24, vocab 256, tokenizer ?: synth; P 8, vocab 151936, tokenizer data/qwen3/tokenizer.json: qwen")
        check(r.returncode == 0 and len(notes) == 1 and notes[0].startswith("report: note: runs of different probes")
              and notes[0].endswith(want) and f"(the residue plots draw one row of panels per P): {want}." in md,
              "mixed_probes_and_vocabularies_named", r.stderr[-500:])
    else:
        check(r.returncode == 0 and not notes and "different probes" not in md, "one_probe_no_mixing_note", r.stderr[-300:])
check(heights["alike"][0] > 0 and heights["mixed"][0] > 1.6 * heights["alike"][0]
      and heights["mixed"][1] > 1.6 * heights["alike"][1], "residue_plots_one_row_per_P", str(heights))

r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(SCRATCH, "nothing")],
                   capture_output=True, text=True)
check(r.returncode != 0 and "nothing" in r.stderr, "report_missing_dir_error", r.stderr.strip())
finish()
