"""Training with more threads than the BLAS runs (issue 37, items 4 and 8).

run.threads defaults to every core; OpenBLAS runs at most its build's MAX_THREADS (64 in the
usual builds), and the RMSNorm backward sized its per-thread buffer by the OpenMP maximum that
OpenBLAS had capped, while its team had run.threads threads: a heap overflow on the first step
of any node with more than 64 cores. OpenMP oversubscribes freely, so this 2-core machine can
ask for 80 and 200 threads. Each run (the tiny config, 4 steps) must exit 0, say once that the
count was capped (when the BLAS has a cap below it), and train the same model as the
1-thread run: its per-step training losses and its final validation loss equal the 1-thread
run's within 1e-4 relative (sums change order with the thread count, nothing else)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_train_threads", train_rows=200)
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
          "train.steps=4", "eval.every=0", "checkpoint.every=0"]


def losses(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r", swmr=True) as f:
        return np.array(f["train/loss"][...]), np.array(f["val/loss"][...])


rc, out = tu.run(common + ["run.name=t1", "run.threads=1"], timeout=300)
check(rc == 0, "run.threads=1 exits 0", out[-500:])
ref = losses("t1") if rc == 0 else None
for threads in (80, 200):
    rc, out = tu.run(common + [f"run.name=t{threads}", f"run.threads={threads}"], timeout=300)
    check(rc == 0, f"run.threads={threads} exits 0 (no heap corruption in the backward)", f"exit {rc}: {out[-800:]}")
    capped = [l for l in out.splitlines() if l.startswith(f"cpu: {threads} threads asked for")]
    check(len(capped) <= 1, f"run.threads={threads}: at most one line about the cap", "\n".join(capped))
    if capped:
        used = int(capped[0].split("using ")[1].split()[0])
        check(1 <= used < threads, f"run.threads={threads}: the cap line names a count below {threads}", capped[0])
    if rc != 0 or ref is None:
        continue
    train, val = losses(f"t{threads}")
    check(len(train) == 4 and len(train) == len(ref[0]), f"run.threads={threads}: one /train row per step",
          f"{len(train)} rows")
    if len(train) == len(ref[0]):
        rel = np.max(np.abs(train - ref[0]) / np.abs(ref[0]))
        check(rel < 1e-4, f"run.threads={threads}: training losses equal the 1-thread run's",
              f"max relative difference {rel:.3g}: {train} vs {ref[0]}")
    check(len(val) == 1 and len(ref[1]) == 1 and abs(val[0] - ref[1][0]) / abs(ref[1][0]) < 1e-4,
          f"run.threads={threads}: the final validation loss equals the 1-thread run's", f"{val} vs {ref[1]}")
finish()
