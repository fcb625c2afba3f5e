"""Faults at the system-call level (tests/faultinject/faultinject.c, an LD_PRELOAD shim) while an
analysis stores its result in analysis.h5 and while a checkpoint is saved: ENOSPC (a disk that
stays full from that call on) or SIGKILL at the N-th write / pwrite / fsync / fdatasync / rename
under the checkpoint directory.

- the shim itself: it fails, kills and counts only under FAULT_DIR (checked with sh, so that a
  shim that injects nothing cannot pass the rest);
- analysis.h5 (plain --eval --probe and --gate-cycle on a tiny checkpoint): a first run counts the
  calls; then for a sample of N (every N with FAULT_EXHAUSTIVE=1, make test-faults-exhaustive),
  in each mode: exit non-zero (SIGKILL, or 1 with one error line naming the file and "No space
  left on device", no crash in HDF5's exit handler); every group that existed before is still
  readable with the same data; at most one new group, complete (its kind's datasets and
  `signal`); no sidecar; then a clean analysis succeeds, adds exactly one group and leaves no
  temporary file;
- checkpoint save (configs/test/tiny.ini, checkpoint.every = 5, resumed from step 5 to 10): a
  first run counts the calls of one save; for a sample of N of the step-10 save: exit non-zero
  (with enospc-once a save may also absorb a fault and succeed: then step 10 must load); step 5
  keeps its files byte for byte and `./train --eval` works on it and on every step_* directory
  there is; a clean resume then saves step 10, which `./train --eval` loads.
The sample: 12 N spread evenly over 1..count (with both ends), modes enospc and kill; exhaustive:
every N, modes enospc, enospc-once and kill."""
import glob
import hashlib
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("fault injection", "h5py missing")
    finish()

tu.require_train()
ROOT = tu.ROOT
SO = os.path.join(ROOT, os.environ.get("BUILD", "build"), "faultinject", "faultinject.so")
if not os.path.exists(SO):
    check(False, "the fault-injection shim is built", f"{SO} missing: make {os.path.relpath(SO, ROOT)}")
    finish()
EXHAUSTIVE = os.environ.get("FAULT_EXHAUSTIVE") == "1"
MODES = ["enospc", "enospc-once", "kill"] if EXHAUSTIVE else ["enospc", "kill"]
SAMPLE = 12


def sample(n):
    if EXHAUSTIVE or n <= SAMPLE:
        return list(range(1, n + 1))
    return sorted({round(1 + i * (n - 1) / (SAMPLE - 1)) for i in range(SAMPLE)})


def faulty(cmd, fault_dir, at=0, mode="", log=None, timeout=300):
    """cmd under the shim; (exit status, stdout, stderr)."""
    env = dict(os.environ, FAULT_DIR=fault_dir, LD_PRELOAD=SO + (" " + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else ""))
    for k in ("FAULT_AT", "FAULT_MODE", "FAULT_LOG"):
        env.pop(k, None)
    if at:
        env.update(FAULT_AT=str(at), FAULT_MODE=mode)
    if log:
        env["FAULT_LOG"] = log
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def counted(cmd, fault_dir, log):
    if os.path.exists(log):
        os.remove(log)
    rc, out, err = faulty(cmd, fault_dir, log=log)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    return rc, out + err, lines


d = tu.scratch("test_fault_injection")

# ---- the shim
sd = os.path.join(d, "shim")
os.makedirs(os.path.join(sd, "in"))
os.makedirs(os.path.join(sd, "out"))
target = os.path.join(sd, "in", "f")
rc, _, err = faulty([sys.executable, "-c", f"import os; os.write(os.open({target!r}, os.O_WRONLY | os.O_CREAT), b'abc')"],
                    os.path.join(sd, "in"), 1, "enospc")
check(rc != 0 and "No space left" in err and os.path.getsize(target) == 0, "shim: enospc fails the first write under FAULT_DIR",
      f"rc {rc} {err}")
rc, _, _ = faulty(["sh", "-c", f"printf abc > {target}"], os.path.join(sd, "in"), 1, "kill")
check(rc == -9, "shim: kill ends the process with SIGKILL", f"rc {rc}")
log = os.path.join(sd, "log")
rc, _, lines = counted(["sh", "-c", f"printf abc > {target}; printf abc > {sd}/out/g; mv {target} {target}2"],
                       os.path.join(sd, "in"), log)
check(rc == 0 and len(lines) == 2 and lines[0].startswith("1 write ") and lines[0].endswith(f"{target} ok")
      and " -> " in lines[1] and "/out/" not in "".join(lines), "shim: counts the calls under FAULT_DIR only (write, rename)",
      f"{lines}")
rc, _, err = faulty(["sh", "-c", f"printf abc > {sd}/out/g"], os.path.join(sd, "in"), 1, "enospc")
check(rc == 0 and os.path.getsize(f"{sd}/out/g") == 3, "shim: a write outside FAULT_DIR is left alone", f"rc {rc} {err}")

