"""The collectives of one training step (issue 12): with PHASELAB_TRACE_COMM each rank records,
for every step, the host all-reduces it asked for from the start of the step through its
optimizer step. The step must make exactly ONE control all-reduce (comm_step_control: loss,
gate-coverage sum, data-failure flag and stop signal together), no max-int all-reduce (the
former failure and signal flags) and one host sum (the gradient norm's sum of squares, the only
other host all-reduce of the step) — on 1 rank, and on 2 ranks when mpirun exists, also with the
gate-coverage penalty on (whose sum used to be an all-reduce of its own). The counters count the
requests on every rank whatever the world size, so the 1-rank run checks the trainer too."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_step_collectives", train_rows=64)
STEPS = 3
base = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
        f"train.steps={STEPS}", "eval.every=0", "checkpoint.every=0"]
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

runs = [("1 rank", 1, []), ("1 rank, gate coverage on", 1, ["train.gate_coverage=0.1"])]
if shutil.which("mpirun"):
    runs.append(("2 ranks", 2, []))
for label, n, extra in runs:
    trace = f"{d}/trace_{n}_{len(extra)}"
    cmd = (MPI + ["-np", str(n), tu.TRAIN] if n > 1 else [tu.TRAIN]) + base + extra + [f"run.name=r{n}_{len(extra)}"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                       env=dict(os.environ, PHASELAB_TRACE_COMM=trace))
    check(p.returncode == 0, f"step collectives: {label}: the run finishes", p.stdout[-800:])
    rows = []
    for r in range(n):
        path = f"{trace}.rank{r}"
        if os.path.exists(path):
            rows += [tuple(int(x) for x in line.split()) for line in open(path) if line.strip()]
    check(len(rows) == STEPS * n, f"step collectives: {label}: one trace line per step and rank",
          f"{len(rows)} lines, want {STEPS * n}")
    check(rows and all(row[2] == 1 for row in rows), f"step collectives: {label}: one control all-reduce per step",
          f"(step, rank, controls, max_int, sum_host): {rows}")
    check(rows and all(row[3] == 0 and row[4] == 1 for row in rows),
          f"step collectives: {label}: no other control all-reduce (only the gradient norm's sum)", f"{rows}")
finish()
