"""Helpers for the integration tests that drive ./train (tests/test_train*.py)."""
import os
import shutil
import subprocess
import sys
import time

from pycheck import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train")
TINY = os.path.join(ROOT, "configs", "test", "tiny.ini")


def scratch(name):
    d = os.path.join(ROOT, "build", "scratch", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def make_corpus(d, seq_len=64, train_rows=500, val_rows=16):
    subprocess.run([TRAIN, "--make-synthetic", d, "--seq-len", str(seq_len), "--train-rows", str(train_rows),
                    "--val-rows", str(val_rows)], check=True, stdout=subprocess.DEVNULL)


def run(args, timeout=300):
    """Runs ./train with args; returns (exit status, stdout + stderr)."""
    p = subprocess.run([TRAIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
    return p.returncode, p.stdout


def start(args, nice=0):
    """./train in the background. nice > 0 lowers its priority, so that a poller of its log
    (wait_for_line) gets the CPU first on a loaded machine and cannot miss a step it waits for."""
    pre = (lambda: os.nice(nice)) if nice else None
    return subprocess.Popen([TRAIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=pre)


def wait_for_line(log_path, needle, proc, timeout=120):
    """Polls a log file until it holds needle (True) or the process ends / time runs out (False)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if os.path.exists(log_path):
            with open(log_path) as f:
                if needle in f.read():
                    return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    return False


def have_train():
    return os.access(TRAIN, os.X_OK)


def require_train():
    """Reports a failed check and ends the test when ./train has not been built."""
    if not have_train():
        check(False, "./train exists", "build ./train first (make)")
        finish()


def signal_stop(run_dir, sig):
    """What a stop signal left in run_dir: (ok, the "signal SIG: stopped after step S" lines of its
    log.txt, its checkpoint directories, S or -1); ok when there is exactly one such line and the
    only checkpoint is step S's. The line is read from log.txt, not stdout: after SIGTERM mpirun
    may end before it forwards the ranks' last lines."""
    log = os.path.join(run_dir, "log.txt")
    text = open(log).read() if os.path.exists(log) else ""
    lines = [l for l in text.splitlines() if l.startswith(f"signal {int(sig)}: stopped after step")]
    ckdir = os.path.join(run_dir, "checkpoints")
    cks = sorted(os.listdir(ckdir)) if os.path.isdir(ckdir) else []
    step = int(lines[0].split()[5]) if lines else -1
    return len(lines) == 1 and cks == [f"step_{step:08d}"], lines, cks, step


def scratch_with_corpus(name, **corpus):
    """A fresh build/scratch/NAME with a synthetic corpus in its data/ (make_corpus options);
    returns (scratch dir, data dir)."""
    d = scratch(name)
    data = os.path.join(d, "data")
    make_corpus(data, **corpus)
    return d, data


def python_with(modules):
    """The first Python that imports every module of `modules` ("tokenizers", "pyarrow.parquet"):
    this one, $PHASELAB_HF_PYTHON, build/venv-hf or ~/.cache/phaselab/venv-hf (make hf-venv);
    None when none does."""
    cands = [sys.executable, os.environ.get("PHASELAB_HF_PYTHON", ""), os.path.join(ROOT, "build", "venv-hf", "bin", "python"),
             os.path.join(os.path.expanduser("~"), ".cache", "phaselab", "venv-hf", "bin", "python")]
    for py in cands:
        if py and os.access(py, os.X_OK) and subprocess.run([py, "-c", "import " + modules],
                                                            capture_output=True).returncode == 0:
            return py
    return None
