"""./train --score CKPT --input FILE (analysis/score.h, docs/spec.md §4.9, §4.8):
- a token shard: the fold by phase equals ./train --eval's validation loss by residue (another code
  path, trainer/evaluate.c) with eval.residues = the period, and the overall mean its validation loss;
- the standard errors (trainer/loss_stats.h: a bootstrap over the windows) agree within 20% with
  the window-clustered delta-method SE computed here from the per-token CSV (the large-sample
  value a window bootstrap estimates); the per-phase CSV, the HDF5 group and the printed table agree;
- --ids with a count that leaves a partial last window: every token 1..n-1 scored once, and the
  tokens of the full windows score as in the shard (the padding is never seen: the model is causal);
- text on a byte-tokenizer checkpoint gives the same log-probabilities as the text's bytes given
  as ids (computed here), and the bits per byte printed;
- a weights-only checkpoint scores the same numbers; --period sets the fold;
- bad input: text on a synthetic checkpoint, an id outside the vocabulary, a shard of another
  tokenizer, one token, an unknown option: one line, exit 2, nothing written."""
import csv
import math
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip
from trainutil import ROOT, TINY, run, require_train, scratch

require_train()
d = scratch("test_score")
T, S = 64, 4                                    # configs/test/tiny.ini: seq_len 64, W4 S4
subprocess.run([os.path.join(ROOT, "train"), "--make-synthetic", os.path.join(d, "synth"), "--seq-len", str(T),
                "--train-rows", "300", "--val-rows", "8"], check=True, stdout=subprocess.DEVNULL)
rc, out = run([TINY, f"data.train={d}/synth/train_*.bin", f"data.val={d}/synth/val_*.bin", f"run.dir={d}", "run.name=r",
               "train.steps=10", "checkpoint.every=10", "eval.every=10"])
check(rc == 0, "tiny training run", out[-300:])
ck = os.path.join(d, "r", "checkpoints", "step_00000010")
val = os.path.join(d, "synth", "val_000.bin")


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def cluster_se(rows, P):
    """Per phase and overall: (mean, se, n) with windows as clusters, from the per-token rows."""
    windows = sorted({int(r["window"]) for r in rows})
    K = len(windows)
    res = []
    for g in list(range(P)) + [None]:
        s = {w: 0.0 for w in windows}
        n = {w: 0 for w in windows}
        for r in rows:
            if g is None or int(r["position"]) % P == g:
                s[int(r["window"])] += -float(r["logprob"])
                n[int(r["window"])] += 1
        N = sum(n.values())
        mu = sum(s.values()) / N
        se = math.sqrt(K / (K - 1) * sum((s[w] - mu * n[w]) ** 2 for w in windows)) / N
        res.append((mu, se, N))
    return res


# ---- 1. a shard against --eval
rc, out = run(["--score", ck, "--input", val])
check(rc == 0 and "stored /score_000" in out, "--score on the validation shard", out[-400:])
rc, ev = run(["--eval", ck, f"eval.residues={S}"])
# --eval's lines: '  r= 3  5.5331 +- 0.0123  (n = 40 tokens)': the mean is the field after r=N
by_res = [float(re.match(r"\s*r=\s*\d+\s+(\S+)", l).group(1)) for l in ev.splitlines() if re.match(r"\s*r=\s*\d+\s+\S+", l)]
overall = next((float(l.split()[2]) for l in ev.splitlines() if l.startswith("validation loss")), None)
phase = read_csv(os.path.join(ck, "score_000.phase.csv"))
check(len(by_res) == S and [round(float(p["nll"]), 4) for p in phase[:S]] == by_res,
      "the fold by phase t mod S equals --eval's loss by residue (eval.residues = S)", f"{phase} vs {by_res}")
check(phase[-1]["phase"] == "all" and overall is not None and round(float(phase[-1]["nll"]), 4) == overall,
      "the overall mean equals --eval's validation loss", f"{phase[-1]} vs {overall}")

tokens = read_csv(os.path.join(ck, "score_000.tokens.csv"))
n_val = (os.path.getsize(val) - 1024) // 4
check(len(tokens) == n_val - 1 and [int(r["index"]) for r in tokens] == list(range(1, n_val)),
      "every token 1..n-1 of the shard scored once", f"{len(tokens)} rows for {n_val} tokens")
ref = cluster_se(tokens, S)
got = [(float(p["nll"]), float(p["se"]), int(p["tokens"])) for p in phase]
check(all(abs(a[0] - b[0]) < 1e-6 and a[2] == b[2] for a, b in zip(ref, got)) and len(got) == S + 1,
      "the fold's means and counts recomputed from the per-token log-probabilities", f"{got} vs {ref}")
