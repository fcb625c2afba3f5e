"""Every input an analysis combines is checked against the others before any work (issue 37),
numbers are parsed as the integers they are, no fixed buffer cuts an input, and weights alone
(config.json + model.safetensors) can be evaluated, analysed and generated from.

- compatibility: a probe, a calibration set or a validation set made with another tokenizer
  (fingerprint patched into a copy of the header), a calibration set of another layout, residue
  count or prompt length, a filler-sweep or --generate tokenizer that is not the checkpoint's, and
  eval.residues different from the probe's residues in ./train: each is one line naming both
  files and both values, exit 2, before the validation pass, with analysis.h5 unchanged;
- numbers: --knockout 0:4294967297 (was head 1), --gate-cycle, --layers longer than 511
  characters (a bad layer past the old cut is refused, a long valid list stored whole),
  --max-new 3e9 / inf / 1e12, --temperature, --top-k, --seed, --context: refused with exit 2 or
  parsed exactly; filler-sweep values of any length (a = 000...0184 is 184), a key given twice;
- sizes from the config: eval.residues = 300 (> the old 256-entry axis), stride 320 and 300
  layers (> the old stack arrays) run to a correct result;
- paths: --gate-cycle from another directory resolves the checkpoint's relative data.val against
  the run's directory, as --eval does, and reports the validation loss;
- weights only: a checkpoint without optimizer/ and state.json, and a directory of config.json +
  model.safetensors as transformers' save_pretrained writes it back (other __metadata__,
  tensors in another order, the phaselab keys in config.json, no config.ini), give the same
  --eval numbers, analyses and generated tokens as the checkpoint; resume still refuses a
  checkpoint that lacks its optimizer; --prompt uses the directory's own tokenizer by default.
Expected values come from the full checkpoint (a different code path: state.json verified,
config.ini) or are worked out here. Scratch: build/scratch/test_analysis_inputs/."""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("analysis inputs", "h5py missing")
    finish()

tu.require_train()
ROOT = tu.ROOT
MAKE_PROBE = os.path.join(ROOT, "tools", "make-probe")
QWEN = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer", "tokenizer.json")
d, data = tu.scratch_with_corpus("test_analysis_inputs", seq_len=160, train_rows=120, val_rows=4)
common = ["data.seq_len=160", "train.batch_tokens=640", f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin",
          f"run.dir={d}", "eval.every=1000", "checkpoint.every=1000"]


