"""tools/trim-vocab (issue 40, item 2): a trimmed tokenizer.json and the corpus re-tokenized with it.

For each source tokenizer (always tests/fuzz/corpus/tokenizer_json/qwen3_mini.json, the fuzz
harnesses' cut-down Qwen3, and a copy of it with merges written as "a b" strings; the official
Qwen3 tokenizer when ../shared/data/qwen3-tokenizer/ exists) a corpus is tokenized by ./tokenize,
trimmed with --keep N, and checked against expectations computed here, not by the tool:
  * the kept set is exactly the test's own fixpoint: bytes + added tokens + the N most used ids of
    the train shards (counted here), closed under the merges whose result is kept; every kept merge
    produces and consumes kept tokens, every source merge whose result is kept is kept (in order),
    the others are dropped, and nothing else is kept;
  * the 256 byte tokens and every added token (content, flags) are kept; ids are dense 0..n-1 and
    in the source's relative order;
  * round trip with the C tokenizer: ./tokenize with the trimmed tokenizer.json on the tokenizer
    fuzz corpus (the text documents of tests/fuzz/corpus/jsonl and regress/jsonl, the
    tokenizer_json seeds as text), a generated multilingual sample, the Qwen3 golden texts (with
    ../shared) and KJV chapters (the README's real corpus, when Debian's bible-kjv is installed)
    decodes to NFC(text), and to what the source tokenizer gives back;
  * the re-tokenized shards decode to the source shards' text with the same validation
    documents; where a document's source tokens are all kept, its ids are the source ids renumbered;
  * the tokenizers library (and transformers, when present) loaded from the trimmed tokenizer.json
    gives ./tokenize's ids on the same texts (skipped without them: python3, or
    $PHASELAB_HF_PYTHON / build/venv-hf / ~/.cache/phaselab/venv-hf with `tokenizers`);
  * a 2-step ./train on the trimmed shards writes checkpoints holding the trimmed tokenizer.json;
  * --size V keeps at most V ids with the largest N that fits; --keep-probe-words makes a trim
    tools/make-probe --tokenizer accepts (official Qwen3 only); bad input (a tokenizer.json that
    did not make the shards, a changed input file, a non-empty --out) is one line and exit 2.
Scratch: build/scratch/test_trim_vocab/."""
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402
import trainutil as tu  # noqa: E402

import numpy as np  # noqa: E402

ROOT = tu.ROOT
TOKENIZE = os.path.join(ROOT, "tokenize")
TRIM = [sys.executable, os.path.join(ROOT, "tools", "trim-vocab")]
MINI = os.path.join(ROOT, "tests", "fuzz", "corpus", "tokenizer_json", "qwen3_mini.json")
QWEN_DIR = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
QWEN = os.path.join(QWEN_DIR, "tokenizer.json")
D = tu.scratch("test_trim_vocab")

if not os.access(TOKENIZE, os.X_OK):
    check(False, "./tokenize exists", "build it first (make)")
    finish()


# ---- the ByteLevel alphabet, written out here (GPT-2's bytes_to_unicode) -------------------------

def byte_chars():
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = byte_chars()
CHAR_BYTE = {c: b for b, c in enumerate(BYTE_CHARS)}


class Tok:
    """A tokenizer.json as the test reads it: strings and bytes of ids, merges as string pairs."""

    def __init__(self, path):
        self.path = path
        self.raw = open(path, "rb").read()
        self.json = json.loads(self.raw)
        m = self.json["model"]
        self.vocab = m["vocab"]
        self.merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ", 1)) for x in m["merges"]]
        self.added = self.json.get("added_tokens") or []
        self.string = {}
        for s, i in self.vocab.items():
            self.string[i] = s
        for a in self.added:
            self.string[a["id"]] = a["content"]
        self.bytes = {i: (bytes(CHAR_BYTE[c] for c in s) if s in self.vocab and self.vocab[s] == i
                          else s.encode()) for i, s in self.string.items()}
        self.eot = next(a["id"] for a in self.added if a["content"] == "<|endoftext|>")

    def decode(self, ids):
        return b"".join(self.bytes[int(i)] for i in ids)


