"""A stage at its own sequence length (data.train_seq_len, data.stages GLOB@T; data/train_stages.h):
the same Bg rows a step at T_j < data.seq_len, in the model's arena for seq_len.

The reference is a plain run whose seq_len is T_j itself, with the same rows a step (so
batch_tokens = Bg * T_j) and the same seed: the staged run's steps at T_j must read the same
windows and give bitwise the same losses, since a causal model at length T_j computes the same
thing whatever length its buffers were sized for, and the loss of a step is its mean over its
Bg * T_j positions in both. Then: the later stage at seq_len; evaluation at seq_len even when the
run ends inside a short stage (its logged validation loss equals ./train --eval of its
checkpoint); exact resume across a change of length; the fingerprint rule (a begun stage's
length is part of the data read); the errors."""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()

d, A = tu.scratch_with_corpus("test_stage_seq_len")          # rows of 64 tokens: seq_len of TINY
SHORT = os.path.join(d, "short")                                # rows of 32 tokens
tu.make_corpus(SHORT, seq_len=32, train_rows=400)
BOUNDARY, T, TS = 10, 64, 32
BG = 512 // T                                                   # TINY: batch_tokens 512, 8 rows a step
common = [tu.TINY, f"data.val={A}/val_*.bin", f"run.dir={d}/runs", "eval.every=0"]
staged = common + [f"data.train={SHORT}/train_*.bin", f"data.train_seq_len={TS}",
                   f"data.stages={BOUNDARY}:{A}/train_*.bin", "train.steps=20"]


def run_traced(name, args, extra_env=None):
    env = {**os.environ, "PHASELAB_TRACE_SAMPLES": f"{d}/{name}.trace", **(extra_env or {})}
    p = tu.subprocess.run([tu.TRAIN] + args + [f"run.name={name}"], stdout=tu.subprocess.PIPE,
                          stderr=tu.subprocess.STDOUT, text=True, env=env, timeout=300)
    return p.returncode, p.stdout


def trace(name):
    rows = {}
    with open(f"{d}/{name}.trace.rank0") as f:
        for line in f:
            step, _rank, sample, window, stage = (int(x) for x in line.split())
            rows.setdefault(step, {})[sample] = (window, stage)
    return {s: [v for _, v in sorted(r.items())] for s, r in rows.items()}