def run(args, cwd=None, timeout=300):
    """./train args: (exit status, stdout, stderr)."""
    p = subprocess.run([tu.TRAIN] + args, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def train(name, config, steps, extra=()):
    rc, out, err = run([config] + common + [f"run.name={name}", f"train.steps={steps}"] + list(extra))
    ck = os.path.join(d, name, "checkpoints", f"step_{steps:08d}")
    check(rc == 0 and os.path.isdir(ck), f"train {name}", (out + err)[-400:])
    return ck


def make_probe(out, *args):
    p = subprocess.run([sys.executable, MAKE_PROBE, "--synthetic", "--out", out, "--quiet"] + list(args),
                       capture_output=True, text=True)
    check(p.returncode == 0, f"make-probe {os.path.basename(out)}", p.stderr[-300:])
    return out


def patched(src, dst, offset, data_bytes):
    raw = bytearray(open(src, "rb").read())
    raw[offset:offset + len(data_bytes)] = data_bytes
    open(dst, "wb").write(raw)
    return dst


def state_of(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None


def last_line(err):
    lines = [l for l in err.splitlines() if l.strip()]
    return lines[-1] if lines else ""


def refused(name, args, wants, h5, cwd=None, gen=False):
    """./train --eval ARGS (or --generate) must exit 2 with a last line 'phaselab: ...' holding every
    string of wants, without the validation pass, and leave h5 as it was."""
    before = state_of(h5)
    rc, out, err = run((["--generate"] if gen else ["--eval"]) + args, cwd=cwd)
    line = last_line(err)
    missing = [w for w in wants if w not in line]
    ok = rc == 2 and line.startswith("phaselab: ") and not missing and "validation loss" not in out \
        and state_of(h5) == before
    check(ok, name, f"rc {rc}, missing {missing}: {line[:600]} | stdout {out[-200:]}")


ck = train("w4s4", tu.TINY, 2)
H5 = os.path.join(ck, "analysis.h5")
probe = make_probe(os.path.join(d, "probe.bin"), "--per-residue", "2", "--max-len", "160", "--seed", "5")
calib = make_probe(os.path.join(d, "calib.bin"), "--per-residue", "1", "--max-len", "160", "--seed", "6")
calib12 = make_probe(os.path.join(d, "calib12.bin"), "--per-residue", "1", "--max-len", "160", "--seed", "7", "--residues", "12")
calib150 = make_probe(os.path.join(d, "calib150.bin"), "--per-residue", "1", "--max-len", "150", "--seed", "8")
calib_needle = make_probe(os.path.join(d, "calib_needle.bin"), "--layout", "needle", "--per-residue", "1", "--max-len", "160",
                          "--seed", "9")
OTHER = hashlib.sha256(b"another tokenizer").hexdigest()
probe_other = patched(probe, os.path.join(d, "probe_other.bin"), 40, OTHER.encode())
calib_other = patched(calib, os.path.join(d, "calib_other.bin"), 40, OTHER.encode())
os.makedirs(os.path.join(d, "val_other"))
val_other = patched(os.path.join(data, "val_000.bin"), os.path.join(d, "val_other", "val_000.bin"), 32, OTHER.encode())

# a first result in analysis.h5, so that "unchanged" compares a file that exists
rc, out, err = run(["--eval", ck, "--probe", probe])
check(rc == 0 and os.path.exists(H5), "--eval stores a probe group", (out + err)[-300:])

# ---- 1. compatibility before computation
refused("probe of another tokenizer: --eval exits 2 before the validation pass, naming both files and fingerprints",
        [ck, "--probe", probe_other], [probe_other, OTHER, "synthetic", ck], H5)
refused("probe of another tokenizer: --gate-cycle exits 2", [ck, "--probe", probe_other, "--gate-cycle", "1"],
        [probe_other, OTHER, "synthetic"], H5)
refused("probe of another tokenizer: --knockout exits 2", [ck, "--probe", probe_other, "--knockout", "0:0", "--calib", calib],
        [probe_other, OTHER, "synthetic"], H5)
refused("--calib of another tokenizer exits 2 naming the calibration set, the checkpoint and both fingerprints",
        [ck, "--probe", probe, "--knockout", "0:0", "--calib", calib_other], [calib_other, ck, OTHER, "synthetic"], H5)
refused("--calib with another residue count exits 2 naming both counts",
        [ck, "--probe", probe, "--knockout", "0:0", "--calib", calib12], [calib12, probe, "12 residues", "has 24"], H5)
refused("--calib of another prompt length exits 2 naming both",
        [ck, "--probe", probe, "--knockout", "0:0", "--calib", calib150], [calib150, probe, "query position"], H5)
refused("--calib of another layout exits 2 naming both", [ck, "--probe", probe, "--knockout", "0:0", "--calib", calib_needle],
        [calib_needle, probe, "needle", "lookup"], H5)
refused("data.val of another tokenizer exits 2 naming the shards and both fingerprints",
        [ck, "--probe", probe, f"data.val={d}/val_other/val_*.bin"], ["data.val", "val_other", OTHER, "synthetic"], H5)
refused("probe for a longer T exits 2 (not 1) before the validation pass",
        [ck, "--probe", make_probe(os.path.join(d, "probe256.bin"), "--per-residue", "1", "--max-len", "256")],
        ["probe256.bin", "256", "160"], H5)
# ./train: eval.residues against the probe's residue count, before any step
rc, out, err = run([tu.TINY] + common + ["run.name=residues", "train.steps=2", f"eval.probe={probe}", "eval.residues=12"])
check(rc == 2 and "probe.bin" in last_line(err) and "24" in last_line(err) and "12" in last_line(err)
      and not os.path.exists(os.path.join(d, "residues", "checkpoints")),
      "./train: eval.residues = 12 with a 24-residue probe is refused at start (exit 2, both counts named)",
      f"rc {rc}: {last_line(err)}")

# ---- 2. numbers parsed as the integers they are
for bad in ("0:4294967297", "4294967296:0", "0:-1", "+0:1", "0:1x", "0:", ":1", "0: 1", "1e0:0"):
    refused(f"--knockout {bad} is refused (never wraps to another head)", [ck, "--probe", probe, "--knockout", bad, "--calib", calib],
            ["--knockout", bad], H5)
for bad in ("4294967297", "+1", "-0", "1e0", " 1", "0x1"):
    refused(f"--gate-cycle '{bad}' is refused", [ck, "--probe", probe, "--gate-cycle", bad], ["--gate-cycle", bad.strip() or bad], H5)
long_bad = ",".join(["0"] * 300) + ",7"                     # 609 characters: the 7 lies past the old 511-character cut
refused("--layers longer than 511 characters: a bad layer past the old cut is refused", [ck, "--probe", probe, "--gate-cycle", "1",
        "--layers", long_bad], ["--layers", "'7'"], H5)
refused("--layers with an empty element is refused", [ck, "--probe", probe, "--gate-cycle", "1", "--layers", "0,,1"],
        ["--layers", "''"], H5)
long_ok = ",".join(["0", "1"] * 150)                       # 599 characters, every layer valid
gc_h5 = os.path.join(d, "gc_long.h5")
rc, out, err = run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "--layers", long_ok, "--out", gc_h5])
layers_attr = None
if rc == 0:
    with h5py.File(gc_h5, "r") as f:
        g = f[sorted(k for k in f if k.startswith("gate_cycle"))[-1]]
        layers_attr = g.attrs.get("layers")
        layers_attr = layers_attr.decode() if isinstance(layers_attr, bytes) else layers_attr
