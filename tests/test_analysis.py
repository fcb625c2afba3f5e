"""The causal analyses end to end on tiny checkpoints trained here (./train --eval CKPT with
--gate-cycle, --knockout, --filler-sweep, and plain --eval on a needle set):

- gate cycling equals a weight edit: the accuracies (and validation losses) of --gate-cycle d
  equal those of plain --eval on a copy of the checkpoint whose {k,v}_gate.{weight,bias} were
  rolled by d along the W axis with numpy in model.safetensors (np.roll, not the code under
  test); delta = 0 and delta = W give the unmodified results; `all` stores the prediction
  A_0((phi - delta) mod S) computed here from the clean curve;
- knockout and the default calibration set run and store [L, G, 2, P] maps; with grid = staggered
  the map folded by phase uses each KV head's own phase (t_K - o_g) mod S (checked against o_g and
  phases worked out by hand, and against a fold of the stored per-residue accuracies);
- bad input (full attention, W != S, delta out of range, a KV head that does not exist, a
  calibration set equal to the evaluated one, a probe for another T or vocabulary, a bad sweep
  file, unknown layers) gives one line naming the flag or file, exit 2, and writes nothing;
- analysis.h5 keeps every earlier group when a new analysis is appended (NXdata attributes,
  labelled dimensions, the checkpoint step as an attribute).
The tiny models barely learn in 20 steps, so the accuracies are mostly 0; the validation
loss by residue, which moves with every weight, is what makes the weight-edit comparison
able to fail."""
import json
import os
import re
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
    skip("analysis", "h5py missing")
    finish()

tu.require_train()
ROOT = tu.ROOT
MAKE_PROBE = os.path.join(ROOT, "tools", "make-probe")
d, data = tu.scratch_with_corpus("test_analysis", seq_len=160, train_rows=300, val_rows=8)
common = ["data.seq_len=160", "train.batch_tokens=640", f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin",
          f"run.dir={d}", "eval.every=1000", "checkpoint.every=1000"]


def train(name, config, steps, extra=()):
    rc, out = tu.run([config] + common + [f"run.name={name}", f"train.steps={steps}"] + list(extra))
    ck = os.path.join(d, name, "checkpoints", f"step_{steps:08d}")
    check(rc == 0 and os.path.isdir(ck), f"train {name}", out[-400:])
    return ck


ck = train("w4s4", tu.TINY, 20)
ck_w8 = train("w8s4", tu.TINY, 2, ["model.window=8"])
ck_full = train("full", os.path.join(ROOT, "configs", "test", "tiny_full.ini"), 2)


def make_probe(out, *args):
    p = subprocess.run([sys.executable, MAKE_PROBE, "--synthetic", "--out", out, "--quiet"] + list(args),
                       capture_output=True, text=True)
    check(p.returncode == 0, f"make-probe {os.path.basename(out)}", p.stderr[-300:])
    return out


probe = make_probe(os.path.join(d, "probe.bin"), "--per-residue", "2", "--max-len", "160", "--seed", "5")
calib = make_probe(os.path.join(d, "calib.bin"), "--per-residue", "1", "--max-len", "160", "--seed", "6")
probe256 = make_probe(os.path.join(d, "probe256.bin"), "--per-residue", "1", "--max-len", "256")
needle = make_probe(os.path.join(d, "needle.bin"), "--layout", "needle", "--per-residue", "3", "--max-len", "160")
raw = bytearray(open(probe, "rb").read())
raw[24:28] = struct.pack("<I", 300)           # the probe claims a 300-token vocabulary
probe_v300 = os.path.join(d, "probe_v300.bin")
open(probe_v300, "wb").write(raw)
probe_copy = os.path.join(d, "probe_copy.bin")
shutil.copy(probe, probe_copy)


def h5_last(path, kind):
    with h5py.File(path, "r") as f:
        names = sorted(k for k in f if k.startswith(kind + "_"))
        g = f[names[-1]]
        return {k: g[k][()] for k in g}, dict(g.attrs)


def printed_val(out):
    """validation loss by residue printed by plain --eval ('  r= 3  5.5331 +- 0.0123  (n = 40 tokens)')."""
    vals = []
    for line in out.splitlines():
        m = re.match(r"\s*r=\s*(\d+)\s+(\S+)", line)
        if m:
            vals.append(float(m.group(2)))
    return np.array(vals)


