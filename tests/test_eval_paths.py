"""./train --eval cannot silently skip (issue 16): a run trained with relative data globs from
its own directory is evaluated from another directory; the checkpoint's relative data.val and
eval.probe resolve against the run's directory recorded in state.json (working_dir), an
override on the command line resolves against the current directory, and every way of
evaluating nothing is an error with a non-zero exit naming the glob and the override to use.
Scratch: build/scratch/test_eval_paths/."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
d = tu.scratch("test_eval_paths")
home = os.path.join(d, "home")      # where the run is started, with relative paths
elsewhere = os.path.join(d, "elsewhere")
os.makedirs(home)
os.makedirs(elsewhere)
tu.make_corpus(os.path.join(home, "data"))


def train_in(cwd, args):
    p = subprocess.run([tu.TRAIN] + args, cwd=cwd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


rc, out = train_in(home, [tu.TINY, "data.train=data/train_*.bin", "data.val=data/val_*.bin", "run.dir=runs",
                          "run.name=r", "train.steps=5", "checkpoint.every=5", "eval.every=0"])
check(rc == 0, "tiny run with relative globs trains", out[-400:])
ckpt = os.path.join(home, "runs", "r", "checkpoints", "step_00000005")
state = json.load(open(os.path.join(ckpt, "state.json")))
check(state.get("working_dir") == os.path.realpath(home) or state.get("working_dir") == home,
      "state.json records the run's working directory", str(state.get("working_dir")))

# from another directory: the relative glob resolves against the recorded directory
rc, out = train_in(elsewhere, ["--eval", ckpt])
loss = re.search(r"validation loss ([0-9.]+) over (\d+) windows", out)
check(rc == 0 and loss and int(loss.group(2)) > 0 and "relative to the run's directory" in out,
      "--eval from another directory evaluates the validation set (and says where it looked)", out[-600:])
rc2, out2 = train_in(home, ["--eval", ckpt])
loss2 = re.search(r"validation loss ([0-9.]+)", out2)
check(rc2 == 0 and loss and loss2 and loss.group(1) == loss2.group(1), "same loss as --eval from the run's directory",
      out2[-300:])

# an override is relative to the current directory
rc, out = train_in(elsewhere, ["--eval", ckpt, "data.val=../home/data/val_*.bin"])
check(rc == 0 and loss and f"validation loss {loss.group(1)}" in out, "data.val= override resolves against the "
      "current directory", out[-300:])
rc, out = train_in(elsewhere, ["--eval", ckpt, "data.val=nowhere/val_*.bin"])
check(rc == 2 and "nowhere/val_*.bin" in out and "data.val=" in out and "validation skipped" not in out,
      "an override matching nothing is an error naming the glob and the override", f"rc {rc}: {out[-300:]}")

# an older checkpoint without working_dir, evaluated from elsewhere: an error, never a skip
del state["working_dir"]
with open(os.path.join(ckpt, "state.json"), "w") as f:
    json.dump(state, f)
rc, out = train_in(elsewhere, ["--eval", ckpt])
check(rc == 2 and "data/val_*.bin" in out and "data.val=GLOB" in out and "records no run directory" in out,
      "no recorded directory and no match: exit 2 naming the glob and data.val=GLOB", f"rc {rc}: {out[-400:]}")

# nothing to evaluate: no data.val, no probe
rc, out = train_in(elsewhere, ["--eval", ckpt, "data.val="])
check(rc != 0 and "nothing to evaluate" in out, "no data.val and no eval.probe: an error, exit non-zero",
      f"rc {rc}: {out[-300:]}")
rc, out = train_in(elsewhere, ["--eval", ckpt, "data.val=", "--probe", "missing.probe"])
check(rc == 2 and "missing.probe" in out and "--probe" in out, "a probe file that cannot be read is an error",
      f"rc {rc}: {out[-300:]}")
finish()
