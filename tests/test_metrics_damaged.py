"""A damaged metrics.h5 never hangs a resume (issue 37, item 3; trainer/metrics.c).

A tiny run writes 10 steps with checkpoints at 5 and 10; each case copies it, damages the
copy's metrics.h5 and resumes it to 15 steps (train.resume_schedule=stretch) under a 60 s
limit. From step 10 nothing is truncated, so before the fix a damaged block was first read by
the first append, in SWMR mode, where HDF5 retries a bad checksum 100 times with a doubling
sleep: the run slept for ever, deaf to SIGTERM. The damage:
  - 16 bytes flipped inside the first, middle and last block of each checksummed metadata kind
    HDF5 writes there (found by the blocks' signatures: chunk index headers EAHD/EAIB, object
    headers OHDR/OCHK, fractal heaps FRHP, B-tree leaves BTLF, free-space FSHD/FSSE);
  - the file cut in half.
Every case must end within the limit with exit 0 (the damage was in a block the resume does
not need) or exit 1 with one line naming the file, saying the checkpoints are intact and how
to move it aside; the step-10 checkpoint must be byte for byte what it was. Then the advice is
followed once (mv metrics.h5 metrics.h5.damaged, the same command again): the run must resume
from step 10 and finish with a new metrics file holding steps 11..15, the moved file kept."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
LIMIT = 60
d, data = tu.scratch_with_corpus("test_metrics_damaged", train_rows=200)
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
          "train.steps=10", "checkpoint.every=5", "checkpoint.keep=3", "eval.every=5"]
rc, out = tu.run(common + ["run.name=A"])
check(rc == 0, "the reference run exits 0", out[-500:])
A = f"{d}/runs/A"


def tree_digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for f in sorted(files):
            h.update(f.encode())
            with open(os.path.join(root, f), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def resume(name):
    """Resumes run NAME under the time limit: (exit status or None when it hung, output)."""
    p = subprocess.Popen([tu.TRAIN] + common + [f"run.name={name}", "train.steps=15", "train.resume_schedule=stretch"],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=LIMIT)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        return None, out


def prepared(name, damage):
    run = f"{d}/runs/{name}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(A, run)
    path = f"{run}/metrics.h5"
    b = bytearray(open(path, "rb").read())
    b = damage(b)
    with open(path, "wb") as f:
        f.write(b)
    return run


if rc == 0:
    raw = open(f"{A}/metrics.h5", "rb").read()
    cases = []
    for sig in [b"EAHD", b"EAIB", b"OHDR", b"OCHK", b"FRHP", b"BTLF", b"FSHD", b"FSSE"]:
        found = [m.start() for m in re.finditer(re.escape(sig), raw)]
        # the first, middle and last block of each kind
        for pos in sorted({found[0], found[len(found) // 2], found[-1]} if found else set()):
            cases.append((f"{sig.decode()}@{pos}", lambda b, p=pos + 12: b[:p] + bytes(x ^ 0xFF for x in b[p:p + 16]) + b[p + 16:]))
    cases.append(("cut in half", lambda b: b[:len(b) // 2]))
    check(any(n.startswith("EAHD") for n, _ in cases), "metrics.h5 has chunk-index headers (EAHD) to damage",
          "no EAHD signature found")
    refused = None
    for i, (what, damage) in enumerate(cases):
        name = f"D{i}"
        run = prepared(name, damage)
        before = tree_digest(f"{run}/checkpoints/step_00000010")
        t0 = time.time()
        status, out = resume(name)
        took = time.time() - t0
        lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
        if status is None:
            check(False, f"metrics.h5 damaged ({what}): the resume ends", f"still running after {LIMIT} s")
            continue
        check(True, f"metrics.h5 damaged ({what}): the resume ends within {LIMIT} s")
        print(f"# {what}: exit {status} after {took:.1f} s", flush=True)
        if status == 1:
            msg = lines[-1] if lines else ""
            check(len(lines) == 1 and f"{run}/metrics.h5" in msg and "checkpoints are intact" in msg
                  and f"mv {run}/metrics.h5 {run}/metrics.h5.damaged" in msg,
                  f"metrics.h5 damaged ({what}): one line naming the file and the way out", out[-800:])
            refused = refused or name
        else:
            check(status == 0, f"metrics.h5 damaged ({what}): exit 0 or 1", f"exit {status}: {out[-500:]}")
        check(tree_digest(f"{run}/checkpoints/step_00000010") == before,
              f"metrics.h5 damaged ({what}): the step-10 checkpoint is untouched", "its files changed")
    check(refused is not None, "at least one damaged file is refused with the message", "every case exited 0")
    if refused:
        run = f"{d}/runs/{refused}"
        os.rename(f"{run}/metrics.h5", f"{run}/metrics.h5.damaged")
        status, out = resume(refused)
        check(status == 0 and "resumed from" in out and "step_00000010" in out,
              "after moving the damaged file aside the same command resumes from step 10", f"exit {status}: {out[-600:]}")
        steps = None
        try:
            import h5py
            with h5py.File(f"{run}/metrics.h5", "r", swmr=True) as f:
                steps = [int(s) for s in f["train/step"][...]]
        except Exception as e:  # noqa: BLE001
            steps = f"error {e}"
        check(steps == list(range(11, 16)), "the new metrics file holds steps 11..15", str(steps))
        check(os.path.exists(f"{run}/metrics.h5.damaged"), "the damaged file stays where it was moved", "missing")
finish()
