"""SIGINT / SIGTERM during an analysis (issue 37, item 3; common/interrupt.h).

./train --eval polls a flag between batches (the probe loop of trainer/probe_eval.c, the
validation loop of trainer/evaluate.c, the filler sweep's loop): a signal ends the analysis with
one line "interrupted by signal N ...: nothing written" and exit 128 + N (130 for SIGINT, 143 for
SIGTERM), within a batch, and analysis.h5 is left exactly as it was (an earlier group is in it;
its bytes must not change and no other file appears in the checkpoint directory). Before, the
default action killed the process at once (exit -2 / -15), wherever it was.

A small model (2 layers, d_model 128, seq_len 256) trained one step, a 192-prompt probe and a
48-prompt calibration set (tools/make-probe): an uninterrupted --knockout all takes ~15 s on one
thread, so the signal, sent once its first progress line is out (after ~2 s), lands mid-run:
  - --knockout all + SIGINT, --knockout all + SIGTERM, --filler-sweep + SIGTERM (each after its
    first progress line), plain --eval --probe + SIGINT 1.5 s after the start."""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish  # noqa: E402

tu.require_train()
MAKE_PROBE = os.path.join(tu.ROOT, "tools", "make-probe")
d, data = tu.scratch_with_corpus("test_analysis_interrupt", seq_len=256, train_rows=64, val_rows=16)
# large enough that every analysis below runs for seconds with OpenBLAS's AVX-512 kernels (3x the
# speed of the SSE3 ones it ran on before ./train chose its kernels, kernels/cpu/cpu_backend.h)
model = ["data.seq_len=256", "model.d_model=256", "model.n_heads=8", "model.n_kv_heads=2", "model.head_dim=32",
         "model.d_ff=1024", "model.n_layers=4", "train.steps=1", "train.batch_tokens=1024", "eval.val_tokens=4096"]
rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}",
                  "run.name=m", "run.threads=1"] + model)
ck = os.path.join(d, "m", "checkpoints", "step_00000001")
check(rc == 0 and os.path.isdir(ck), "train the model", out[-400:])


def make_probe(out, per_residue, seed):
    p = subprocess.run([sys.executable, MAKE_PROBE, "--synthetic", "--out", out, "--quiet", "--per-residue", str(per_residue),
                        "--max-len", "256", "--seed", str(seed)], capture_output=True, text=True)
    check(p.returncode == 0, f"make-probe {os.path.basename(out)}", p.stderr[-300:])
    return out


probe = make_probe(os.path.join(d, "probe.bin"), 4, 3)
probe_long = make_probe(os.path.join(d, "probe_long.bin"), 16, 5)     # the plain --eval --probe interrupted after 1.5 s
calib = make_probe(os.path.join(d, "calib.bin"), 1, 4)
sweep = os.path.join(d, "sweep.ini")
with open(sweep, "w") as f:
    f.write("[sweep]\nprompt = 20 81 21 82 22 83 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 240\n")

# an earlier analysis in analysis.h5, which the interrupted ones must leave alone
rc, out = tu.run(["--eval", ck, "--probe", probe, "run.threads=1"])
store = os.path.join(ck, "analysis.h5")
check(rc == 0 and os.path.exists(store), "an uninterrupted --eval --probe exits 0 and stores its group", out[-400:])


def snapshot():
    files = sorted(os.listdir(ck))
    digest = hashlib.sha256(open(store, "rb").read()).hexdigest() if os.path.exists(store) else None
    return files, digest


