"""The docs/spec.md §2b remedies through ./train on the tiny config (configs/test/tiny.ini):

  * train.gate_coverage = lambda: /train/gate_coverage exists, is > 0 and equals the log line;
    /train/loss stays the plain cross-entropy: with the same seed and data, step 1 (before any
    update) has bit-identical loss for lambda = 0 and lambda = 1, and the penalty changes the
    updates (later losses differ). Without the penalty there is no /train/gate_coverage.
  * compressor = shared and grid = staggered train, resume to the same losses as one run
    (checkpoint names with the W axis 1 load back), and their gate statistics exist.
  * the CUDA backend refuses grid = staggered and gate_coverage > 0 with one line (skipped
    without a GPU).
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

try:
    import h5py
except ImportError:  # pragma: no cover
    h5py = None


def train(d, data, name, *over, steps=4):
    args = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}",
            f"run.name={name}", f"train.steps={steps}", "eval.every=0", "checkpoint.every=2"] + list(over)
    return tu.run(args)


def train_losses(d, name):
    with h5py.File(os.path.join(d, name, "metrics.h5"), "r") as f:
        g = f["train"]
        return list(g["loss"][:]), (list(g["gate_coverage"][:]) if "gate_coverage" in g else None), \
            ("gates" in f and len(f["gates"]["step"]) > 0)


def main():
    tu.require_train()
    if h5py is None:
        skip("remedies through ./train", "h5py not installed")
        finish()
    d, data = tu.scratch_with_corpus("test_remedies_train")

    rc0, out0 = train(d, data, "lambda0")
    rc1, out1 = train(d, data, "lambda1", "train.gate_coverage=1")
    check(rc0 == 0 and rc1 == 0, "tiny runs with gate_coverage 0 and 1 finish", out0[-300:] + out1[-300:])
    if rc0 == 0 and rc1 == 0:
        l0, c0, _ = train_losses(d, "lambda0")
        l1, c1, _ = train_losses(d, "lambda1")
        check(c0 is None, "no /train/gate_coverage without the penalty")
        # the gates start uniform (zero init): penalty exactly 0 at step 1, then > 0
        check(c1 is not None and len(c1) == len(l1) and c1[0] == 0 and all(v > 0 for v in c1[1:]),
              "/train/gate_coverage logged every log step: 0 at the uniform init, then > 0", f"{c1}")
        check(l0[0] == l1[0], "step 1 /train/loss identical with and without the penalty (loss is plain CE)",
              f"{l0[0]!r} vs {l1[0]!r}")
        check(l0[-1] != l1[-1], "the penalty changes the updates", f"{l0} vs {l1}")
        logged = [float(x) for x in re.findall(r"gate coverage ([0-9.eE+-]+)", out1)]
        check(len(logged) == len(c1) and all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(logged, c1)),
              "log line 'gate coverage' = /train/gate_coverage", f"{logged} vs {c1}")

    for name, over in (("shared", ["model.compressor=shared"]),
                       ("staggered", ["model.grid=staggered", "model.local=tail"]),
                       ("all_three", ["model.compressor=shared", "model.grid=staggered", "model.gate=vector",
                                      "train.gate_coverage=0.5"])):
        rc, out = train(d, data, name, *over)
        check(rc == 0, f"{name}: tiny run finishes", out[-400:])
        if rc != 0:
            continue
        full, _, gates = train_losses(d, name)
        check(gates, f"{name}: gate statistics logged")
        ckpts = sorted(glob.glob(os.path.join(d, name, "checkpoints", "step_*", "config.json")))
        if ckpts:
            with open(ckpts[-1]) as f:
                pl = json.load(f).get("phaselab", {})
            want_c = "shared" if "model.compressor=shared" in over else "paper"
            want_g = "staggered" if "model.grid=staggered" in over else None
            check(pl.get("compressor") == want_c and pl.get("grid") == want_g,
                  f"{name}: checkpoint config.json names compressor {want_c} and grid {want_g or '(aligned: absent)'}",
                  f"{pl}")
        # resume: a run killed at step 3 (checkpoint at step 2) and run again reproduces the losses
        os.environ["PHASELAB_FAIL_RANK"], os.environ["PHASELAB_FAIL_STEP"] = "0", "3"
        rc_a, out_a = train(d, data, name + "_resumed", *over)
        del os.environ["PHASELAB_FAIL_RANK"], os.environ["PHASELAB_FAIL_STEP"]
        rc_b, out_b = train(d, data, name + "_resumed", *over)
        ok = rc_a != 0 and rc_b == 0
        check(ok, f"{name}: killed at step 3, then resumed", (out_a + out_b)[-400:])
        if ok:
            resumed, _, _ = train_losses(d, name + "_resumed")
            check(resumed == full, f"{name}: resumed losses = uninterrupted losses, bitwise", f"{resumed} vs {full}")

    # the CUDA backend trains staggered grids (kernels/cuda, tests/gpu/test_cuda_staggered.c for the numbers)
    rc, out = train(d, data, "cuda_staggered", "model.grid=staggered", "run.device=cuda", steps=1)
    # kernels/backend_select.c's two refusals: "... no usable GPU: ..." and "... built without CUDA ..."
    if rc != 0 and ("no usable GPU" in out or "built without CUDA" in out):
        skip("CUDA trains grid = staggered", "no GPU (" + (out.strip().splitlines()[-1][:120] if out.strip() else "") + ")")
    else:
        check(rc == 0, "CUDA trains grid = staggered (one step)", out[-300:])
    finish()


if __name__ == "__main__":
    main()
