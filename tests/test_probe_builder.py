"""Tests of tools/make-probe: builds small probe sets and reads them back with an independent
parser of the format documented in data/probe.h, then checks the structure of every prompt
(64 key-value records with distinct keys, 8 demonstrations repeated from the list, the target
key last, the right answer), the synthetic vocabulary ranges, the common query position, and
the balance: equal mean and variance of t_K across residue groups in both protocols."""
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "make-probe")
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_probe_builder")
os.makedirs(SCRATCH, exist_ok=True)


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def parse(path):
    b = open(path, "rb").read()
    assert b[:8] == b"PHLPRBv1", "magic"
    hdr, rec, n, P, vocab, maxlen, ntok = struct.unpack_from("<IIIIIIQ", b, 8)
    fp = b[40:104].rstrip(b"\0").decode()
    q, nrec, ndemo = struct.unpack_from("<III", b, 104)
    assert hdr == 256 and rec == 32, "sizes"
    assert len(b) == 256 + 32 * n + 4 * ntok, "file length"
    toks = np.frombuffer(b, dtype="<u4", offset=256 + 32 * n, count=ntok)
    prompts = []
    for i in range(n):
        proto, res, tk, ans, length, tidx, off = struct.unpack_from("<IIIIIIQ", b, 256 + 32 * i)
        prompts.append(dict(protocol=proto, residue=res, t_key=tk, answer=ans, target_index=tidx,
                            tokens=toks[off:off + length].astype(np.int64)))
    return dict(P=P, vocab=vocab, max_len=maxlen, fingerprint=fp, q=q, records=nrec, demos=ndemo,
                prompts=prompts, raw=b)


def structure_errors(pr, q, is_filler, is_key, is_value, R=64, D=8):
    """Returns a list of what is wrong with one prompt of R records and D demonstrations (empty
    when it is well formed)."""
    t, tk = pr["tokens"], pr["t_key"]
    errs = []
    if len(t) != q + 1:
        errs.append(f"length {len(t)} != {q + 1}")
        return errs
    nonfill = [i for i in range(len(t)) if not is_filler(t[i])]
    if len(nonfill) != 2 * R + 2 * D + 1:
        errs.append(f"{len(nonfill)} non-filler tokens")
        return errs
    pairs = [(nonfill[2 * i], nonfill[2 * i + 1]) for i in range(R + D)]
    if any(b != a + 1 for a, b in pairs):
        errs.append("a key is not directly followed by its value")
    if not all(is_key(t[a]) and is_value(t[b]) for a, b in pairs):
        errs.append("key/value token ranges")
    recs = [(int(t[a]), int(t[b])) for a, b in pairs[:R]]
    table = dict(recs)
    if len(table) != R:
        errs.append("keys not distinct")
    demos = [(int(t[a]), int(t[b])) for a, b in pairs[R:]]
    if any(table.get(k) != v for k, v in demos):
        errs.append("a demo is not a record of the list")
    if len({k for k, _ in demos}) != D:
        errs.append("demos repeat")
    query = int(t[nonfill[-1]])
    if nonfill[-1] != q or query not in table:
        errs.append("the last token is not a key of the list")
    elif query in {k for k, _ in demos}:
        errs.append("the target is among the demos")
    elif table[query] != pr["answer"]:
        errs.append(f"answer {pr['answer']} != the target's value {table[query]}")
    if pairs[pr["target_index"]][0] != tk or int(t[tk]) != query:
        errs.append(f"t_K {tk} is not the target key's position in the list")
    if pr["protocol"] == 0 and pairs[R - 1][0] - pairs[0][0] != 2 * R - 2:
        errs.append("pp list is not contiguous")
    return errs


# ---- synthetic set, default max-len (256), 48 prompts per residue -----------------------------
N, P = 48, 24
out = os.path.join(SCRATCH, "synth.probe")
r = run("--synthetic", "--out", out, "--per-residue", str(N), "--seed", "7", "--quiet")
check(r.returncode == 0 and os.path.exists(out), "builds_synthetic", r.stderr.strip())
if r.returncode != 0:
    finish()
print("# " + r.stdout.strip().replace("\n", "\n# "))
d = parse(out)
prompts = d["prompts"]
check(d["P"] == P and d["vocab"] == 256 and d["fingerprint"] == "synthetic" and len(prompts) == 2 * P * N,
      "header_fields", f"P {d['P']} vocab {d['vocab']} fp {d['fingerprint']} n {len(prompts)}")
check(d["max_len"] <= 256 and all(len(p["tokens"]) <= 256 for p in prompts), "fits_max_len", f"max {d['max_len']}")