def interrupted(name, args, sig, wait_for=None, delay=1.5, code=None, group=False, env=None):
    """Runs ./train ARGS, sends SIG once a stderr line holds wait_for (or after delay s) and checks
    the exit status, the message and that nothing was written. group: the signal goes to the
    whole process group, as Ctrl-C in a terminal does."""
    before = snapshot()
    p = subprocess.Popen([tu.TRAIN] + args + ["run.threads=1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env)
    err_lines, seen = [], threading.Event()

    def read_err():
        for line in p.stderr:
            err_lines.append(line)
            if wait_for and wait_for in line:
                seen.set()
    t = threading.Thread(target=read_err, daemon=True)
    t.start()
    if wait_for:
        seen.wait(timeout=120)
    else:
        time.sleep(delay)
    still_running = p.poll() is None
    sent = time.time()
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    t.join(timeout=5)
    took = time.time() - sent
    err = "".join(err_lines)
    check(still_running, f"{name}: still working when the signal was sent", "it had already ended: make it longer")
    want = code if code is not None else 128 + int(sig)
    check(p.returncode == want, f"{name}: exit {want}", f"exit {p.returncode}: {err[-600:]}")
    check(took < 30, f"{name}: ends within 30 s of the signal", f"{took:.1f} s")
    msg = [l for l in err.splitlines() if "interrupted by signal" in l]
    check(len(msg) == 1 and f"signal {int(sig)}" in msg[0] and "nothing written" in msg[0] and msg[0].startswith("phaselab: "),
          f"{name}: one line 'phaselab: ... interrupted by signal {int(sig)} ...: nothing written'", err[-600:])
    check(snapshot() == before, f"{name}: analysis.h5 and the checkpoint directory are unchanged",
          f"{before} -> {snapshot()}")


def checkpoint_removed_midway():
    """The checkpoint directory removed while --knockout all runs on it (a by-hand rm, or a rotation
    racing the analysis): the finished result goes to CKPTNAME.analysis.h5 in the current
    directory with one warning, and the directory is not made again as a stub."""
    import shutil
    gone = os.path.join(d, "gone", "step_00000001")
    shutil.copytree(ck, gone)
    for f in ("analysis.h5", ".analysis.h5.lock"):
        if os.path.exists(os.path.join(gone, f)):
            os.remove(os.path.join(gone, f))
    work = os.path.join(d, "cwd")
    os.makedirs(work, exist_ok=True)
    # (the checkpoint with a trailing slash, as tab completion gives it)
    p = subprocess.Popen([tu.TRAIN, "--eval", gone + "/", "--probe", probe, "--knockout", "all", "--calib", calib, "run.threads=1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work)
    err_lines, seen = [], threading.Event()

    def read_err():
        for line in p.stderr:
            err_lines.append(line)
            if "knockout: " in line:
                seen.set()
    t = threading.Thread(target=read_err, daemon=True)
    t.start()
    seen.wait(timeout=120)
    running = p.poll() is None
    shutil.rmtree(os.path.dirname(gone))
    out = p.communicate(timeout=300)[0]
    t.join(timeout=5)
    err = "".join(err_lines)
    rescue = os.path.join(work, "step_00000001.analysis.h5")
    check(running, "checkpoint removed mid-analysis: still working when it was removed", "it had already ended")
    check(p.returncode == 0 and os.path.isfile(rescue) and "stored /knockout_000 in step_00000001.analysis.h5" in out
          and not os.path.exists(os.path.dirname(gone)) and "no longer exists" in err,
          "checkpoint removed mid-analysis: the result is stored in CKPTNAME.analysis.h5 in the current directory, "
          "said once; no stub directory", f"rc {p.returncode}: {out[-300:]} {err[-400:]}")


if rc == 0:
    checkpoint_removed_midway()
    interrupted("--knockout all, SIGINT", ["--eval", ck, "--probe", probe, "--knockout", "all", "--calib", calib],
                signal.SIGINT, wait_for="knockout: ")
    interrupted("--knockout all, SIGTERM", ["--eval", ck, "--probe", probe, "--knockout", "all", "--calib", calib],
                signal.SIGTERM, wait_for="knockout: ")
    interrupted("--filler-sweep, SIGTERM", ["--eval", ck, "--filler-sweep", sweep], signal.SIGTERM, wait_for="filler sweep: ")
    interrupted("--eval --probe, SIGINT", ["--eval", ck, "--probe", probe_long], signal.SIGINT, delay=1.5)
    # Ctrl-C while --knockout builds its default calibration set with tools/make-probe (a
    # python3 on PATH that announces itself and sleeps stands in for a slow make-probe)
    fake = os.path.join(d, "fakebin")
    os.makedirs(fake, exist_ok=True)
    with open(os.path.join(fake, "python3"), "w") as f:
        f.write("#!/bin/sh\necho 'fake make-probe: started' >&2\nexec sleep 60\n")
    os.chmod(os.path.join(fake, "python3"), 0o755)
    interrupted("--knockout building its calibration set, Ctrl-C", ["--eval", ck, "--probe", probe, "--knockout", "all"],
                signal.SIGINT, wait_for="fake make-probe: started", group=True,
                env=dict(os.environ, PATH=fake + os.pathsep + os.environ.get("PATH", "")))
finish()