check(rc == 0 and layers_attr == long_ok, "--layers of 599 characters runs and is stored whole",
      f"rc {rc}: {last_line(err)} stored {str(layers_attr)[:40]}... ({len(layers_attr or '')} chars)")

ids = os.path.join(d, "prompt.txt")
open(ids, "w").write("16 80 17 81 18 82 16")
for opt, bad in (("--max-new", "3e9"), ("--max-new", "inf"), ("--max-new", "1e12"), ("--max-new", "3000000000"),
                 ("--max-new", "-1"), ("--max-new", "1.5"), ("--temperature", "inf"), ("--temperature", "nan"),
                 ("--temperature", "-1"), ("--temperature", "1e400"), ("--top-k", "1e3"), ("--top-k", "-1"),
                 ("--top-k", "4294967297"), ("--seed", "-1"), ("--seed", "18446744073709551616"), ("--seed", "1e3"),
                 ("--context", "0"), ("--context", "1e3"), ("--context", "4294967297")):
    refused(f"--generate {opt} {bad} is refused", [ck, "--prompt-ids", ids, opt, bad], [opt, bad], H5, gen=True)
rc, out, err = run(["--generate", ck, "--prompt-ids", ids, "--max-new", "000000000000000000000003", "--seed",
                    "18446744073709551615", "--temperature", "1", "--top-k", "5"])
check(rc == 0 and len(out.split("|")[-1].split()) == 3, "--max-new 000...0003 generates 3 tokens; --seed 2^64-1 is accepted",
      f"rc {rc}: {out[-200:]} {last_line(err)}")

# filler-sweep files through ./train (the reader's own cases: tests/test_filler_sweep.c)
sweep = os.path.join(d, "sweep.ini")
open(sweep, "w").write("[sweep]\nprompt = 20 81 21 82 22 83 20\na = " + "0" * 300 + "184\nb = 82\nfiller = 208\nL0 = 0\nL1 = 7\n")
fs_h5 = os.path.join(d, "fs.h5")
rc, out, err = run(["--eval", ck, "--filler-sweep", sweep, "--out", fs_h5])
a_attr = None
if rc == 0:
    with h5py.File(fs_h5, "r") as f:
        a_attr = int(f[sorted(k for k in f if k.startswith("filler_sweep"))[-1]].attrs["a"])
