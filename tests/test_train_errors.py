"""What bad input gets (issue 3): each case must end with a non-zero exit and one error line
naming the file (and offset or key) and what was expected; an older complete checkpoint is
never touched, and the next resume starts from the newest complete one."""
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()

d, data = tu.scratch_with_corpus("test_train_errors")
runs = f"{d}/runs"


def train(name, *extra, train_glob=f"{data}/train_*.bin", val_glob=f"{data}/val_*.bin"):
    return tu.run([tu.TINY, f"data.train={train_glob}", f"data.val={val_glob}", f"run.dir={runs}", f"run.name={name}",
                   *extra])


def err_line(out):
    lines = [l for l in out.splitlines() if l.startswith("phaselab:")]
    return lines[-1] if lines else out[-300:]


rc, out = tu.run([f"{d}/nope.ini"])
check(rc == 2 and "nope.ini" in err_line(out), "missing config file", err_line(out))

rc, out = train("e1", train_glob=f"{d}/none_*.bin")
check(rc != 0 and "none_*.bin" in err_line(out), "empty training glob names the glob", err_line(out))

bad = f"{d}/bad"
os.makedirs(bad)
raw = open(f"{data}/train_000.bin", "rb").read()
open(f"{bad}/magic.bin", "wb").write(b"XXXXXXXX" + raw[8:])
rc, out = train("e2", train_glob=f"{bad}/magic.bin")
check(rc != 0 and "magic.bin" in err_line(out) and "PHLTOKv1" in err_line(out), "wrong magic names file and magic", err_line(out))

open(f"{bad}/trunc.bin", "wb").write(raw[:len(raw) - 6])
rc, out = train("e3", train_glob=f"{bad}/trunc.bin")
check(rc != 0 and "trunc.bin" in err_line(out), "truncated shard names the file", err_line(out))

# a token >= vocab_size: vocabulary 200 while the synthetic corpus uses ids up to 255
rc, out = train("e4", "model.vocab_size=200")
line = err_line(out)
check(rc != 0 and ("train_000.bin@" in line or "val_000.bin@" in line) and "200" in line,
      "token >= vocab_size names the file and offset", line)

# a validation set shorter than one window
short = f"{d}/short"
os.makedirs(short)
tu.make_corpus(short, seq_len=32, train_rows=10, val_rows=1)
rc, out = train("e5", val_glob=f"{short}/val_*.bin")
check(rc != 0 and ("val_000.bin" in err_line(out) or "val_*.bin" in err_line(out)), "validation set shorter than one window",
      err_line(out))

# an unwritable run directory: a regular file where the directory should be
open(f"{d}/afile", "w").write("x")
rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"run.dir={d}/afile", "run.name=x"])
check(rc != 0 and "afile" in err_line(out), "unwritable run directory names the path", err_line(out))

# checkpoints: a corrupt newest one is reported; the older one is untouched
rc, out = train("ck", "train.steps=10")
ckdir = f"{runs}/ck/checkpoints"
check(rc == 0 and sorted(os.listdir(ckdir)) == ["step_00000005", "step_00000010"], "two checkpoints written",
      str(os.listdir(ckdir)))
older = open(f"{ckdir}/step_00000005/model.safetensors", "rb").read()
newest = f"{ckdir}/step_00000010/model.safetensors"
with open(newest, "r+b") as f:
    f.truncate(os.path.getsize(newest) - 100)
rc, out = train("ck", "train.steps=12")
line = err_line(out)
check(rc != 0 and "step_00000010/model.safetensors" in line and "corrupt" in line, "corrupt checkpoint names the file", line)
check(open(f"{ckdir}/step_00000005/model.safetensors", "rb").read() == older, "older checkpoint untouched", "changed")
shutil.rmtree(f"{ckdir}/step_00000010")
# a half-written checkpoint (as left by a crash) is ignored and removed; resume from the newest complete
os.makedirs(f"{ckdir}/.tmp_step_00000007/optimizer")
open(f"{ckdir}/.tmp_step_00000007/model.safetensors", "wb").write(b"garbage")
rc, out = train("ck", "train.steps=12", "train.resume_schedule=stretch")
check(rc == 0 and "step_00000005" in out and not os.path.exists(f"{ckdir}/.tmp_step_00000007"),
      "half-written checkpoint ignored; resume from the newest complete one", out[-300:])