check(all(abs(b[1] / a[1] - 1) < 0.2 for a, b in zip(ref, got)),
      "bootstrap SEs within 20% of the delta-method SE over windows computed here", f"{[g[1] for g in got]} vs {[r[1] for r in ref]}")
check(all(0 < g[1] < 1 for g in got), "the SEs are positive and finite", str(got))

try:
    import h5py
    with h5py.File(os.path.join(ck, "score.h5"), "r") as f:
        g = f["score_000"]
        ok = (g.attrs["signal"] in (b"nll", "nll") and list(g["nll"][:].round(6)) == [round(x[0], 6) for x in got[:S]]
              and list(g["nll_errors"][:].round(6)) == [round(x[1], 6) for x in got[:S]]
              and len(g["logprob"]) == n_val - 1 and abs(g["logprob"][5] - float(tokens[5]["logprob"])) < 1e-6
              and int(g["token_id"][5]) == int(tokens[5]["token_id"]) and int(g.attrs["period"]) == S
              and abs(g.attrs["nll_se"] - got[-1][1]) < 1e-7 and 0 <= g.attrs["p_phase"] <= 1 and g.attrs["df1_phase"] == S - 1)
        check(ok, "score.h5 /score_000: the fold and its errors as the signal, the per-token arrays, period, SE, test",
              str(dict(g.attrs)))
except ImportError:
    skip("score_h5", "skipped: no h5py")

# a second call: its own group and CSVs (score_001), the first call's CSVs left as they were
before = open(os.path.join(ck, "score_000.tokens.csv")).read()
rc, out = run(["--score", ck, "--input", val, "--period", "3"])
check(rc == 0 and "stored /score_001" in out and open(os.path.join(ck, "score_000.tokens.csv")).read() == before
      and len(read_csv(os.path.join(ck, "score_001.phase.csv"))) == 4,
      "a second --score: /score_001 with score_001.{phase,tokens}.csv; score_000's CSVs unchanged", out[-300:])

# CSVs of that number already there (a group stored in a sidecar is numbered afresh): the next free number
open(os.path.join(ck, "score_002.phase.csv"), "w").write("mine\n")
rc, out = run(["--score", ck, "--input", val, "--period", "3"])
check(rc == 0 and "stored /score_002" in out and f"wrote {ck}/score_003.phase.csv and {ck}/score_003.tokens.csv" in out
      and open(os.path.join(ck, "score_002.phase.csv")).read() == "mine\n",
      "an existing score_002 CSV is never replaced: the next free number (003) is used", out[-300:])

# ---- 2. --ids with a partial last window; --period; --out and --csv
ids = [int(r["token_id"]) for r in tokens]
with open(val, "rb") as f:
    f.seek(1024)
    first = struct.unpack("<I", f.read(4))[0]
n = 3 * T + 11
idf = os.path.join(d, "ids.txt")
open(idf, "w").write(" ".join(map(str, [first] + ids[:n - 1])) + "\n")
rc, out = run(["--score", ck, "--input", idf, "--ids", "--period", "3", "--out", os.path.join(d, "o", "ids.h5")])
part = read_csv(os.path.join(d, "o", "ids_000.tokens.csv")) if rc == 0 else []
check(rc == 0 and len(part) == n - 1 and int(part[-1]["window"]) == 3 and int(part[-1]["position"]) == 9,
      "--ids: n - 1 tokens scored, the last window partial (3 full windows of 64 + 10)", out[-300:])
check(all(abs(float(a["logprob"]) - float(b["logprob"])) < 1e-5 for a, b in zip(part, tokens[:n - 1])) and len(part) == n - 1,
      "the same tokens score the same in a partial window as in the shard (padding never seen)", "")
ph3 = read_csv(os.path.join(d, "o", "ids_000.phase.csv")) if rc == 0 else []
check(len(ph3) == 4 and sum(int(p["tokens"]) for p in ph3[:3]) == n - 1 and int(part[7]["phase"]) == 7 % 3,
      "--period 3: the fold has 3 phases covering every token", str(ph3))

# a 7-token input is one window: the phase test cannot run, and the output says so instead of F(0, 0) = nan
short = os.path.join(d, "short.ids")
open(short, "w").write(" ".join(map(str, ids[:7])) + "\n")
rc, out = run(["--score", ck, "--input", short, "--ids", "--out", os.path.join(d, "o", "short.h5")])
check(rc == 0 and "homogeneity across the phases: not testable with 1 window of 64 tokens" in out and "F(0, 0)" not in out,
      "one window: the homogeneity test is said to be not testable, no F(0, 0) = nan", out[-400:])