check(rc == 0 and a_attr == 184, "--filler-sweep: a = 000...0184 (300 zeros) runs as a = 184", f"rc {rc}: a {a_attr} {last_line(err)}")
twice = os.path.join(d, "twice.ini")
open(twice, "w").write("[sweep]\nprompt = 20 81\na = 81\nb = 82\nfiller = 208\na = 83\nL0 = 0\nL1 = 7\n")
refused("--filler-sweep: a key given twice exits 2 naming both lines", [ck, "--filler-sweep", twice],
        ["twice.ini:6", "lines 3 and 6"], H5)
longp = os.path.join(d, "longp.ini")
open(longp, "w").write("[sweep]\nprompt = " + " ".join(["208"] * 158) + "\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 3\n")
refused("--filler-sweep: a prompt longer than T - 4 exits 2 naming its length and T", [ck, "--filler-sweep", longp],
        ["longp.ini:2", "158 tokens", "T = 160"], H5)
if os.path.exists(QWEN):
    qtext = os.path.join(d, "qwen_sweep.ini")
    # single letters are Qwen ids 64.. < 256: the vocabulary fits, only the tokenizer differs
    open(qtext, "w").write(f"[sweep]\ntext = \"a\"\ntokenizer = {os.path.abspath(QWEN)}\na_text = \"c\"\nb_text = \"d\"\n"
                           "filler = 208\nL0 = 0\nL1 = 7\n")
    qsha = hashlib.sha256(open(QWEN, "rb").read()).hexdigest()
    refused("--filler-sweep: text through another tokenizer than the checkpoint's exits 2 naming both fingerprints",
            [ck, "--filler-sweep", qtext], ["qwen_sweep.ini:3", qsha, "synthetic", ck], H5)
    refused("--generate --tokenizer of another vocabulary exits 2 naming both fingerprints",
            [ck, "--prompt", "a", "--tokenizer", QWEN], ["--tokenizer", qsha, "synthetic"], H5, gen=True)
else:
    skip("tokenizer mismatch with a real tokenizer.json", f"{QWEN} not found")
refused("--generate --prompt on a synthetic checkpoint without --tokenizer exits 2 pointing to --prompt-ids",
        [ck, "--prompt", "ab"], ["--prompt-ids", "synthetic"], H5, gen=True)

# ---- 3. sizes from the config, not from constants
res_h5 = os.path.join(d, "res300.h5")
rc, out, err = run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "eval.residues=300", "train.seed=7", "--out", res_h5])
vr = over = None
if rc == 0:
    with h5py.File(res_h5, "r") as f:
        g = f[sorted(k for k in f if k.startswith("gate_cycle"))[-1]]
        vr = (list(g["val_residue"][()]), g["val_loss_by_residue"].shape)
        over = g.attrs.get("overrides")
check(over in ("eval.residues=300 train.seed=7", b"eval.residues=300 train.seed=7"),
      "--gate-cycle stores the command-line overrides it ran with (attribute overrides, tools/report's pooling key)",
      f"overrides {over!r}")
check(rc == 0 and vr and vr[0] == list(range(300)) and vr[1] == (1, 300),
      "--gate-cycle with eval.residues = 300: the validation axis is 0..299 (no read past 256 entries)",
      f"rc {rc}: {last_line(err)} {vr[1] if vr else ''}")

d640, data640 = os.path.join(d, "s320"), os.path.join(d, "data640")
tu.make_corpus(data640, seq_len=640, train_rows=16, val_rows=2)
rc, out, err = run([tu.TINY, "data.seq_len=640", "train.batch_tokens=1280", "train.micro_batch=2", f"data.train={data640}/train_*.bin",
                    f"data.val={data640}/val_*.bin", f"run.dir={d}", "run.name=s320", "train.steps=1", "eval.every=1000",
                    "eval.val_tokens=1280",
                    "checkpoint.every=1000", "model.window=320", "model.stride=320", "model.n_local=8"])
