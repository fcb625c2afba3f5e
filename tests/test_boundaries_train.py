"""Learned chunk boundaries (docs/spec.md §6.5, model.boundaries = learned) through the whole program,
on the tiny config (W 8 the longest chunk, S 4 the target mean length):
  - a run trains (finite, decreasing loss) and differs from the same run on the grid (W 8 / S 4);
  - the log line and metrics.h5 carry /train/boundary_ratio and /train/boundary_rate, finite, the rate
    in (0, 1], the ratio >= 0 (R_l >= 0 for F, G in [0, 1]);
  - the checkpoint's config.json carries boundaries = learned, so --eval of it reproduces the run's own
    last validation loss (a checkpoint that forgot the key would evaluate the grid model), and the
    transformers remote config (tools/hf/configuration_phaselab.py, loaded against a stand-in
    PretrainedConfig: no transformers needed) accepts that config.json (the remote code's logits against
    the C forward: tests/test_hf_transformers.py);
  - the analyses: --score runs (the full forward), the probe through the KV cache (--decode) = through the
    full forward, --knockout all runs, --generate's chunked prefill = token by token, gate cycling refuses
    with one line;
  - bad combinations exit 2 with one line naming the key: window = stride, phase jitter."""
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
d, data = tu.scratch_with_corpus("test_boundaries_train")
common = [tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}/runs",
          "train.steps=12", "checkpoint.every=12", "eval.every=6", "model.window=8", "model.stride=4"]
LB = ["model.boundaries=learned", "train.boundary_ratio=0.1"]


def train_table(name):
    with h5py.File(f"{d}/runs/{name}/metrics.h5", "r") as f:
        t = f["train"]
        return {k: t[k][...] for k in t.keys()}, f["val/loss"][...]


rc, out = tu.run(common + LB + ["run.name=L"])
check(rc == 0, "learned-boundary run exits 0", out[-400:])
tr, valL = train_table("L") if rc == 0 else ({}, np.array([np.nan]))
loss = tr.get("loss", np.array([np.nan]))
check(np.all(np.isfinite(loss)) and loss[-1] < loss[0], "learned-boundary run: loss finite and decreasing", f"{loss}")
ratio, rate = tr.get("boundary_ratio"), tr.get("boundary_rate")
check(ratio is not None and rate is not None and len(ratio) == len(loss) and np.all(np.isfinite(ratio))
      and np.all(np.isfinite(rate)) and np.all((rate > 0) & (rate <= 1)) and np.all(ratio >= 0),
      "metrics.h5 /train/boundary_ratio and /train/boundary_rate: one finite value a row, rate in (0, 1]",
      f"ratio {ratio}, rate {rate}")
check(re.search(r"boundary ratio [0-9.]+ rate [0-9.]+", out) is not None, "the log line carries the ratio and the rate",
      out[-400:])
rc, out = tu.run(common + ["run.name=G"])
lossG = train_table("G")[0]["loss"] if rc == 0 else np.array([np.nan])
check(rc == 0 and lossG.tobytes() != loss.tobytes(), "learned boundaries change the losses of the W8/S4 grid",
      f"{lossG} vs {loss}")

ck = f"{d}/runs/L/checkpoints/step_00000012"
cfg = json.load(open(f"{ck}/config.json")) if os.path.exists(f"{ck}/config.json") else {}
check(cfg.get("phaselab", {}).get("boundaries") == "learned", "config.json carries boundaries = learned",
      f"{cfg.get('phaselab')}")
rc, out = tu.run(["--eval", ck])
m = re.search(r"validation loss ([0-9.]+)", out)
check(rc == 0 and m and abs(float(m.group(1)) - float(valL[-1])) < 6e-5,   # printed to 4 decimals
      "--eval of the checkpoint = the run's last validation loss (its boundaries came back)", out[-400:])

stub = f"{d}/stub"   # a stand-in transformers.PretrainedConfig: the remote config's own checks only
os.makedirs(stub, exist_ok=True)
with open(f"{stub}/transformers.py", "w") as f:
    f.write("class PretrainedConfig:\n    def __init__(self, **kwargs):\n        pass\n")
