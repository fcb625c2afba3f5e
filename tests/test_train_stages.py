"""Training data in stages, data.stages (data/train_stages.h): which windows each step reads,
exact resume across a stage boundary, resume refusal when the stages change, and the errors of
a bad spec.

Two corpora of different sizes and row mixes: A (500 rows, the default mix) and B (300 rows,
every row long). The reference for what a stage reads is a plain run on that stage's corpus
alone (its sample trace, PHASELAB_TRACE_SAMPLES), not a reimplementation of the permutation:
stage 1 starting at step 12 must read at step s exactly what a run on B alone reads at step
s - 12, and the steps before 12 exactly what a run on A alone reads."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()

d, A = tu.scratch_with_corpus("test_train_stages")
B = os.path.join(d, "dataB")
tu.subprocess.run([tu.TRAIN, "--make-synthetic", B, "--seq-len", "64", "--train-rows", "300", "--val-rows", "16",
                   "--long-fraction", "1"], check=True, stdout=tu.subprocess.DEVNULL)
BOUNDARY = 12
common = [tu.TINY, f"data.val={A}/val_*.bin", f"run.dir={d}/runs"]
staged = common + [f"data.train={A}/train_*.bin", f"data.stages={BOUNDARY}:{B}/train_*.bin"]


def trace_env(name):
    return {**os.environ, "PHASELAB_TRACE_SAMPLES": f"{d}/{name}.trace"}


def run_traced(name, args, extra_env=None):
    env = trace_env(name)
    env.update(extra_env or {})
    p = tu.subprocess.run([tu.TRAIN] + args + [f"run.name={name}"], stdout=tu.subprocess.PIPE,
                          stderr=tu.subprocess.STDOUT, text=True, env=env, timeout=300)
    return p.returncode, p.stdout


def trace(name):
    """{step: [(window, stage), ...]} in sample order; the last write of a step wins (a resumed
    run repeats the steps after its checkpoint)."""
    rows = {}
    with open(f"{d}/{name}.trace.rank0") as f:
        for line in f:
            step, rank, sample, window, stage = (int(x) for x in line.split())
            rows.setdefault(step, {})[sample] = (window, stage)
    return {s: [v for _, v in sorted(r.items())] for s, r in rows.items()}


def losses(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r") as f:
        return f["train/step"][...], f["train/loss"][...]


rc, out = run_traced("S", staged)
check(rc == 0, "a run with one stage after data.train exits 0", out[-600:])
check(f"data: stage 1 ({BOUNDARY}:{B}/train_*.bin): steps {BOUNDARY + 1} on read its 300 training windows" in out,
      "its log names the stage, its first step (numbered as the log does) and its windows", out[:900])
check(f"data: step {BOUNDARY + 1} on reads stage 1 ({BOUNDARY}:" in out and f"step {BOUNDARY + 1}/30" in out,
      "and says when the run moves on to it", out[-3000:])
rcA, outA = run_traced("onlyA", common + [f"data.train={A}/train_*.bin"])
# a stage j >= 1 shuffles with the key train.seed xor (j * 0x9e3779b97f4a7c15) (data/train_stages.h):
# the run on B alone uses stage 1's key as its seed, so that its windows are stage 1's
rcB, outB = run_traced("onlyB", common + [f"data.train={B}/train_*.bin", f"train.seed={7 ^ 0x9e3779b97f4a7c15}"])
check(rcA == 0 and rcB == 0, "the reference runs on A alone and on B alone exit 0", outA[-300:] + outB[-300:])

tS, tA, tB = trace("S"), trace("onlyA"), trace("onlyB")
check(sorted(tS) == list(range(30)), "the staged run traced 30 steps", str(sorted(tS))[:200])
check(all(st == 0 for s in range(BOUNDARY) for _, st in tS[s]) and
      all(st == 1 for s in range(BOUNDARY, 30) for _, st in tS[s]),
      f"steps 0..{BOUNDARY - 1} read stage 0, steps {BOUNDARY}..29 stage 1",
      str({s: {st for _, st in tS[s]} for s in tS}))
check(all([w for w, _ in tS[s]] == [w for w, _ in tA[s]] for s in range(BOUNDARY)),
      f"before step {BOUNDARY}: the same windows as a run on A alone", "windows differ")
check(all([w for w, _ in tS[s]] == [w for w, _ in tB[s - BOUNDARY]] for s in range(BOUNDARY, 30)),
      f"from step {BOUNDARY}: at step s the windows a run on B alone reads at step s - {BOUNDARY} "
      "(the stage starts at its own epoch 0)", "windows differ")

stepS, lossS = losses("S")
_, lossA = losses("onlyA")
check(np.array_equal(lossS[:BOUNDARY], lossA[:BOUNDARY]),
      f"losses of steps 1..{BOUNDARY} equal the run on A alone, bitwise", f"{lossS[:BOUNDARY]} vs {lossA[:BOUNDARY]}")
check(not np.array_equal(lossS[BOUNDARY:], lossA[BOUNDARY:]), "after the boundary the losses differ from A's",
      "stage 1 had no effect on the losses")

# --- exact resume across the boundary: a crash before step 14 leaves step 10's checkpoint
rc, out = run_traced("K", staged, {"PHASELAB_FAIL_RANK": "0", "PHASELAB_FAIL_STEP": "14"})
check(rc != 0, "the run killed before step 14 does not exit 0", f"rc {rc}")
cks = sorted(os.listdir(f"{d}/runs/K/checkpoints"))
check(cks[-1] == "step_00000010", "its newest checkpoint is step 10's, before the boundary", str(cks))
rc, out = run_traced("K", staged)
check(rc == 0 and "resumed from" in out, "the resume from step 10 exits 0", out[-600:])
stepK, lossK = losses("K")
check(list(stepK) == list(stepS) and np.array_equal(lossK, lossS),
      "the resumed run's losses equal the uninterrupted one's, bitwise, across the boundary",
      f"max diff {np.max(np.abs(lossK - lossS)) if lossK.shape == lossS.shape else 'shapes differ'}")
tK = trace("K")
# (the killed run's own trace lines died unflushed with it; the resume traces steps 10..29)
check(sorted(tK)[:1] == [10] and all(tK[s] == tS[s] for s in range(10, 30)),
      "the resume read the same windows as the uninterrupted run at every step from 10", str(sorted(tK))[:200])

# --- resume refusal: another boundary is another run
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", f"data.stages=13:{B}/train_*.bin", "run.name=K",
                           "train.steps=40"])
check(rc == 2 and "refusing to resume" in out and "data.stages" in out,
      "resuming with the stage boundary moved is refused (exit 2), naming data.stages", f"rc {rc}: {out[-500:]}")
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", "run.name=K", "train.steps=40"])
check(rc == 2 and "refusing to resume" in out, "resuming without the stages is refused (exit 2)", f"rc {rc}: {out[-300:]}")

# --- a run without data.stages keeps the fingerprint it always had (no stage hashing)
with open(f"{d}/runs/onlyA/checkpoints/step_00000030/state.json") as f:
    state = f.read()
check('"data_fingerprint"' in state, "a checkpoint records the data fingerprint", state[:300])
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", "run.name=onlyA", "train.steps=31",
                           "train.resume_schedule=stretch"])
check(rc == 0 and "resumed from" in out, "a run without stages resumes as before", out[-400:])

# --- continuing a finished run with a new stage after its last checkpoint (step 31): allowed,
# since no step read so far changes; moving that boundary once the stage has begun is not
rc, out = run_traced("onlyA", common + [f"data.train={A}/train_*.bin", f"data.stages=31:{B}/train_*.bin",
                                        "run.name=onlyA", "train.steps=35", "train.resume_schedule=stretch"])
tC = trace("onlyA")
check(rc == 0 and "resumed from" in out and all(st == 1 for s in range(31, 35) for _, st in tC[s]),
      "a stage added after the last checkpoint: the resume is accepted and steps 32..35 read it", out[-600:])
check(all([w for w, _ in tC[s]] == [w for w, _ in tB[s - 31]] for s in range(31, 35)),
      "the added stage starts at its own epoch 0", "windows differ")
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", f"data.stages=32:{B}/train_*.bin", "run.name=onlyA",
                           "train.steps=40"])
check(rc == 2 and "refusing to resume" in out, "and once it has begun, moving its boundary is refused", out[-400:])

# --- errors: each names [data] stages, says what was expected, exits 2 and creates no run
ini = os.path.join(d, "bad.ini")
with open(ini, "w") as f:
    f.write(open(tu.TINY).read().replace("[data]\n", f"[data]\nstages = 5 {B}/train_*.bin\n"))
cases = [
    ([ini], f"{ini}:", "STEP:GLOB", "a stage without ':' in an INI file (named with its line)"),
    (common + [f"data.train={A}/train_*.bin", f"data.stages=12:{B}/train_*.bin, 8:{A}/train_*.bin"],
     "command line: data.stages", "strictly increasing", "first steps not increasing"),
    (common + [f"data.train={A}/train_*.bin", "data.stages=0:x"], "data.stages", "whole number >= 1",
     "a stage at step 0"),
    (common + [f"data.train={A}/train_*.bin", "data.stages=5: "], "data.stages", "empty glob", "an empty glob"),
]
for n, (args, where, what, label) in enumerate(cases):
    rc, out = tu.run(args + [f"run.name=bad{n}"])
    check(rc == 2 and where in out and what in out and not os.path.exists(f"{d}/runs/bad{n}"),
          f"error: {label}: exit 2, '{where}' and '{what}', no run directory", f"rc {rc}: {out[-400:]}")
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", f"data.stages=5:{d}/nothing/*.bin", "run.name=bad_glob"])
check(rc != 0 and f"[data] stages: stage 1 (5:{d}/nothing/*.bin): " in out and "no file matches" in out,
      "a stage whose glob matches nothing: non-zero exit naming the key, the stage and its glob",
      f"rc {rc}: {out[-400:]}")
ck = f"{d}/runs/bad_glob/checkpoints"
check(not os.path.isdir(ck) or not os.listdir(ck), "and no checkpoint was written", str(os.listdir(ck)) if os.path.isdir(ck) else "")

rc, out = tu.run(["--dry-run"] + staged)
check(rc == 0 and f"training data (steps numbered as the log does, 1..30): steps 1..{BOUNDARY} from {A}/train_*.bin; "
      f"steps {BOUNDARY + 1}..30 from {B}/train_*.bin" in out, "--dry-run says which steps read which data", out[-800:])

# --- a stage train.steps does not reach (a short smoke run of a long config): allowed, and said
rc, out = tu.run(["--dry-run"] + common + [f"data.train={A}/train_*.bin", f"data.stages=30:{B}/train_*.bin"])
check(rc == 0 and f"{B}/train_*.bin from step 31: not reached (train.steps = 30)" in out,
      "--dry-run flags a stage at or past train.steps as not reached", out[-600:])
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", f"data.stages=30:{B}/train_*.bin", "run.name=unreached",
                           "train.steps=3"])
check(rc == 0 and "warning: not reached with train.steps = 3" in out, "and the run warns in its log", out[-800:])

# --- a later stage over data.train's own files reads them in another order than stage 0 did
rc, out = run_traced("again", common + [f"data.train={A}/train_*.bin", f"data.stages=4:{B}/train_*.bin, 8:{A}/train_*.bin",
                                        "train.steps=12"])
tR = trace("again")
check(rc == 0 and [w for s in range(8, 12) for w, _ in tR[s]] != [w for s in range(4) for w, _ in tA[s]],
      "a stage that returns to data.train's files does not replay the run's first steps", out[-400:])
finish()