ck320 = os.path.join(d, "s320", "checkpoints", "step_00000001")
check(rc == 0 and os.path.isdir(ck320), "train a stride-320 model", (out + err)[-300:])
probe640 = make_probe(os.path.join(d, "probe640.bin"), "--per-residue", "1", "--max-len", "640", "--seed", "3")
calib640 = make_probe(os.path.join(d, "calib640.bin"), "--per-residue", "1", "--max-len", "640", "--seed", "4")
s320_h5 = os.path.join(d, "s320.h5")
rc, out, err = run(["--eval", ck320, "--probe", probe640, "--knockout", "1:1", "--calib", calib640, "--out", s320_h5])
shape = None
if rc == 0:
    with h5py.File(s320_h5, "r") as f:
        g = f[sorted(k for k in f if k.startswith("knockout"))[-1]]
        shape = (g["rel_change_phase"].shape, list(g["phase"][()][:3]) + [int(g["phase"][()][-1])])
        over = g.attrs.get("overrides")
check(over in ("", b""), "--knockout without overrides stores overrides = \"\"", f"overrides {over!r}")
check(rc == 0 and shape == ((2, 2, 2, 320), [0, 1, 2, 319]), "--knockout on a stride-320 model: phase axis of 320 (no stack overflow)",
      f"rc {rc}: {last_line(err)} {shape}")
rc, out, err = run(["--eval", ck320, "--probe", probe640, "data.val=", "--out", os.path.join(d, "s320_plain.h5")])
check(rc == 0 and "lookup probe" in out, "plain --eval on a stride-320 model stores its probe table", f"rc {rc}: {last_line(err)}")
refused("--gate-cycle on a stride-320 model with a 24-residue probe exits 2 (S must divide P)",
        [ck320, "--probe", probe640, "--gate-cycle", "1"], ["24 residues", "320"], os.path.join(ck320, "analysis.h5"))

ckdeep = train("deep", tu.TINY, 1, ["model.n_layers=300", "model.d_model=8", "model.n_heads=2", "model.n_kv_heads=1",
                                    "model.head_dim=4", "model.d_ff=8", "train.micro_batch=4"])
deep_h5 = os.path.join(d, "deep.h5")
rc, out, err = run(["--eval", ckdeep, "--probe", probe, "--knockout", "299:0", "--calib", calib, "--out", deep_h5, "data.val="])
rc2, out2, err2 = run(["--eval", ckdeep, "--probe", probe, "--gate-cycle", "1", "--layers", "299,0", "--out", deep_h5, "data.val="])
shape = None
if rc == 0 and rc2 == 0:
    with h5py.File(deep_h5, "r") as f:
        g = f[sorted(k for k in f if k.startswith("knockout"))[-1]]
        shape = (g["acc"].shape, int(g["layer"][()][-1]), bool(np.isfinite(g["acc"][299, 0]).all()),
                 bool(np.isnan(g["acc"][298, 0]).all()))
check(shape == ((300, 1, 2, 24), 299, True, False) or shape == ((300, 1, 2, 24), 299, True, True),
      "300 layers: --knockout 299:0 fills layer 299 of a [300, 1, 2, 24] map; --gate-cycle --layers 299 runs",
      f"rc {rc}/{rc2}: {last_line(err)} {last_line(err2)} {shape}")

# ---- 4. relative data.val from another directory (one resolution for --eval and every analysis)
home, elsewhere = os.path.join(d, "home"), os.path.join(d, "elsewhere")
os.makedirs(elsewhere)
tu.make_corpus(os.path.join(home, "data"), seq_len=160, train_rows=40, val_rows=4)
rc, out, err = run([tu.TINY, "data.seq_len=160", "train.batch_tokens=640", "data.train=data/train_*.bin", "data.val=data/val_*.bin",
                    "run.dir=runs", "run.name=rel", "train.steps=1", "eval.every=1000", "checkpoint.every=1000"], cwd=home)
ckrel = os.path.join(home, "runs", "rel", "checkpoints", "step_00000001")
check(rc == 0, "a run with relative data globs", (out + err)[-300:])
rel_h5 = os.path.join(d, "rel.h5")
rc, out, err = run(["--eval", ckrel, "--probe", probe, "--gate-cycle", "1", "--out", rel_h5], cwd=elsewhere)
has_val = False
if rc == 0:
    with h5py.File(rel_h5, "r") as f:
        has_val = "val_loss" in f[sorted(f.keys())[-1]]
check(rc == 0 and "relative to the run's directory" in out and "validation loss" in out and has_val,
      "--gate-cycle from another directory resolves the relative data.val and stores the validation loss",
      f"rc {rc}: {last_line(err)} {out[-300:]}")
