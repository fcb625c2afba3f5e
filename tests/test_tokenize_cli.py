"""Integration tests of ./tokenize (cli/tokenize_main.c and data/tokenize_pipeline.c).

Expected token streams are computed here, independently of the C code:
  - byte tokenizer: the UTF-8 bytes of each document (Python's decode(errors="replace") for
    invalid UTF-8), end-of-text 256 after each document;
  - Qwen3 BPE: the reference ids of ../shared/data/qwen3-tokenizer/golden.jsonl (HuggingFace
    tokenizers), end-of-text 151643 after each non-empty document.
Checked: shard headers, the exact concatenation of val + train shards, the val rule (whole
documents until --val-tokens is reached), shard sizes, independence of --threads,
resumption after a SIGKILL (byte-identical shards), the malformed-input report, .gz/.zst
input, long .txt documents tokenized in pieces, and usage errors."""
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, skip, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
TOKENIZE = "./tokenize"
SCRATCH = "build/scratch/tokenize_cli"
QWEN = "../shared/data/qwen3-tokenizer/"


def run(args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([TOKENIZE] + args, capture_output=True, text=True, env=e)
    return p.returncode, p.stdout, p.stderr


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    hdr = data[:1024]
    info = {
        "magic": hdr[:8],
        "header": int.from_bytes(hdr[8:12], "little"),
        "bpt": int.from_bytes(hdr[12:16], "little"),
        "vocab": int.from_bytes(hdr[16:20], "little"),
        "eot": int.from_bytes(hdr[20:24], "little"),
        "n": int.from_bytes(hdr[24:32], "little"),
        "fp": hdr[32:96].rstrip(b"\0").decode(),
    }
    tokens = np.frombuffer(data[1024:], dtype="<u4")
    return info, tokens


def shards(out, split):
    names = sorted(n for n in os.listdir(out) if n.startswith(split + "_") and n.endswith(".bin"))
    return [os.path.join(out, n) for n in names]


def stream(out, split):
    parts = [read_shard(p)[1] for p in shards(out, split)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype="<u4")


def same_files(a, b):
    na = sorted(n for n in os.listdir(a) if n.endswith(".bin"))
    nb = sorted(n for n in os.listdir(b) if n.endswith(".bin"))
    if na != nb:
        return False, f"{len(na)} vs {len(nb)} shards"
    for n in na:
        if open(os.path.join(a, n), "rb").read() != open(os.path.join(b, n), "rb").read():
            return False, f"{n} differs"
    return True, ""


def expected_split(docs, eot, val_tokens):
    """docs: list of id lists (non-empty). Returns (val, train) streams by the val rule."""
    val, train = [], []
    for d in docs:
        target = val if len(val) < val_tokens else train
        target.extend(d + [eot])
    return np.array(val, dtype=np.uint32), np.array(train, dtype=np.uint32)


def make_byte_corpus(d):
    """Writes a mixed corpus; returns the expected list of documents (bytes) in input order."""
    docs = []
    lines = []
    for i in range(400):
        text = f"document {i}: " + "the quick brown fox " * (i % 7) + "\u00e9\u4e2d\U0001F600" * (i % 3)
        lines.append(json.dumps({"id": i, "text": text}))
        docs.append(text.encode())
    lines.insert(50, "this is not json")                      # bad line 51
    lines.insert(80, json.dumps({"body": "no text field"}))   # bad line 81
    lines.insert(90, json.dumps({"text": 17}))                # bad line 91
    lines.insert(100, "")                                     # blank line: empty
    lines.insert(110, json.dumps({"text": ""}))               # empty document
    raw = ("\n".join(lines) + "\n").encode()
    # invalid UTF-8 inside a JSON string (line 201 after the insertions above)
    bad = b'{"text": "caf\xc3 au lait \xff\xfe end"}'
    raw_lines = raw.split(b"\n")
    raw_lines.insert(200, bad)
    docs_bad_index = 200 - 5 + 0  # 5 non-document lines precede line 201
    raw = b"\n".join(raw_lines)
    docs.insert(docs_bad_index, "caf\xc3 au lait \xff\xfe end".encode("latin-1").decode("utf-8", errors="replace").encode())
    with open(os.path.join(d, "a_part1.jsonl"), "wb") as f:
        f.write(raw)
    gz_docs = []
    with gzip.open(os.path.join(d, "b_part2.jsonl.gz"), "wt") as f:
        for i in range(150):
            t = f"gzip doc {i} " + "lorem ipsum " * (i % 5)
            f.write(json.dumps({"text": t}) + "\n")
            gz_docs.append(t.encode())
    docs += gz_docs
    txt = "first block line 1\nfirst block line 2\n\n \t\nsecond block\r\n\r\n\nthird block, no final newline"
    with open(os.path.join(d, "c_part3.txt"), "w", newline="") as f:
        f.write(txt)
    docs += [b"first block line 1\nfirst block line 2", b"second block", b"third block, no final newline"]
    zst_ok = shutil.which("zstd") is not None
    if zst_ok:
        with open(os.path.join(d, "d_part4.txt"), "w") as f:
            f.write("zstd block one\n\nzstd block two\n")
        subprocess.run(["zstd", "-q", "--rm", os.path.join(d, "d_part4.txt"), "-o", os.path.join(d, "d_part4.txt.zst")], check=True)
        docs += [b"zstd block one", b"zstd block two"]
    return docs


def test_bytes(base):
    corpus = os.path.join(base, "corpus")
    os.makedirs(corpus)
    docs = make_byte_corpus(corpus)
    want_val, want_train = expected_split([list(d) for d in docs], 256, 3000)
    out1 = os.path.join(base, "bytes_t1")
    rc, so, se = run(["--tokenizer", "bytes", "--input", corpus + "/*", "--out", out1, "--shard-tokens", "2048",
                      "--val-tokens", "3000", "--threads", "1", "--quiet"])
    if not check(rc == 0, "bytes: ./tokenize runs", f"exit {rc}: {se.strip()}"):
        return
    info, _ = read_shard(shards(out1, "train")[0])
    check(info["magic"] == b"PHLTOKv1" and info["header"] == 1024 and info["bpt"] == 4 and info["vocab"] == 257
          and info["eot"] == 256 and info["fp"] == "bytes", "bytes: shard header", str(info))
    val, train = stream(out1, "val"), stream(out1, "train")
    check(np.array_equal(val, want_val), "bytes: val shards hold exactly the first documents' ids + end-of-text",
          f"{len(val)} tokens, expected {len(want_val)}")
    check(np.array_equal(train, want_train), "bytes: train shards hold exactly the remaining documents' ids + end-of-text",
          f"{len(train)} tokens, expected {len(want_train)}")
    sizes = [read_shard(p)[0]["n"] for p in shards(out1, "train")]
    check(all(s == 2048 for s in sizes[:-1]) and 0 < sizes[-1] <= 2048, "bytes: train shards are --shard-tokens long, last shorter",
          str(sizes))
    check("bad lines       3 " in so, "bytes: 3 bad lines reported", so)
    rc, so, se = run(["--tokenizer", "bytes", "--input", corpus + "/*", "--out", out1, "--shard-tokens", "2048",
                      "--val-tokens", "3000", "--quiet"])
    check(rc == 0 and "already complete" in so, "rerun of a complete directory does nothing", so + se)
    check("first at " + corpus + "/a_part1.jsonl:51: invalid JSON" in so, "bad line reported with file:line",
          so)
    check("empty           2" in so, "blank line and empty text counted as empty", so)
    check("invalid UTF-8   1 documents, 3 sequences" in so and "a_part1.jsonl:201" in so,
          "invalid UTF-8 counted with its first line", so)

    out2 = os.path.join(base, "bytes_t2")
    rc, _, se = run(["--tokenizer", "bytes", "--input", corpus + "/*", "--out", out2, "--shard-tokens", "2048",
                     "--val-tokens", "3000", "--threads", "2", "--quiet"])
    ok, why = same_files(out1, out2) if rc == 0 else (False, se)
    check(ok, "bytes: --threads 2 writes the same shards as --threads 1", why)

    for kill_after in (1, 4):
        out3 = os.path.join(base, f"bytes_killed_{kill_after}")
        args = ["--tokenizer", "bytes", "--input", corpus + "/*", "--out", out3, "--shard-tokens", "2048",
                "--val-tokens", "3000", "--threads", "2", "--quiet"]
        rc1, _, _ = run(args, env={"PHASELAB_TOKENIZE_KILL_AFTER_SHARDS": str(kill_after)})
        rc2, so2, se2 = run(args)
        ok, why = same_files(out1, out3) if rc2 == 0 else (False, se2)
        check(rc1 == -9 and ok and "resumed run" in so2,
              f"resume after SIGKILL at shard {kill_after} gives identical shards", f"first exit {rc1}; {why}")

    # a long .txt document is tokenized in pieces that concatenate exactly
    long_dir = os.path.join(base, "long")
    os.makedirs(long_dir)
    body = "".join(f"line {i} of a long document\n" for i in range(2000)) + " " * 10000 + "tail"
    with open(os.path.join(long_dir, "long.txt"), "w") as f:
        f.write(body)
    out4 = os.path.join(base, "bytes_long")
    rc, so, se = run(["--tokenizer", "bytes", "--input", long_dir + "/long.txt", "--out", out4, "--max-doc-bytes", "4096",
                      "--txt-docs", "file", "--quiet"])
    want = np.array(list(body.encode()) + [256], dtype=np.uint32)
    check(rc == 0 and np.array_equal(stream(out4, "train"), want) and "documents       1 " in so,
          "a document longer than --max-doc-bytes is written whole (pieces concatenate)", so + se)
    check("forced splits   2" in so or "forced splits   3" in so, "a cut without a safe line start is counted as forced", so)


def test_qwen(base):
    tj = QWEN + "tokenizer.json"
    if not os.path.exists(tj):
        skip("qwen3: ./tokenize reproduces the golden ids", "../shared not found")
        return
    golden = [json.loads(l) for l in open(QWEN + "golden.jsonl")]
    corpus = os.path.join(base, "qwen")
    os.makedirs(corpus)
    with open(os.path.join(corpus, "golden.jsonl"), "w") as f:
        for g in golden * 3:
            f.write(json.dumps({"text": g["text"]}) + "\n")
    docs = [g["ids"] for g in golden * 3 if g["text"] != ""]
    want_val, want_train = expected_split(docs, 151643, 5000)
    out = os.path.join(base, "qwen_out")
    rc, so, se = run(["--tokenizer", tj, "--input", corpus + "/golden.jsonl", "--out", out, "--shard-tokens", "10000",
                      "--val-tokens", "5000", "--threads", "2", "--quiet"])
    if not check(rc == 0, "qwen3: ./tokenize runs", f"exit {rc}: {se.strip()}"):
        return
    info, _ = read_shard(shards(out, "train")[0])
    check(info["vocab"] == 151936 and info["eot"] == 151643
          and info["fp"] == "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
          "qwen3: shard header (vocab 151936, eot 151643, sha256 fingerprint)", str(info))
    val, train = stream(out, "val"), stream(out, "train")
    check(np.array_equal(val, want_val) and np.array_equal(train, want_train),
          "qwen3: shards hold exactly the golden ids with end-of-text separators",
          f"val {len(val)}/{len(want_val)}, train {len(train)}/{len(want_train)}")
    out2 = os.path.join(base, "qwen_killed")
    args = ["--tokenizer", tj, "--input", corpus + "/golden.jsonl", "--out", out2, "--shard-tokens", "10000",
            "--val-tokens", "5000", "--threads", "2", "--quiet"]
    rc1, _, _ = run(args, env={"PHASELAB_TOKENIZE_KILL_AFTER_SHARDS": "3"})
    rc2, _, se2 = run(args)
    ok, why = same_files(out, out2) if rc2 == 0 else (False, se2)
    check(rc1 == -9 and ok, "qwen3: resume after SIGKILL gives identical shards", f"first exit {rc1}; {why}")


def test_errors(base):
    rc, _, se = run(["--tokenizer", "bytes", "--input", base + "/nothing-*.jsonl", "--out", base + "/e1"])
    check(rc == 2 and "no file matches" in se, "no matching input: exit 2 with a message", se)
    # --help says what each option of the usage means (it printed the usage alone, on stderr)
    rc, so, _ = run(["--help"])
    opts = ["--tokenizer", "--input", "--out", "--val-tokens", "--txt-docs", "--field", "--shard-tokens", "--max-doc-bytes",
            "--vocab-size", "--threads", "--quiet"]
    described = {o for o in opts for line in so.splitlines() if line.startswith("  " + o + " ") and len(line.split()) > 3}
    check(rc == 0 and described == set(opts) and "default 0: no val_*.bin" in so, "--help: every option described, on stdout",
          f"{rc} missing {sorted(set(opts) - described)}")
    rc, _, se = run(["--tokenizer", "bytes", "--out", base + "/e1"])
    check(rc == 2 and "required" in se, "missing --input: usage error", se)
    rc, _, se = run(["--tokenizer", base + "/missing.json", "--input", "tests/*.py", "--out", base + "/e1"])
    check(rc == 2 and "missing.json" in se, "missing tokenizer.json named", se)
    bad = os.path.join(base, "corrupt.jsonl.gz")
    with open(bad, "wb") as f:
        lines = "".join(json.dumps({"text": f"line {i} " + str(i * 7919 % 104729) * 5}) + "\n" for i in range(3000))
        packed = gzip.compress(lines.encode())
        f.write(packed[:len(packed) // 2])
    rc, _, se = run(["--tokenizer", "bytes", "--input", bad, "--out", base + "/e2", "--quiet"])
    check(rc == 1 and "corrupt.jsonl.gz" in se, "truncated gzip: exit 1 naming the file", se)
    rc, _, se = run(["--tokenizer", "bytes", "--input", "Makefile", "--out", base + "/e3", "--quiet"])
    check(rc == 2 and "unknown input type" in se and "named *.txt" in se,
          "unknown file type rejected, saying a plain-text file needs a *.txt name", se)
    # a directory given as --input (or matched by a glob), even one named like a text file: exit 2
    # naming it, with the glob to use (it was "read error", exit 1, or "unknown input type")
    for d in ("corpus_dir", "corpus_dir.txt"):
        os.makedirs(os.path.join(base, d), exist_ok=True)
        rc, _, se = run(["--tokenizer", "bytes", "--input", os.path.join(base, d), "--out", base + "/e5", "--quiet"])
        check(rc == 2 and f"{d}: is a directory" in se and f"'{base}/{d}/*.txt'" in se,
              f"a directory as --input ({d}): exit 2, 'is a directory' and a glob to use", f"{rc} {se}")
    # text in another encoding (Latin-1): tokenized with U+FFFD as documented, and a warning on stderr
    # says what to do (it was only a count in the summary)
    lat = os.path.join(base, "latin1.txt")
    open(lat, "wb").write("Café crème brûlée\n\nnaïve résumé\n".encode("latin-1"))
    rc, _, se = run(["--tokenizer", "bytes", "--input", lat, "--out", base + "/e7", "--quiet"])
    check(rc == 0 and "warning: 2 of 2 documents had invalid UTF-8 (first at " + lat + ":1)" in se and "iconv" in se,
          "a Latin-1 file: a warning naming the first file:line and how to convert it", f"{rc} {se}")
    # a directory as --tokenizer: named as a directory (it was "cannot read")
    rc, _, se = run(["--tokenizer", os.path.join(base, "corpus_dir"), "--input", "tests/*.py", "--out", base + "/e6"])
    check(rc == 2 and "corpus_dir: cannot open: Is a directory" in se, "a directory as --tokenizer: exit 2, 'Is a directory'",
          f"{rc} {se}")
    nul = os.path.join(base, "nul.jsonl")
    with open(nul, "w") as f:
        f.write('{"text": "ab\\u0000cd"}\n{"text": "ok"}\n{"text": "x\\\\u0000y"}\n')
    rc, so, se = run(["--tokenizer", "bytes", "--input", nul, "--out", base + "/e4"])
    toks = stream(base + "/e4", "train")
    want = list(b"ok") + [256] + list(b"x\\u0000y") + [256]
    check(rc == 0 and "nul.jsonl:1" in so + se and list(toks) == want,
          "a JSON \\u0000 is a reported bad line, never a silently cut document", f"{rc} {so[-300:]} {se[-200:]} {list(toks)}")


def main():
    if not os.access(TOKENIZE, os.X_OK):
        check(False, "./tokenize exists", "build it with make tokenize")
        finish()
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    test_bytes(SCRATCH)
    test_qwen(SCRATCH)
    test_errors(SCRATCH)
    finish()


if __name__ == "__main__":
    main()
