"""A run directory as ./train leaves it, written by hand for the tests of tools/report: config.ini
and metrics.h5 in trainer/metrics.h's layout, holding what the report reads (the config as the
file's attribute; /train, /val and /probe step rows; the train and validation losses; the probe's
top-1 accuracy rows of both protocols). Needs h5py (the caller skips without it)."""
import os

import numpy as np


def write_run(run_dir, cfg, acc, train_steps, val_steps=None, probe_steps=None, val_loss=1.0):
    """run_dir/config.ini = cfg and run_dir/metrics.h5: /train/step = train_steps (loss 1.0 each),
    /val/step = val_steps (default train_steps; loss val_loss each), /probe/step = probe_steps
    (default train_steps) with /probe/acc_pp = /probe/acc_ip = acc, one row [P] per probe step (a
    single row [P] may be given as a 1-D array). Creates run_dir if needed; returns the metrics.h5 path."""
    import h5py
    val_steps = train_steps if val_steps is None else val_steps
    probe_steps = train_steps if probe_steps is None else probe_steps
    os.makedirs(run_dir, exist_ok=True)
    open(os.path.join(run_dir, "config.ini"), "w").write(cfg)
    path = os.path.join(run_dir, "metrics.h5")
    with h5py.File(path, "w") as f:
        f.attrs["config"] = cfg
        for grp, steps in (("train", train_steps), ("val", val_steps), ("probe", probe_steps)):
            f[f"{grp}/step"] = np.array(steps, dtype=np.int64)
        f["train/loss"] = np.ones(len(train_steps))
        f["val/loss"] = np.full(len(val_steps), float(val_loss))
        rows = np.atleast_2d(np.asarray(acc, dtype=float))
        for p in ("pp", "ip"):
            f[f"probe/acc_{p}"] = rows
    return path
