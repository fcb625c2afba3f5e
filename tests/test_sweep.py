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

# ---- every grid point's config is checked (./train --summary) before anything is written or run:
# an unknown key or a bad value is one line naming the point and the key, exit 2, nothing written,
# with --dry-run and without it, for run and slurm alike
have_train = os.access(os.path.join(ROOT, "train"), os.X_OK)
for what, axis, needle in (("unknown_key", "model.strid=4,8", "model.strid: unknown key"),
                           ("bad_value", "train.steps=10,abc", 'train.steps: "abc" is not an integer')):
    for mode in ("run", "slurm"):
        for dry in (["--dry-run"], []):
            bad = os.path.join(S, f"bad_{what}_{mode}{'_dry' if dry else ''}")
            r = sweep(mode, "configs/test/tiny_full.ini", "--set", axis, "--out", bad, *dry)
            errs = [l for l in r.stderr.splitlines() if l.strip()]
            name = f"{mode}{'_dry_run' if dry else ''}_refuses_{what}_in_the_grid"
            if not have_train:
                skip(name, "./train is not built (make)")
                continue
            check(r.returncode == 2 and len(errs) == 1 and errs[0].startswith("sweep: grid point tiny_full-")
                  and needle in errs[0] and not r.stdout.strip() and not os.path.exists(bad), name,
                  f"exit {r.returncode}, stdout {r.stdout[:200]!r}, stderr {r.stderr[-400:]!r}, "
                  f"written: {os.path.exists(bad)}")

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

# ---- the documented sweeps: in README.md, configs/paper/README.md and docs/remedies.md, every
# `tools/sweep status DIR` and `tools/report DIR` next to a `tools/sweep run` or `slurm` (the same
# code block or paragraph) names the directory those write to: their run.dir=, as the documented
# command prints it with --dry-run (run as a shell runs it: configs/paper/*.ini)
import re  # noqa: E402
import shlex  # noqa: E402
for doc in ("README.md", os.path.join("configs", "paper", "README.md"), os.path.join("docs", "remedies.md")):
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read().replace("\\\n", " ")
    made, named, bad = set(), set(), []
    for block in re.split(r"\n```|\n\s*\n", text):
        cmds = [c.split("  #")[0].strip() for c in re.findall(r"^(tools/(?:sweep|report) [^\n]*)", block, re.M)] + \
            re.findall(r"`(tools/(?:sweep|report) [^`]*)`", block)
        cmds = [shlex.split(c) for c in cmds]
        sweeps = [" ".join(x for x in a if x != "--submit") for a in cmds if a[1] in ("run", "slurm")]   # globs unquoted
        if not sweeps:
            continue
        for c in sweeps:
            r = subprocess.run(["bash", "-c", c + " --dry-run"], cwd=ROOT, capture_output=True, text=True)
            dirs = set(re.findall(r"run\.dir=([^\s)]+)", r.stdout))
            if r.returncode != 0 or len(dirs) != 1:
                bad.append(f"{c}: exit {r.returncode}, run.dir {sorted(dirs)}: {r.stderr.strip()[-300:]}")
            made |= dirs
        named |= {a[1] if a[0] == "tools/report" else a[2] for a in cmds if a[0] == "tools/report" or a[1] == "status"}
    name = f"documented_sweep_dirs_{re.sub(r'[^a-z]+', '_', doc.lower())}"
    if not have_train:
        skip(name, "./train is not built (make)")
        continue
    check(not bad and named and named <= made, name, f"{'; '.join(bad)} status/report of {sorted(named)}, sweeps write {sorted(made)}")

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

check(r.returncode == 1 and "b_failed" in r.stderr, "status_exits_1_when_a_run_failed", f"exit {r.returncode}: {r.stderr}")
rowline = {l.split()[0]: l for l in r.stdout.splitlines()[1:-1] if l.strip()}
check("(data/x.bin@1024: token 999 outside the vocabulary)" in rowline.get("b_failed", ""), "status_failed_shows_the_reason",
      rowline.get("b_failed", r.stdout))

