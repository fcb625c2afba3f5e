"""Strict ./train inputs (issue 19): the run lock, --eval that evaluates nothing, and --dry-run
with sizes whose arithmetic used to overflow or exhaust memory. Each bad case is one line naming
the file and key (or the glob / the lock holder) and a non-zero exit."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()

d, data = tu.scratch_with_corpus("test_train_strict")
runs = f"{d}/runs"
base = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}"]


def err_line(out):
    lines = [l for l in out.splitlines() if l.startswith("phaselab:") and "warning" not in l]
    return lines[-1] if lines else out[-300:]


# --- --summary (the config alone): huge sizes are range errors naming the key, quickly
for key, value in [("model.head_dim", "2147483646"), ("data.seq_len", "2147483647"), ("model.n_layers", "2147483647"),
                   ("train.batch_tokens", "9223372036854775807"), ("model.d_model", "2147483647")]:
    t0 = time.time()
    rc, out = tu.run(["--summary", tu.TINY, f"{key}={value}"], timeout=60)
    line = err_line(out)
    check(rc == 2 and key.split(".")[1] in line and "range" in line and time.time() - t0 < 20,
          f"--summary {key}={value}: a range error naming the key", f"exit {rc}: {line}")
t0 = time.time()
rc, out = tu.run(["--summary", tu.TINY, "model.n_layers=1024"], timeout=120)
check(rc == 0 and "parameters:" in out and time.time() - t0 < 30, "--summary with 1024 layers is quick",
      f"exit {rc} in {time.time() - t0:.1f}s")
rc, out = tu.run(["--summary", tu.TINY, "data.seq_len=2", "train.batch_tokens=8"])
line = err_line(out)
check(rc == 2 and "window" in line and "seq_len" in line,
      "--summary: compressed seq_len < window names both keys", f"exit {rc}: {line}")
check(rc == 2 and "activations 0.00 B" not in out, "--summary: seq_len < window is not a valid plan", out[-300:])
rc, out = tu.run(["--summary", tu.TINY, "data.seq_len=4194304", "model.d_model=65536", "model.d_ff=1048576",
                  "train.micro_batch=262144", "train.batch_tokens=1099511627776"])
line = err_line(out)
# (refused by the config loader's int-shape check, model_shape_check, which names where micro_batch was set)
check(rc == 2 and ("tiny.ini" in line or "command line" in line) and "micro_batch" in line and "activations 0.00 B" not in out,
      "--summary: an activation plan past 2^60 bytes is an error, not 0.00 B", f"exit {rc}: {line}")

# --- command-line numbers that used to wrap through an int cast
rc, out = tu.run(["--make-synthetic", f"{d}/wrap", "--seq-len", "4294967297"])
check(rc == 2 and "--seq-len" in err_line(out), "--make-synthetic --seq-len 2^32+1: usage error, not 1", err_line(out))
rc, out = tu.run(["--bench", "--threads", "4294967296"], timeout=60)
check(rc == 2 and "--threads" in err_line(out), "--bench --threads 2^32: usage error, not 0", err_line(out))

# --- --eval never silently skips
rc, out = tu.run(base + ["run.name=ev", "train.steps=5"])
ck = f"{runs}/ev/checkpoints/step_00000005"
check(rc == 0 and os.path.isdir(ck), "a checkpoint to evaluate", out[-300:])
rc, out = tu.run(["--eval", ck, f"data.val={d}/nothing_*.bin"])
line = err_line(out)
check(rc != 0 and "nothing_*.bin" in line and "skipped" not in out, "--eval with a validation glob matching nothing fails",
      f"exit {rc}: {line}")
rc, out = tu.run(["--eval", ck, "data.val="])
line = err_line(out)
check(rc == 2 and "nothing to evaluate" in line and "config.ini" in line, "--eval with nothing to evaluate fails", f"exit {rc}: {line}")
rc, out = tu.run(["--eval", ck])
check(rc == 0 and "validation loss" in out, "--eval with its validation set still works", out[-300:])

# --- the run lock
long_run = base + ["run.name=lock", "train.steps=100000", "checkpoint.every=20", "eval.every=0"]
first = tu.start(long_run)
log = f"{runs}/lock/log.txt"
started = tu.wait_for_line(log, "step ", first, timeout=120)
rc, out = tu.run(long_run)
line = err_line(out)
check(started and rc == 2 and f"pid {first.pid}" in line and "lock" in line,
      "a second ./train of the same run: exit 2 naming the holder's pid", f"exit {rc}: {line}")
with open(log) as f:
    log_text = f.read()
check(log_text.count("| run ") == 1, "the refused second run wrote nothing into the run's log", log_text[-300:])
first.send_signal(signal.SIGTERM)
out1, _ = first.communicate(timeout=120)
check(first.returncode == 0 and "signal" in out1, "the first run ends normally after the refused second", out1[-300:])
# a stale lock (its holder killed) is taken over
second = tu.start(long_run)
tu.wait_for_line(log, "resumed from", second, timeout=120)
time.sleep(0.5)
second.kill()
second.communicate()
pid_in_lock = open(f"{runs}/lock/lock").read().strip()
last = max(int(n.split("_")[1]) for n in os.listdir(f"{runs}/lock/checkpoints") if n.startswith("step_"))
rc, out = tu.run(base + ["run.name=lock", f"train.steps={last}", "checkpoint.every=20", "eval.every=0"])  # nothing to do
check(rc == 0 and pid_in_lock == str(second.pid) and "in use" not in out,
      "a stale lock of a killed run is taken over", f"exit {rc}, lock held pid {pid_in_lock}: {err_line(out)}")

# --- a shard truncated in place while training: an error naming it, not SIGBUS
import shutil  # noqa: E402
tdir = f"{d}/trunc"
os.makedirs(tdir, exist_ok=True)
shutil.copy(f"{data}/train_000.bin", f"{tdir}/train_000.bin")
args = [tu.TINY, f"data.train={tdir}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}", "run.name=trunc",
        "train.steps=100000", "checkpoint.every=0", "eval.every=0"]
p = tu.start(args)
started = tu.wait_for_line(f"{runs}/trunc/log.txt", "step ", p, timeout=120)
os.truncate(f"{tdir}/train_000.bin", 1024 + 4 * 1000)
try:
    out, _ = p.communicate(timeout=120)
except Exception:
    p.kill()
    out, _ = p.communicate()
line = err_line(out)
check(started and p.returncode == 1 and "train_000.bin@" in line and "shrank" in line,
      "a shard truncated in place during training: exit 1 naming the file, no SIGBUS", f"exit {p.returncode}: {line}")
finish()