# ---- corpora --------------------------------------------------------------------------------------

def fuzz_corpus_docs():
    """The text documents of the tokenizer fuzz corpus: the fuzz_jsonl inputs (byte 0: the kind,
    byte 1: the record limit, then the file) and the fuzz_tokenizer_json seeds read as text."""
    docs = []
    dirs = [os.path.join(ROOT, "tests", "fuzz", s, "jsonl") for s in ("corpus", "regress")]
    for d in dirs:
        for name in sorted(os.listdir(d)):
            raw = open(os.path.join(d, name), "rb").read()
            if len(raw) < 2:
                continue
            kind, body = raw[0] % 5, raw[2:]
            if kind == 3:
                try:
                    body = gzip.decompress(body)
                except (OSError, EOFError):
                    continue
            if kind == 4:
                if not shutil.which("zstd"):
                    continue
                p = subprocess.run(["zstd", "-d", "-q", "-c"], input=body, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
                body = p.stdout
            text = body.decode("utf-8", "replace")
            if kind in (0, 3):
                for line in text.splitlines():
                    try:
                        o = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(o, dict) and isinstance(o.get("text"), str):
                        docs.append(o["text"])
            else:
                docs += [b for b in text.split("\n\n") if b.strip()] + [text]
    for d in [os.path.join(ROOT, "tests", "fuzz", s, "tokenizer_json") for s in ("corpus", "regress")]:
        for name in sorted(os.listdir(d)):
            docs.append(open(os.path.join(d, name), "rb").read().decode("utf-8", "replace"))
    return clean(docs)


def clean(docs):
    """Documents ./tokenize keeps one for one: valid UTF-8 (no lone surrogates), non-empty, no NUL
    (a JSONL line with \\u0000 is a bad line) and no literal <|endoftext|> (it would split one)."""
    out = []
    for t in docs:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            t = t.encode("utf-8", "replace").decode("utf-8")
        if t and "<|endoftext|>" not in t and "\0" not in t:
            out.append(t)
    return out


WORDS = ("the of and to in is that it was for on are with as his they be at one have this from or had by "
         "hot word but what some we can out other were all there when up use your how said an each she "
         "phase compression window stride key value don't I'll we're they've it's").split()
OTHER = ["café", "naïve", "Ångström", "e\u0301", "A\u030a", "\u1e9b\u0323", "日本語の文章", "中文测试", "한국어",
         "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "😀", "👩\u200d💻", "🇫🇷", "\t", "  ", "\r\n", "\n\n",
         "3.14159", "1,234,567", "x=y+1;", "def f(a):\n    return a", "<|im_start|>", "<|im_end|>", "\u00a0",
         "\u3000", "’", "—", "...", "!!!", "http://example.org/a?b=c", "\u180e", "\u2028", "ﬁ", "Ⅻ", "½"]


def sample_docs(n, seed):
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(5, 80)):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
                parts.append((w.capitalize() if rng.random() < 0.1 else w) + rng.choice([" ", " ", " ", ", ", ". "]))
            elif r < 0.9:
                parts.append(rng.choice(OTHER))
            else:   # random code points, surrogates and noncharacters left out
                cps = [rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                                   rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF)]) for _ in range(4)]
                parts.append("".join(chr(c) for c in cps))
        docs.append("".join(parts))
    return clean(docs)


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")


def tokenize(tokenizer, inputs, out, val_tokens=0, shard_tokens=None):
    cmd = [TOKENIZE, "--tokenizer", tokenizer, "--out", out, "--val-tokens", str(val_tokens), "--quiet",
           "--threads", "2"]
    if shard_tokens:
        cmd += ["--shard-tokens", str(shard_tokens)]
    for i in inputs:
        cmd += ["--input", i]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def split_ids(d, split):
    files = sorted(f for f in os.listdir(d) if f.startswith(split + "_") and f.endswith(".bin"))
    parts = [np.fromfile(os.path.join(d, f), dtype="<u4", offset=1024) for f in files]
    return np.concatenate(parts) if parts else np.zeros(0, dtype="<u4")


