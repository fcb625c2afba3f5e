"""tools/report's fold of the probe by phase, checked against numbers computed here:
  - multi-rate strides (model.head_strides = 4,2; model.stride = 2, the smallest) fold by the lcm
    of the strides, 4, as ./train's probe_phase_fold and docs/spec.md §3.1 / §6.4 do: the fold_pp
    and period_pp columns of report.csv (a weak residue every 4th: the fold by 4 is 100 100 100 40
    and every phase's residues agree; a fold by 2 would mix 100 and 40 in phase 1);
  - probe_folded_by_variant.png, one run with --prompts-per-residue N: the Wilson interval of a
    folded phase counts the N * P / S prompts the phase pools (P / S residues of N prompts each),
    not the N of one residue. The band's bounds are caught where the plot hands them to
    figstyle.band (the report imported as a module) and compared with the Wilson interval of
    docs/spec.md §3.6 worked out here.
Scratch: build/scratch/test_report_fold/."""
import csv
import importlib.machinery
import importlib.util
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
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_fold")
REPORT = os.path.join(ROOT, "tools", "report")
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_fold", f"h5py/matplotlib missing ({e})")
    finish()

P = 24
shutil.rmtree(SCRATCH, ignore_errors=True)


def write_sweep_run(sweep, name, model, acc):
    cfg = f"[model]\nn_layers = 1\n{model}[train]\nsteps = 100\n[run]\nname = {name}\n"
    write_run(os.path.join(SCRATCH, sweep, name), cfg, acc, [100])


# ---- multi-rate strides fold by the lcm ---------------------------------------------------------
weak4 = np.where(np.arange(P) % 4 == 3, 40.0, 100.0)
write_sweep_run("multirate", "mr-seed1", "attention = compressed\nn_kv_heads = 2\nwindow = 4\nstride = 2\nhead_strides = 4,2\n",
          weak4)
out = os.path.join(SCRATCH, "out_multirate")
r = subprocess.run([sys.executable, REPORT, os.path.join(SCRATCH, "multirate"), "--out", out, "--prompts-per-residue", "100"],
                   capture_output=True, text=True)
rows = {x["run"]: x for x in csv.DictReader(open(os.path.join(out, "report.csv")))} if r.returncode == 0 else {}
row = rows.get("mr-seed1", {})
check(row.get("fold_pp") == "100.0 100.0 100.0 40.0", "multirate_folds_by_the_lcm_of_head_strides",
      f"fold_pp {row.get('fold_pp')!r} (want the fold by lcm(4, 2) = 4); {r.stderr[-300:]}")
check(row.get("period_pp") == "1.0", "multirate_period_check_by_the_lcm", f"period_pp {row.get('period_pp')!r}")

# ---- the Wilson interval of a folded phase pools the phase's residues -------------------------------
N, S = 10, 8
k_res = np.array([(3 + r % S + r // S) % (N + 1) for r in range(P)])     # correct prompts of each residue
acc = 100.0 * k_res / N
write_sweep_run("single", "w8s8-seed1", "attention = compressed\nn_kv_heads = 1\nwindow = 8\nstride = 8\n", acc)


def wilson(k, n, z=1.959963984540054):
    """docs/spec.md §3.6, in percent."""
    ph = k / n
    c = (ph + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, c - h), 100 * min(1.0, c + h)


want = [wilson(int(k_res[j::S].sum()), N * P // S) for j in range(S)]      # k of the phase out of N P / S prompts

loader = importlib.machinery.SourceFileLoader("phaselab_report", REPORT)
spec = importlib.util.spec_from_loader("phaselab_report", loader)
rep = importlib.util.module_from_spec(spec)
loader.exec_module(rep)
rep.PROMPTS_PER_RESIDUE[0] = N
runs = [rep.read_run(os.path.join(SCRATCH, "single", "w8s8-seed1", "metrics.h5"))]
rep.prompts_per_residue(runs)            # no eval.probe here: N is the option's
groups = rep.build_groups(runs)
seen = []
band = rep.fs.band


def spy(ax, x, mean, lo, hi, *a, **k):
    seen.append((np.asarray(mean, dtype=float), np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)))
    return band(ax, x, mean, lo, hi, *a, **k)


rep.fs.band = spy
os.makedirs(os.path.join(SCRATCH, "out_single"))
rep.plot_by_variant(groups, os.path.join(SCRATCH, "out_single"), True)
rep.fs.band = band
got = seen[0] if len(seen) == 1 else None
check(got is not None and np.allclose(got[0], [100.0 * k_res[j::S].sum() / (N * P / S) for j in range(S)]),
      "folded_plot_draws_the_phase_means", f"{got}")
check(got is not None and np.allclose(got[1], [lo for lo, _ in want], atol=1e-9) and
      np.allclose(got[2], [hi for _, hi in want], atol=1e-9),
      "folded_phase_wilson_interval_counts_N_P_over_S_prompts",
      f"lo {None if got is None else np.round(got[1], 3)} hi {None if got is None else np.round(got[2], 3)}; "
      f"want {np.round(want, 3).tolist()}")
finish()