refused("--gate-cycle: a data.val override matching nothing exits 2 (no silent skip)",
        [ckrel, "--probe", probe, "--gate-cycle", "1", "data.val=nowhere/*.bin"], ["nowhere/*.bin", "data.val=GLOB"],
        os.path.join(ckrel, "analysis.h5"), cwd=elsewhere)

# ---- 5. weights only
def numbers(out):
    """The lines that carry results: validation losses and the probe table."""
    keep = []
    for l in out.splitlines():
        s = l.strip()
        if s.startswith(("validation loss", "r=")) or "|" in s or s.startswith(("pp:", "ip:", "pp ", "ip ")):
            keep.append(s)
    return keep


full_out = run(["--eval", ck, "--probe", probe, "--out", os.path.join(d, "full.h5")])[1]
wo = os.path.join(d, "weights_only")
shutil.copytree(ck, wo)
shutil.rmtree(os.path.join(wo, "optimizer"))
os.remove(os.path.join(wo, "state.json"))
if os.path.exists(os.path.join(wo, "analysis.h5")):
    os.remove(os.path.join(wo, "analysis.h5"))
rc, out, err = run(["--eval", wo, "--probe", probe])
check(rc == 0 and "weights-only checkpoint: no state.json" in out and numbers(out) == numbers(full_out) and len(numbers(out)) > 30,
      "--eval on a checkpoint without optimizer/ and state.json: says so in one line, same validation loss and probe table",
      f"rc {rc}: {last_line(err)}")

# what transformers' save_pretrained writes back: config.json (phaselab keys kept, its own added, the
# "phaselab" object complete), model.safetensors with another __metadata__ and tensors in name order
hf = os.path.join(d, "hf_saved")
os.makedirs(hf)
cfg = json.load(open(os.path.join(ck, "config.json")))
cfg.update({"transformers_version": "4.56.0", "torch_dtype": "float32", "_name_or_path": ck, "output_attentions": False,
            "return_dict": True, "bos_token_id": None, "tie_word_embeddings": cfg.get("tie_word_embeddings", True)})
