"""Checkpoint integrity (issue 19): state.json records the sha256 of every file; loading
verifies them, the step against the directory name, world_size >= 1, the counters and the
"complete" flag. Every mismatch is one error line naming the file and a non-zero exit, and no
older checkpoint is ever touched. Checkpoints from before checksums (byte counts only) are
accepted with a warning."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()

d, data = tu.scratch_with_corpus("test_checkpoint_integrity")
runs = f"{d}/runs"


def train(name, *extra):
    return tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={runs}",
                   f"run.name={name}", *extra])


def err_line(out):
    lines = [l for l in out.splitlines() if l.startswith("phaselab:") and "warning" not in l]
    return lines[-1] if lines else out[-300:]


def snapshot(ckdir):
    """{relative path: bytes} of every file under ckdir"""
    out = {}
    for root, _, names in os.walk(ckdir):
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, ckdir)] = open(p, "rb").read()
    return out


def fresh(name, src):
    """runs/NAME/checkpoints/ holding a copy of src (a checkpoint directory), as step_N of its name"""
    ck = f"{runs}/{name}/checkpoints"
    shutil.rmtree(f"{runs}/{name}", ignore_errors=True)
    os.makedirs(ck)
    dst = f"{ck}/{os.path.basename(src)}"
    shutil.copytree(src, dst)
    return dst


def flip(path, offset_from_end):
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        b = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))


def to_legacy(ckpt, **edit):
    """rewrites state.json the way checkpoints before checksums looked (byte counts, no
    state_sha256), with the given keys replaced"""
    p = f"{ckpt}/state.json"
    st = json.load(open(p))
    st.pop("state_sha256", None)
    st["files"] = {k: v["bytes"] for k, v in st["files"].items()}
    st.update(edit)
    open(p, "w").write(json.dumps(st, indent=1))


rc, out = train("base", "train.steps=10")
base = f"{runs}/base/checkpoints"
check(rc == 0 and sorted(os.listdir(base)) == ["step_00000005", "step_00000010"], "base run wrote two checkpoints",
      out[-300:])
st = json.load(open(f"{base}/step_00000010/state.json"))
files = st.get("files", {})
check(all(isinstance(v, dict) and len(v.get("sha256", "")) == 64 for v in files.values()) and
      "optimizer/rank_00000.bin" in files and "model.safetensors" in files and len(st.get("state_sha256", "")) == 64,
      "state.json records bytes and sha256 of every file and its own sha256", json.dumps(st)[:300])

rc, out = tu.run(["--eval", f"{base}/step_00000010"])
check(rc == 0 and "warning" not in out, "a checksummed checkpoint evaluates without a warning", out[-300:])

# one flipped byte in the weights: --eval and resume refuse, naming the file
ck = fresh("flipw", f"{base}/step_00000010")
flip(f"{ck}/model.safetensors", 7)
rc, out = tu.run(["--eval", ck])
line = err_line(out)
check(rc != 0 and "model.safetensors" in line and "sha256" in line, "--eval: flipped weight byte is a checksum error",
      line)
shutil.copytree(f"{base}/step_00000005", f"{runs}/flipw/checkpoints/step_00000005")
older = snapshot(f"{runs}/flipw/checkpoints/step_00000005")
rc, out = train("flipw", "train.steps=12")
line = err_line(out)
check(rc != 0 and "step_00000010/model.safetensors" in line and "sha256" in line,
      "resume: flipped weight byte is a checksum error naming the file", line)
check(snapshot(f"{runs}/flipw/checkpoints/step_00000005") == older, "resume refused: the older checkpoint untouched",
      "changed")

# one flipped byte in the AdamW state
ck = fresh("flipo", f"{base}/step_00000010")
flip(f"{ck}/optimizer/rank_00000.bin", 3)
rc, out = train("flipo", "train.steps=12")
line = err_line(out)
check(rc != 0 and "rank_00000.bin" in line and "sha256" in line, "flipped optimizer byte is a checksum error", line)

# a missing optimizer shard (a rank's file lost): named as missing, with the size state.json lists
ck = fresh("losto", f"{base}/step_00000010")
size = os.path.getsize(f"{ck}/optimizer/rank_00000.bin")
os.remove(f"{ck}/optimizer/rank_00000.bin")
rc, out = train("losto", "train.steps=12")
line = err_line(out)
check(rc == 1 and "rank_00000.bin: missing (state.json lists it, " + str(size) + " bytes" in line and "-1" not in line,
      "a missing optimizer shard is named as missing (exit 1)", line)

# an edited counter in state.json
ck = fresh("edit", f"{base}/step_00000010")
p = f"{ck}/state.json"
text = open(p).read()
open(p, "w").write(text.replace(f'"tokens":\t{st["tokens"]}', f'"tokens":\t{st["tokens"] + 64}'))
rc, out = tu.run(["--eval", ck])
line = err_line(out)
check(rc != 0 and "state.json" in line and "state_sha256" in line, "edited counter is refused (state_sha256)", line)

# the newest checkpoint's step disagrees with its directory name: refused, older ones kept
ck = fresh("misname", f"{base}/step_00000010")
shutil.copytree(f"{base}/step_00000005", f"{runs}/misname/checkpoints/step_00000005")
os.rename(ck, f"{runs}/misname/checkpoints/step_00000020")
before = snapshot(f"{runs}/misname/checkpoints")
rc, out = train("misname", "train.steps=25")
line = err_line(out)
check(rc != 0 and "step_00000020/state.json" in line and "step 10" in line and "20" in line,
      "step in state.json != directory name is refused", line)
check(snapshot(f"{runs}/misname/checkpoints") == before, "misnamed checkpoint refused: no checkpoint touched",
      str(sorted(os.listdir(f"{runs}/misname/checkpoints"))))

# checkpoints from before checksums: accepted with a warning, sizes still checked
ck = fresh("legacy", f"{base}/step_00000010")
to_legacy(ck)
rc, out = tu.run(["--eval", ck])
check(rc == 0 and "warning" in out and "no checksums" in out, "old checkpoint without checksums: accepted with a warning",
      out[-300:])
ck = fresh("legacy0", f"{base}/step_00000010")
to_legacy(ck, world_size=0)
rc, out = train("legacy0", "train.steps=12")
line = err_line(out)
check(rc != 0 and "world_size" in line and "state.json" in line, "world_size 0 is refused", line)
ck = fresh("legacyc", f"{base}/step_00000010")
to_legacy(ck, complete=False)
rc, out = tu.run(["--eval", ck])
check(rc != 0 and "complete" in err_line(out), "\"complete\": false is refused", err_line(out))
ck = fresh("legacyu", f"{base}/step_00000010")
to_legacy(ck, updates=3)
rc, out = tu.run(["--eval", ck])
check(rc != 0 and "updates" in err_line(out), "inconsistent counters are refused", err_line(out))

# a step of 9 digits is found on resume (names are not assumed to be 13 characters)
big = 100000000
ck = fresh("big", f"{base}/step_00000010")
to_legacy(ck, step=big, updates=big - st["skipped_steps"])
os.rename(ck, f"{runs}/big/checkpoints/step_{big}")
rc, out = train("big", f"train.steps={big}")
check(f"resumed from {runs}/big/checkpoints/step_{big}" in out, "a checkpoint of step 100000000 is found on resume",
      out[-400:])

finish()