is_filler = lambda x: 208 <= x <= 255
is_key = lambda x: 16 <= x <= 79
is_value = lambda x: 80 <= x <= 207
bad = []
for i, p in enumerate(prompts):
    e = structure_errors(p, d["q"], is_filler, is_key, is_value)
    if e:
        bad.append(f"prompt {i}: {'; '.join(e)}")
check(not bad, "prompt_structure_records_demos_target", "; ".join(bad[:3]))
check(all(p["residue"] == p["t_key"] % P for p in prompts), "residue_is_tk_mod_P")

qpos = {len(p["tokens"]) - 1 for p in prompts}
check(qpos == {d["q"]}, "query_position_equal_everywhere", f"query positions {sorted(qpos)[:5]}")

ip_gaps = 0
for p in prompts:
    if p["protocol"] == 1:
        nf = [i for i in range(len(p["tokens"])) if not is_filler(p["tokens"][i])]
        ip_gaps += nf[127] - nf[0] > 127
check(ip_gaps > 0.9 * P * N, "ip_fillers_between_records", f"{ip_gaps} of {P * N} ip prompts have inner gaps")

pp = [p for p in prompts if p["protocol"] == 0]
ip = [p for p in prompts if p["protocol"] == 1]
check(all(a["t_key"] == b["t_key"] and a["answer"] == b["answer"] and a["residue"] == b["residue"] for a, b in zip(pp, ip)),
      "protocols_paired", "pp and ip prompt i differ in t_K or answer")

for proto, name in ((0, "pp"), (1, "ip")):
    groups = [np.array([p["t_key"] for p in prompts if p["protocol"] == proto and p["residue"] == r], dtype=float)
              for r in range(P)]
    counts = [len(g) for g in groups]
    means = np.array([g.mean() for g in groups])
    varis = np.array([g.var() for g in groups])
    print(f"# {name}: counts {min(counts)}..{max(counts)}, mean t_K {means.min():.4f}..{means.max():.4f}, "
          f"var t_K {varis.min():.2f}..{varis.max():.2f}")
    check(counts == [N] * P, f"{name}_count_per_residue", f"{counts}")
    # N = 48: means are exactly equal (24 | N, integer target mean); variances within 2% (at an
    # exactly equal mean the variance moves in steps of 576/N = 12, about 0.5% of it). A design
    # that ignored the residue would have means about 23 positions apart.
    check(means.max() - means.min() <= 0.05, f"{name}_equal_mean_tk", f"means {means.min():.3f}..{means.max():.3f}")
    check((varis.max() - varis.min()) <= 0.02 * varis.mean(), f"{name}_equal_variance_tk",
          f"variances {varis.min():.1f}..{varis.max():.1f}")
    check(varis.mean() > 24 ** 2, f"{name}_tk_spread_over_many_windows", f"variance {varis.mean():.1f}")

# ---- determinism, a shorter max-len, bad arguments ----------------------------------------------
out2 = os.path.join(SCRATCH, "synth2.probe")
r2 = run("--synthetic", "--out", out2, "--per-residue", str(N), "--seed", "7", "--quiet")
check(r2.returncode == 0 and open(out2, "rb").read() == d["raw"], "same_seed_same_file")
out3 = os.path.join(SCRATCH, "short.probe")
r3 = run("--synthetic", "--out", out3, "--per-residue", "24", "--max-len", "200", "--quiet")
ok = r3.returncode == 0
if ok:
    d3 = parse(out3)
    ok = d3["max_len"] <= 200 and {len(p["tokens"]) for p in d3["prompts"]} == {d3["q"] + 1}
    ms = [np.mean([p["t_key"] for p in d3["prompts"] if p["residue"] == r]) for r in range(P)]
    ok = ok and max(ms) - min(ms) <= 0.05   # N = 24: exactly equal means