def docs_of(ids, eot):
    out, start = [], 0
    for c in np.flatnonzero(ids == eot).tolist():
        out.append(ids[start:c].tolist())
        start = c + 1
    return out


def encode_docs(tokenizer, docs, name):
    """./tokenize's ids of each document (a JSONL of them, no validation split)."""
    jl = os.path.join(D, name + ".jsonl")
    write_jsonl(jl, docs)
    out = os.path.join(D, name + "_shards")
    shutil.rmtree(out, ignore_errors=True)
    rc, msg = tokenize(tokenizer, [jl], out)
    if rc != 0:
        return None, msg
    tok = Tok(tokenizer)
    return docs_of(split_ids(out, "train"), tok.eot), ""


def nfc(t):
    return unicodedata.normalize("NFC", t).encode("utf-8")


def trim(*args):
    p = subprocess.run(TRIM + list(args), capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


# ---- the expected kept set, computed here -----------------------------------------------------------

def expected_kept(src, counts, n):
    """bytes + added + the n most used ids (ties by lower id), closed under the merges whose
    result is kept: a plain set fixpoint."""
    used = [i for i in range(len(counts)) if counts[i] > 0]
    used.sort(key=lambda i: (-counts[i], i))
    kept = {src.vocab[c] for c in BYTE_CHARS} | {a["id"] for a in src.added} | set(used[:n])
    while True:
        strings = {src.string[i] for i in kept}
        grow = set()
        for a, b in src.merges:
            if a + b in strings:
                grow.add(src.vocab[a])
                grow.add(src.vocab[b])
        if grow <= kept:
            return kept, used[:n]
        kept |= grow


# ---- the tokenizers library / transformers, wherever they are ------------------------------------

HF_SCRIPT = r"""
import json, sys
req = json.load(open(sys.argv[1]))
from tokenizers import Tokenizer
tk = Tokenizer.from_file(req["tokenizer"])
res = {"tokenizers": [e.ids for e in tk.encode_batch(req["texts"], add_special_tokens=False)]}
try:
    import transformers
    from transformers import PreTrainedTokenizerFast
except Exception:
    transformers = None
if transformers is not None:
    ft = PreTrainedTokenizerFast(tokenizer_file=req["tokenizer"])
    res["transformers"] = [ft(t, add_special_tokens=False)["input_ids"] for t in req["texts"]]
    res["transformers_version"] = transformers.__version__
json.dump(res, open(sys.argv[2], "w"))
"""


HF_PY = tu.python_with("tokenizers")


def hf_encode(tokenizer, texts, name):
    req, res = os.path.join(D, name + "_hf_req.json"), os.path.join(D, name + "_hf_res.json")
    json.dump({"tokenizer": tokenizer, "texts": texts}, open(req, "w"))
    script = os.path.join(D, "hf_encode.py")
    open(script, "w").write(HF_SCRIPT)
    p = subprocess.run([HF_PY, script, req, res], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, p.stderr[-400:]
    return json.load(open(res)), ""


# ---- one source tokenizer ------------------------------------------------------------------------

FUZZ_DOCS = fuzz_corpus_docs()


def real_docs():
    """A sample of the README's real corpus, the King James Bible of Debian's bible-kjv (the
    program `bible` prints it): Genesis and Psalms, a document per chapter. [] without it."""
    if not shutil.which("bible"):
        return []
    p = subprocess.run(["bible", "gen1:1-gen50:26", "ps1:1-ps150:6"], capture_output=True, timeout=60)
    return clean([b for b in p.stdout.decode("utf-8", "replace").split("\n\n") if b.strip()])


REAL_DOCS = real_docs()
if not REAL_DOCS:
    skip("round trip and tokenizers on the real corpus (KJV)", "the program `bible` (Debian bible-kjv) is not installed")


def trial(label, source, keep, n_train_docs, checkpoint=False):
    """Tokenize a corpus with source, trim it to --keep keep, check everything above."""
    root = os.path.join(D, label)
    os.makedirs(root)
    corpus_docs = sample_docs(n_train_docs, seed=len(label)) + FUZZ_DOCS
    text_dir = os.path.join(root, "text")
    os.makedirs(text_dir)
    write_jsonl(os.path.join(text_dir, "a.jsonl"), corpus_docs[: len(corpus_docs) // 2])
    write_jsonl(os.path.join(text_dir, "b.jsonl"), corpus_docs[len(corpus_docs) // 2:])
    src_shards = os.path.join(root, "src", "shards")
    rc, msg = tokenize(source, [os.path.join(text_dir, "*.jsonl")], src_shards, val_tokens=800, shard_tokens=3000)
    if not check(rc == 0, f"{label}: ./tokenize with the source tokenizer", msg[-300:]):
        return
    src = Tok(source)
    train_src = split_ids(src_shards, "train")
    val_src = split_ids(src_shards, "val")
    counts = np.bincount(train_src, minlength=max(src.string) + 1)
    out = os.path.join(root, "trim")
    # run it from elsewhere: the inputs are found relative to the shards' ancestors
    p = subprocess.run(TRIM + ["--tokenizer", source, "--shards", src_shards, "--keep", str(keep), "--out", out],
                       capture_output=True, text=True, timeout=600, cwd=D)
    if not check(p.returncode == 0, f"{label}: trim-vocab --keep {keep} runs", (p.stdout + p.stderr)[-500:]):
        return
    tj_path = os.path.join(out, "tokenizer.json")
    t = Tok(tj_path)
    n = len(t.string)

    # dense ids, original relative order
    ids = sorted(t.string)
    check(ids == list(range(n)) and len(t.vocab) + len(t.added) == n,
          f"{label}: ids are dense 0..n-1 (n = {n})", f"{len(ids)} ids, max {max(ids)}, {len(t.vocab)}+{len(t.added)} entries")
    src_id_of = {}
    for i, s in src.string.items():
        src_id_of.setdefault(s, i)
    old = [src_id_of.get(t.string[i], -1) for i in range(n)]
    check(-1 not in old and old == sorted(old), f"{label}: kept tokens keep the source's relative order",
          "a trimmed token is not in the source, or the order differs")
    # bytes and added tokens
    check(all(c in t.vocab for c in BYTE_CHARS), f"{label}: all 256 byte tokens kept",
          f"missing {[c for c in BYTE_CHARS if c not in t.vocab][:5]}")
    strip = lambda a: {k: v for k, v in a.items() if k != "id"}   # noqa: E731
    check([strip(a) for a in t.added] == [strip(a) for a in src.added],
          f"{label}: every added/special token kept, content and flags unchanged", f"{len(t.added)} vs {len(src.added)}")
    # the kept set is the fixpoint computed here
    want, top = expected_kept(src, counts, keep)
    got = {src_id_of[t.string[i]] for i in range(n)}
    check(got == want, f"{label}: kept set = bytes + added + the {keep} most used, closed under kept merges",
          f"{len(got - want)} extra, {len(want - got)} missing (e.g. {sorted(want - got)[:5]})")
    check(set(top) <= got, f"{label}: the {keep} most used tokens of the train shards are kept",
          f"{len(set(top) - got)} missing")
    tstr = set(t.vocab)
    closed = all(a in tstr and b in tstr and a + b in tstr for a, b in t.merges)
    expect_merges = [m for m in src.merges if m[0] + m[1] in tstr]
    check(closed, f"{label}: every kept merge produces and consumes kept tokens", "a merge names a dropped token")
    check(t.merges == expect_merges, f"{label}: merges = the source merges whose result is kept, in source order",
          f"{len(t.merges)} merges, expected {len(expect_merges)}")
    dropped = len(src.merges) - len(t.merges)
    check(dropped > 0 and n < len(src.string), f"{label}: the trim drops tokens and merges",
          f"{n} of {len(src.string)} ids, {dropped} merges dropped")
    check(t.json.get("normalizer") == src.json.get("normalizer") and
          t.json.get("pre_tokenizer") == src.json.get("pre_tokenizer") and t.json.get("decoder") == src.json.get("decoder"),
          f"{label}: normalizer, pre_tokenizer and decoder unchanged", "changed")

    # the re-tokenized shards: the same text, the same val documents, mapped ids where exact
    new_shards = os.path.join(out, "shards")
    train_new, val_new = split_ids(new_shards, "train"), split_ids(new_shards, "val")
    check(int(max(train_new.max(initial=0), val_new.max(initial=0))) < n, f"{label}: re-tokenized ids < {n}",
          "an id out of range")
    same_text = src.decode(val_src) == t.decode(val_new) and src.decode(train_src) == t.decode(train_new)
    check(same_text, f"{label}: re-tokenized shards decode to the source shards' text, split for split",
          "the text differs")
    check(len(docs_of(val_new, t.eot)) == len(docs_of(val_src, src.eot)) > 0,
          f"{label}: the validation split holds the same documents",
          f"{len(docs_of(val_new, t.eot))} vs {len(docs_of(val_src, src.eot))} documents")
    hdr = open(os.path.join(new_shards, "train_000000.bin"), "rb").read(96)
    fp = hdr[32:96].split(b"\0")[0].decode()
    check(fp == hashlib.sha256(t.raw).hexdigest() and int.from_bytes(hdr[16:20], "little") == (n + 127) // 128 * 128,
          f"{label}: new shards carry the trimmed tokenizer's sha256 and vocab size {(n + 127) // 128 * 128}",
          f"{fp} / {int.from_bytes(hdr[16:20], 'little')}")
    new_of_old = {src_id_of[t.string[i]]: i for i in range(n)}
    mapped = changed = 0
    for sd, nd in zip(docs_of(np.concatenate([val_src, train_src]), src.eot),
                      docs_of(np.concatenate([val_new, train_new]), t.eot)):
        if all(i in new_of_old for i in sd):
            mapped += [new_of_old[i] for i in sd] == nd
            changed += [new_of_old[i] for i in sd] != nd
    check(mapped > 0 and changed == 0,
          f"{label}: documents whose source tokens are all kept get the source ids, renumbered",
          f"{changed} such documents differ ({mapped} equal)")

    # round trip on the tokenizer fuzz corpus and a sample, with the C tokenizer
    texts = FUZZ_DOCS + sample_docs(40, seed=99)
    if os.path.exists(os.path.join(QWEN_DIR, "golden.jsonl")):
        texts += clean([json.loads(l)["text"] for l in open(os.path.join(QWEN_DIR, "golden.jsonl"), encoding="utf-8")])
    texts += REAL_DOCS
    what = f"{len(texts)} texts (fuzz corpus, sample" + (", golden" if os.path.exists(QWEN_DIR) else "") + \
        (", KJV chapters)" if REAL_DOCS else ")")
    ids_new, msg = encode_docs(tj_path, texts, label + "_rt_new")
    ids_src, msg2 = encode_docs(source, texts, label + "_rt_src")
    if check(ids_new is not None and ids_src is not None and len(ids_new) == len(texts) == len(ids_src),
             f"{label}: ./tokenize encodes the round-trip texts", (msg + msg2)[-300:]):
        bad = [k for k, (x, ids) in enumerate(zip(texts, ids_new)) if t.decode(ids) != nfc(x)]
        check(not bad, f"{label}: round trip decode(encode(x)) == NFC(x) with the trimmed tokenizer on "
              + what, f"{len(bad)} differ, first {texts[bad[0]][:60]!r}" if bad else "")
        same = all(t.decode(a) == src.decode(b) for a, b in zip(ids_new, ids_src))
        check(same, f"{label}: trimmed and source tokenizers decode their encodings to the same bytes", "differ")
        longer = sum(len(a) for a in ids_new) - sum(len(b) for b in ids_src)
        check(longer >= 0, f"{label}: the trimmed tokenizer needs at least as many tokens in all", f"{longer:+d}")
        # the tokenizers library / transformers on the same texts
        if HF_PY is None:
            skip(f"{label}: tokenizers library gives ./tokenize's ids", "no python with `tokenizers` (make hf-venv, "
                 "or PHASELAB_HF_PYTHON)")
        else:
            res, why = hf_encode(tj_path, texts, label)
            if check(res is not None, f"{label}: tokenizers loads the trimmed tokenizer.json", why):
                diff = [k for k, (a, b) in enumerate(zip(res["tokenizers"], ids_new)) if a != b]
                check(not diff, f"{label}: tokenizers.Tokenizer.from_file(trimmed) gives ./tokenize's ids on "
                      + what, f"{len(diff)} differ, first {texts[diff[0]][:60]!r}" if diff else "")
                if "transformers" in res:
                    diff = [k for k, (a, b) in enumerate(zip(res["transformers"], ids_new)) if a != b]
                    check(not diff, f"{label}: transformers {res['transformers_version']} PreTrainedTokenizerFast "
                          "gives ./tokenize's ids on " + what, f"{len(diff)} differ")
                else:
                    skip(f"{label}: transformers gives ./tokenize's ids", "transformers not installed")

    # rerunning on the same --out is accepted (an interrupted trim is finished by the same command)
    rc, so, se = trim("--tokenizer", source, "--shards", src_shards, "--keep", str(keep), "--out", out)
    check(rc == 0, f"{label}: rerun into the same --out is accepted", (so + se)[-300:])

    if checkpoint:
        vs = (n + 127) // 128 * 128
        rc, log = tu.run([tu.TINY, f"data.train={new_shards}/train_*.bin", f"data.val={new_shards}/val_*.bin",
                          f"run.dir={root}/runs", "run.name=t", f"model.vocab_size={vs}", "model.attention=full",
                          "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=1",
                          "model.head_dim=8", "model.d_ff=32", "data.seq_len=32", "train.steps=2",
                          "train.batch_tokens=128", "train.micro_batch=4", "checkpoint.every=1", "eval.every=0",
                          "eval.val_tokens=64", "eval.probe="])
        ck = os.path.join(root, "runs", "t", "checkpoints", "step_00000002")
        ok = rc == 0 and os.path.exists(os.path.join(ck, "tokenizer.json"))
        check(ok and open(os.path.join(ck, "tokenizer.json"), "rb").read() == t.raw,
              f"{label}: a run on the trimmed shards (model.vocab_size={vs}) writes checkpoints holding the trimmed "
              "tokenizer.json", f"rc {rc}: {log[-400:]}")
        if ok:
            gen = json.load(open(os.path.join(ck, "generation_config.json")))
            check(gen.get("eos_token_id") == t.eot, f"{label}: generation_config.json eos = the trimmed <|endoftext|> "
                  f"({t.eot})", str(gen))
    return src_shards, out


# ---- runs -----------------------------------------------------------------------------------------

res = trial("mini", MINI, keep=60, n_train_docs=60, checkpoint=True)

# the same tokenizer with merges as "a b" strings (the older format): written back in that format
legacy = json.loads(open(MINI, "rb").read())
legacy["model"]["merges"] = [a + " " + b for a, b in legacy["model"]["merges"]]
LEGACY = os.path.join(D, "legacy.json")
with open(LEGACY, "w", encoding="utf-8") as f:
    json.dump(legacy, f, ensure_ascii=False)
trial("legacy", LEGACY, keep=60, n_train_docs=30)
lj = os.path.join(D, "legacy", "trim", "tokenizer.json")
if os.path.exists(lj):
    ms = json.load(open(lj))["model"]["merges"]
    check(ms and all(isinstance(m, str) for m in ms), "legacy: merges written back as \"a b\" strings", str(ms[:2]))

if res:
    src_shards, out = res
    src = Tok(MINI)
    counts = np.bincount(split_ids(src_shards, "train"), minlength=len(src.string))
    # --size V: the largest N whose closed set fits
    V = 320
    rc, so, se = trim("--tokenizer", MINI, "--shards", src_shards, "--size", str(V), "--out", os.path.join(D, "size"))
    if check(rc == 0, f"--size {V} runs", (so + se)[-300:]):
        n = len(Tok(os.path.join(D, "size", "tokenizer.json")).string)
        best = max(k for k in range(0, int((counts > 0).sum()) + 1) if len(expected_kept(src, counts, k)[0]) <= V)
        check(n <= V and n == len(expected_kept(src, counts, best)[0]),
              f"--size {V}: at most {V} ids, the largest N that fits (N = {best})", f"{n} ids")
    # --plan writes nothing
    plan_out = os.path.join(D, "plan")
    rc, so, se = trim("--tokenizer", MINI, "--shards", src_shards, "--keep", "10", "--plan")
    check(rc == 0 and "kept" in so and not os.path.exists(plan_out), "--plan prints the selection, writes nothing", se)
    # bad input: one line, exit 2, nothing written
    bad_out = os.path.join(D, "bad")
    for name, args in [
        ("a tokenizer.json that did not make the shards", ["--tokenizer", LEGACY, "--shards", src_shards, "--keep", "5"]),
        ("a non-empty --out of another trim", ["--tokenizer", MINI, "--shards", src_shards, "--keep", "7",
                                              "--out", out]),
        ("no --keep or --size", ["--tokenizer", MINI, "--shards", src_shards]),
        ("shards that are not a ./tokenize output", ["--tokenizer", MINI, "--shards", D, "--keep", "5"]),
    ]:
        a = args + (["--out", bad_out] if "--out" not in args else [])
        rc, so, se = trim(*a)
        lines = [l for l in se.strip().splitlines() if l]
        check(rc == 2 and (len(lines) == 1 and lines[0].startswith("trim-vocab: ") or "usage" in se) and
              "Traceback" not in se and not os.path.exists(bad_out), f"bad input: {name}: exit 2, one line",
              f"rc {rc}: {se[-300:]}")
    # a changed input file is refused (the shards no longer describe it)
    victim = os.path.join(D, "mini", "text", "a.jsonl")
    with open(victim, "a") as f:
        f.write('{"text": "one more"}\n')
    rc, so, se = trim("--tokenizer", MINI, "--shards", src_shards, "--keep", "60", "--out", bad_out)
    check(rc == 2 and "changed" in se and not os.path.exists(os.path.join(bad_out, "shards")),
          "bad input: an input changed since ./tokenize read it: exit 2", f"rc {rc}: {se[-300:]}")

if os.path.exists(QWEN):
    res = trial("qwen3", QWEN, keep=400, n_train_docs=120)
    if res:
        # --keep-probe-words: tools/make-probe --tokenizer accepts the trimmed tokenizer
        pw = os.path.join(D, "qwen3_probe")
        rc, so, se = trim("--tokenizer", QWEN, "--shards", res[0], "--keep", "50", "--keep-probe-words", "--out", pw)
        if check(rc == 0, "qwen3: trim-vocab --keep-probe-words runs", (so + se)[-300:]):
            p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--tokenizer",
                                os.path.join(pw, "tokenizer.json"), "--out", os.path.join(pw, "probe.bin"),
                                "--per-residue", "1", "--residues", "2", "--max-len", "160"],
                               capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, "qwen3: make-probe --tokenizer accepts a --keep-probe-words trim of 50 tokens",
                  (p.stdout + p.stderr)[-300:])
else:
    skip("qwen3: trim the official Qwen3 tokenizer", "../shared/data/qwen3-tokenizer/tokenizer.json not found")
finish()