def plain_eval(ckpt, out_h5):
    rc, out = tu.run(["--eval", ckpt, "--probe", probe, "--out", out_h5])
    check(rc == 0, f"plain --eval {os.path.basename(out_h5)}", out[-300:])
    g, _ = h5_last(out_h5, "probe")
    return g["acc"], printed_val(out)


def roll_copy(src, dst, delta):
    """Copy of the checkpoint with the gate tensors rolled by delta along axis 1, with numpy."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    for f in ("analysis.h5",):
        if os.path.exists(os.path.join(dst, f)):
            os.remove(os.path.join(dst, f))
    path = os.path.join(dst, "model.safetensors")
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    body = bytearray(buf[8 + n:])
    rolled = 0
    for name, info in header.items():
        if name == "__metadata__" or "_gate." not in name:
            continue
        assert info["dtype"] == "F32", info
        lo, hi = info["data_offsets"]
        a = np.frombuffer(bytes(body[lo:hi]), dtype="<f4").reshape(info["shape"])
        body[lo:hi] = np.roll(a, delta, axis=1).astype("<f4").tobytes()
        rolled += 1
    open(path, "wb").write(buf[:8 + n] + bytes(body))
    # state.json records every file's sha256 (checkpoint integrity): this copy is edited on
    # purpose, so record it the way checkpoints before checksums did (file sizes only, no
    # state_sha256), which the loader accepts with a warning
    sp = os.path.join(dst, "state.json")
    st = json.load(open(sp))
    st.pop("state_sha256", None)
    st["files"] = {k: (v["bytes"] if isinstance(v, dict) else v) for k, v in st["files"].items()}
    json.dump(st, open(sp, "w"), indent=2)
    return rolled


same = lambda a, b: np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
clean_acc, clean_val = plain_eval(ck, os.path.join(d, "clean.h5"))
check(len(clean_val) == 24, "plain --eval prints 24 validation residues", f"{len(clean_val)}")

for delta in (1, 2, 3):
    out_h5 = os.path.join(d, f"gc{delta}.h5")
    rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", str(delta), "--out", out_h5])
    check(rc == 0, f"--gate-cycle {delta} runs", out[-300:])
    g, attrs = h5_last(out_h5, "gate_cycle")
    copy = os.path.join(d, f"rolled{delta}")
    n = roll_copy(ck, copy, delta)
    check(n == 8, "rolled the 8 gate tensors (k/v weight and bias, 2 layers)", f"{n}")
    acc, val = plain_eval(copy, os.path.join(d, f"rolled{delta}.h5"))
    check(same(g["acc"][0], acc), f"gate cycle {delta}: accuracies equal the rolled checkpoint's", f"{g['acc'][0]} vs {acc}")
    check(np.allclose(np.round(g["val_loss_by_residue"][0], 4), val, atol=1e-9, rtol=0),
          f"gate cycle {delta}: validation loss by residue equals the rolled checkpoint's", f"{g['val_loss_by_residue'][0]} vs {val}")
    check(not np.allclose(val, clean_val, atol=2e-4), f"gate cycle {delta}: the roll changes the model (the test can fail)",
          "rolled and clean validation losses agree")
    check(int(attrs["step"]) == 20 and attrs["NX_class"] in (b"NXdata", "NXdata"), f"gate cycle {delta}: step and NXdata attributes",
          f"{attrs.get('step')}")

for delta in (0, 4):
    out_h5 = os.path.join(d, f"gc{delta}.h5")
    rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", str(delta), "--out", out_h5])
    g, _ = h5_last(out_h5, "gate_cycle") if rc == 0 else ({"acc": [None], "val_loss_by_residue": [np.zeros(24)]}, {})
    check(rc == 0 and same(g["acc"][0], clean_acc) and np.allclose(np.round(g["val_loss_by_residue"][0], 4), clean_val, atol=1e-9),
          f"gate cycle {delta} (= 0 mod W) gives the unmodified results", out[-300:])
    _, attrs = h5_last(out_h5, "gate_cycle") if rc == 0 else (None, {})
    ran = [l for l in out.splitlines() if l.startswith("identity check:")]
    want_check = "pass" if delta == 4 else "not run"
    check(str(attrs.get("identity_check", b"").decode() if isinstance(attrs.get("identity_check"), bytes) else attrs.get("identity_check"))
          == want_check and (ran == ["identity check: delta 4 (= 0 mod 4) reproduces delta 0's counts exactly: yes"] if delta == 4
                             else ran == []) and ("gate cycle: delta 4 (1/1)" in out) == (delta == 4),
          f"gate cycle {delta}: identity_check = {want_check}" + (" (evaluated through the roll, not copied)" if delta == 4 else ""),
          f"{attrs.get('identity_check')} {ran}")

out_all = os.path.join(d, "gc_all.h5")
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "all", "--layers", "0,1", "--out", out_all])
check(rc == 0, "--gate-cycle all --layers 0,1 runs", out[-300:])
if rc == 0:
    g, attrs = h5_last(out_all, "gate_cycle")
    check(list(g["delta"]) == [0, 1, 2, 3], "all: delta = 0..S-1", f"{g['delta']}")
    a0 = g["acc_phase"][0]                  # [2, S], the clean curve
    want = np.stack([np.roll(a0, k, axis=1) for k in range(4)])      # A_0((phi - k) mod S)
    check(same(g["predicted_phase"], want), "all: predicted curve is A_0((phi - delta) mod S)", "")
    dev = np.abs(np.asarray(g["acc_phase"]) - want).max(axis=2)       # [ndelta, 2]
    check(np.allclose(g["max_deviation"], dev, atol=1e-9), "all: max_deviation = max over phases of |measured - predicted|",
          f"{np.asarray(g['max_deviation'])} vs {dev}")
    with h5py.File(out_all, "r") as f:
        ds = f[sorted(k for k in f if k.startswith("gate_cycle"))[-1]]["acc"]
        labels = [dim.label for dim in ds.dims]
    check(labels == ["delta", "protocol", "residue"], "dimension labels", f"{labels}")

# knockout with an explicit and with the default calibration set, appended to one file
ko_h5 = os.path.join(d, "ko.h5")
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "all", "--calib", calib, "--out", ko_h5])
check(rc == 0, "--knockout all --calib runs", out[-300:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--knockout", "1:0", "--out", ko_h5])
check(rc == 0 and "calibration: building" in out, "--knockout with the default calibration set (make-probe, another seed)", out[-300:])
cell = re.search(r"^ +1 +(\S+) \[ *(\S+), *(\S+)\] +-$", out, re.M)
check(re.search(r"^ +0 +- +-$", out, re.M) and cell and cell.group(1) != "-",
      "--knockout 1:0: the heads not knocked out print '-', the knocked-out one its value and 95% interval", out[-600:])
check("paired bootstrap over the" in out and re.search(r"clean: pp mean \S+  ip mean \S+ \(n = \d+ pp and \d+ ip prompts", out),
      "--knockout: the table says its n and how its interval is made", out[-900:])
rc, out = tu.run(["--eval", ck, "--probe", probe, "--gate-cycle", "1", "--out", ko_h5])
if os.path.exists(ko_h5):
    with h5py.File(ko_h5, "r") as f:
        groups = sorted(f.keys())
        shape = f["knockout_000/rel_change"].shape if "knockout_000" in f else None
        default = f.attrs.get("default")
        rm = np.asarray(f["knockout_000/rel_change_mean"]) if "knockout_000" in f else None
        rlo = np.asarray(f["knockout_000/rel_change_mean_lo"]) if "knockout_000/rel_change_mean_lo" in f else None
        rhi = np.asarray(f["knockout_000/rel_change_mean_hi"]) if "knockout_000/rel_change_mean_hi" in f else None
        gm = np.asarray(f["gate_cycle_000/mean_acc"]) if "gate_cycle_000/mean_acc" in f else None
        gacc = np.asarray(f["gate_cycle_000/acc"]) if "gate_cycle_000/acc" in f else None
    check(groups == ["gate_cycle_000", "knockout_000", "knockout_001"], "appending keeps every earlier analysis", f"{groups}")
    # every knocked-out cell's relative change has a 95% interval around it (paired bootstrap over the prompts)
    # (this tiny model scores 0: its changes are NaN, and so must their intervals be; the interval's math and
    # the prompt outcomes it reads are checked in test_probe_bootstrap and test_knockout)
    ok = rlo is not None and rhi is not None and rlo.shape == rm.shape == rhi.shape
    if ok:
        both = np.isfinite(rm) & np.isfinite(rlo) & np.isfinite(rhi)
        ok = (np.all(np.isnan(rlo[np.isnan(rm)])) and np.all(np.isnan(rhi[np.isnan(rm)]))
              and np.all((rlo[both] <= rm[both] + 1e-9) & (rm[both] <= rhi[both] + 1e-9)))
    check(ok, "knockout: rel_change_mean_lo/hi [L, G, 2]: NaN where the change is, around it elsewhere", f"{rlo} {rm} {rhi}")
    # the gate cycle's mean is the mean over residues of its stored accuracies, inside its interval
    ok = gm is not None and gm.shape == (1, 2, 3)
    if ok:
        want = np.nanmean(gacc, axis=2)                       # [nd, 2]
        pres = np.isfinite(want)
        ok = (np.allclose(gm[..., 0][pres], want[pres], atol=1e-9)
              and np.all((gm[..., 1][pres] <= gm[..., 0][pres] + 1e-9) & (gm[..., 0][pres] <= gm[..., 2][pres] + 1e-9)))
    check(ok, "gate cycle: mean_acc [delta, protocol, (mean, lo, hi)] is the residues' mean with its 95% interval", f"{gm}")
    check(shape == (2, 2, 2, 24), "knockout map [L, G, 2, P]", f"{shape}")
    check(default in (b"gate_cycle_000", "gate_cycle_000"), "root default is the newest group", f"{default}")
else:
    check(False, "knockout file written", "")

# a probe whose P (6) is no multiple of S (4): the knockout runs, says the phase fold is undefined, stores it NaN
probe6 = make_probe(os.path.join(d, "probe6.bin"), "--per-residue", "2", "--max-len", "160", "--residues", "6", "--seed", "8")
calib6 = make_probe(os.path.join(d, "calib6.bin"), "--per-residue", "1", "--max-len", "160", "--residues", "6", "--seed", "9")
k6 = os.path.join(d, "ko6.h5")
rc, out = tu.run(["--eval", ck, "--probe", probe6, "--knockout", "0:0", "--calib", calib6, "--out", k6])
g6, _ = h5_last(k6, "knockout") if rc == 0 else ({}, {})
check(rc == 0 and "note: the probe's 6 residues are not a multiple of the fold 4" in out
      and np.isnan(g6["rel_change_phase"]).all() and np.isfinite(g6["acc_clean"]).all() and g6["acc_clean"].shape == (2, 6),
      "--knockout with P = 6, S = 4: one note, rel_change_phase NaN, the per-residue accuracies stored", out[-400:])

# per-head phase (docs/spec.md §2b: the phase of t for KV head g is (t - o_g) mod S, o_g = floor(g S / G)):
# a staggered W4/S4 model with 2 KV heads has o = 0, 2, so residue r is phase r mod 4 on head 0
# and (r - 2) mod 4 on head 1 (worked by hand here, not with the code under test); the aligned
# model has o = 0, 0. rel_change_phase must be the knocked-out head's own fold of acc and acc_clean.
ck_stag = train("w4s4_staggered", tu.TINY, 20, ["model.grid=staggered"])
for name, ckpt, want_off in (("aligned", ck, [0, 0]), ("staggered", ck_stag, [0, 2])):
    kh5 = os.path.join(d, f"ko_{name}.h5")
    rc, out = tu.run(["--eval", ckpt, "--probe", probe, "--knockout", "all", "--calib", calib, "--out", kh5])
    check(rc == 0, f"--knockout all on the {name} grid runs", out[-300:])
    if rc != 0:
        continue
    g, attrs = h5_last(kh5, "knockout")
    want_phase = np.array([[(r - o) % 4 for r in range(24)] for o in want_off])
    check(list(g["grid_offset"]) == want_off, f"knockout {name}: grid_offset = {want_off}", f"{g['grid_offset']}")
    check(np.array_equal(g["phase_of_residue"], want_phase), f"knockout {name}: phase_of_residue[g, r] = (r - o_g) mod 4",
          f"{g['phase_of_residue']}")
    # the fold by the head's own phase, from the stored per-residue accuracies (equal prompts per residue)
    acc, clean, relp = g["acc"], g["acc_clean"], g["rel_change_phase"]      # [L,G,2,P], [2,P], [L,G,2,S]
    want = np.full(relp.shape, np.nan)
    for l in range(acc.shape[0]):
        for h in range(acc.shape[1]):
            for p in range(2):
                for s in range(4):
                    sel = want_phase[h] == s
                    a, c = acc[l, h, p, sel].mean(), clean[p, sel].mean()
                    if np.isfinite(a) and np.isfinite(c) and c > 0:
                        want[l, h, p, s] = 100 * (a - c) / c
    fin = np.isfinite(want)
    check(np.array_equal(fin, np.isfinite(relp)), f"knockout {name}: rel_change_phase is defined where the fold is",
          f"{relp} vs {want}")
    if fin.sum() == 0:      # the 20-step model scores 0 everywhere: no cell to compare (the fold itself is
        skip(f"knockout {name}: rel_change_phase is each head's own fold",   # checked by test_phase_test.c)
             "the tiny model scores 0 at every residue, so no fold has a value to compare")
    else:
        check(np.allclose(relp[fin], want[fin], atol=1e-9),
              f"knockout {name}: rel_change_phase is each head's own fold ({int(fin.sum())} finite cells)", f"{relp} vs {want}")
    if name == "staggered":
        check("(t_K - o_g) mod 4" in out, "knockout staggered: the table says it folds by the head's own phase", out[-600:])
        # tools/report labels each row with the head's o_g (its own formula from the grid, docs/spec.md §2b)
        shutil.copy(kh5, os.path.join(ckpt, "analysis.h5"))
        with h5py.File(os.path.join(ckpt, "analysis.h5"), "a") as f:   # the untrained model scores 0: give the maps values to draw
            grp = f[sorted(k for k in f if k.startswith("knockout_"))[-1]]
            for k in ("rel_change_mean", "rel_change_phase"):
                grp[k][...] = np.arange(grp[k].size, dtype=float).reshape(grp[k].shape) - 5.0
        rep_s = os.path.join(d, "report_staggered")
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(d, "w4s4_staggered"),
                            "--out", rep_s], capture_output=True, text=True)
        md = open(os.path.join(rep_s, "analysis.md")).read() if os.path.exists(os.path.join(rep_s, "analysis.md")) else ""
        check(p.returncode == 0 and "| 0:1 (o=2) |" in md and "| 1:0 (o=0) |" in md and "(t_K - o_g) mod 4" in md
              and "differ from SPEC" not in p.stderr,
              "report: the staggered knockout table labels head g's rows with o_g = floor(g S / G) and its own phase",
              p.stderr[-300:] + md[:600])
        os.remove(os.path.join(ckpt, "analysis.h5"))

# needle set: scored by plain --eval, stored as a probe group with layout needle
nd_h5 = os.path.join(d, "needle.h5")
rc, out = tu.run(["--eval", ck, "--probe", needle, "--out", nd_h5])
check(rc == 0 and "needle probe" in out, "--eval scores a needle set", out[-300:])
if rc == 0:
    g, attrs = h5_last(nd_h5, "probe")
    check(attrs["layout"] in (b"needle", "needle") and g["total"].shape == (2, 8) and (g["total"] == 3).all(),
          "needle: 3 prompts per residue mod 8 and protocol", f"{g['total']}")

# filler sweep on the tiny model
sweep = os.path.join(d, "sweep.ini")
open(sweep, "w").write("[sweep]\nprompt = 20 81 21 82 22 83 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 31\n")
fs_h5 = os.path.join(d, "fs.h5")
rc, out = tu.run(["--eval", ck, "--filler-sweep", sweep, "--out", fs_h5])
check(rc == 0 and "peak period" in out, "--filler-sweep runs", out[-300:])
if rc == 0:
    g, attrs = h5_last(fs_h5, "filler_sweep")
    ok = g["p_a"].shape == (32,) and ((g["p_a"] > 0) & (g["p_a"] < 1)).all() and np.allclose(g["diff"], g["p_a"] - g["p_b"])
    check(ok, "filler sweep stores P(a), P(b), P(a)-P(b) per L", "")
    check(g["power"].shape == (16,) and float(attrs["peak_period"]) == 32 / (int(np.argmax(g["power"])) + 1),
          "peak period is N / argmax of the stored periodogram", f"{attrs.get('peak_period')}")

# tools/report draws the analyses found in a checkpoint's analysis.h5
shutil.copy(ko_h5, os.path.join(ck, "analysis.h5"))
with h5py.File(os.path.join(ck, "analysis.h5"), "a") as f, h5py.File(fs_h5, "r") as g, h5py.File(nd_h5, "r") as n:
    g.copy("filler_sweep_000", f)
    n.copy("probe_000", f, name="probe_000")
rep = os.path.join(d, "report")
p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "report"), os.path.join(d, "w4s4"), "--out", rep],
                   capture_output=True, text=True)
# every group, each in its own file named after the group: both knockouts (`all`, then `1:0`), not
# only the newest; the untrained model's clean accuracy is 0, so their relative change is undefined
# and the report says so (the absolute change is still drawn)
for fn in ("gate_cycle_w4s4_step_00000020_gate_cycle_000.png", "needle_w4s4_step_00000020_probe_000.png",
           "filler_sweep_w4s4_step_00000020_filler_sweep_000.png", "knockout_w4s4_step_00000020_knockout_000.png",
           "knockout_w4s4_step_00000020_knockout_001.png", "analysis.md"):
    check(p.returncode == 0 and os.path.exists(os.path.join(rep, fn)), f"report draws {fn}", p.stderr[-300:])
md = open(os.path.join(rep, "analysis.md")).read() if os.path.exists(os.path.join(rep, "analysis.md")) else ""
check("(/knockout_000, step 20)" in md and "(/knockout_001, step 20)" in md and "KV-head knockout all" in md
      and "KV-head knockout 1:0" in md, "report: analysis.md has a section for each knockout group, with its step", md[:600])
os.remove(os.path.join(ck, "analysis.h5"))

# bad input: exit 2, one line naming the flag or file, nothing written
bad_sweep = os.path.join(d, "bad_sweep.ini")
open(bad_sweep, "w").write("[sweep]\nprompt = 20 300\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 8\n")
long_sweep = os.path.join(d, "long_sweep.ini")
open(long_sweep, "w").write("[sweep]\nprompt = 20 81\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 200\n")
cases = [
    ("full attention --gate-cycle", [ck_full, "--probe", probe, "--gate-cycle", "1"], "--gate-cycle"),
    ("W != S --gate-cycle", [ck_w8, "--probe", probe, "--gate-cycle", "1"], "W = 8"),
    ("delta outside 0..W", [ck, "--probe", probe, "--gate-cycle", "5"], "0..4"),
    ("delta not a number", [ck, "--probe", probe, "--gate-cycle", "two"], "--gate-cycle"),
    ("layer that does not exist", [ck, "--probe", probe, "--gate-cycle", "1", "--layers", "0,2"], "--layers"),
    ("KV head that does not exist", [ck, "--probe", probe, "--knockout", "0:2"], "KV heads 0..1"),
    ("layer of a knockout that does not exist", [ck, "--probe", probe, "--knockout", "2:0"], "layers 0..1"),
    ("knockout spec", [ck, "--probe", probe, "--knockout", "3"], "L:H"),
    ("calibration = evaluated set", [ck, "--probe", probe, "--knockout", "0:0", "--calib", probe], "--calib"),
    ("calibration with the same prompts", [ck, "--probe", probe, "--knockout", "0:0", "--calib", probe_copy], "shares"),
    ("probe for another T", [ck, "--probe", probe256, "--gate-cycle", "1"], "probe256.bin"),
    ("probe for another vocabulary", [ck, "--probe", probe_v300, "--knockout", "0:0"], "probe_v300.bin"),
    ("sweep token outside the vocabulary", [ck, "--filler-sweep", bad_sweep], "bad_sweep.ini:2"),
    ("sweep longer than T", [ck, "--filler-sweep", long_sweep], "long_sweep.ini"),
    ("two analyses at once", [ck, "--probe", probe, "--gate-cycle", "1", "--knockout", "0:0"], "one analysis"),
    ("calib without knockout", [ck, "--probe", probe, "--gate-cycle", "1", "--calib", calib], "--calib"),
]
for name, args, want in cases:
    out_h5 = os.path.join(d, "never.h5")
    rc, out = tu.run(["--eval"] + args + ["--out", out_h5])
    lines = [l for l in out.strip().splitlines() if l.startswith("phaselab:")]
    check(rc == 2 and len(lines) == 1 and want in lines[0] and not os.path.exists(out_h5), f"bad input: {name}",
          f"rc {rc}, out {out.strip()[-300:]}")
check(not os.path.exists(os.path.join(ck_full, "analysis.h5")) and not os.path.exists(os.path.join(ck_w8, "analysis.h5")),
      "bad input writes nothing into the checkpoint", "")
finish()