cfg["phaselab"] = dict({"rope_dims": cfg["head_dim"], "grid": "aligned"}, **cfg["phaselab"])
json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=2, sort_keys=True)
buf = open(os.path.join(ck, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", buf[:8])[0]
header = json.loads(buf[8:8 + n])
body = buf[8 + n:]
names = sorted(k for k in header if k != "__metadata__")
new_header, chunks, at = {"__metadata__": {"format": "pt"}}, [], 0
for k in names:
    lo, hi = header[k]["data_offsets"]
    new_header[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"], "data_offsets": [at, at + hi - lo]}
    chunks.append(body[lo:hi])
    at += hi - lo
# config.json carries the model only: the run's own settings (CPU, one thread, micro-batch 4, 512 validation tokens as in
# tiny.ini) are given on the command line, so that the numbers can be compared exactly
HFRUN = ["run.device=cpu", "run.threads=1", "train.micro_batch=4", "eval.val_tokens=512"]
hj = json.dumps(new_header).encode()
hj += b" " * (-len(hj) % 8)
open(os.path.join(hf, "model.safetensors"), "wb").write(struct.pack("<Q", len(hj)) + hj + b"".join(chunks))
rc, out, err = run(["--eval", hf, "--probe", probe, f"data.val={data}/val_*.bin"] + HFRUN)
check(rc == 0 and "weights-only checkpoint" in out and numbers(out) == numbers(full_out),
      "--eval on config.json + model.safetensors as save_pretrained writes them: same numbers as the checkpoint",
      f"rc {rc}: {last_line(err)}")
check(not os.path.exists(os.path.join(hf, "config.ini")), "the save_pretrained directory has no config.ini (read from config.json)", "")

for name, args in (("--gate-cycle 1", ["--gate-cycle", "1"]), ("--knockout 0:1", ["--knockout", "0:1", "--calib", calib])):
    kind = "gate_cycle" if "gate" in name else "knockout"
    got = []
    for src in (ck, wo, hf):
        h5 = os.path.join(d, f"wo_{kind}_{os.path.basename(src)}.h5")
        rc, out, err = run(["--eval", src, "--probe", probe, "--out", h5, f"data.val={data}/val_*.bin"] + args + (HFRUN if src == hf else []))
        if rc != 0:
            got.append(f"rc {rc}: {last_line(err)}")
            continue
        with h5py.File(h5, "r") as f:
            g = f[sorted(k for k in f if k.startswith(kind))[-1]]
            got.append([np.asarray(g["acc"][()]), np.asarray(g["val_loss"][()] if "val_loss" in g else [])])
    same = lambda a, b: not isinstance(a, str) and not isinstance(b, str) and all(
        x.shape == y.shape and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))
    check(same(got[0], got[1]) and same(got[0], got[2]) and got[0][0].size > 0,
          f"{name} on the weights-only and the save_pretrained directory equals the checkpoint's", str(got)[:400])
fs = []
for src in (ck, wo, hf):
    rc, out, err = run(["--eval", src, "--filler-sweep", sweep, "--out", os.path.join(d, f"fs_{os.path.basename(src)}.h5")]
                       + (HFRUN if src == hf else []))
    fs.append([l for l in out.splitlines() if l[:5].strip().isdigit()] if rc == 0 else f"rc {rc}: {last_line(err)}")
check(isinstance(fs[0], list) and len(fs[0]) == 8 and fs[1] == fs[0] and fs[2] == fs[0],
      "--filler-sweep on the weights-only directories equals the checkpoint's", str(fs)[:300])
dec = [run(["--eval", src, "--probe", probe, "--decode", "data.val=", "--out", os.path.join(d, "dec.h5")] + (HFRUN if src == hf else []))
       for src in (ck, hf)]
check(all(r[0] == 0 for r in dec) and numbers(dec[0][1]) == numbers(dec[1][1]),
      "--eval --decode on the save_pretrained directory equals the checkpoint's", f"{[r[0] for r in dec]} {last_line(dec[1][2])}")
gens = [run(["--generate", src, "--prompt-ids", ids, "--max-new", "8"] + (HFRUN if src == hf else [])) for src in (ck, wo, hf)]
check(all(g[0] == 0 for g in gens) and gens[1][1] == gens[0][1] and gens[2][1] == gens[0][1],
      "--generate on the weights-only directories gives the checkpoint's tokens", str([(g[0], g[1][-60:]) for g in gens]))

# where the checkpoint's tokenizer fingerprint comes from when config.json lacks the key: the words
# of phaselab_vocabulary (checkpoints written before it), else the first training shard's header
old = os.path.join(d, "wo_oldjson")
shutil.copytree(wo, old)
c1 = json.load(open(os.path.join(old, "config.json")))
c1.pop("phaselab_tokenizer_fingerprint", None)
json.dump(c1, open(os.path.join(old, "config.json"), "w"))
refused("a config.json without phaselab_tokenizer_fingerprint: 'synthetic' read from phaselab_vocabulary",
        [old, "--probe", probe_other], [OTHER, "'synthetic'", "config.json"], os.path.join(old, "analysis.h5"))
os.remove(os.path.join(old, "config.json"))
refused("no config.json at all: the fingerprint of the training shards (data.train of config.ini)",
        [old, "--probe", probe_other], [OTHER, "'synthetic'", "train_000.bin"], os.path.join(old, "analysis.h5"))

# config.json without phaselab_seq_len: needs data.seq_len=T
noseq = os.path.join(d, "hf_noseq")
shutil.copytree(hf, noseq)
c2 = json.load(open(os.path.join(noseq, "config.json")))
del c2["phaselab_seq_len"]
json.dump(c2, open(os.path.join(noseq, "config.json"), "w"))
refused("config.json without phaselab_seq_len exits 2 asking for data.seq_len=T", [noseq, "--probe", probe],
        ["phaselab_seq_len", "data.seq_len=T"], os.path.join(noseq, "analysis.h5"))
rc, out, err = run(["--eval", noseq, "--probe", probe, "data.seq_len=160"] + HFRUN)
check(rc == 0 and numbers(out) == [l for l in numbers(full_out) if not l.startswith(("validation loss", "r="))],
      "... and runs with data.seq_len=160", f"rc {rc}: {last_line(err)}")

# --prompt: the directory's own tokenizer by default ("bytes" says config.json here)
bytes_dir = os.path.join(d, "hf_bytes")
shutil.copytree(hf, bytes_dir)
c3 = json.load(open(os.path.join(bytes_dir, "config.json")))
c3["phaselab_tokenizer_fingerprint"] = "bytes"
json.dump(c3, open(os.path.join(bytes_dir, "config.json"), "w"))
rc, out, err = run(["--generate", bytes_dir, "--prompt", "key", "--max-new", "4"])
check(rc == 0 and out.startswith("key") and "tokenizer: bytes (the checkpoint's own)" in err,
      "--generate --prompt without --tokenizer uses the checkpoint's own tokenizer", f"rc {rc}: {out[:80]} {last_line(err)}")
if os.path.exists(QWEN):
    shutil.copy(QWEN, os.path.join(bytes_dir, "tokenizer.json"))
    c3["phaselab_tokenizer_fingerprint"] = hashlib.sha256(open(QWEN, "rb").read()).hexdigest()
    json.dump(c3, open(os.path.join(bytes_dir, "config.json"), "w"))
    rc, out, err = run(["--generate", bytes_dir, "--prompt", "a", "--max-new", "2"])
    check(rc == 0 and out.startswith("a") and "tokenizer.json (the checkpoint's own)" in err,
          "--generate --prompt uses the directory's tokenizer.json by default", f"rc {rc}: {out[:80]} {last_line(err)}")
    refused("--generate --tokenizer bytes on a checkpoint of another tokenizer exits 2", [bytes_dir, "--prompt", "ab", "--tokenizer", "bytes"],
            ["bytes", c3["phaselab_tokenizer_fingerprint"]], os.path.join(bytes_dir, "analysis.h5"), gen=True)

# damaged weights are still refused; resume still needs the optimizer state
bad = os.path.join(d, "wo_truncated")
shutil.copytree(wo, bad)
st = os.path.join(bad, "model.safetensors")
with open(st, "r+b") as f:
    f.truncate(os.path.getsize(st) - 64)
rc, out, err = run(["--eval", bad, "--probe", probe])
check(rc == 1 and "model.safetensors" in last_line(err), "a truncated weights-only model.safetensors is refused (exit 1, file named)",
      f"rc {rc}: {last_line(err)}")
opt_less = os.path.join(d, "w4s4_noopt")
shutil.copytree(os.path.join(d, "w4s4"), opt_less)
shutil.rmtree(os.path.join(opt_less, "checkpoints", "step_00000002", "optimizer"))
rc, out, err = run(["--eval", os.path.join(opt_less, "checkpoints", "step_00000002"), "--probe", probe])
check(rc == 0 and "weights-only" not in out and numbers(out) == numbers(full_out),
      "--eval on a checkpoint without optimizer/ (state.json kept and verified): same numbers", f"rc {rc}: {last_line(err)}")
rc, out, err = run([tu.TINY] + common + ["run.name=w4s4_noopt", "train.steps=2"])
check(rc == 1 and "optimizer/rank_00000.bin" in (out + err) and "corrupt" in (out + err),
      "resume still refuses a checkpoint without its optimizer state (exit 1, file named)", f"rc {rc}: {(out + err)[-300:]}")
tampered = os.path.join(d, "w4s4_tampered")
shutil.copytree(ck, tampered)
with open(os.path.join(tampered, "model.safetensors"), "r+b") as f:
    f.seek(-4, 2)
    f.write(b"\x00\x00\xc0\x7f")
rc, out, err = run(["--eval", tampered, "--probe", probe])
check(rc == 1 and "sha256" in last_line(err) and "model.safetensors" in last_line(err),
      "--eval still refuses a checkpoint whose weights differ from state.json's checksum", f"rc {rc}: {last_line(err)}")

# ---- a probe at chance says so
check("not retrieving: mean accuracy" in full_out and "includes chance 1/64" in full_out
      and "homogeneity not rejected" not in full_out, "a probe at chance says 'not retrieving ... includes chance 1/64'",
      "\n".join(l for l in full_out.splitlines() if "phase-effect" in l))
finish()
