"""A stop signal to a run whose console nobody reads (common/log.h, log_guard_console).

Open MPI's mpirun stops reading the ranks' stdout once it has forwarded a SIGTERM; rank 0 then
blocked in write(2) on the full pty and never wrote its checkpoint (CI, tests/test_mpi_train.py).
Here the same situation without mpirun: ./train's stdout and stderr are a pty that is never
read, so the run blocks on its own step lines once the pty's buffer is full (log.txt, written
first, stops growing). SIGTERM must still give one complete checkpoint at the stopping step, the
"signal 15: stopped" line in log.txt and exit 0, within 30 s."""
import os
import pty
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_stop_unread_console", train_rows=64)
log = os.path.join(d, "runs", "r", "log.txt")
try:
    master, slave = pty.openpty()
except OSError as e:                # a container or chroot without /dev/pts
    skip("SIGTERM while the console is unread: one checkpoint, exit 0", f"no pseudo-terminal here ({e})")
    finish()
p = subprocess.Popen([tu.TRAIN, tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin",
                      f"run.dir={d}/runs", "run.name=r", "run.log_every=1", "train.steps=1000000", "eval.every=0",
                      "checkpoint.every=1000000"], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
os.close(slave)                     # the master stays open and is never read

# blocked: log.txt has step lines and has not grown for 1.5 s (at most 90 s)
size, still_since, t0, blocked = -1, time.time(), time.time(), False
while time.time() - t0 < 90 and p.poll() is None:
    now = os.path.getsize(log) if os.path.exists(log) else -1
    if now != size:
        size, still_since = now, time.time()
    elif size > 0 and time.time() - still_since > 1.5 and "step " in open(log).read():
        blocked = True
        break
    time.sleep(0.1)
if not blocked:
    p.kill()
    skip("SIGTERM while the console is unread: one checkpoint, exit 0",
         "the run never blocked on its unread pty within 90 s (a larger pty buffer than expected)")
    finish()

steps_before = open(log).read().count("\nstep ")
p.send_signal(signal.SIGTERM)
try:
    rc = p.wait(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    rc = None
os.close(master)
one, stopped, ck, step = tu.signal_stop(os.path.join(d, "runs", "r"), signal.SIGTERM)
check(rc == 0 and one,
      f"SIGTERM while the console is unread (blocked after about {steps_before} step lines): one checkpoint at the "
      "stopping step, exit 0", f"exit {rc} (None: still running after 30 s), stop lines {stopped}, checkpoints {ck}")
rc2, out2 = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
                    "run.name=r", f"train.steps={step + 3}", "eval.every=0", "checkpoint.every=1000000",
                    "train.resume_schedule=stretch"])
check(rc2 == 0 and "resumed from" in out2, "the run resumes from that checkpoint", out2[-300:])
finish()