check(ok, "max_len_200_fits_and_balances", r3.stderr.strip())
# ---- short contexts (docs/spec.md §3.5): fewer records and demonstrations ---------------------
# By hand from the fit rule: T = 64: D = 64 // 16 = 4, R = (64 - 9) // 3 = 18, F = 64 - 36 - 8 - 1 = 19,
# target positions F + 2R - 1 = 54, so at most 54 // 3 = 18 residues; T = 100: D = 6, R = 29, F = 29;
# T = 32: D = 2, R = 9, F = 9.
for T, R, D, F, Pp in ((64, 18, 4, 19, 8), (100, 29, 6, 29, 24), (32, 9, 2, 9, 8)):
    o = os.path.join(SCRATCH, f"t{T}.probe")
    rr = run("--synthetic", "--out", o, "--per-residue", "12", "--max-len", str(T), "--residues", str(Pp), "--quiet")
    ok, why = rr.returncode == 0, rr.stderr.strip()
    if ok:
        dd = parse(o)
        errs = [e for p in dd["prompts"] for e in structure_errors(p, dd["q"], is_filler, is_key, is_value, R, D)]
        ok = (dd["q"] == T - 1 and dd["records"] == R and dd["demos"] == D and not errs
              and all(p["residue"] == p["t_key"] % Pp for p in dd["prompts"]) and len(dd["prompts"]) == 2 * 12 * Pp)
        why = f"q {dd['q']} records {dd['records']} demos {dd['demos']}: {errs[:2]}"
    check(ok, f"max_len_{T}_fits_{R}_records_{D}_demos", why)
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", "64")
check(r4.returncode == 2 and "too few for 24 residues" in r4.stderr and "--residues 18 or fewer" in r4.stderr
      and r4.stderr.count("\n") == 1, "short_max_len_names_the_residues_that_fit", f"rc {r4.returncode}: {r4.stderr.strip()}")
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", "64", "--residues", "18", "--per-residue", "3")
check(r4.returncode == 0, "the_recommended_residues_build", r4.stderr.strip())
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--layout", "needle", "--max-len", "64", "--residues", "20")
check(r4.returncode == 2 and "--residues 19 or fewer" in r4.stderr, "needle_short_names_the_residues_that_fit", r4.stderr.strip())
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--layout", "needle", "--max-len", "64", "--residues", "19",
         "--per-residue", "3")
check(r4.returncode == 0, "needle_64_builds_with_19_residues", r4.stderr.strip())
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", "64", "--records", "3", "--demos", "3")
check(r4.returncode == 2 and "demos <= records - 1" in r4.stderr, "rejects_more_demos_than_records", r4.stderr.strip())
r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", "8")
check(r4.returncode == 2 and r4.stderr.strip() == "make-probe: --max-len 8: too short for the default records and "
      "demonstrations; the smallest --max-len is 9, or give --records 2 --demos 1", "rejects_a_prompt_too_short_for_two_records",
      r4.stderr.strip())
# a --max-len too short for any probe is blamed on --max-len (never on --records / --demos the user did not give),
# naming the smallest that works; both smallest lengths build
for T in ("4", "7"):
    r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", T)
    check(r4.returncode == 2 and r4.stderr.strip() == f"make-probe: --max-len {T}: too short for any lookup probe; the "
          "smallest --max-len is 9 (8 with --records 2 --demos 1)", f"max_len_{T}_names_the_smallest_max_len", r4.stderr.strip())
for T, extra in (("9", []), ("8", ["--records", "2", "--demos", "1"])):
    r4 = run("--synthetic", "--out", os.path.join(SCRATCH, "x.probe"), "--max-len", T, "--residues", "1", "--per-residue", "2", *extra)
    check(r4.returncode == 0 and f"prompt length {T}," in r4.stdout, f"max_len_{T}_builds", r4.stderr.strip())

# ---- a real tokenizer --------------------------------------------------------------------------
tokjson = next((p for p in (os.path.join(ROOT, "data", "qwen3-tokenizer", "tokenizer.json"),
                            "/work/shared/data/qwen3-tokenizer/tokenizer.json") if os.path.exists(p)), None)
if tokjson is None:
    skip("tokenizer_animals_and_names", "no Qwen3 tokenizer.json found")
else:
    import json
    vocab = json.load(open(tokjson))["model"]["vocab"]
    inv = {i: w for w, i in vocab.items()}
    out5 = os.path.join(SCRATCH, "qwen.probe")
    r5 = run("--tokenizer", tokjson, "--out", out5, "--per-residue", "2", "--quiet")
    ok = r5.returncode == 0
    why = r5.stderr.strip()
    if ok:
        d5 = parse(out5)
        p0 = d5["prompts"][0]["tokens"]
        words = [inv.get(int(x), "?") for x in p0]
        keys = {int(x) for x in p0[:-1]} & {int(p0[-1])}
        ok = (len(d5["fingerprint"]) == 64 and d5["vocab"] >= 151643 and all(w.startswith("Ġ") for w in words)
              and inv[d5["prompts"][0]["answer"]][1].isupper() and inv[int(p0[-1])][1:].islower() and len(keys) == 1)
        why = " ".join(words[-6:])
        t = {"Ġcat", "Ġdog", "Ġhorse"} & {inv[int(x)] for p in d5["prompts"] for x in p["tokens"]}
        ok = ok and len(t) > 0
    check(ok, "tokenizer_animals_and_names", why)
finish()
