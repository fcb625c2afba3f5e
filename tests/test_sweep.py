"""tools/sweep without Slurm: the grid (cartesian product of --set axes over the base configs,
names encoding the overrides, mpirun prefix for --np > 1), the sbatch script of `slurm
--dry-run`, `status` on hand-made run directories (done / failed / stopped / pending), and, when
./train can train, a real `sweep run` of two tiny configs."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(ROOT, "build", "scratch", "test_sweep")
shutil.rmtree(S, ignore_errors=True)
os.makedirs(S)
SWEEP = [sys.executable, os.path.join(ROOT, "tools", "sweep")]


def sweep(*args):
    return subprocess.run(SWEEP + list(args), cwd=ROOT, capture_output=True, text=True)


r = sweep("run", "configs/test/tiny_full.ini", "configs/test/tiny_w4s4.ini", "--set", "train.seed=1,2",
          "--set", "train.lr=1e-3,3e-3", "--override", "data.val=v.bin", "--out", "build/scratch/test_sweep/g",
          "--dry-run")
lines = r.stdout.strip().splitlines()
check(r.returncode == 0 and len(lines) == 8, "grid_is_cartesian_product", f"{len(lines)} commands: {r.stderr.strip()}")
want = ("./train configs/test/tiny_w4s4.ini data.val=v.bin train.seed=2 train.lr=3e-3 "
        "run.name=tiny_w4s4-seed2-lr3e-3 run.dir=build/scratch/test_sweep/g")
check(want in lines, "names_encode_overrides", lines[-1] if lines else "")
check(not os.path.exists(os.path.join(S, "g")), "dry_run_writes_nothing")
r = sweep("run", "configs/test/tiny_full.ini", "--np", "2", "--dry-run")
check(r.stdout.startswith("mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 30 -np 2 ./train configs/test/tiny_full.ini"),
      "np_uses_mpirun", r.stdout.strip())
r = sweep("run", "configs/test/tiny_full.ini", "--set", "train.seed", "--dry-run")
check(r.returncode == 2 and "section.key=" in r.stderr, "bad_set_is_usage_error", r.stderr.strip())

r = sweep("slurm", "configs/test/tiny_full.ini", "configs/test/tiny_w4s4.ini", "--set", "train.seed=1,2",
          "--partition", "p1", "--time", "1:00:00", "--np", "2", "--dry-run")
sc = r.stdout
check(r.returncode == 0 and "#SBATCH --array=0-3" in sc and "#SBATCH --requeue" in sc and "#SBATCH --partition=p1" in sc
      and "#SBATCH --time=1:00:00" in sc and "#SBATCH --ntasks=2" in sc and "scontrol requeue" in sc
      and "3) cmd=(mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 30 -np 2 ./train configs/test/tiny_w4s4.ini train.seed=2 "
          "run.name=tiny_w4s4-seed2" in sc, "slurm_script", sc[:400] + r.stderr)
script = os.path.join(S, "x.sbatch")
open(script, "w").write(sc)
check(subprocess.run(["bash", "-n", script]).returncode == 0, "slurm_script_is_valid_bash")

# ---- status on hand-made run directories ----------------------------------------------------
st = os.path.join(S, "st")
def mkrun(name, log, steps=10):
    d = os.path.join(st, name)
    os.makedirs(d)
    open(os.path.join(d, "config.ini"), "w").write(f"[train]\nsteps = {steps}\n")
    open(os.path.join(d, "log.txt"), "w").write(log)
    old = 1e9   # long ago: not "running"
    os.utime(os.path.join(d, "log.txt"), (old, old))
mkrun("a_done", "step 10/10 | loss 1\ndone: 10 steps, 100 tokens in 1s; run directory x\n")
mkrun("b_failed", "step 3/10 | loss 1\nphaselab: data/x.bin@1024: token 999 outside the vocabulary\n")
mkrun("c_stopped", "step 4/10 | loss 1\nsignal 15: stopped after step 4 with a checkpoint; run the same command to resume\n")
mkrun("d_running", "step 4/10 | loss 1\n")
os.utime(os.path.join(st, "d_running", "log.txt"))          # just now
open(os.path.join(st, "sweep.json"), "w").write('{"runs": [{"name": "e_pending"}, {"name": "a_done"}]}')
r = sweep("status", st)
rows = {l.split()[0]: l.split()[1] for l in r.stdout.splitlines()[1:-1] if l.strip()}
check(rows == {"a_done": "done", "b_failed": "failed", "c_stopped": "stopped", "d_running": "running",
               "e_pending": "pending"}, "status_states", r.stdout + r.stderr)

# ---- a real local sweep ------------------------------------------------------------------------
data = os.path.join(S, "data")
ok = os.access(os.path.join(ROOT, "train"), os.X_OK) and subprocess.run(
    ["./train", "--make-synthetic", data, "--seq-len", "64", "--train-rows", "1000", "--val-rows", "64"],
    cwd=ROOT, capture_output=True).returncode == 0
if not ok:
    skip("local_sweep_runs", "./train cannot train yet")
else:
    out = os.path.join(S, "runs")
    r = sweep("run", "configs/test/tiny_full.ini", "configs/test/tiny_w4s4.ini", "--set", "train.steps=4,6",
              "--override", f"data.train={data}/train_*.bin", "--override", f"data.val={data}/val_*.bin", "--out", out)
    check(r.returncode == 0, "local_sweep_runs", (r.stdout + r.stderr)[-600:])
    r = sweep("status", out)
    names = sorted(l.split()[0] for l in r.stdout.splitlines()[1:-1])
    check(names == ["tiny_full-steps4", "tiny_full-steps6", "tiny_w4s4-steps4", "tiny_w4s4-steps6"]
          and r.stdout.strip().endswith("4 done") and "6/6" in r.stdout, "local_sweep_status_done", r.stdout)

# ---- Ctrl-C of a sweep of 2-rank runs, parallel (--jobs 2) and serial (--jobs 1): each running
# run saves and stops, the sweep says so. The sweep sends SIGUSR1 (mpirun only forwards it; after
# a SIGTERM it SIGKILLs the ranks and lingers), and its children run in sessions of their own, so
# that a terminal's SIGINT would not reach mpirun either. Every rank sleeps 2 s before the save,
# which the runs must survive, and the sweep must end well before an mpirun's SIGTERM linger
# (30 s grace) would let it.
if not ok or not shutil.which("mpirun"):
    for jobs in (2, 1):
        skip(f"sweep_ctrl_c_stops_mpirun_runs_with_checkpoints_jobs{jobs}", "mpirun not installed" if ok else "./train cannot train yet")
else:
    import signal
    import time
    for jobs, names in ((2, ("tiny_full", "tiny_w4s4")), (1, ("tiny_full",))):
        out = os.path.join(S, f"stop{jobs}")
        env = dict(os.environ, PHASELAB_STOP_SAVE_DELAY_MS="2000")
        configs = [f"configs/test/{n}.ini" for n in ("tiny_full", "tiny_w4s4")]
        p = subprocess.Popen(SWEEP + ["run", *configs, "--np", "2", "--jobs", str(jobs),
                                      "--override", f"data.train={data}/train_*.bin", "--override", f"data.val={data}/val_*.bin",
                                      "--override", "train.steps=100000", "--override", "eval.every=0",
                                      "--override", "checkpoint.every=100000", "--override", "run.threads=1", "--out", out],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        logs = [os.path.join(out, n, "log.txt") for n in names]
        t0 = time.time()
        while time.time() - t0 < 120 and not all(os.path.exists(l) and " 20/100000 " in open(l).read() for l in logs):
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        t_sig = time.time()
        text = p.communicate(timeout=120)[0]
        secs = time.time() - t_sig
        stops = [tu.signal_stop(os.path.dirname(f), signal.SIGUSR1) for f in logs]
        good = all(st[0] for st in stops)
        cks = [st[2] for st in stops]
        stops = [st[1] for st in stops]
        not_started = f"{2 - len(names)} runs not started"
        check(p.returncode == 1 and "stopped by a signal" in text and not_started in text and good and 2 <= secs < 20,
              f"sweep_ctrl_c_stops_mpirun_runs_with_checkpoints_jobs{jobs}",
              f"exit {p.returncode} after {secs:.1f}s; stop lines {stops}; checkpoints {cks}; {text[-500:]}")
finish()
