"""tools/demo-run (make run's job) run twice on a short run (DEMO_RUNS: its data and run in a scratch
directory; 20 steps): both runs exit 0 and print the same probe summary, and the final checkpoint's
analysis.h5 holds exactly one probe group: the rerun says the evaluation is stored already and
stores nothing new (it appended a duplicate /probe_001 before); a misspelt override stops it before
any data is made."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("demo_run", "h5py missing")
    finish()
tu.require_train()
S = os.path.join(tu.ROOT, "build", "scratch", "test_demo_run")
shutil.rmtree(S, ignore_errors=True)
env = dict(os.environ, DEMO_RUNS=S)
args = [os.path.join(tu.ROOT, "tools", "demo-run"), "train.steps=20", "checkpoint.every=20", "eval.every=0", "run.log_every=10"]
runs = [subprocess.run(args, capture_output=True, text=True, env=env, timeout=600) for _ in range(2)]
summary = [[l for l in r.stdout.splitlines() if l.startswith(("pp: mean", "ip: mean"))] for r in runs]
check(all(r.returncode == 0 for r in runs) and summary[0] and summary[0] == summary[1],
      "demo-run twice: exit 0, the same probe summary printed", f"{[r.returncode for r in runs]} {summary} "
      f"{runs[0].stderr[-300:]} {runs[1].stderr[-300:]}")
h5 = os.path.join(S, "demo", "checkpoints", "step_00000020", "analysis.h5")
groups = sorted(k for k in h5py.File(h5, "r")) if os.path.exists(h5) else []
check(groups == ["probe_000"], "the final checkpoint's analysis.h5 holds one probe group after two runs", f"{groups}")
check("stored already, as /probe_000" in runs[1].stdout and "stored already" not in runs[0].stdout
      and not [l for l in runs[1].stdout.splitlines() if l.startswith("stored /") and l.endswith(h5)],
      "the rerun says the evaluation is stored already and stores nothing", runs[1].stdout[-500:])
# a misspelt override stops before the corpus and the probe are made (./train --summary first)
S2 = S + "_typo"
shutil.rmtree(S2, ignore_errors=True)
r = subprocess.run([args[0], "model.strid=4"], capture_output=True, text=True, env=dict(env, DEMO_RUNS=S2), timeout=120)
check(r.returncode == 2 and "model.strid: unknown key" in r.stderr and not os.path.exists(S2),
      "demo-run with a misspelt override: exit 2 naming the key, nothing made", f"{r.returncode} {r.stderr[-300:]}")
finish()
