"""Phase jitter in a training run (docs/spec.md §6.2), on the tiny compressed config (W4/S4):
  - a jittered run trains (finite, decreasing loss) and differs from the same run without jitter
    (the shifts reach the training step);
  - killed at a step between checkpoints (PHASELAB_FAIL_STEP, SIGKILL) and rerun, it resumes and
    ends with losses and weights bitwise identical to the uninterrupted run (the shifts are drawn
    from the seed and the sample index, not from the process's history);
  - evaluation is unshifted: the validation losses of the final checkpoint, re-evaluated with
    --eval, equal the run's own last validation row."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_phase_jitter_train")
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
          "train.steps=16", "checkpoint.every=5", "eval.every=8"]


def train_losses(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r") as f:
        return f["train/loss"][...], f["val/loss"][...]


def weights(name, step):
    return open(f"{d}/runs/{name}/checkpoints/step_{step:08d}/model.safetensors", "rb").read()


rc, out = tu.run(common + ["run.name=J", "train.phase_jitter=true"])
check(rc == 0, "jittered run exits 0", out[-400:])
lossJ, valJ = train_losses("J")
check(np.all(np.isfinite(lossJ)) and lossJ[-1] < lossJ[0], "jittered run: loss finite and decreasing", f"{lossJ}")

rc, out = tu.run(common + ["run.name=P"])
lossP, _ = train_losses("P")
check(rc == 0, "plain run exits 0", out[-400:])
check(rc == 0 and lossP.tobytes() != lossJ.tobytes(), "jitter changes the training losses", f"{lossP} vs {lossJ}")

os.environ["PHASELAB_FAIL_RANK"], os.environ["PHASELAB_FAIL_STEP"] = "0", "12"
rc, out = tu.run(common + ["run.name=K", "train.phase_jitter=true"])
del os.environ["PHASELAB_FAIL_RANK"], os.environ["PHASELAB_FAIL_STEP"]
check(rc != 0, "the run killed at step 12 did not finish", f"exit {rc}")
rc, out = tu.run(common + ["run.name=K", "train.phase_jitter=true"])
check(rc == 0 and "resumed from" in out, "the killed jittered run resumes", out[-400:])
lossK, valK = train_losses("K")
check(lossK.tobytes() == lossJ.tobytes() and valK.tobytes() == valJ.tobytes(),
      "jitter + SIGKILL + resume: losses bitwise identical to the uninterrupted run", f"{lossK} vs {lossJ}")
check(weights("K", 16) == weights("J", 16), "jitter + resume: final weights bitwise identical", "model.safetensors differ")

rc, out = tu.run(["--eval", f"{d}/runs/J/checkpoints/step_00000016"])
line = [l for l in out.splitlines() if "val loss" in l or "validation loss" in l]
check(rc == 0 and line, "--eval of the jittered checkpoint runs", out[-400:])
if line:
    import re
    nums = [float(x) for x in re.findall(r"loss ([0-9.]+)", line[0])]
    print(f"# --eval: {line[0].strip()} | run's last validation loss {float(valJ[-1]):.6f}")
    check(nums and abs(nums[0] - float(valJ[-1])) < 5e-4, "--eval (unshifted) = the run's last validation loss",
          f"{line[0]} vs {valJ[-1]}")
# --summary states the shift's range: the stride, or with multi-rate strides their lcm (docs/spec.md §6.2)
rc, out = tu.run(["--summary", tu.TINY, "model.attention=compressed", "model.n_kv_heads=2", "model.window=8",
                  "model.stride=6", "model.head_strides=8,6", "train.phase_jitter=true"])
check(rc == 0 and "mod 24 (the lcm of the KV heads' strides; offsets o_g + (u mod S_g))" in out,
      "--summary: multi-rate jitter draws u mod lcm(8, 6) = 24", out[-600:])
rc, out = tu.run(["--summary", tu.TINY, "model.attention=compressed", "model.window=8", "model.stride=8",
                  "train.phase_jitter=true"])
check(rc == 0 and "mod 8 (offsets o_g + u)" in out, "--summary: jitter draws u mod the stride 8", out[-600:])
finish()
