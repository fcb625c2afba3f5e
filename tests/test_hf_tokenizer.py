"""Tokenizer and generation files of checkpoints (issue 16).

Shards made by ./tokenize from the official Qwen3 tokenizer.json (../shared/data/qwen3-tokenizer)
carry its sha256 as fingerprint. A run on them:
  * fails at start-up (exit 2, before training) when no tokenizer.json with that sha256 is
    next to the shards or in their parent directory, naming data.tokenizer=;
  * fails when data.tokenizer names a file with another sha256;
  * with the file found (parent directory) or named, writes checkpoints holding a byte-identical
    tokenizer.json, a tokenizer_config.json, generation_config.json with eos = pad = the
    shards' end-of-text id (151643), and config.json saying the vocabulary is that tokenizer;
  * with transformers installed: AutoTokenizer.from_pretrained(checkpoint) encodes the corpus's
    first document of a shard to a corpus document and back to the ids ./tokenize wrote, and eos_token_id is 151643.
A byte-tokenized run (./tokenize --tokenizer bytes) and a synthetic run say in config.json what
their vocabulary is, carry generation_config.json (eos 256 / 0) and no tokenizer files.
Scratch: build/scratch/test_hf_tokenizer/."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

try:
    import transformers  # noqa: F401
except ImportError:   # the cached venv of tests/test_hf_transformers.py, when there is one
    py = os.environ.get("PHASELAB_HF_PYTHON") or os.path.join(tu.ROOT, "build", "venv-hf", "bin", "python")
    if not os.environ.get("PHASELAB_HF_REEXEC") and os.access(py, os.X_OK) and subprocess.run(
            [py, "-c", "import transformers, numpy"], capture_output=True).returncode == 0:
        os.environ["PHASELAB_HF_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)

tu.require_train()
ROOT = tu.ROOT
TOKENIZE = os.path.join(ROOT, "tokenize")
QWEN = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer", "tokenizer.json")
d = tu.scratch("test_hf_tokenizer")

words = "the quick brown fox jumps over a lazy dog phase compression window stride key value".split()
docs = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40)) for i in range(120)]
with open(os.path.join(d, "corpus.txt"), "w") as f:
    f.write("\n\n".join(docs) + "\n")

FULL_TINY = ["model.attention=full", "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=1",
             "model.head_dim=8", "model.d_ff=32", "data.seq_len=32", "train.steps=1", "train.batch_tokens=128",
             "train.micro_batch=4", "checkpoint.every=1", "eval.every=0", "eval.val_tokens=64"]


def tokenize(tokenizer, out):
    p = subprocess.run([TOKENIZE, "--tokenizer", tokenizer, "--input", os.path.join(d, "corpus.txt"), "--out", out,
                        "--val-tokens", "500"], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def train(name, corpus, vocab, extra=()):
    return tu.run([tu.TINY, f"data.train={corpus}/train_*.bin", f"data.val={corpus}/val_*.bin", f"run.dir={d}/runs",
                   f"run.name={name}", f"model.vocab_size={vocab}"] + FULL_TINY + list(extra))


def ckpt_of(name):
    return os.path.join(d, "runs", name, "checkpoints", "step_00000001")


if not os.path.exists(QWEN):
    skip("Qwen3 tokenizer files in checkpoints", "../shared/data/qwen3-tokenizer/tokenizer.json not found")
else:
    corpus = os.path.join(d, "qwen", "corpus")
    os.makedirs(os.path.dirname(corpus))
    rc, out = tokenize(QWEN, corpus)
    check(rc == 0, "./tokenize with the Qwen3 tokenizer.json", out[-300:])
    rc, out = train("missing", corpus, 151936)
    check(rc == 2 and "data.tokenizer=" in out and "sha256" in out and not os.path.exists(ckpt_of("missing")),
          "tokenizer.json not found: start-up error naming data.tokenizer=, no checkpoint", f"rc {rc}: {out[-400:]}")
    wrong = os.path.join(d, "wrong.json")
    with open(QWEN, "rb") as src, open(wrong, "wb") as dst:
        dst.write(src.read() + b" ")
    rc, out = train("wrong", corpus, 151936, [f"data.tokenizer={wrong}"])
    check(rc == 2 and "wrong.json" in out, "data.tokenizer with another sha256 is refused", f"rc {rc}: {out[-300:]}")
    rc, out = train("named", corpus, 151936, [f"data.tokenizer={QWEN}"])
    check(rc == 0 and os.path.exists(os.path.join(ckpt_of("named"), "tokenizer.json")),
          "data.tokenizer=PATH: the checkpoint carries tokenizer.json", out[-300:])
    shutil.copy(QWEN, os.path.join(d, "qwen", "tokenizer.json"))   # the shards' parent directory
    rc, out = train("found", corpus, 151936)
    ck = ckpt_of("found")
    check(rc == 0, "tokenizer.json in the shards' parent directory is found", out[-300:])
    if rc == 0:
        same = open(os.path.join(ck, "tokenizer.json"), "rb").read() == open(QWEN, "rb").read()
        tc = json.load(open(os.path.join(ck, "tokenizer_config.json")))
        gen = json.load(open(os.path.join(ck, "generation_config.json")))
        cfg = json.load(open(os.path.join(ck, "config.json")))
        check(same, "checkpoint tokenizer.json is byte-identical to the one the shards were made with", "differs")
        check(tc.get("eos_token") == "<|endoftext|>" and tc.get("tokenizer_class"), "tokenizer_config.json", str(tc))
        check(gen.get("eos_token_id") == 151643 and gen.get("pad_token_id") == 151643,
              "generation_config.json eos = pad = 151643 (the shards' end-of-text)", str(gen))
        check(cfg.get("model_type") == "qwen3" and "tokenizer.json" in cfg.get("phaselab_vocabulary", ""),
              "config.json: qwen3, vocabulary = tokenizer.json in this directory", str(cfg.get("phaselab_vocabulary")))
        try:
            from transformers import AutoTokenizer
        except ImportError:
            AutoTokenizer = None
        if AutoTokenizer is None:
            skip("AutoTokenizer reproduces ./tokenize's ids", "transformers not installed")
        else:
            import numpy as np
            tok = AutoTokenizer.from_pretrained(ck)
            shard = sorted(f for f in os.listdir(corpus) if f.startswith("train_"))[0]
            ids = np.fromfile(os.path.join(corpus, shard), dtype="<u4", offset=1024).tolist()
            first = ids[:ids.index(151643)] if 151643 in ids else ids
            text = tok.decode(first)
            mine = tok(text, add_special_tokens=False)["input_ids"]
            check(text in docs and mine == first and tok.eos_token_id == 151643,
                  "AutoTokenizer.from_pretrained(checkpoint): the shard's first document decodes to a corpus "
                  "document and encodes back to ./tokenize's ids", f"{text[:60]!r}: {mine[:10]} vs {first[:10]}")

# byte-tokenized and synthetic runs: the vocabulary in words, no tokenizer files
corpus = os.path.join(d, "bytes")
rc, out = tokenize("bytes", corpus)
check(rc == 0, "./tokenize --tokenizer bytes", out[-300:])
rc, out = train("bytes", corpus, 257)
ck = ckpt_of("bytes")
if check(rc == 0, "byte-tokenized run trains", out[-300:]):
    cfg = json.load(open(os.path.join(ck, "config.json")))
    gen = json.load(open(os.path.join(ck, "generation_config.json")))
    check(cfg.get("phaselab_vocabulary", "").startswith("bytes") and gen.get("eos_token_id") == 256
          and not os.path.exists(os.path.join(ck, "tokenizer.json")),
          "byte run: config.json says bytes, eos 256, no tokenizer.json", f"{cfg.get('phaselab_vocabulary')} {gen}")
synth = os.path.join(d, "synth")
tu.make_corpus(synth, seq_len=32, train_rows=50, val_rows=4)
rc, out = train("synth", synth, 256)
ck = ckpt_of("synth")
if check(rc == 0, "synthetic run trains", out[-300:]):
    cfg = json.load(open(os.path.join(ck, "config.json")))
    gen = json.load(open(os.path.join(ck, "generation_config.json")))
    check(cfg.get("phaselab_vocabulary", "").startswith("synthetic") and gen.get("eos_token_id") == 0
          and not os.path.exists(os.path.join(ck, "tokenizer.json")),
          "synthetic run: config.json says synthetic, eos 0, no tokenizer.json", f"{cfg.get('phaselab_vocabulary')} {gen}")
finish()