# the step of a run stopped between two /train rows (log_every 50, SIGTERM at step 28): its newest
# checkpoint's step, not the last logged row's
import h5py  # noqa: E402
mkrun("f_stopped_between_rows", "step 1/60 | loss 1\ncheckpoint step 28 -> x/checkpoints/step_00000028 (0.0s)\n"
      "signal 15: stopped after step 28 with a checkpoint; run the same command to resume\n", steps=60)
for n in (20, 28):
    os.makedirs(os.path.join(st, "f_stopped_between_rows", "checkpoints", f"step_{n:08d}"))
    open(os.path.join(st, "f_stopped_between_rows", "checkpoints", f"step_{n:08d}", "state.json"), "w").write("{}")
os.makedirs(os.path.join(st, "f_stopped_between_rows", "checkpoints", ".tmp_step_00000040"))   # a save cut short
with h5py.File(os.path.join(st, "f_stopped_between_rows", "metrics.h5"), "w") as f:
    f["train/step"] = [1]
old = 1e9
os.utime(os.path.join(st, "f_stopped_between_rows", "metrics.h5"), (old, old))
# sweep.json's records: a Slurm task never submitted, one whose sbatch failed, one submitted, and a
# finished run whose latest attempt failed (nothing written since) or failed before its files were
# written again (the files are newer: they say what happened)
import json  # noqa: E402
mkrun("g_done_then_failed", "done: 10 steps, 100 tokens in 1s; run directory x\n")
mkrun("h_failed_then_done", "done: 10 steps, 100 tokens in 1s; run directory x\n")
os.utime(os.path.join(st, "h_failed_then_done", "log.txt"), (2e9, 2e9))
open(os.path.join(st, "sweep.json"), "w").write(json.dumps({"runs": [
    {"name": "e_pending"}, {"name": "a_done"},
    {"name": "i_unsubmitted", "mode": "slurm"},
    {"name": "j_sbatch_failed", "mode": "slurm",
     "attempt": {"rc": 1, "error": "not submitted: sbatch x failed (exit 1): Invalid partition", "time": 1.5e9}},
    {"name": "k_queued", "mode": "slurm", "job": "77_0"},
    {"name": "g_done_then_failed", "mode": "run", "attempt": {"rc": 2, "error": "refusing to resume y", "time": 1.5e9}},
    {"name": "h_failed_then_done", "mode": "run", "attempt": {"rc": 2, "error": "refusing to resume z", "time": 1.5e9}}]}))
r = sweep("status", st)
rowline = {l.split()[0]: l for l in r.stdout.splitlines()[1:-1] if l.strip()}
rows = {n: l.split()[1] for n, l in rowline.items()}
check(rows.get("f_stopped_between_rows") == "stopped" and rowline["f_stopped_between_rows"].split()[2] == "28/60",
      "status_step_is_the_newest_checkpoints", rowline.get("f_stopped_between_rows", r.stdout))
check(rows.get("i_unsubmitted") == "unstarted" and rows.get("k_queued") == "pending" and rows.get("e_pending") == "pending",
      "status_unsubmitted_slurm_task_is_not_pending", r.stdout)
check(rows.get("j_sbatch_failed") == "failed" and "(not submitted: sbatch x failed (exit 1): Invalid partition)"
      in rowline["j_sbatch_failed"], "status_failed_sbatch_is_failed", r.stdout)
check(rows.get("g_done_then_failed") == "failed" and rowline["g_done_then_failed"].endswith("(refusing to resume y)")
      and rows.get("h_failed_then_done") == "done", "status_latest_attempt_counts", r.stdout)
check(r.returncode == 1 and r.stdout.strip().splitlines()[-1] ==
      "2 done; 3 failed; 2 pending; 1 running; 2 stopped; 1 unstarted", "status_counts", r.stdout + r.stderr)
# one run's own directory (runs/kjv after ./train configs/kjv.ini): its row (it was "no runs here
# (no run directory with log.txt ...)", exit 2, of a directory holding log.txt); a checkpoints
# directory (each checkpoint has a config.ini) is no runs directory
one = os.path.join(st, "f_stopped_between_rows")
for n in (20, 28):
    open(os.path.join(one, "checkpoints", f"step_{n:08d}", "config.ini"), "w").write("[train]\nsteps = 60\n")