# ---- a tiny checkpoint, its probe
data = os.path.join(d, "data")
tu.make_corpus(data, seq_len=64, train_rows=200, val_rows=8)
TRAIN_ARGS = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", "train.steps=10", "eval.every=1000",
              "checkpoint.every=5", "checkpoint.keep=3"]
probe = os.path.join(d, "needle.bin")
p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--layout", "needle", "--max-len", "64",
                    "--per-residue", "2", "--seed", "5", "--out", probe, "--quiet"], capture_output=True, text=True)
check(p.returncode == 0, "make-probe", p.stderr[-300:])


def error_lines(err):
    return [l for l in err.splitlines() if l.startswith("phaselab:") and not l.startswith("phaselab: warning:")]


def no_crash_noise(text):
    return not any(s in text for s in ("HDF5-DIAG", "infinite loop", "Segmentation", "Traceback", "core dumped"))


def failed_as_expected(mode, rc, err, where):
    """kill: SIGKILL; enospc: exit 1 with one error line naming a file under `where` and ENOSPC."""
    if mode == "kill":
        return rc == -9, f"exit {rc}, expected SIGKILL"
    lines = error_lines(err)
    ok = rc == 1 and len(lines) == 1 and "No space left on device" in lines[0] and where in lines[0] and no_crash_noise(err)
    return ok, f"exit {rc}, error lines {lines}, stderr {err[-300:]}"


# ================================================================ analysis.h5
run_dir = os.path.join(d, "a")
rc, out = tu.run(TRAIN_ARGS + [f"run.dir={d}", "run.name=a", "train.steps=5"])
ck = os.path.join(run_dir, "checkpoints", "step_00000005")
check(rc == 0 and os.path.isdir(ck), "train a tiny checkpoint (5 steps)", out[-300:])
h5 = os.path.join(ck, "analysis.h5")
REQUIRED = {"probe": {"acc", "correct", "total", "acc_phase", "phase_test", "protocol", "residue", "phase"},
            "gate_cycle": {"acc", "predicted", "acc_phase", "predicted_phase", "correlation", "p_phase", "delta", "protocol",
                           "residue", "phase"}}


def contents(path):
    res = {}
    with h5py.File(path, "r") as f:
        for k in f:
            g = f[k]
            res[k] = ({a: np.asarray(g.attrs[a]) for a in g.attrs}, {n: g[n][()] for n in g})
    return res


def same_group(a, b):
    (aa, ad), (ba, bd) = a, b
    return set(aa) == set(ba) and set(ad) == set(bd) and \
        all(np.array_equal(np.asarray(ad[n]), np.asarray(bd[n]), equal_nan=np.asarray(ad[n]).dtype.kind == "f") for n in ad) and \
        all(np.array_equal(aa[n], ba[n], equal_nan=aa[n].dtype.kind == "f" and ba[n].dtype.kind == "f") for n in aa)


def complete(name, group):
    attrs, dsets = group
    kind = name.rsplit("_", 1)[0]
    return kind in REQUIRED and REQUIRED[kind] <= set(dsets) and "signal" in attrs and str(attrs["signal"].astype(str)) in dsets


def check_file(before):
    """(ok, why): the file holds every group of before unchanged, at most one more, complete."""
    try:
        now = contents(h5)
    except Exception as e:  # noqa: BLE001
        return False, f"analysis.h5 unreadable: {e}"
    lost = [k for k in before if k not in now or not same_group(before[k], now[k])]
    new = [k for k in now if k not in before]
    half = [k for k in new if not complete(k, now[k])]
    if lost or len(new) > 1 or half:
        return False, f"changed or lost {lost}, new {new}, incomplete {half}"
    return True, new


for f in glob.glob(os.path.join(ck, "*analysis*")):
    os.remove(f)
for _ in range(2):                                   # two earlier analyses to keep
    rc, out = tu.run(["--eval", ck, "--probe", probe])
check(rc == 0 and os.path.exists(h5), "two clean analyses before the faults", out[-300:])
baseline = open(h5, "rb").read()
base_contents = contents(h5)
cases = [("--eval --probe", ["--eval", ck, "--probe", probe]), ("--gate-cycle 1", ["--eval", ck, "--probe", probe, "--gate-cycle", "1"])]
for what, args in cases:
    open(h5, "wb").write(baseline)
    rc, out, calls = counted([tu.TRAIN] + args, ck, os.path.join(d, "analysis_calls.log"))
    check(rc == 0 and len(calls) >= 4 and any(" rename " in c for c in calls),
          f"analysis {what}: a clean run under the shim counts its calls ({len(calls)}: write, fsync, rename, fsync)", f"{calls} {out[-300:]}")
    for mode in MODES:
        bad = []
        for n in sample(len(calls)):
            open(h5, "wb").write(baseline)             # the state before (a leftover temporary file stays)
            rc, out, err = faulty([tu.TRAIN] + args, ck, n, mode)
            if mode == "enospc-once":
                ok, why = (rc == 1 and len(error_lines(err)) == 1 and no_crash_noise(err)), f"exit {rc}: {err[-300:]}"
            else:
                ok, why = failed_as_expected(mode, rc, err, ck)
            if not ok:
                bad.append(f"N={n}: {why}")
                continue
            ok, new = check_file(base_contents)
            if not ok:
                bad.append(f"N={n}: after the fault: {new}")
                continue
            if glob.glob(os.path.join(ck, "analysis.pending-*")):
                bad.append(f"N={n}: a sidecar was written for a file that was not busy")
            after_fault = contents(h5)
            rc, out, err = faulty([tu.TRAIN] + args, ck)      # the shim, no fault: a clean analysis
            ok, new2 = check_file(after_fault)
            if rc != 0 or not ok or len(new2) != 1:
                bad.append(f"N={n}: the next clean analysis: exit {rc}, {new2}, {err[-200:]}")
            elif os.path.exists(h5 + ".tmp"):
                bad.append(f"N={n}: analysis.h5.tmp left after a clean analysis")
        check(not bad, f"analysis {what}, {mode} at each of {len(sample(len(calls)))} of {len(calls)} calls: exit non-zero, earlier groups "
              "intact, no half group, then a clean analysis adds one group", "; ".join(bad[:4]))

