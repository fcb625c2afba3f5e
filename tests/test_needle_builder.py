"""Tests of tools/make-probe --layout needle: builds needle sets and reads them back with an
independent parser of the format in data/probe.h (header layout fields 116-139), then checks
every prompt's structure (a haystack of R records of K tokens with distinct keys, the target's
key tokens at the fixed query position, its first value tokens teacher forced after it, the
fillers), the synthetic vocabulary ranges, the residue t_K mod P' (8 by default), and the
balance: the same query position and the same mean and variance of t_K in every residue group,
in both protocols; also the recorded builder options and the error for a T that cannot hold it."""
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "make-probe")
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_needle_builder")
os.makedirs(SCRATCH, exist_ok=True)


def parse(path):
    b = open(path, "rb").read()
    assert b[:8] == b"PHLPRBv1"
    hdr, rec, n, P, vocab, maxlen, ntok = struct.unpack_from("<IIIIIIQ", b, 8)
    q, nrec, ndemo = struct.unpack_from("<III", b, 104)
    layout, seed, per, pad, nk, nv = struct.unpack_from("<IIIIII", b, 116)
    assert len(b) == 256 + 32 * n + 4 * ntok
    toks = np.frombuffer(b, dtype="<u4", offset=256 + 32 * n, count=ntok)
    prompts = []
    for i in range(n):
        proto, res, tk, ans, length, tidx, off = struct.unpack_from("<IIIIIIQ", b, 256 + 32 * i)
        prompts.append(dict(protocol=proto, residue=res, t_key=tk, answer=ans, target_index=tidx,
                            tokens=[int(x) for x in toks[off:off + length]]))
    return dict(P=P, max_len=maxlen, q=q, records=nrec, demos=ndemo, layout=layout, seed=seed, per=per, pad=pad,
                nk=nk, nv=nv, prompts=prompts)


def build(name, *args):
    out = os.path.join(SCRATCH, name + ".bin")
    r = subprocess.run([sys.executable, TOOL, "--synthetic", "--layout", "needle", "--out", out, "--quiet", *args],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"{name}_builds", r.stderr[-300:])
    return parse(out) if r.returncode == 0 else None


def structure(name, s, K, T):
    nk, nv = K // 2, K - K // 2
    check(s["layout"] == 1 and s["nk"] == nk and s["nv"] == nv and s["demos"] == 0, f"{name}_header_layout",
          f"{s['layout']} {s['nk']} {s['nv']} {s['demos']}")
    R, q = s["records"], s["q"]
    F = T - R * K - (K - 1)
    check(s["pad"] == F and q == F + R * K + nk - 1 and s["max_len"] == T, f"{name}_query_position_and_padding",
          f"q {q} pad {s['pad']} F {F}")
    bad = []
    for j, p in enumerate(s["prompts"]):
        t, tk = p["tokens"], p["t_key"]
        if len(t) != q + nv:
            bad.append(f"{j}: length"); continue
        if tk % s["P"] != p["residue"]:
            bad.append(f"{j}: residue")
        if t[q + 1 - nk:q + 1] != t[tk:tk + nk] or t[tk + nk] != p["answer"] or t[q + 1:] != t[tk + nk:tk + nk + nv - 1]:
            bad.append(f"{j}: query/answer")
        hay = [i for i in range(q + 1 - nk) if not 208 <= t[i] <= 255]
        if len(hay) != R * K or any(hay[K * r + m] != hay[K * r] + m for r in range(R) for m in range(K)):
            bad.append(f"{j}: haystack layout")
            continue
        recs = [tuple(t[hay[K * r + m]] for m in range(K)) for r in range(R)]
        if len({r[:nk] for r in recs}) != R:
            bad.append(f"{j}: keys not distinct")
        if any(not 16 <= x <= 79 for r in recs for x in r[:nk]) or any(not 80 <= x <= 207 for r in recs for x in r[nk:]):
            bad.append(f"{j}: vocabulary ranges")
        if hay[K * p["target_index"]] != tk:
            bad.append(f"{j}: target index")
        if p["protocol"] == 0 and hay[-1] - hay[0] != R * K - 1:
            bad.append(f"{j}: pp haystack not contiguous")
    check(not bad, f"{name}_every_prompt_structure", f"{bad[:5]}")


def balance(name, s, per):
    P = s["P"]
    for proto, pn in ((0, "pp"), (1, "ip")):
        groups = [np.array([p["t_key"] for p in s["prompts"] if p["protocol"] == proto and p["residue"] == r], float)
                  for r in range(P)]
        counts = [len(g) for g in groups]
        check(counts == [per] * P, f"{name}_{pn}_counts", f"{counts}")
        means = np.array([g.mean() for g in groups])
        varis = np.array([g.var() for g in groups])
        # N = 48, P' = 8: 8 | N, so the means can be exactly equal; variances within 2%
        check(means.max() - means.min() <= 0.05, f"{name}_{pn}_equal_mean_tk", f"{means.min():.3f}..{means.max():.3f}")
        check(varis.max() - varis.min() <= 0.02 * varis.mean(), f"{name}_{pn}_equal_variance_tk",
              f"{varis.min():.1f}..{varis.max():.1f}")
        check(varis.mean() > 8 ** 2, f"{name}_{pn}_tk_spread_over_many_windows", f"{varis.mean():.1f}")
    qs = {len(p["tokens"]) - s["nv"] for p in s["prompts"]}
    check(qs == {s["q"]}, f"{name}_one_query_position", f"{qs}")


s = build("k4", "--per-residue", "48", "--max-len", "256", "--seed", "9")
if s:
    check(s["P"] == 8 and s["seed"] == 9 and s["per"] == 48, f"k4_default_residues_8_and_recorded_options", f"{s['P']} {s['seed']}")
    structure("k4", s, 4, 256)
    balance("k4", s, 48)
s = build("k2", "--per-residue", "48", "--max-len", "200", "--record-tokens", "2", "--records", "60")
if s:
    check(s["records"] == 60, "k2_records_option", f"{s['records']}")
    structure("k2", s, 2, 200)
    balance("k2", s, 48)
s = build("k6_p12", "--per-residue", "24", "--max-len", "256", "--record-tokens", "6", "--residues", "12")
if s:
    structure("k6_p12", s, 6, 256)
    check(s["P"] == 12, "k6_residues_option", f"{s['P']}")
r = subprocess.run([sys.executable, TOOL, "--synthetic", "--layout", "needle", "--out", os.path.join(SCRATCH, "x.bin"),
                    "--max-len", "20", "--records", "8"], capture_output=True, text=True)
check(r.returncode == 2 and "max-len 20" in r.stderr, "too_short_max_len_refused", r.stderr.strip())
finish()