r = sweep("status", one + "/")
check(r.returncode == 0 and r.stdout.splitlines()[1].split()[:3] == ["f_stopped_between_rows", "stopped", "28/60"]
      and r.stdout.strip().splitlines()[-1] == "1 stopped", "status_of_one_run_directory", r.stdout + r.stderr)
r = sweep("status", os.path.join(one, "checkpoints"))
check(r.returncode == 2 and "no runs here" in r.stderr, "status_of_a_checkpoints_directory_is_no_runs", r.stdout + r.stderr)

# tools/sweep slurm --submit records what sbatch did in sweep.json (a stand-in sbatch on PATH)
fake = os.path.join(S, "fakebin")
os.makedirs(fake)
for name, body in (("fail", 'echo "sbatch: error: Batch job submission failed: Invalid partition specified" >&2; exit 1'),
                   ("ok", 'echo "4242;cluster"')):
    sub = os.path.join(S, f"sub_{name}")
    open(os.path.join(fake, "sbatch"), "w").write(f"#!/bin/sh\n{body}\n")
    os.chmod(os.path.join(fake, "sbatch"), 0o755)
    env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"])
    r1 = subprocess.run(SWEEP + ["slurm", "configs/test/tiny_full.ini", "--set", "train.seed=1,2", "--out", sub, "--submit"],
                        cwd=ROOT, capture_output=True, text=True, env=env)
    r2 = sweep("status", sub)
    last = r2.stdout.strip().splitlines()[-1] if r2.stdout.strip() else ""
    if not have_train:
        skip(f"slurm_submit_{name}_status", "./train is not built (make)")
    elif name == "fail":
        check(r1.returncode == 1 and "Invalid partition specified" in r1.stderr and r2.returncode == 1 and last == "2 failed"
              and "(not submitted: sbatch" in r2.stdout, "slurm_submit_fail_status", f"{r1.stderr} {r2.stdout} {r2.stderr}")
    else:
        check(r1.returncode == 0 and r2.returncode == 0 and last == "2 pending", "slurm_submit_ok_status",
              f"{r1.stderr} {r2.stdout} {r2.stderr}")
        # the same slurm command again, without --submit: the jobs recorded for the runs are kept
        r3 = subprocess.run(SWEEP + ["slurm", "configs/test/tiny_full.ini", "--set", "train.seed=1,2", "--out", sub],
                            cwd=ROOT, capture_output=True, text=True, env=env)
        r4 = sweep("status", sub)
        last4 = r4.stdout.strip().splitlines()[-1] if r4.stdout.strip() else ""
        check(r3.returncode == 0 and last4 == "2 pending", "slurm_rewritten_keeps_recorded_jobs", f"{r3.stderr} {r4.stdout}")
r = sweep("slurm", "configs/test/tiny_full.ini", "--out", os.path.join(S, "sub_none"))
r2 = sweep("status", os.path.join(S, "sub_none"))
if have_train:
    check(r.returncode == 0 and r2.returncode == 0 and r2.stdout.strip().endswith("1 unstarted"),
          "slurm_without_submit_status_unsubmitted", r2.stdout + r2.stderr)

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

    # a rerun that ./train refuses (train.steps changed under a finished run): both runs failed, with
    # the reason, and status says so (exit 1), though metrics.h5 reached the old train.steps
    re_out = os.path.join(S, "rerun")
    dat = ["--override", f"data.train={data}/train_*.bin", "--override", f"data.val={data}/val_*.bin", "--out", re_out]
    r0 = sweep("run", "configs/test/tiny_full.ini", "--set", "train.seed=1,2", "--override", "train.steps=4", *dat)
    r = sweep("run", "configs/test/tiny_full.ini", "--set", "train.seed=1,2", "--override", "train.steps=8", *dat)
    r2 = sweep("status", re_out)
    rowline = {l.split()[0]: l for l in r2.stdout.splitlines()[1:-1] if l.strip()}
    check(r0.returncode == 0 and r.returncode == 1 and r2.returncode == 1 and r2.stdout.strip().endswith("\n2 failed")
          and all(rowline.get(n, "").split()[1:3] == ["failed", "4/4"] and "(refusing to resume" in rowline[n]
                  for n in ("tiny_full-seed1", "tiny_full-seed2")), "status_after_a_refused_rerun_is_failed",
          r2.stdout + r2.stderr)

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