# a state.json that is not JSON
os.makedirs(f"{runs}/js/checkpoints", exist_ok=True)
shutil.copytree(f"{ckdir}/step_00000012", f"{runs}/js/checkpoints/step_00000012")
open(f"{runs}/js/checkpoints/step_00000012/state.json", "w").write("{not json")
rc, out = train("js", "train.steps=14")
check(rc != 0 and "state.json" in err_line(out), "corrupt state.json names the file", err_line(out))

# non-finite steps: a huge learning rate overflows the weights; updates are skipped, counted,
# and after max_bad_steps in a row the run stops with status 3, its last checkpoint intact
rc, out = train("nan", "train.lr=1e38", "train.min_lr=1e37", "train.warmup_steps=0", "train.grad_clip=0",
                "checkpoint.every=1", "train.max_bad_steps=3")
skipped = [l for l in out.splitlines() if "update skipped" in l]
check(rc == 3 and len(skipped) == 3, "3 non-finite steps in a row stop the run with status 3",
      f"status {rc}, {len(skipped)} skipped: {out[-400:]}")
cks = sorted(os.listdir(f"{runs}/nan/checkpoints")) if os.path.isdir(f"{runs}/nan/checkpoints") else []
check(len(cks) >= 1 and "intact" in out, "the last good checkpoint is kept", f"{cks}")
rc, out = train("nan0", "train.lr=1e38", "train.min_lr=1e37", "train.warmup_steps=0", "train.grad_clip=0",
                "checkpoint.every=100", "train.max_bad_steps=2")
check(rc == 3 and "no checkpoint was written" in out and "checkpoint (step 0)" not in out
      and not os.path.isdir(f"{runs}/nan0/checkpoints/step_00000000"),
      "stopped before its first checkpoint: says there is none (not 'step 0 is intact')", err_line(out))

# data.loss_targets = answers needs the synthetic corpus: a shard with another tokenizer
# fingerprint (bytes 32-95) is refused at start-up, naming the glob and both fingerprints
other = f"{d}/other"
os.makedirs(other)
for name in ("train_000.bin", "val_000.bin"):
    b = bytearray(open(f"{data}/{name}", "rb").read())
    b[32:96] = b"bytes".ljust(64, b"\0")
    open(f"{other}/{name}", "wb").write(bytes(b))
rc, out = train("lt", "data.loss_targets=answers", train_glob=f"{other}/train_*.bin", val_glob=f"{other}/val_*.bin")
line = err_line(out)
check(rc != 0 and "train_*.bin" in line and "loss_targets" in line and '"synthetic"' in line and '"bytes"' in line,
      "loss_targets = answers on a non-synthetic corpus names the glob and the fingerprints", line)
check(not os.path.exists(f"{runs}/lt/checkpoints"), "the refused run wrote no checkpoint", str(os.listdir(f"{runs}/lt")) if os.path.isdir(f"{runs}/lt") else "")
rc, out = train("lt2", "data.loss_targets=nonsense")
check(rc == 2 and "loss_targets" in err_line(out) and "answers" in err_line(out), "a bad loss_targets word names the words",
      err_line(out))
rc, out = train("lt3", "data.loss_targets=answers", "train.steps=3", "eval.every=3")
check(rc == 0 and "val loss" in out, "loss_targets = answers trains on the synthetic corpus", out[-300:])
# the run directory removed while the run runs (a user's rm -r): the run stops at its next evaluation with
# one line saying so, exit 1, and does not recreate a stub directory (it recreated checkpoints/ and wrote on)
import subprocess  # noqa: E402
import time  # noqa: E402
gone = f"{runs}/gone"
p = subprocess.Popen([tu.TRAIN, tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                      "run.name=gone", "train.steps=100000", "eval.every=50", "checkpoint.every=100000"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
t0 = time.time()
while not os.path.exists(f"{gone}/metrics.h5") and time.time() - t0 < 60:
    time.sleep(0.05)
shutil.rmtree(gone, ignore_errors=True)
try:
    out = p.communicate(timeout=120)[0]
except subprocess.TimeoutExpired:
    p.kill()
    out = p.communicate()[0] + "\n(still running after 120 s)"
check(p.returncode == 1 and "was removed or replaced while this run was running" in err_line(out) and not os.path.exists(gone),
      "run directory removed during the run: exit 1, said, not recreated", f"{p.returncode} {err_line(out)} exists={os.path.exists(gone)}")
finish()