# ... and the mean has no standard error (it printed '+- 0.0000': one window's bootstrap replicates are all that window)
check(rc == 0 and "no standard error: 1 window" in out and "+- 0.0000" not in out,
      "one window: the mean NLL has no standard error, not +- 0.0000", out[-400:])

# ---- 3. text on a byte-tokenizer checkpoint
text = "".join(f"In the beginning {i} the words were {'abc'[i % 3]} and {i * i % 17}.\n" for i in range(400))
tx = os.path.join(d, "text.txt")
open(tx, "w").write(text)
rc, o = subprocess.run([os.path.join(ROOT, "tokenize"), "--tokenizer", "bytes", "--input", tx, "--out", os.path.join(d, "tok"),
                        "--val-tokens", "0", "--quiet"], capture_output=True, text=True).returncode, ""
shards = sorted(os.path.join(d, "tok", f) for f in os.listdir(os.path.join(d, "tok")) if f.endswith(".bin")) if rc == 0 else []
check(rc == 0 and shards, "./tokenize --tokenizer bytes: the text as a shard", str(rc))
rc, out = run([TINY, "model.vocab_size=257", f"data.train={shards[0] if shards else 'none'}", f"run.dir={d}", "run.name=b",
               "train.steps=4", "checkpoint.every=4", "eval.every=0"])
cb = os.path.join(d, "b", "checkpoints", "step_00000004")
check(rc == 0, "a byte-vocabulary checkpoint", out[-300:])
rc, out = run(["--score", cb, "--input", tx, "--csv", os.path.join(d, "t_text")])
rc2, out2 = None, ""
open(os.path.join(d, "bytes.ids"), "w").write(",".join(str(b) for b in text.encode()))
rc2, out2 = run(["--score", cb, "--input", os.path.join(d, "bytes.ids"), "--ids", "--csv", os.path.join(d, "t_ids")])
a = read_csv(os.path.join(d, "t_text_000.tokens.csv")) if rc == 0 else []
b = read_csv(os.path.join(d, "t_ids_001.tokens.csv")) if rc2 == 0 else []
check(rc == 0 and rc2 == 0 and len(a) == len(text.encode()) - 1 and a == b,
      "text with the checkpoint's own tokenizer (bytes) scores as its bytes given as ids", out[-300:] + out2[-300:])
nll = float(read_csv(os.path.join(d, "t_text_000.phase.csv"))[-1]["nll"]) if a else 0
bpb = next((float(w) for l in out.splitlines() if "bits/byte" in l for w in [l.split(",")[-1].split()[0]]), None)
check(bpb is not None and abs(bpb - nll * len(a) / math.log(2) / len(text.encode())) < 1e-3,
      "text: bits per byte = total NLL / ln 2 / bytes", f"{bpb} vs nll {nll}")

# ---- 4. weights only
wo = os.path.join(d, "weights_only")
shutil.copytree(ck, wo, ignore=shutil.ignore_patterns("score*", "optimizer", "analysis*", ".*lock"))
os.remove(os.path.join(wo, "state.json"))
rc, out = run(["--score", wo, "--input", val])
w_phase = read_csv(os.path.join(wo, "score_000.phase.csv")) if rc == 0 else []
check(rc == 0 and "weights-only checkpoint" in out and w_phase == phase, "a weights-only checkpoint scores the same", out[-300:])

# ---- 5. bad input: one line, exit 2, nothing written
open(os.path.join(d, "plain.txt"), "w").write("some text\n")
open(os.path.join(d, "big.ids"), "w").write("1 2 300 4\n")
open(os.path.join(d, "one.ids"), "w").write("5\n")
bad = [(["--input", os.path.join(d, "plain.txt")], ["no text tokenizer", "--ids"]),
       (["--input", os.path.join(d, "big.ids"), "--ids"], ["token 2 is id 300", "0..255"]),
       (["--input", shards[0] if shards else "none"], ["tokenizer"]),
       (["--input", os.path.join(d, "one.ids"), "--ids"], ["at least 2"]),
       (["--input", val, "--period", "0"], ["--period", "[1, "]),
       (["--input", val, "--bogus", "1"], ["unknown option --bogus"]),
       (["--ids"], ["--input FILE is required"])]
for args, words in bad:
    bd = os.path.join(d, "bad")
    shutil.rmtree(bd, ignore_errors=True)
    p = subprocess.run([os.path.join(ROOT, "train"), "--score", ck, "--out", os.path.join(bd, "x.h5")] + args,
                       capture_output=True, text=True)
    lines = [l for l in p.stderr.splitlines() if l.startswith("phaselab:")]
    check(p.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words) and not os.path.exists(bd),
          f"bad input {' '.join(os.path.basename(x) for x in args)}: one line, exit 2, nothing written",
          f"rc {p.returncode}: {p.stderr.strip()[-300:]}")
finish()
