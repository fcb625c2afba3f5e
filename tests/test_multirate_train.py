"""Multi-rate strides (docs/spec.md §6.4, model.head_strides) through the whole program, on the tiny
config (W4, 2 KV heads, strides 4,2 with stride = 2):
  - a run trains (finite, decreasing loss) and differs from the same run with both heads at stride 2
    (the per-head stride reaches the training step);
  - the checkpoint's config.json carries head_strides, so --eval of it reproduces the run's own
    last validation row (a checkpoint that forgot the strides would evaluate another model);
  - the analyses run on it: --eval with a probe through the full forward and through the KV cache
    (--decode: the same accuracy, the decoder completing each head's entries at j S_g + W - 1), the
    phase fold by lcm(4, 2) = 4,
    the knockout of every KV head, and --generate with a chunked and a token-by-token prefill
    (the same greedy tokens);
  - on a bad list the run is refused with one line naming the key (exit 2)."""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

import h5py  # noqa: E402

tu.require_train()
d, data = tu.scratch_with_corpus("test_multirate_train")
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
          "train.steps=12", "checkpoint.every=12", "eval.every=6", "model.stride=2"]
MR = ["model.head_strides=4,2"]


def losses(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r") as f:
        return f["train/loss"][...], f["val/loss"][...]


rc, out = tu.run(common + MR + ["run.name=M"])
check(rc == 0, "multi-rate run exits 0", out[-400:])
lossM, valM = losses("M") if rc == 0 else (np.array([np.nan]), np.array([np.nan]))
check(np.all(np.isfinite(lossM)) and lossM[-1] < lossM[0], "multi-rate run: loss finite and decreasing", f"{lossM}")
rc, out = tu.run(common + ["run.name=P"])
lossP, _ = losses("P") if rc == 0 else (np.array([np.nan]), None)
check(rc == 0 and lossP.tobytes() != lossM.tobytes(), "head_strides 4,2 changes the losses of stride 2 everywhere",
      f"{lossP} vs {lossM}")

ck = f"{d}/runs/M/checkpoints/step_00000012"
cfg = json.load(open(f"{ck}/config.json")) if os.path.exists(f"{ck}/config.json") else {}
check(cfg.get("phaselab", {}).get("head_strides") == "4,2", "config.json carries head_strides",
      f"{cfg.get('phaselab')}")
rc, out = tu.run(["--eval", ck])
m = re.search(r"validation loss ([0-9.]+)", out)
check(rc == 0 and m and abs(float(m.group(1)) - float(valM[-1])) < 6e-5,   # printed to 4 decimals
      "--eval of the checkpoint = the run's last validation loss (its strides came back)", out[-400:])

probe = f"{d}/probe.bin"
p = subprocess.run([sys.executable, os.path.join(tu.ROOT, "tools", "make-probe"), "--synthetic", "--out", probe, "--quiet",
                    "--per-residue", "2", "--max-len", "64", "--residues", "16", "--seed", "5"], capture_output=True, text=True)
check(p.returncode == 0, "make-probe", p.stderr[-300:])


def accuracy(text):
    return re.findall(r"acc(?:uracy)?[^0-9]*([0-9.]+)", text)


P16 = ["eval.residues=16"]   # 3P <= 64 positions; the phase fold lcm(4, 2) = 4 divides it
rc1, out1 = tu.run(["--eval", ck, "--probe", probe] + P16)
rc2, out2 = tu.run(["--eval", ck, "--probe", probe, "--decode"] + P16)
check(rc1 == 0 and rc2 == 0 and accuracy(out1) and accuracy(out1) == accuracy(out2),
      "probe accuracy through the KV cache (--decode) = through the full forward", f"{out1[-300:]} || {out2[-300:]}")
check("by phase t_K mod 4" in out1, "the probe's phase fold is lcm(4, 2) = 4 (docs/spec.md §6.4)", out1[-300:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "all", "--out", f"{d}/ko.h5"] + P16)
check(rc == 0, "--knockout all runs on a multi-rate model", out[-300:])
# staggered multi-rate grids: head g starts at floor(g S_g / G) of its own stride (4,2 on 2 heads: 0, 1), and the
# gate cycling needs W = S, which no single W meets for differing strides: refused naming head_strides
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "--out", f"{d}/gc.h5"] + P16)
check(rc == 2 and "model.head_strides" in out and not os.path.exists(f"{d}/gc.h5"),
      "--gate-cycle on a multi-rate model: refused (exit 2) naming model.head_strides, nothing written", out[-300:])

# knockout's per-head fold says the offsets it used (not floor(g * lcm / G): 0, 2)
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "0:1", "--out", f"{d}/ko_stag.h5", "model.grid=staggered"] + P16)
with h5py.File(f"{d}/ko_stag.h5", "r") as f:
    offs = [int(x) for x in f[sorted(f.keys())[-1]]["grid_offset"][()]] if rc == 0 else None
check(rc == 0 and offs == [0, 1] and "(grid = staggered, o_g = 0, 1)" in out,
      "--knockout on staggered multi-rate grids names the offsets it folded by (0, 1)", f"{offs} {out[-400:]}")

ids = f"{d}/prompt.txt"
with open(ids, "w") as f:
    f.write("5 17 3 99 42 7 8 11 64 2 30\n")
gen = ["--generate", ck, "--prompt-ids", ids, "--max-new", "12", "--temperature", "0", "--ignore-eot"]
def tokens(text):   # the generated ids, without the timing lines
    return [l for l in text.splitlines() if l.strip() and not l.startswith(("prefill:", "decode:"))]


rc1, g1 = tu.run(gen)
rc2, g2 = tu.run(gen + ["--stepwise-prefill"])
g1, g2 = tokens(g1), tokens(g2)
check(rc1 == 0 and rc2 == 0 and g1 and g1 == g2, "--generate: chunked prefill = token-by-token prefill", f"{g1} || {g2}")

rc, out = tu.run(common + ["run.name=B", "model.head_strides=4,3,2"])
lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
check(rc == 2 and len(lines) == 1 and "head_strides" in lines[0] and "one stride per KV head" in lines[0],
      "a list of 3 strides for 2 KV heads: one line naming the key, exit 2", f"rc {rc}: {out[-300:]}")
finish()