# ================================================================ checkpoint save
ct = os.path.join(d, "ckpt_template")
os.makedirs(os.path.join(ct, "r", "checkpoints"))
rc, out, calls = counted([tu.TRAIN] + TRAIN_ARGS + [f"run.dir={ct}", "run.name=r"], os.path.join(ct, "r", "checkpoints"),
                         os.path.join(d, "ckpt_calls.log"))
first = [i for i, c in enumerate(calls) if "tmp_step_00000010" in c]
K = first[0] if first else 0
check(rc == 0 and K > 10 and len(calls) == 2 * K, f"checkpoint: a clean 10-step run counts two saves of {K} calls each",
      f"rc {rc}, {len(calls)} calls, {out[-300:]}")
# the template: killed at the first call of the step-10 save, so step 5 is the newest checkpoint
shutil.rmtree(ct)
os.makedirs(os.path.join(ct, "r", "checkpoints"))
rc, out, _ = faulty([tu.TRAIN] + TRAIN_ARGS + [f"run.dir={ct}", "run.name=r"], os.path.join(ct, "r", "checkpoints"), K + 1, "kill")
step5 = os.path.join(ct, "r", "checkpoints", "step_00000005")
check(rc == -9 and os.path.isdir(step5), "checkpoint: a run killed at the step-10 save leaves step 5", f"rc {rc}")


def digests(ckdir):
    res = {}
    for root, _, files in os.walk(ckdir):
        for f in files:
            p = os.path.join(root, f)
            res[os.path.relpath(p, ckdir)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return res


def evaluates(ckdir):
    rc, out = tu.run(["--eval", ckdir])
    return rc == 0 and "validation loss" in out, f"exit {rc}: {out[-200:]}"


step5_files = digests(step5)
case_root = os.path.join(d, "ckpt_case")
cdir = os.path.join(case_root, "r", "checkpoints")


def fresh_case():
    shutil.rmtree(case_root, ignore_errors=True)
    shutil.copytree(ct, case_root)


fresh_case()
resume = [tu.TRAIN] + TRAIN_ARGS + [f"run.dir={case_root}", "run.name=r"]
rc, out, rcalls = counted(resume, cdir, os.path.join(d, "resume_calls.log"))
check(rc == 0 and len(rcalls) == K, f"checkpoint: the resumed run's step-10 save makes the same {K} calls", f"rc {rc} {len(rcalls)} {out[-300:]}")
for mode in MODES:
    bad = []
    for n in sample(K):
        fresh_case()
        rc, out, err = faulty(resume, cdir, n, mode)
        s10 = os.path.join(cdir, "step_00000010")
        if mode == "enospc-once" and rc == 0:        # a fault the save absorbed: step 10 must be whole
            ok, why = evaluates(s10)
            if not ok:
                bad.append(f"N={n}: exit 0 but step 10 does not evaluate: {why}")
            continue
        ok, why = failed_as_expected("kill" if mode == "kill" else "enospc", rc, err, cdir) if mode != "enospc-once" else \
            (rc == 1 and len(error_lines(err)) == 1 and no_crash_noise(err), f"exit {rc}: {err[-300:]}")
        if not ok:
            bad.append(f"N={n}: {why}")
            continue
        if digests(os.path.join(cdir, "step_00000005")) != step5_files:
            bad.append(f"N={n}: step 5 changed")
            continue
        visible = sorted(x for x in os.listdir(cdir) if x.startswith("step_"))
        for name in visible:
            ok, why = evaluates(os.path.join(cdir, name))
            if not ok:
                bad.append(f"N={n}: {name} does not evaluate: {why}")
        rc, out, err = faulty(resume, cdir)          # a clean resume after the fault
        ok, why = evaluates(s10) if rc == 0 else (False, f"resume exit {rc}: {(out + err)[-300:]}")
        if not ok:
            bad.append(f"N={n}: after the fault, resuming: {why}")
    check(not bad, f"checkpoint save, {mode} at each of {len(sample(K))} of {K} calls: exit non-zero, step 5 intact and loadable, "
          "every step_* loadable, a clean resume saves step 10", "; ".join(bad[:4]))
finish()
