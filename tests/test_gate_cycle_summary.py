"""tools/gate-cycle-summary: per checkpoint the mean correlation over the deltas != 0 and the accuracy
kept, then per (run, step) the mean and 95% Student-t interval over seeds. The analysis.h5 files are
written here with h5py (the layout of analysis/analysis.c's gate_cycle group: delta [nd],
correlation [nd, 2], acc_phase [nd, 2, S]) with numbers whose summary is known by hand:
seed s has correlations 0.1 s for every delta, clean accuracy 40 and cycled accuracy 10 s, so
corr pp = 0.1 s, kept = s / 4; over seeds 1, 2, 3: corr mean 0.2, sd 0.1, t(0.975, 2) = 4.303,
half-width 0.2484; kept mean 0.5, sd 0.25, half-width 0.621.
A second directory adds, after each seed's `--gate-cycle all` group (layers all), a later
single-delta group (`--gate-cycle 1`) in seed 2, which must not drop seed 2 (n stays 3, and the
group is named as not used), and a later full group of other layers (layers 0, cycled accuracy 5,
so kept 1/8) in seed 3, which must be summarised in a row of its own, never pooled with layers all."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from pycheck import check, skip, finish  # noqa: E402

try:
    import h5py
    import numpy as np
except ImportError:
    skip("gate-cycle-summary", "h5py missing")
    finish()
    sys.exit(0)

SCRATCH = os.path.join(ROOT, "build", "scratch", "test_gate_cycle_summary")
shutil.rmtree(SCRATCH, ignore_errors=True)
S = 8
for seed in (1, 2, 3):
    d = os.path.join(SCRATCH, f"gc_d32-seed{seed}", "checkpoints", "step_00000600")
    os.makedirs(d)
    with h5py.File(os.path.join(d, "analysis.h5"), "w") as f:
        f.create_group("gate_cycle_000")          # an older group: the newest one counts
        g = f.create_group("gate_cycle_001")
        g["delta"] = np.arange(S)
        corr = np.full((S, 2), 0.1 * seed)
        corr[0] = 1.0
        g["correlation"] = corr
        acc = np.full((S, 2, S), 10.0 * seed)
        acc[0] = 40.0
        g["acc_phase"] = acc
    if seed == 1:
        del_f = h5py.File(os.path.join(d, "analysis.h5"), "a")
        del del_f["gate_cycle_000"]
        del_f.close()
tool = os.path.join(ROOT, "tools", "gate-cycle-summary")
p = subprocess.run([sys.executable, tool, SCRATCH], capture_output=True, text=True)
row = [ln for ln in p.stdout.splitlines() if ln.startswith("| gc_d32 | 600 |")]
check(p.returncode == 0 and len(row) == 1, "one summary row for gc_d32 at step 600", p.stdout + p.stderr)
if row:
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    check(cells[2] == "3" and cells[3] == "40.0 [40.0, 40.0]", "n = 3 seeds, clean accuracy 40.0 (no spread)", f"{cells}")
    check(cells[4] == "0.20 [-0.05, 0.45]", "corr pp: mean 0.2, 95% t-interval 0.2 +- 4.303 * 0.1 / sqrt(3)", f"{cells[4]}")
    check(cells[6] == "0.50 [-0.12, 1.12]", "kept: 1/4, 2/4, 3/4: mean 0.5 +- 4.303 * 0.25 / sqrt(3) = 0.621", f"{cells[6]}")
p = subprocess.run([sys.executable, tool, SCRATCH, "--min-clean", "50"], capture_output=True, text=True)
check(p.returncode == 2 and p.stdout.count("left out") == 3, "--min-clean 50: every checkpoint (clean 40%) left out, exit 2",
      p.stdout + p.stderr)
p = subprocess.run([sys.executable, tool, os.path.join(SCRATCH, "missing")], capture_output=True, text=True)
check(p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr, "a missing directory: one line, exit 2",
      p.stderr)
# ---- the newest group with the full delta set, per set of layers ------------------------------------
MIXED = os.path.join(SCRATCH, "mixed")
for seed in (1, 2, 3):
    d = os.path.join(MIXED, f"gc_d32-seed{seed}", "checkpoints", "step_00000600")
    os.makedirs(d)
    with h5py.File(os.path.join(d, "analysis.h5"), "w") as f:
        def gc(name, layers, deltas, cycled):
            g = f.create_group(name)
            g.attrs["layers"] = layers
            g["delta"] = np.asarray(deltas)
            corr = np.full((len(deltas), 2), 0.1 * seed)
            acc = np.full((len(deltas), 2, S), cycled)
            for i, dl in enumerate(deltas):
                if dl == 0:
                    corr[i], acc[i] = 1.0, 40.0
            g["correlation"], g["acc_phase"] = corr, acc
        gc("gate_cycle_000", "all", list(range(S)), 10.0 * seed)
        if seed == 2:
            gc("gate_cycle_001", "all", [1], 99.0)          # --gate-cycle 1, later: not the full delta set
        if seed == 3:
            gc("gate_cycle_001", "0", list(range(S)), 5.0)  # --gate-cycle all --layers 0, later: other layers
        if seed == 1:                                       # a changed model (overrides), later: its own row
            gc("gate_cycle_001", "all", list(range(S)), 7.0)
            f["gate_cycle_001"].attrs["overrides"] = "model.stride=2"
p = subprocess.run([sys.executable, tool, MIXED], capture_output=True, text=True)
rows = {tuple(c.strip() for c in ln.strip("|").split("|"))[-1]: [c.strip() for c in ln.strip("|").split("|")]
        for ln in p.stdout.splitlines() if ln.startswith("| gc_d32 | 600 |")}
check(p.returncode == 0 and sorted(rows) == ["0", "all", "all [overrides model.stride=2]"],
      "one row per set of cycled layers and overrides (a changed model is never averaged with the plain ones)",
      p.stdout + p.stderr)
r_all, r_0 = rows.get("all", []), rows.get("0", [])
check(r_all[2:7] == ["3", "40.0 [40.0, 40.0]", "0.20 [-0.05, 0.45]", "0.20 [-0.05, 0.45]", "0.50 [-0.12, 1.12]"],
      "a later single-delta group does not drop its checkpoint: layers all keeps n = 3 and the numbers above", f"{r_all}")
check(r_0[2:7] == ["1", "40.0", "0.30", "0.30", "0.12"], "layers 0 summarised apart: seed 3 alone, kept 5/40",
      f"{r_0}")
check("gc_d32 seed 2 step 600: /gate_cycle_001 (layers all): deltas 1, not the full set 0..7: not used" in p.stdout,
      "the single-delta group is named as not used", p.stdout)

empty = os.path.join(SCRATCH, "empty")
os.makedirs(empty)
p = subprocess.run([sys.executable, tool, empty], capture_output=True, text=True)
check(p.returncode == 2 and "no analysis.h5" in p.stderr, "nothing to summarise: exit 2", p.stderr)
finish()
