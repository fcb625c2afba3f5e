"""A resume with another train.steps (issue 37, item 7): refused by default, naming
train.resume_schedule; `keep` continues the learning-rate schedule of the total the checkpoint
recorded (state.json schedule_steps; lr = min_lr past its end), `stretch` recomputes the cosine for
the new train.steps. Checkpoints written before schedule_steps existed load, taking their
config.ini's train.steps as the total (said in the log). The expected learning rates are computed
here from the formula of trainer/schedule.h, not by the code under test.
Scratch: build/scratch/test_resume_schedule/."""
import json
import math
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_resume_schedule")
runs = f"{d}/runs"
LR, MIN_LR, WARMUP = 3e-3, 3e-4, 5          # configs/test/tiny.ini's schedule, given explicitly below


def train(name, *extra):
    return tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                   f"run.name={name}", f"train.lr={LR}", f"train.min_lr={MIN_LR}", f"train.warmup_steps={WARMUP}",
                   "run.log_every=1", "eval.every=0", "checkpoint.every=5", *extra])


def expected_lr(step, total):
    """trainer/schedule.h, step = the 0-based index of the update (the log's step - 1)"""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    p = min(1.0, (step - WARMUP) / max(1, total - WARMUP - 1))
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * p))


def logged_lr(out):
    """{log step: lr} of the progress lines"""
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step +(\d+)/\d+ \|.*?\| lr ([0-9.e+-]+) \|", out, re.M)}


def lr_matches(lrs, steps, total):
    bad = [(s, lrs.get(s), expected_lr(s - 1, total)) for s in steps
           if s not in lrs or abs(lrs[s] - expected_lr(s - 1, total)) > 1e-3 * expected_lr(s - 1, total)]
    return not bad, f"(step, logged, expected) {bad[:4]}"


def state(name, step):
    return json.load(open(f"{runs}/{name}/checkpoints/step_{step:08d}/state.json"))


def copy_run(src, dst, keep_steps):
    """runs/DST = runs/SRC with only the checkpoints of keep_steps"""
    shutil.rmtree(f"{runs}/{dst}", ignore_errors=True)
    shutil.copytree(f"{runs}/{src}", f"{runs}/{dst}")
    for n in os.listdir(f"{runs}/{dst}/checkpoints"):
        if int(n.split("_")[1]) not in keep_steps:
            shutil.rmtree(f"{runs}/{dst}/checkpoints/{n}")


rc, out = train("A", "train.steps=10")
ok, why = lr_matches(logged_lr(out), range(1, 11), 10)
check(rc == 0 and ok, "a 10-step run follows the warm-up + cosine schedule", why + out[-300:])
check(rc == 0 and state("A", 10).get("schedule_steps") == 10, "state.json records schedule_steps = 10",
      str(state("A", 10).get("schedule_steps")) if rc == 0 else out[-300:])

# refused by default, naming the key and its two words; nothing written
before = sorted(os.listdir(f"{runs}/A/checkpoints"))
rc, out = train("A", "train.steps=14")
line = [l for l in out.splitlines() if l.startswith("phaselab:")]
check(rc == 2 and line and "train.resume_schedule=keep" in line[-1] and "train.resume_schedule=stretch" in line[-1]
      and "10 steps" in line[-1], "more steps on a finished run: refused (exit 2), naming train.resume_schedule",
      f"exit {rc}: {out[-400:]}")
check(sorted(os.listdir(f"{runs}/A/checkpoints")) == before, "the refused resume wrote no checkpoint",
      str(os.listdir(f"{runs}/A/checkpoints")))
rc, out = train("A", "train.steps=10")
check(rc == 0 and "nothing to do" in out, "the same train.steps on the finished run: nothing to do, exit 0", out[-300:])

# keep, from the middle (step 5): steps 6..10 as the original run, then min_lr
copy_run("A", "K", {5})
rc, out = train("K", "train.steps=14", "train.resume_schedule=keep")
lrs = logged_lr(out)
ok, why = lr_matches(lrs, range(6, 15), 10)
check(rc == 0 and ok and all(abs(lrs[s] - MIN_LR) < 1e-9 for s in range(10, 15)),
      "keep: the 10-step schedule continues (steps 6..10 as before, then min_lr)", why + out[-300:])
check(rc == 0 and state("K", 14).get("schedule_steps") == 10, "keep: the new checkpoint still records 10",
      str(state("K", 14).get("schedule_steps")) if rc == 0 else "")
rc, out = train("K", "train.steps=16")
check(rc == 2 and "train.resume_schedule" in out, "keep: a later resume with other steps is asked again", out[-300:])

# stretch, from the middle: steps 6..14 on the cosine of 14 steps
copy_run("A", "S", {5})
rc, out = train("S", "train.steps=14", "train.resume_schedule=stretch")
ok, why = lr_matches(logged_lr(out), range(6, 15), 14)
check(rc == 0 and ok, "stretch: the cosine is recomputed for 14 steps", why + out[-300:])
check(rc == 0 and state("S", 14).get("schedule_steps") == 14, "stretch: the new checkpoint records 14",
      str(state("S", 14).get("schedule_steps")) if rc == 0 else "")

# a checkpoint from before schedule_steps (and checksums): its config.ini's train.steps is the total
copy_run("A", "L", {5})
p = f"{runs}/L/checkpoints/step_00000005/state.json"
st = json.load(open(p))
st.pop("schedule_steps")
st.pop("state_sha256")
st["files"] = {k: v["bytes"] for k, v in st["files"].items()}
open(p, "w").write(json.dumps(st, indent=1))
rc, out = train("L", "train.steps=14")
check(rc == 2 and "records no schedule_steps" in out and "train.resume_schedule" in out,
      "old checkpoint, more steps: refused, the total taken from its config.ini (said)", out[-400:])
rc, out = train("L", "train.steps=10")
ok, why = lr_matches(logged_lr(out), range(6, 11), 10)
check(rc == 0 and "resumed from" in out and ok, "old checkpoint, the same steps: resumes on its schedule", why + out[-300:])
finish()
