"""tools/report and tools/sweep status must not hang on a file they cannot read: each metrics.h5 /
analysis.h5 is read in a child process with a time limit (PHASELAB_READ_TIMEOUT, 2 s here).
Cases:
- a metrics.h5 held open for writing (h5py "a", the HDF5 file lock): bounded, explained;
- a FIFO named metrics.h5 or analysis.h5 (an open() that never returns, as with a file held by a
  writer on a network file system): report finishes well inside the limit of this test, names
  the file once with "no answer in 2 s", reports the good run beside it and exits 1;
- a metrics.h5 written by ./train and cut to a half and to a quarter (HDF5 retries its SWMR
  metadata reads forever on some cuts): report and sweep status finish in bounded time, warn about
  that file (or read it), and list the good run.
Each subprocess itself runs under a 120 s timeout, so a hang fails the check instead of the run."""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

ROOT = tu.ROOT
S = os.path.join(ROOT, "build", "scratch", "test_tool_timeouts")
shutil.rmtree(S, ignore_errors=True)
os.makedirs(S)
try:
    import h5py
    import numpy as np
except ImportError as e:
    skip("tool_timeouts", f"numpy/h5py missing ({e})")
    finish()
LIMIT = 2
ENV = dict(os.environ, PHASELAB_READ_TIMEOUT=str(LIMIT))
ENV.pop("PHASELAB_DEBUG", None)


def tool(*args):
    t0 = time.time()
    try:
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", args[0])] + list(args[1:]), capture_output=True,
                           text=True, env=ENV, timeout=120)
        return r.returncode, r.stdout, r.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        return None, "", f"hung: killed after 120 s ({e})", time.time() - t0


def good_run(d, name="good"):
    os.makedirs(d)
    with h5py.File(os.path.join(d, "metrics.h5"), "w") as f:
        f.attrs["config"] = f"[model]\nattention = full\n[run]\nname = {name}\n"
        f["train/step"] = np.arange(1, 6, dtype=np.int64)
        f["train/loss"] = np.linspace(5, 4, 5)
        f["val/step"] = np.array([5], dtype=np.int64)
        f["val/loss"] = np.array([4.5])


# ---- FIFOs: a read that blocks forever ----------------------------------------------------------
sw = os.path.join(S, "fifo_sweep")
good_run(os.path.join(sw, "good"))
os.makedirs(os.path.join(sw, "stuck"))
fifo = os.path.join(sw, "stuck", "metrics.h5")
os.mkfifo(fifo)
ck = os.path.join(sw, "good", "checkpoints", "step_00000005")
os.makedirs(ck)
fifo_a = os.path.join(ck, "analysis.h5")
os.mkfifo(fifo_a)
rc, out, err, secs = tool("report", sw, "--out", os.path.join(S, "fifo_out"))
named = [l for l in err.splitlines() if fifo in l and f"no answer in {LIMIT} s" in l]
named_a = [l for l in err.splitlines() if fifo_a in l and f"no answer in {LIMIT} s" in l]
last = err.strip().splitlines()[-1] if err.strip() else ""
check(rc == 1 and secs < 60 and len(named) == 1 and len(named_a) == 1 and "Traceback" not in err,
      "report_fifo_times_out_and_names_the_file", f"exit {rc} after {secs:.1f}s: {err[-600:]}")
check("skipped 2 of 3 files" in last, "report_last_line_says_what_was_skipped", last)
csv_path = os.path.join(S, "fifo_out", "report.csv")
rows = open(csv_path).read().splitlines() if os.path.exists(csv_path) else []
check(len(rows) == 2 and rows[1].startswith("good,"), "report_reports_the_rest_beside_a_stuck_file", str(rows))

# ---- a metrics.h5 held open for writing by another program (h5py 'a': the HDF5 file lock) ---------
lk = os.path.join(S, "locked_sweep")
good_run(os.path.join(lk, "good"))
good_run(os.path.join(lk, "held"), "held")
holder = h5py.File(os.path.join(lk, "held", "metrics.h5"), "a")
rc, out, err, secs = tool("report", lk, "--out", os.path.join(S, "locked_out"))
rc2, out2, err2, secs2 = tool("sweep", "status", lk)
holder.close()
held = os.path.join(lk, "held", "metrics.h5")
# where HDF5 file locking is off (HDF5_USE_FILE_LOCKING=FALSE, some file systems) the file is simply read
check(secs < 60 and "Traceback" not in err and (rc == 0 or (rc == 1 and held in err and "held open for writing" in err)),
      "report_locked_file_bounded_and_explained", f"exit {rc} after {secs:.1f}s: {err[-500:]}")
check(secs2 < 60 and "Traceback" not in err2 and "good" in out2 and (rc2 == 0 or (rc2 == 1 and held in err2)),
      "status_locked_file_bounded_and_explained", f"exit {rc2} after {secs2:.1f}s: {out2[-300:]} {err2[-500:]}")

# ---- metrics.h5 written by ./train, cut short -----------------------------------------------------
if not tu.have_train():
    for c in ("report", "status"):
        for frac in (2, 4):
            skip(f"{c}_truncated_metrics_bounded_1_{frac}", "./train is not built (make)")
    finish()
data = os.path.join(S, "data")
tu.make_corpus(data, seq_len=64, train_rows=300, val_rows=16)
runs = os.path.join(S, "runs")
rc, text = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                   "run.name=src", "train.steps=30", "eval.every=10"])
src = os.path.join(runs, "src", "metrics.h5")
if rc != 0 or not os.path.exists(src):
    check(False, "train a tiny run for its metrics.h5", text[-400:])
    finish()
for frac in (2, 4):
    sweep = os.path.join(S, f"cut{frac}")
    good_run(os.path.join(sweep, "good"))
    d = os.path.join(sweep, "cut")
    os.makedirs(d)
    for f in ("config.ini", "log.txt"):
        shutil.copy(os.path.join(runs, "src", f), d)
    shutil.copy(src, os.path.join(d, "metrics.h5"))
    os.truncate(os.path.join(d, "metrics.h5"), os.path.getsize(src) // frac)
    cut = os.path.join(d, "metrics.h5")
    rc, out, err, secs = tool("report", sweep, "--out", os.path.join(S, f"cut{frac}_out"))
    warned = sum(cut in l and "skipped" in l for l in err.splitlines())
    rows = open(os.path.join(S, f"cut{frac}_out", "report.csv")).read() if os.path.exists(os.path.join(S, f"cut{frac}_out", "report.csv")) else ""
    check(rc in (0, 1) and secs < 60 and (rc == 0 or warned >= 1) and "good," in rows and "Traceback" not in err,
          f"report_truncated_metrics_bounded_1_{frac}", f"exit {rc} after {secs:.1f}s: {err[-500:]}")
    rc, out, err, secs = tool("sweep", "status", sweep)
    check(rc in (0, 1) and secs < 60 and (rc == 0 or cut in err) and "good" in out and "cut" in out and "Traceback" not in err,
          f"status_truncated_metrics_bounded_1_{frac}", f"exit {rc} after {secs:.1f}s: {out[-300:]} {err[-500:]}")
finish()
