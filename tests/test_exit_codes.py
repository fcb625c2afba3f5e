"""Exit codes as the README says (issue 37, item 7): 2 for bad input (the command line, the config or
a file it names), 1 for a runtime failure, never 0 when nothing was done. One table of
representative bad inputs: each must end with its exact exit status and one error line
("phaselab: ...") naming the file at fault. Every case of a training run is also given to
./train --dry-run, which must give the same status and the same line (one set of start-up checks),
and write nothing. Scratch: build/scratch/test_exit_codes/."""
import fcntl
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

tu.require_train()
TOKENIZE = os.path.join(tu.ROOT, "tokenize")
MAKE_PROBE = os.path.join(tu.ROOT, "tools", "make-probe")

d, data = tu.scratch_with_corpus("test_exit_codes")
runs = f"{d}/runs"
raw = open(f"{data}/train_000.bin", "rb").read()


def put(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    return path


def patched(src, offset, content):
    b = bytearray(open(src, "rb").read())
    b[offset:offset + len(content)] = content
    return bytes(b)


def err_line(out):
    lines = [l for l in out.splitlines() if l.startswith("phaselab:") and "warning" not in l]
    return lines[-1] if lines else ""


# ---- the bad inputs
put(f"{d}/unk.ini", "[model]\nwidth = 3\n")
put(f"{d}/bad.ini", "[model]\nd_model = banana\n")
put(f"{d}/bad/magic.bin", b"XXXXXXXX" + raw[8:])
put(f"{d}/bad/trunc.bin", raw[:len(raw) - 6])
put(f"{d}/bytesval/val_000.bin", patched(f"{data}/val_000.bin", 32, b"bytes".ljust(64, b"\0")))
put(f"{d}/sha/train_000.bin", patched(f"{data}/train_000.bin", 32, b"ab" * 32))   # a tokenizer.json nowhere
put(f"{d}/afile", "x")
have_probe = os.access(MAKE_PROBE, os.X_OK)
if have_probe:
    for name, extra in (("p24", []), ("p8", ["--residues", "8"])):   # prompts of 256 tokens
        subprocess.run([sys.executable, MAKE_PROBE, "--synthetic", "--out", f"{d}/{name}.bin", "--per-residue", "4",
                        "--quiet"] + extra, check=True, capture_output=True)
    put(f"{d}/pfp.bin", patched(f"{d}/p24.bin", 40, b"bytes".ljust(64, b"\0")))
    p24 = open(f"{d}/p24.bin", "rb").read()
    put(f"{d}/pcut.bin", p24[:len(p24) - 10])

DATA = [f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin"]
SEQ256 = ["data.seq_len=256", "train.batch_tokens=1024"]   # the probe's prompts are 256 tokens


def run_args(name, *extra, data_args=None):
    return [tu.TINY] + (DATA if data_args is None else data_args) + [f"run.dir={runs}", f"run.name={name}"] + list(extra)


# a finished run to resume, and a copy of it with a damaged newest checkpoint
rc, out = tu.run(run_args("done", "train.steps=5", "checkpoint.every=5", "eval.every=0"))
check(rc == 0, "a tiny run to resume", out[-300:])
shutil.copytree(f"{runs}/done", f"{runs}/damaged")
os.remove(f"{runs}/damaged/lock")
with open(f"{runs}/damaged/checkpoints/step_00000005/model.safetensors", "r+b") as f:
    f.seek(-20, os.SEEK_END)
    f.write(b"\xff" * 8)

# (name, ./train arguments, exit status, text the error line must hold, also --dry-run)
CASES = [
    ("missing config", [f"{d}/nope.ini"], 2, ["nope.ini"], True),
    ("unknown key", [f"{d}/unk.ini"], 2, ["unk.ini:2", "width"], True),
    ("bad value", [f"{d}/bad.ini"], 2, ["bad.ini:2", "d_model"], True),
    ("bad override", run_args("o", "train.steps=many"), 2, ["train.steps"], True),
    ("no training data", run_args("n", data_args=[]), 2, ["tiny.ini", "[data] train"], True),
    ("training glob matches nothing", run_args("g", data_args=[f"data.train={d}/none_*.bin"]), 2,
     ["tiny.ini: data.train = ", "none_*.bin", "no file matches"], True),
    ("stage glob matches nothing", run_args("s", f"data.stages=3:{d}/later_*.bin"), 2, ["tiny.ini", "later_*.bin"], True),
    ("validation glob matches nothing", run_args("v", data_args=[DATA[0], f"data.val={d}/nov_*.bin"]), 2,
     ["tiny.ini: data.val = ", "nov_*.bin", "val_*.bin only with --val-tokens N"], True),
    ("damaged shard (magic)", run_args("m", data_args=[f"data.train={d}/bad/magic.bin"]), 2, ["magic.bin", "PHLTOKv1"],
     True),
    ("truncated shard", run_args("t", data_args=[f"data.train={d}/bad/trunc.bin"]), 2, ["trunc.bin", "truncated"], True),
    ("model.vocab_size below the shards' vocabulary", run_args("vo", "model.vocab_size=200"), 2,
     ["train_000.bin@16", "200", "256"], True),
    ("validation shards of another tokenizer", run_args("vt", data_args=[DATA[0], f"data.val={d}/bytesval/val_*.bin"]),
     2, ["bytesval", "bytes", "synthetic"], True),
    ("shard tokenizer.json missing", run_args("tj", data_args=[f"data.train={d}/sha/train_*.bin"]), 2,
     ["sha/train_000.bin", "data.tokenizer="], True),
    # a tokenizer.json other than the shards' (the untrimmed one for trimmed shards): its own sha256 is
    # named (it said "cannot be read or its sha256 is not ...")
    ("data.tokenizer of another file", run_args("tw", data_args=[f"data.train={d}/sha/train_*.bin",
                                                                f"data.tokenizer={d}/afile"]), 2,
     ["afile: [data] tokenizer: its sha256 is 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881, not abab"],
     True),
    ("probe file missing", run_args("pm", f"eval.probe={d}/nope.probe"), 2, ["tiny.ini: eval.probe = ", "nope.probe"], True),
    ("run directory under a regular file", run_args("x")[:-2] + [f"run.dir={d}/afile", "run.name=x"], 2,
     ["afile/x", "Not a directory"], True),
    ("resume with another train.steps", run_args("done", "train.steps=8", "eval.every=0"), 2,
     ["step_00000005", "train.resume_schedule=keep", "train.resume_schedule=stretch"], True),
    ("resume with train.steps below the checkpoint", run_args("done", "train.steps=3", "train.resume_schedule=keep"), 2,
     ["step_00000005", "below its step 5"], True),
    ("resume with another model", run_args("done", "model.d_model=48"), 2, ["step_00000005", "[model]"], True),
    ("damaged checkpoint (runtime)", run_args("damaged", "train.steps=8", "train.resume_schedule=stretch"), 1,
     ["damaged/checkpoints/step_00000005/model.safetensors", "sha256"], True),
]
if have_probe:
    CASES += [
        ("probe of another tokenizer", run_args("pt", *SEQ256, f"eval.probe={d}/pfp.bin"), 2,
         ["pfp.bin", "bytes", "synthetic"], True),
        ("probe residues != eval.residues", run_args("pr", *SEQ256, f"eval.probe={d}/p8.bin"), 2,
         ["p8.bin", "8 residues", "eval.residues = 24"], True),
        ("probe prompts longer than seq_len", run_args("pl", f"eval.probe={d}/p24.bin"), 2, ["p24.bin", "64"], True),
        ("damaged probe", run_args("pc", *SEQ256, f"eval.probe={d}/pcut.bin"), 2, ["pcut.bin"], True),
    ]
else:
    skip("probe cases", "tools/make-probe not executable")

def tree(top):
    return sorted(os.path.join(r, n) for r, ds, ns in os.walk(top) for n in ds + ns)


for name, args, want, needles, dry in CASES:
    if dry:   # first, so that it meets what the run meets; it must write nothing
        before = tree(runs)
        rcd, outd = tu.run(["--dry-run"] + args, timeout=120)
        lined = err_line(outd)
        check(tree(runs) == before, f"--dry-run writes nothing: {name}", str(set(tree(runs)) ^ set(before)))
    rc, out = tu.run(args, timeout=120)
    line = err_line(out)
    check(rc == want and all(n in line for n in needles), f"exit {want}: {name}",
          f"exit {rc}, line '{line}' (expected {needles})")
    if dry:
        check(rcd == want and lined == line, f"--dry-run gives the run's exit {want} and line: {name}",
              f"exit {rcd}, line '{lined}' vs the run's '{line}'")

# the run directory in use by another ./train (its lock held)
os.makedirs(f"{runs}/busy", exist_ok=True)
with open(f"{runs}/busy/lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    lock.write("4242\n")
    lock.flush()
    rc, out = tu.run(run_args("busy"))
    rcd, outd = tu.run(["--dry-run"] + run_args("busy"))
check(rc == 2 and "busy/lock" in err_line(out) and "4242" in err_line(out), "exit 2: the run directory is in use",
      err_line(out))
check(rcd == 2 and err_line(outd) == err_line(out), "--dry-run gives the run's exit 2 and line: run directory in use",
      err_line(outd))

# usage
for name, args in (("no arguments", []), ("--dry-run without a config", ["--dry-run"]), ("unknown option", ["--bogus"])):
    rc, out = tu.run(args)
    check(rc == 2 and ("usage" in out.lower() or "unknown option" in out), f"exit 2: {name}", f"exit {rc}: {out[-200:]}")

# a valid config passes with a wall-time estimate, writing nothing
rc, out = tu.run(["--dry-run"] + run_args("fresh", "train.steps=40", "eval.every=20"))
check(rc == 0 and "wall-time estimate" in out and "evaluation: 2 evaluations" in out and
      not os.path.exists(f"{runs}/fresh"), "--dry-run of a valid config: exit 0, an estimate, nothing written",
      f"exit {rc}: {out[-500:]}")

# nothing was done is never a success: --eval with nothing to evaluate
rc, out = tu.run(["--eval", f"{runs}/done/checkpoints/step_00000005", "data.val="])
check(rc == 2 and "nothing to evaluate" in out and "config.ini" in err_line(out), "exit 2: --eval with nothing to evaluate",
      f"exit {rc}: {err_line(out)}")

# ./tokenize: nothing tokenized, --out a file, --out's parents created
if not os.access(TOKENIZE, os.X_OK):
    skip("./tokenize cases", "./tokenize not built")
else:
    def tokenize(*args):
        p = subprocess.run([TOKENIZE, "--tokenizer", "bytes", "--quiet"] + list(args), capture_output=True, text=True,
                           timeout=120)
        return p.returncode, p.stdout + p.stderr

    put(f"{d}/txt/empty.txt", "")
    put(f"{d}/txt/blank.txt", "\n\n  \n")
    rc, out = tokenize("--input", f"{d}/txt/*.txt", "--out", f"{d}/tok_empty")
    check(rc == 2 and "nothing tokenized" in err_line(out) and "2 input file(s)" in err_line(out)
          and not os.path.exists(f"{d}/tok_empty"), "./tokenize of empty inputs: exit 2 'nothing tokenized', no --out left",
          f"exit {rc}: {out[-300:]}")
    put(f"{d}/jl/bad.jsonl", '{"text": 3}\nnot json\n{"other": "x"}\n')
    rc, out = tokenize("--input", f"{d}/jl/bad.jsonl", "--out", f"{d}/tok_bad")
    check(rc == 2 and "nothing tokenized" in err_line(out) and "3 bad line(s)" in err_line(out) and "bad.jsonl:1" in out,
          "./tokenize with every line bad: exit 2 naming the first bad line", f"exit {rc}: {out[-300:]}")
    put(f"{d}/txt2/doc.txt", "one document\n")
    rc, out = tokenize("--input", f"{d}/txt2/doc.txt", "--out", f"{d}/afile")
    check(rc == 2 and f"{d}/afile" in err_line(out) and "not a directory" in err_line(out),
          "./tokenize --out naming a regular file: exit 2", f"exit {rc}: {out[-300:]}")
    rc, out = tokenize("--input", f"{d}/txt2/doc.txt", "--out", f"{d}/deep/er/corpus")
    check(rc == 0 and os.path.exists(f"{d}/deep/er/corpus/train_000000.bin"),
          "./tokenize creates the parents of --out", f"exit {rc}: {out[-300:]}")
    rc, out = tokenize("--input", f"{d}/none/*.txt", "--out", f"{d}/tok_none")
    check(rc == 2 and "none/*.txt" in err_line(out), "./tokenize with an input glob matching nothing: exit 2",
          f"exit {rc}: {out[-300:]}")
finish()