def metrics(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r") as f:
        return f["train/loss"][...], f["train/tokens"][...] if "train/tokens" in f else None


rc, out = run_traced("S", staged)
check(rc == 0, "a run whose data.train trains at 32 tokens and whose stage 1 at 64 exits 0", out[-800:])
check(f"training windows of {TS}+1 tokens" in out and
      f"data: stage 1 ({BOUNDARY}:{A}/train_*.bin): steps {BOUNDARY + 1} on read its" in out and
      f"windows of {T}+1 tokens" in out, "its log gives each stage's window length", out[:1200])
# the reference: seq_len 32 itself, the same 8 rows a step
rc, outR = run_traced("R", common + [f"data.train={SHORT}/train_*.bin", f"data.seq_len={TS}",
                                     f"train.batch_tokens={BG * TS}", "train.steps=20", "data.val="])
check(rc == 0, "the reference run at seq_len 32 exits 0", outR[-600:])
tS, tR = trace("S"), trace("R")
check(all([w for w, _ in tS[s]] == [w for w, _ in tR[s]] for s in range(BOUNDARY)),
      f"steps 1..{BOUNDARY} read the windows of 32+1 tokens a seq_len-32 run reads", "windows differ")
lossS, tokS = metrics("S")
lossR, tokR = metrics("R")
check(np.array_equal(lossS[:BOUNDARY], lossR[:BOUNDARY]),
      f"and their losses are bitwise those of the seq_len-32 run", f"{lossS[:BOUNDARY]} vs {lossR[:BOUNDARY]}")
check(not np.array_equal(lossS[BOUNDARY:], lossR[BOUNDARY:]), "after the boundary (64-token rows) they differ",
      "stage 1 changed nothing")
steps_tokens = np.diff(np.concatenate([[0], tokS])) if tokS is not None else []
check(list(steps_tokens[:BOUNDARY]) == [BG * TS] * BOUNDARY and list(steps_tokens[BOUNDARY:]) == [BG * T] * (20 - BOUNDARY),
      "a short step counts Bg*32 tokens, a full one Bg*64 (metrics.h5 /train/tokens)", str(steps_tokens))

# --- evaluation runs at seq_len even when the run ends inside the short stage
rc, out = run_traced("E", common + [f"data.train={SHORT}/train_*.bin", f"data.train_seq_len={TS}", "train.steps=6"])
v = re.search(r"eval step 6 \| val loss ([0-9.]+) over (\d+) windows", out)
check(rc == 0 and v is not None and v.group(2) == str(512 // T),
      "a run ending at 32 tokens evaluates windows of 64 (val_tokens / seq_len of them)", out[-800:])
rc, ev = tu.run(["--eval", f"{d}/runs/E/checkpoints/step_00000006", f"data.val={A}/val_*.bin"])
v2 = re.search(r"validation loss ([0-9.]+)", ev)
check(rc == 0 and v is not None and v2 is not None and v.group(1) == v2.group(1),
      "and its logged validation loss equals ./train --eval of its checkpoint", f"{v and v.group(1)} vs {ev[-500:]}")

# --- exact resume across the change of length: killed before step 13, resumed from step 10
rc, out = run_traced("K", staged, {"PHASELAB_FAIL_RANK": "0", "PHASELAB_FAIL_STEP": "13"})
check(rc != 0 and sorted(os.listdir(f"{d}/runs/K/checkpoints"))[-1] == "step_00000010",
      "the run killed before step 13 leaves step 10's checkpoint", f"rc {rc}")
rc, out = run_traced("K", staged)
lossK, _ = metrics("K")
check(rc == 0 and "resumed from" in out and np.array_equal(lossK, lossS),
      "the resume from step 10 gives the uninterrupted run's losses, bitwise", out[-500:])

# --- the fingerprint: a begun stage's length is data already read
rc, out = tu.run(common + [f"data.train={SHORT}/train_*.bin", "data.train_seq_len=16",
                           f"data.stages={BOUNDARY}:{A}/train_*.bin", "train.steps=25", "run.name=K"])
check(rc == 2 and "refusing to resume" in out and "train_seq_len" in out,
      "resuming with another data.train_seq_len is refused (exit 2), naming it", out[-500:])
rc, out = tu.run(common + [f"data.train={SHORT}/train_*.bin", f"data.train_seq_len={TS}",
                           f"data.stages={BOUNDARY}:{A}/train_*.bin@32", "train.steps=25", "run.name=K"])
check(rc == 2 and "refusing to resume" in out, "resuming with a begun stage at another length is refused",
      out[-500:])
rc, out = run_traced("K", common + [f"data.train={SHORT}/train_*.bin", f"data.train_seq_len={TS}",
                                    f"data.stages={BOUNDARY}:{A}/train_*.bin, 20:{SHORT}/train_*.bin@32",
                                    "train.steps=24", "train.resume_schedule=stretch"])
tK = trace("K")
check(rc == 0 and "resumed from" in out and "(20:" + SHORT + "/train_*.bin@32)" in out and
      all(st == 2 for s in range(20, 24) for _, st in tK[s]),
      "a stage at 32 tokens added after the last checkpoint is accepted, and its steps read it", out[-700:])

# --- train_seq_len = seq_len is the same data as train_seq_len = 0 (the fingerprint and the check)
rc, out = tu.run(common + [f"data.train={A}/train_*.bin", "train.steps=5", "run.name=P"])
rc2, out2 = tu.run(common + [f"data.train={A}/train_*.bin", f"data.train_seq_len={T}", "train.steps=6",
                             "run.name=P", "train.resume_schedule=stretch"])
check(rc == 0 and rc2 == 0 and "resumed from" in out2,
      "train_seq_len = seq_len is the default: a run without it resumes with it", out2[-400:])

# --- errors: each names the key and what was expected, exits 2, creates no run directory
cases = [
    ([f"data.train_seq_len={T * 2}"], "train_seq_len", f"..{T}", "data.train_seq_len above seq_len"),
    ([f"data.train_seq_len=2"], "train_seq_len", "one compression window", "a length shorter than one window"),
    ([f"data.stages=5:{A}/train_*.bin@{T * 2}"], "data.stages", f"..{T}", "a stage longer than seq_len"),
    ([f"data.stages=5:{A}/train_*.bin@0"], "data.stages", "whole number >= 1", "a stage at length 0"),
    ([f"data.stages=5:@32"], "data.stages", "empty glob", "a stage with a length and no glob"),
]
for n, (args, where, what, label) in enumerate(cases):
    rc, out = tu.run(common + [f"data.train={A}/train_*.bin"] + args + [f"run.name=bad{n}"])
    check(rc == 2 and where in out and what in out and not os.path.exists(f"{d}/runs/bad{n}"),
          f"error: {label}: exit 2, '{where}' and '{what}', no run directory", f"rc {rc}: {out[-400:]}")

rc, out = tu.run(["--dry-run"] + staged)
check(rc == 0 and f"steps 1..{BOUNDARY} from {SHORT}/train_*.bin at seq_len {TS}; steps {BOUNDARY + 1}..20 from "
      f"{A}/train_*.bin\n" in out, "--dry-run gives each stage's length where it is not seq_len", out[-900:])
finish()
