"""Probes for short contexts (docs/spec.md §3.5, tools/make-probe): a model with seq_len 64 is probed
with lookup and needle sets built for it, and every error on the way recommends a command that works:
- tools/make-probe --checkpoint CKPT takes the checkpoint's tokenizer, seq_len and eval.residues; with
  eval.residues = 24 at T = 64 it refuses, naming the residues that fit (18);
- ./train --eval with a 256-token probe on the 64-token model: one line whose recommended
  tools/make-probe command (and eval.residues) is run here as printed and then evaluates;
- a training run whose eval.probe has other residues than eval.residues: the rebuild it offers is
  only one that fits T;
- the needle layout at T = 64 evaluates."""
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish
from trainutil import ROOT, TINY, run, require_train, scratch

require_train()
d = scratch("test_probe_short")
MP = [sys.executable, os.path.join(ROOT, "tools", "make-probe")]
subprocess.run([os.path.join(ROOT, "train"), "--make-synthetic", os.path.join(d, "synth"), "--seq-len", "64",
                "--train-rows", "300", "--val-rows", "4"], check=True, stdout=subprocess.DEVNULL)
data = [f"data.train={d}/synth/train_*.bin", f"data.val={d}/synth/val_*.bin"]
rc, out = run([TINY] + data + [f"run.dir={d}", "run.name=r", "train.steps=4", "checkpoint.every=4", "eval.every=0"])
check(rc == 0, "tiny run at seq_len 64", out[-300:])
ck = os.path.join(d, "r", "checkpoints", "step_00000004")


def mp(*args):
    p = subprocess.run(MP + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# ---- make-probe --checkpoint: the model's own tokenizer and length
rc, out = mp("--checkpoint", ck, "--out", os.path.join(d, "own.probe"), "--per-residue", "4", "--quiet")
check(rc == 2 and "too few for 24 residues" in out and "--residues 18 or fewer" in out,
      "--checkpoint: seq_len 64 and eval.residues 24 from the checkpoint; refused naming the 18 residues that fit", out[-300:])
rc, out = mp("--checkpoint", ck, "--out", os.path.join(d, "own.probe"), "--per-residue", "4", "--residues", "8", "--quiet")
check(rc == 0 and "--max-len 64" in out and "prompt length 64" in out and "18 records, 4 demonstrations" in out,
      "--checkpoint --residues 8: a 64-token lookup probe of the checkpoint's tokenizer", out[-300:])
rc, out = run(["--eval", ck, "--probe", os.path.join(d, "own.probe"), "eval.residues=8"])
check(rc == 0 and "lookup probe" in out and "chance 1/18" in out, "the 64-token probe evaluates (chance = 1/18 records)", out[-300:])

# ---- the length error recommends what works; run it as printed
rc, out = mp("--synthetic", "--out", os.path.join(d, "long.probe"), "--per-residue", "2", "--quiet")
check(rc == 0, "a default 256-token probe", out)
p = subprocess.run([os.path.join(ROOT, "train"), "--eval", ck, "--probe", os.path.join(d, "long.probe")],
                   capture_output=True, text=True)
line = p.stderr.strip()
m = re.search(r"rebuild it with (tools/make-probe[^;)]*?)(?: and set (eval\.residues=\d+))?\)", line)
check(p.returncode == 2 and line.count("\n") == 0 and m and "--max-len 64" in m.group(1) and "--max-len 128" not in line,
      "--eval with a 256-token probe at T = 64: one line recommending a 64-token build", line)
if m:
    cmd = shlex.split(m.group(1))
    rc, out = mp(*cmd[1:], "--synthetic", "--per-residue", "3", "--quiet", "--out", os.path.join(d, "advised.probe"))
    extra = [m.group(2)] if m.group(2) else []
    rc2, out2 = run(["--eval", ck, "--probe", os.path.join(d, "advised.probe")] + extra) if rc == 0 else (1, "")
    check(rc == 0 and rc2 == 0 and "lookup probe" in out2, f"the recommended command works: {m.group(1)} {' '.join(extra)}",
          out[-200:] + out2[-200:])

# ---- the residues mismatch of a run offers only a rebuild that fits T
rc, out = run([TINY] + data + [f"run.dir={d}", "run.name=m", "train.steps=2", f"eval.probe={d}/own.probe", "eval.residues=24"])
check(rc == 2 and "eval.residues=8" in out and "--residues 24" not in out,
      "eval.probe of 8 residues with eval.residues 24 at T = 64: offers eval.residues=8, not an impossible rebuild", out[-300:])
rc, out = run([TINY] + data + [f"run.dir={d}", "run.name=m2", "train.steps=2", f"eval.probe={d}/own.probe", "eval.residues=12"])
check(rc == 2 and "eval.residues=8" in out and "--max-len 64 --residues 12" in out,
      "with eval.residues 12 (which fits 64 tokens) the rebuild is offered too", out[-300:])

# ---- the needle layout at T = 64
rc, out = mp("--checkpoint", ck, "--layout", "needle", "--out", os.path.join(d, "needle.probe"), "--per-residue", "3", "--quiet")
rc2, out2 = run(["--eval", ck, "--probe", os.path.join(d, "needle.probe"), "eval.residues=8"]) if rc == 0 else (1, "")
check(rc == 0 and "prompt length 64" in out and rc2 == 0 and "needle probe" in out2,
      "a 64-token needle probe (11 records of 4 tokens) builds from the checkpoint and evaluates", out[-200:] + out2[-300:])
finish()
