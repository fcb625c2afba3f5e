"""Strict input handling of ./tokenize (issue 19): every bad input ends with exit 1 or 2 and one
line naming the file (and key, line or offset), never a crash, a hang, or exit 0 with wrong
output. Covered: --threads/--vocab-size overflow, a tokenizer.json regex full of \\s, a token id
near 2^31, gzip that is not gzip / has a flipped magic byte / trailing bytes, empty .gz and
.zst, --max-doc-bytes for short JSONL lines, and a tokenize-state.json whose fields do not match
the shards and inputs it describes."""
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, skip, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
TOKENIZE = "./tokenize"
SCRATCH = "build/scratch/tokenize_strict"
QWEN = "../shared/data/qwen3-tokenizer/tokenizer.json"


def run(args, env=None, timeout=120):
    e = dict(os.environ)
    if env:
        e.update(env)
    try:
        p = subprocess.run([TOKENIZE] + args, capture_output=True, text=True, env=e, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", "timed out"
    return p.returncode, p.stdout, p.stderr


def last_line(se):
    lines = [l for l in se.splitlines() if l.startswith("phaselab:")]
    return lines[-1] if lines else se[-300:]


def fails_cleanly(rc, se, needle, name, codes=(1, 2)):
    line = last_line(se)
    return check(rc in codes and needle in line, name, f"exit {rc}: {line}")


if not os.access(TOKENIZE, os.X_OK):
    check(False, "./tokenize exists", "build it with make tokenize")
    finish()
shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
S = SCRATCH
docs = [json.dumps({"text": f"document {i} " + "abc " * (i % 13)}) for i in range(300)]
open(f"{S}/a.jsonl", "w").write("\n".join(docs) + "\n")

# --- command line numbers
rc, _, se = run(["--tokenizer", "bytes", "--input", f"{S}/a.jsonl", "--out", f"{S}/t1", "--threads", "4294967296"],
                timeout=30)
fails_cleanly(rc, se, "--threads", "--threads 4294967296: usage error, not 0 workers and a hang", codes=(2,))
rc, _, se = run(["--tokenizer", "bytes", "--input", f"{S}/a.jsonl", "--out", f"{S}/t1", "--vocab-size", "4294967552"])
fails_cleanly(rc, se, "--vocab-size", "--vocab-size past 2^32: usage error", codes=(2,))

# --- tokenizer.json
if os.path.exists(QWEN):
    tj = json.load(open(QWEN))
    many = json.loads(json.dumps(tj))
    # the rewrite of \S to [^White_Space] grows 2 bytes to 99: a pattern of escapes only is the
    # worst case (it overflowed the n * 48 + 1 buffer; ASan shows it for a single escape)
    many["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s\\S" * 4
    open(f"{S}/many_s.json", "w").write(json.dumps(many))
    rc, so, se = run(["--tokenizer", f"{S}/many_s.json", "--input", f"{S}/a.jsonl", "--out", f"{S}/t2", "--quiet"])
    check(rc == 0,
          "a pre-tokenizer regex of \\s/\\S escapes loads (no heap overflow)", f"exit {rc}: {se[-300:]}")
    huge = json.loads(json.dumps(tj))
    huge["added_tokens"].append({"id": 2147483000, "content": "<|huge|>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    open(f"{S}/huge_id.json", "w").write(json.dumps(huge))
    rc, so, se = run(["--tokenizer", f"{S}/huge_id.json", "--input", f"{S}/a.jsonl", "--out", f"{S}/t3", "--quiet"])
    fails_cleanly(rc, se, "huge_id.json", "a token id near 2^31 is an error naming tokenizer.json", codes=(2,))
    # two added tokens with one id: decoding could not give back what was encoded (fuzz_tokenizer_json)
    dup = json.loads(json.dumps(tj))
    dup["added_tokens"][1]["id"] = dup["added_tokens"][0]["id"]
    open(f"{S}/dup_id.json", "w").write(json.dumps(dup))
    rc, so, se = run(["--tokenizer", f"{S}/dup_id.json", "--input", f"{S}/a.jsonl", "--out", f"{S}/t4", "--quiet"])
    fails_cleanly(rc, se, "dup_id.json", "two added tokens with one id is an error naming tokenizer.json", codes=(2,))
else:
    skip("tokenizer.json cases", f"{QWEN} not present")

# --- gzip read strictly, empty compressed files
plain = ("\n".join(docs[:50]) + "\n").encode()
cases = {
    "not_gzip.jsonl.gz": plain,
    "flipped_magic.jsonl.gz": bytes([0x1f, 0x8b ^ 0x01]) + gzip.compress(plain)[2:],
    "trailing.jsonl.gz": gzip.compress(plain) + b"garbage after the member",
    "empty.jsonl.gz": b"",
}
for name, data in cases.items():
    open(f"{S}/{name}", "wb").write(data)
    rc, so, se = run(["--tokenizer", "bytes", "--input", f"{S}/{name}", "--out", f"{S}/gz_{name}", "--quiet"])
    fails_cleanly(rc, se, name, f"{name}: rejected, naming the file")
open(f"{S}/two_members.jsonl.gz", "wb").write(gzip.compress(plain) + gzip.compress(plain))
rc, so, se = run(["--tokenizer", "bytes", "--input", f"{S}/two_members.jsonl.gz", "--out", f"{S}/gz_two"])
check(rc == 0 and "documents       100" in so, "two concatenated gzip members are read whole", f"{rc} {so[-300:]} {se[-200:]}")
open(f"{S}/empty.txt.zst", "wb").write(b"")
rc, so, se = run(["--tokenizer", "bytes", "--input", f"{S}/empty.txt.zst", "--out", f"{S}/zst_empty", "--quiet"])
fails_cleanly(rc, se, "empty.txt.zst", "empty .zst: rejected, naming the file")

# --- --max-doc-bytes holds for lines shorter than the read buffer
long_line = json.dumps({"text": "x" * 10000})
open(f"{S}/long.jsonl", "w").write(docs[0] + "\n" + long_line + "\n" + docs[1] + "\n")
rc, so, se = run(["--tokenizer", "bytes", "--input", f"{S}/long.jsonl", "--out", f"{S}/maxdoc", "--max-doc-bytes", "4096"])
check(rc == 0 and "documents       2" in so and "long.jsonl:2" in so, "a 10 kB line over --max-doc-bytes 4096 is a bad line",
      so[-400:] + se[-200:])

# --- tokenize-state.json is validated against the shards and inputs it describes
base_args = ["--tokenizer", "bytes", "--input", f"{S}/a.jsonl", "--shard-tokens", "1024", "--val-tokens", "2000",
             "--threads", "1", "--quiet"]
rc, _, _ = run(base_args + ["--out", f"{S}/ref"])
ref = {n: open(f"{S}/ref/{n}", "rb").read() for n in sorted(os.listdir(f"{S}/ref")) if n.endswith(".bin")}
check(rc == 0 and len(ref) > 4, "reference tokenization", f"exit {rc}")


def killed_state(name, kill_after=4):
    out = f"{S}/{name}"
    run(base_args + ["--out", out], env={"PHASELAB_TOKENIZE_KILL_AFTER_SHARDS": str(kill_after)})
    return out, json.load(open(f"{out}/tokenize-state.json"))


out, st = killed_state("resume_ok")
rc, so, se = run(base_args + ["--out", out])
got = {n: open(f"{out}/{n}", "rb").read() for n in sorted(os.listdir(out)) if n.endswith(".bin")}
check(rc == 0 and got == ref, "an unedited state resumes to identical shards", f"exit {rc} {se[-200:]}")

edits = [
    ("split 5", lambda s: s["resume"].update(split=5), "split"),
    ("split -1", lambda s: s["resume"].update(split=-1), "split"),
    ("file index past the inputs", lambda s: s["resume"].update(file=7), "file"),
    ("huge offset", lambda s: s["resume"].update(offset=1e30), "offset"),
    ("offset inside a line", lambda s: s["resume"].update(offset=s["resume"]["offset"] + 3), "a.jsonl@"),
    ("offset of another line", lambda s: s["resume"].update(offset=s["resume"]["offset"] + len(docs[0]) + 1), "a.jsonl@"),
    ("huge skip_tokens", lambda s: s["resume"].update(skip_tokens=1e15), "skip_tokens"),
    ("skip_tokens past the document", lambda s: s["resume"].update(skip_tokens=s["train"]["tokens"]), "skip_tokens"),
    ("tokens disagree with the shards", lambda s: s["train"].update(tokens=s["train"]["tokens"] + 5), "train.tokens"),
    ("fractional counter", lambda s: s["stats"].update(documents=1.5), "documents"),
    ("missing counter", lambda s: s["resume"].pop("line"), "line"),
]
for name, edit, needle in edits:
    out, st = killed_state("st_" + name.replace(" ", "_"))
    edit(st)
    open(f"{out}/tokenize-state.json", "w").write(json.dumps(st))
    before = {n: open(f"{out}/{n}", "rb").read() for n in os.listdir(out) if n.endswith(".bin")}
    rc, so, se = run(base_args + ["--out", out])
    line = last_line(se)
    after = {n: open(f"{out}/{n}", "rb").read() for n in os.listdir(out) if n.endswith(".bin")}
    check(rc in (1, 2) and needle in line and ("tokenize-state.json" in line or "a.jsonl" in line) and
          all(after.get(n) == b for n, b in before.items()),
          f"state with {name}: refused naming the file and field, shards kept", f"exit {rc}: {line}")
finish()