probe_py = ("import json, sys\nsys.path[:0] = [sys.argv[1], sys.argv[2]]\nfrom configuration_phaselab import PhaselabConfig\n"
            "try:\n    PhaselabConfig(**json.load(open(sys.argv[3])))\n    print('accepted')\n"
            "except ValueError as e:\n    print('ValueError:', e)\n")
p = subprocess.run([sys.executable, "-c", probe_py, stub, os.path.join(tu.ROOT, "tools", "hf"), f"{ck}/config.json"],
                   capture_output=True, text=True)
lines = [l for l in p.stdout.splitlines() if l.strip()]
check(lines == ["accepted"], "the transformers remote config accepts the checkpoint's boundaries = learned "
      "(its logits: tests/test_hf_transformers.py)", p.stdout[-300:] + p.stderr[-300:])

txt = f"{d}/score.txt"
with open(txt, "w") as f:
    f.write("5 17 3 99 42 7 8 11 64 2 30 12 14 200 3 3 9\n")
rc, out = tu.run(["--score", ck, "--input", txt, "--ids"])
check(rc == 0, "--score runs on a learned-boundary checkpoint (the full forward)", out[-400:])
probe = f"{d}/probe.bin"
p = subprocess.run([sys.executable, os.path.join(tu.ROOT, "tools", "make-probe"), "--synthetic", "--out", probe, "--quiet",
                    "--per-residue", "2", "--max-len", "64", "--residues", "16", "--seed", "5"], capture_output=True, text=True)
check(p.returncode == 0, "make-probe", p.stderr[-300:])
P16 = ["eval.residues=16"]
# the per-residue table (the chunk-phase table that follows it is printed by the full forward only)
accuracy = lambda text: re.findall(r"acc(?:uracy)?[^0-9]*([0-9.]+)", text.split("by chunk phase")[0])   # noqa: E731
rc1, out1 = tu.run(["--eval", ck, "--probe", probe] + P16)
rc2, out2 = tu.run(["--eval", ck, "--probe", probe, "--decode"] + P16)
check(rc1 == 0 and rc2 == 0 and accuracy(out1) and accuracy(out1) == accuracy(out2),
      "probe accuracy through the KV cache (--decode: each chunk pooled when its boundary arrives) = the full forward",
      f"{out1[-300:]} || {out2[-300:]}")
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "all", "--out", f"{d}/ko.h5"] + P16)
check(rc == 0, "--knockout all runs on a learned-boundary model", out[-300:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "--out", f"{d}/gc.h5"] + P16)
lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
check(rc == 2 and len(lines) == 1 and "boundaries = learned" in lines[0], "--gate-cycle refuses it with one line (no grid)",
      f"rc {rc}: {out[-300:]}")

ids = f"{d}/prompt.txt"
with open(ids, "w") as f:
    f.write("5 17 3 99 42 7 8 11 64 2 30\n")
gen = ["--generate", ck, "--prompt-ids", ids, "--max-new", "12", "--temperature", "0", "--ignore-eot"]
tokens = lambda text: [l for l in text.splitlines() if l.strip() and not l.startswith(("prefill:", "decode:"))]   # noqa: E731
rc1, g1 = tu.run(gen)
rc2, g2 = tu.run(gen + ["--stepwise-prefill"])
g1, g2 = tokens(g1), tokens(g2)
check(rc1 == 0 and rc2 == 0 and g1 and g1 == g2, "--generate: chunked prefill = token-by-token prefill", f"{g1} || {g2}")

for extra, key, why in ((["model.window=4"], "window", "window > stride >= 2"),
                        (["train.phase_jitter=true"], "boundaries", "train.phase_jitter")):
    rc, out = tu.run(common + LB + extra + ["run.name=B"])
    lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
    check(rc == 2 and len(lines) == 1 and key in lines[0] and why in lines[0],
          f"learned boundaries with {extra[0]}: one line naming {key}, exit 2", f"rc {rc}: {out[-300:]}")
finish()
