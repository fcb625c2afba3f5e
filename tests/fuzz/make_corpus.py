#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/NAME/ (docs/fuzzing.md).

Run from the repository root: python3 tests/fuzz/make_corpus.py [QWEN_TOKENIZER_JSON]
Seeds are small valid (or nearly valid) inputs of each format, so the fuzzer starts inside the
parser instead of at its first check. The safetensors seeds come from the harness itself
(FUZZ_WRITE_SEEDS=DIR build-fuzz/fuzz/fuzz_safetensors, the real writer); the probe seeds
(single sets and probe + calibration pairs) from tools/make-probe. The tokenizer seed is a cut-down Qwen3 tokenizer.json: the same
normalizer, pre-tokenizer regex and added tokens, the 256 byte tokens and the first merges
whose parts are in the vocabulary (ids renumbered)."""
import json, os, shutil, struct, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C = os.path.join(ROOT, "tests", "fuzz", "corpus")
QWEN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer", "tokenizer.json")


def out(name, fname, data):
    d = os.path.join(C, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- config: real INI files, one with overrides after NUL bytes
for ini in ["configs/test/tiny.ini", "configs/test/tiny_full.ini", "configs/test/tiny_w4s4.ini", "configs/demo.ini"]:
    out("config", os.path.basename(ini), open(os.path.join(ROOT, ini), "rb").read())
out("config", "overrides.ini", b"[model]\nd_model = 32\nattention = compressed\nwindow = 4\nstride = 2\n"
    b"\0train.steps=3\0model.gate=vector\0run.name=x\0eval.probe=\0data.seq_len=16")
out("config", "stages.ini", b"[data]\ntrain = a/*.bin\ntrain_seq_len = 32\nstages = 5:b/*.bin@32, 9 : c:d.bin\nloss_targets = answers\n"
    b"[train]\nsteps = 10\n\0data.stages=2:x,3:y\0train.steps=4")

# ---- shard: 1024-byte header + tokens
def shard(tokens, vocab=256, eot=0, fp=b"bytes"):
    h = b"PHLTOKv1" + struct.pack("<IIIIQ", 1024, 4, vocab, eot, len(tokens)) + fp.ljust(64, b"\0")
    return h.ljust(1024, b"\0") + struct.pack("<%dI" % len(tokens), *tokens)
out("shard", "bytes_20.bin", shard([72, 101, 108, 108, 111, 0, 87, 111, 114, 108, 100, 0, 1, 2, 3, 4, 5, 6, 7, 0]))
out("shard", "empty.bin", shard([]))
out("shard", "synthetic.bin", shard(list(range(16, 40)), vocab=256, eot=1, fp=b"synthetic"))

# ---- state.json as checkpoint_save writes it
state = {"step": 10, "tokens": 5120, "samples": 80, "updates": 10, "skipped_steps": 0, "world_size": 1,
         "seed": "7", "data_fingerprint": "ab" * 32, "code_version": "abc123", "n_floats": 4096, "shard": 4096,
         "files": {"model.safetensors": 16, "config.ini": 16, "optimizer/rank_00000.bin": 16}, "complete": True}
out("state_json", "state.json", json.dumps(state, indent=1))
state2 = dict(state, files={"model.safetensors": 17, "config.json": 3}, seed="18446744073709551615")
out("state_json", "state_bad_sizes.json", json.dumps(state2))

# ---- JSONL / TXT records: byte 0 = kind (0 jsonl, 1 txt blocks, 2 txt file), byte 1 = limit
out("jsonl", "lines.jsonl", b"\0\x08" + b'{"text": "Hello world"}\n\n{"text": "caf\\u00e9 \\ud83d\\ude00 tab\\tnew\\nline"}\n'
    b'{"id": 3}\n[1,2]\n{"text": 5}\n{"text": "a\\u0000b"}\r\n{"text": "\xc3\xa9 raw utf-8 and bad \xff"}\n')
out("jsonl", "long.jsonl", b"\0\x00" + b'{"text": "' + b"x" * 40 + b'"}\n{"text": "short"}\n')
out("jsonl", "blocks.txt", b"\x01\x02" + b"First document,\nstill first.\n\n \t\nSecond one\n\xe4\xb8\xad\xe6\x96\x87 more\n\n\n"
    b"Third " + b"word " * 20 + b"\nnext line\n")
out("jsonl", "whole.txt", b"\x02\x01" + b"whole file\n\nis one document " * 5 + b"\xf0\x9f\x98\x80\xf0\x9f")

import gzip, shutil as _sh
out("jsonl", "lines.jsonl.gz", b"\3\x08" + gzip.compress(b'{"text": "compressed line"}\n{"text": "two"}\n', mtime=0))
if _sh.which("zstd"):
    z = subprocess.run(["zstd", "-q", "-c"], input=b"zstd text document\n\nsecond one\n", stdout=subprocess.PIPE, check=True).stdout
    out("jsonl", "blocks.txt.zst", b"\4\x02" + z)

# ---- tokenizer.json: cut-down Qwen3
if os.path.exists(QWEN):
    t = json.load(open(QWEN, encoding="utf-8"))
    vocab_full = t["model"]["vocab"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    byte_chars = [chr(c) for c in cs]
    vocab = {}
    for ch in byte_chars:
        vocab[ch] = len(vocab)
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab_full and a + b not in vocab:
            merges.append([a, b]); vocab[a + b] = len(vocab)
        if len(merges) >= 300:
            break
    added = [dict(a, id=len(vocab) + i) for i, a in enumerate(t["added_tokens"][:4])]
    mini = dict(t, added_tokens=added)
    mini["model"] = dict(t["model"], vocab=vocab, merges=merges)
    out("tokenizer_json", "qwen3_mini.json", json.dumps(mini, ensure_ascii=False, separators=(",", ":")))
    # the same with merges as "a b" strings (the older tokenizers format) and no added tokens
    legacy = dict(mini, added_tokens=[], normalizer=None)
    legacy["model"] = dict(mini["model"], merges=[a + " " + b for a, b in merges[:100]])
    out("tokenizer_json", "legacy_merges.json", json.dumps(legacy, ensure_ascii=False))
else:
    print("make_corpus: %s not found, tokenizer seeds left as they are" % QWEN)

# ---- probe sets from tools/make-probe
tmp = os.path.join(ROOT, "build", "scratch", "fuzz-corpus")
os.makedirs(tmp, exist_ok=True)
for name, args in [("synthetic_p2.bin", ["--residues", "2"]), ("synthetic_p3_pad.bin", ["--residues", "3", "--padding", "2"])]:
    p = os.path.join(tmp, name)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", p,
                    "--per-residue", "1", "--max-len", "150", "--quiet"] + args, check=True, stdout=subprocess.DEVNULL)
    out("probe", name, open(p, "rb").read())

# ---- probe + calibration set pairs (fuzz_probe: a second file after the first one's implied size)
def make_probe(name, args):
    p = os.path.join(tmp, name)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", p, "--quiet"] + args,
                   check=True, stdout=subprocess.DEVNULL)
    return open(p, "rb").read()
p2 = make_probe("p2.bin", ["--residues", "2", "--per-residue", "1", "--max-len", "150"])
p2_calib = make_probe("p2_calib.bin", ["--residues", "2", "--per-residue", "1", "--max-len", "150", "--seed", "7"])
p3 = make_probe("p3.bin", ["--residues", "3", "--per-residue", "1", "--max-len", "150"])
p2_long = make_probe("p2_long.bin", ["--residues", "2", "--per-residue", "1", "--max-len", "160"])
needle = make_probe("needle.bin", ["--layout", "needle", "--residues", "2", "--per-residue", "1", "--max-len", "64",
                                   "--record-tokens", "2"])
needle_calib = make_probe("needle_calib.bin", ["--layout", "needle", "--residues", "2", "--per-residue", "1", "--max-len", "64",
                                               "--record-tokens", "2", "--seed", "9"])
out("probe", "pair_same_build.bin", p2 + p2_calib)            # compatible: another seed
out("probe", "pair_residues.bin", p2 + p3)                    # 2 vs 3 residues
out("probe", "pair_length.bin", p2 + p2_long)                 # another prompt length
out("probe", "pair_layout.bin", p2 + needle)                  # lookup vs needle
out("probe", "pair_needle.bin", needle + needle_calib)        # compatible needle sets
out("probe", "needle.bin", needle)
other_fp = bytearray(p2_calib)
other_fp[40:104] = b"ab" * 32                                 # another tokenizer's fingerprint
out("probe", "pair_fingerprint.bin", p2 + bytes(other_fp))

# ---- option values (fuzz_options: one argv value)
for i, v in enumerate(["0:1", "0:4294967297", "4294967296:0", "+0:1", "0: 1", "1,2,0", "0,,1", "299,0", "7",
                       "000000000000000000000003", "4294967297", "9223372036854775807", "9223372036854775808",
                       "18446744073709551615", "18446744073709551616", " -18446744073709551615", "3e9", "1e12", "inf",
                       "nan", "-0", " 1", "+1", "0x1", "0.5", "1e6", "1e-400", "0x1p-1074", "2.2250738585072014e-308",
                       "all", ",".join(str(i) for i in range(300))]):
    out("options", "v%02d" % i, v)

# ---- prompt-id files (fuzz_prompt_ids)
out("prompt_ids", "ids.txt", "1 2 3\n4 5 6\n")
out("prompt_ids", "commas.txt", "1,2,,3\r\n\t7 , 8\n")
out("prompt_ids", "zeros.txt", "0000000000000000000000184 2147483647\n")
out("prompt_ids", "too_large.txt", "1\n2\n2147483648\n")
out("prompt_ids", "bad_line3.txt", "1\n2\n3 x 4\n")
out("prompt_ids", "nul.txt", b"1 2\x00 3")
out("prompt_ids", "separators_only.txt", " \t\r\n,,\n")

# ---- filler-sweep files (fuzz_filler_sweep; tok.json is the harness's copy of the legacy_merges seed)
sweep = "[sweep]\nprompt = 20 81 7\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n"
out("filler_sweep", "ids.ini", sweep)
out("filler_sweep", "commas.ini", "; comment\n# comment\n[ sweep ]\n  prompt = 1,2 , 3\r\na=4\nb=5\nfiller=0\nL0=000000000000000000002\nL1=12\n")
out("filler_sweep", "bytes_text.ini", '[sweep]\ntext = "key: "\ntokenizer = bytes\na_text = x\nb_text = y\nfiller_text = " "\nL0 = 1\nL1 = 9\n')
out("filler_sweep", "bpe_text.ini", '[sweep]\ntext = "hello world"\ntokenizer = tok.json\na_text = a\nb_text = b\nfiller_text = " "\nL0 = 0\nL1 = 16\n')
out("filler_sweep", "twice.ini", sweep + "a = 83\n")
out("filler_sweep", "both.ini", sweep.replace("a = 81", "a = 81\na_text = x"))
out("filler_sweep", "long_prompt.ini", "[sweep]\nprompt = " + " ".join(str(i % 200) for i in range(60)) + "\na = 1\nb = 2\nfiller = 3\nL0 = 0\nL1 = 4\n")
out("filler_sweep", "other_section.ini", "[other]\nx = 1\n" + sweep)

# ---- safetensors from the harness (the real writer)
h = os.path.join(ROOT, "build-fuzz", "fuzz", "fuzz_safetensors")
if os.path.exists(h):
    d = os.path.join(C, "safetensors")
    os.makedirs(d, exist_ok=True)
    subprocess.run([h], env=dict(os.environ, FUZZ_WRITE_SEEDS=d), check=True)
else:
    print("make_corpus: build the harnesses first (make fuzz) for the safetensors seeds")
for d in sorted(os.listdir(C)):
    files = os.listdir(os.path.join(C, d))
    print("%-16s %2d files, %6d bytes" % (d, len(files), sum(os.path.getsize(os.path.join(C, d, f)) for f in files)))
