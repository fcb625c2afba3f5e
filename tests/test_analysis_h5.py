"""analysis.h5 is never lost, aliased or left half-written (analysis/analysis_h5.h), on a tiny
checkpoint trained here and a needle probe built by tools/make-probe:

- provenance: every group records the code version (as ./train --version prints it), the
  sha256 of the probe and calibration sets (hashlib here), their builder seeds and prompts per
  residue (the make-probe options given here), --decode, and absolute input paths; each
  analysis prints one "stored /GROUP in FILE" line naming the group it added;
- busy: a reader holding the file open (h5py "r") does not stop an analysis; a writer holding it
  (h5py "a") or another analysis holding the writer lock makes the analysis wait, announced on
  stderr, and after PHASELAB_ANALYSIS_WAIT seconds store its group in a sidecar
  NAME.pending-TIME-PID.h5 (one complete group, root attribute pending_for) leaving the file
  as it was; a writer that lets go within the wait gets the group in the file;
- two analyses at once both land, as two groups with different numbers;
- a file left unclean by a stopped writer of the old kind (data past the end of allocation
  recorded in its superblock, made here with h5py and a byte edit): a complete dangling group
  keeps its data (an in-place writer would allocate over it), an incomplete one is left out of
  the new file and the old file kept as NAME.damaged-TIME-PID.h5, and the new group is numbered
  from the complete ones;
- an empty file is replaced; a file that is not HDF5 is left as it is and the result goes to a
  sidecar; --out naming a directory is refused before any work (exit 2), a missing parent made.
(Faults at each write: tests/test_fault_injection.py.)"""
import fcntl
import glob
import hashlib
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainutil as tu  # noqa: E402
from pycheck import check, finish, skip  # noqa: E402

try:
    import h5py
except ImportError:
    skip("analysis.h5", "h5py missing")
    finish()

tu.require_train()
ROOT = tu.ROOT
d, data = tu.scratch_with_corpus("test_analysis_h5", seq_len=64, train_rows=200, val_rows=8)
rc, out = tu.run([tu.TINY, f"data.train={data}/train_*.bin", f"data.val={data}/val_*.bin", f"run.dir={d}", "run.name=r",
                  "train.steps=5", "eval.every=1000"])
ck = os.path.join(d, "r", "checkpoints", "step_00000005")
check(rc == 0 and os.path.isdir(ck), "train a tiny checkpoint", out[-300:])


def make_probe(name, *args):
    path = os.path.join(d, name)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--layout", "needle",
                        "--max-len", "64", "--out", path, "--quiet"] + list(args), capture_output=True, text=True)
    check(p.returncode == 0, f"make-probe {name}", p.stderr[-300:])
    return path


probe = make_probe("needle.bin", "--per-residue", "2", "--seed", "5")
calib = make_probe("calib.bin", "--per-residue", "1", "--seed", "6")
sweep = os.path.join(d, "sweep.ini")
open(sweep, "w").write("[sweep]\nprompt = 20 81 21 82 22 83 20\na = 81\nb = 82\nfiller = 208\nL0 = 0\nL1 = 15\n")


def run(args, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([tu.TRAIN] + args, capture_output=True, text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def stored_lines(out):
    return [l for l in out.splitlines() if l.startswith("stored /")]


def groups(path):
    with h5py.File(path, "r") as f:
        return sorted(f.keys())


def contents(path):
    """{group: ({attr: value}, {dataset: array})} of every group, read with h5py."""
    res = {}
    with h5py.File(path, "r") as f:
        for k in f:
            g = f[k]
            res[k] = ({a: g.attrs[a] for a in g.attrs}, {n: g[n][()] for n in g})
    return res


def same(a, b):
    if set(a) != set(b):
        return False
    for k in a:
        (aa, ad), (ba, bd) = a[k], b[k]
        if set(aa) != set(ba) or set(ad) != set(bd):
            return False
        for n in ad:
            x, y = np.asarray(ad[n]), np.asarray(bd[n])
            if x.shape != y.shape or not (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else np.array_equal(x, y)):
                return False
        for n in aa:
            x, y = np.asarray(aa[n]), np.asarray(ba[n])
            if not (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" and y.dtype.kind == "f" else np.array_equal(x, y)):
                return False
    return True


text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
h5 = os.path.join(ck, "analysis.h5")

# ---- provenance and the "stored" line
version = subprocess.run([tu.TRAIN, "--version"], capture_output=True, text=True).stdout.split()[1]
runs = [("probe", ["--eval", ck, "--probe", probe]), ("probe", ["--eval", ck, "--probe", probe, "--decode"]),
        ("gate_cycle", ["--eval", ck, "--probe", probe, "--gate-cycle", "1"]),
        ("knockout", ["--eval", ck, "--probe", probe, "--knockout", "0:0", "--calib", calib]),
        ("filler_sweep", ["--eval", ck, "--filler-sweep", sweep])]
names = []
for kind, args in runs:
    rc, out, err = run(args)
    lines = stored_lines(out)
    want = f"stored /{kind}_{sum(k == kind for k, _ in runs[:len(names)]):03d} in {h5}"
    check(rc == 0 and lines == [want], f"{' '.join(args[2:])}: exit 0 and one line '{want}'", f"rc {rc}: {lines} {err[-300:]}")
    names.append(lines[0].split()[1][1:] if lines else "")
c = contents(h5)
check(sorted(c) == sorted(names), "every analysis added its own group", f"{sorted(c)} vs {names}")
for (kind, args), name in zip(runs, names):
    if name not in c:
        continue
    a = c[name][0]
    check(text(a.get("phaselab_version")) == version and text(a.get("checkpoint_path")) == os.path.realpath(ck)
          and len(text(a.get("created"))) == 20 and text(a.get("overrides", "absent")) == "",
          f"{name}: code version {version}, absolute checkpoint path, creation time, no overrides",
          f"{a.get('phaselab_version')} {a.get('checkpoint_path')} {a.get('created')} overrides {a.get('overrides')!r}")
    if kind == "filler_sweep":
        check(text(a.get("sweep_file_sha256")) == sha(sweep) and text(a.get("sweep_file_path")) == os.path.realpath(sweep)
              and int(a.get("decode", -1)) == 0, f"{name}: sweep file sha256 and absolute path", f"{a}")
        continue
    decode = 1 if "--decode" in args else 0
    check(text(a.get("probe_sha256")) == sha(probe) and text(a.get("probe_path")) == os.path.realpath(probe)
          and int(a.get("probe_seed", -1)) == 5 and int(a.get("probe_per_residue", -1)) == 2 and int(a.get("decode", -1)) == decode,
          f"{name}: probe sha256, absolute path, seed 5, 2 prompts per residue, decode = {decode}", f"{a}")
    if kind == "knockout":
        check(text(a.get("calibration_sha256")) == sha(calib) and text(a.get("calibration_path")) == os.path.realpath(calib)
              and int(a.get("calibration_seed", -1)) == 6 and int(a.get("calibration_per_residue", -1)) == 1,
              f"{name}: calibration sha256, absolute path, seed 6, 1 prompt per residue", f"{a}")
    with h5py.File(h5, "r") as f:
        ds = f[name]["acc"]
        scales = [ds.dims[i][0].name for i in range(len(ds.dims))] if all(len(ds.dims[i]) for i in range(len(ds.dims))) else []
    check(scales and all(s.startswith(f"/{name}/") for s in scales), f"{name}: dimension scales attached", f"{scales}")

# ---- an analysis of the checkpoint read with overrides records them in its own group
ov_h5 = os.path.join(d, "overrides.h5")
for kind, extra in [("probe", []), ("knockout", ["--knockout", "0:0", "--calib", calib])]:
    rc, out, err = run(["--eval", ck, "--probe", probe, *extra, "--out", ov_h5, "train.micro_batch=2", "eval.every=7"])
    grp = stored_lines(out)[0].split()[1][1:] if rc == 0 and stored_lines(out) else ""
    got = text(contents(ov_h5)[grp][0].get("overrides", "absent")) if grp else None
    check(rc == 0 and got == "train.micro_batch=2 eval.every=7",
          f"{kind} with two overrides: the group's 'overrides' attribute names both, in order", f"rc {rc}: {got!r} {err[-300:]}")

PROBE = ["--eval", ck, "--probe", probe]


def holder(path, mode, seconds):
    """h5py holding path open in mode for `seconds` in another process (started when it says so)."""
    code = "import h5py, sys, time\nf = h5py.File(sys.argv[1], sys.argv[2])\nprint('ready', flush=True)\n" \
           "time.sleep(float(sys.argv[3]))\nf.close()\n"
    p = subprocess.Popen([sys.executable, "-c", code, path, mode, str(seconds)], stdout=subprocess.PIPE, text=True)
    ready = p.stdout.readline().strip() == "ready"
    return p, ready


def sidecars():
    return sorted(glob.glob(os.path.join(ck, "analysis.pending-*.h5")))


# ---- a reader does not block
before = groups(h5)
p, ready = holder(h5, "r", 30)
t0 = time.time()
rc, out, err = run(PROBE, {"PHASELAB_ANALYSIS_WAIT": "20"})
took = time.time() - t0
p.kill(), p.wait()
check(ready and rc == 0 and "busy" not in err and took < 15 and groups(h5) == sorted(before + [f"probe_{2:03d}"]),
      "a reader holding analysis.h5 open (h5py 'r') does not stop an analysis", f"rc {rc}, {took:.1f}s, {err[-300:]}")

# ---- a writer holding the file: announced wait, then a sidecar; the file is untouched
raw = contents(h5)
p, ready = holder(h5, "a", 30)
t0 = time.time()
rc, out, err = run(PROBE, {"PHASELAB_ANALYSIS_WAIT": "1"})
took = time.time() - t0
p.kill(), p.wait()
side = sidecars()
lines = stored_lines(out)
check(ready and rc == 0 and "busy" in err and "waiting up to 1 s" in err and "PHASELAB_ANALYSIS_WAIT" in err and took >= 1,
      "a writer holding analysis.h5 (h5py 'a'): the analysis says it waits (PHASELAB_ANALYSIS_WAIT)", f"rc {rc}, {err[-300:]}")
check(len(side) == 1 and len(lines) == 1 and side[0] in lines[0] and lines[0].startswith("stored /probe_000 in "),
      "... then stores its group in one sidecar analysis.pending-TIME-PID.h5, and says so", f"{side} {lines}")
check(same(contents(h5), raw), "... and leaves analysis.h5 as it was (the same groups and data)", "")
if side:
    with h5py.File(side[0], "r") as f:
        ok = list(f) == ["probe_000"] and text(f.attrs.get("pending_for")) == os.path.realpath(h5) and \
             {"acc", "correct", "total", "acc_phase", "phase_test"} <= set(f["probe_000"]) and "signal" in f["probe_000"].attrs
    check(ok, "the sidecar holds one complete group and names the file it stands in for (pending_for)", "")
    check(re.fullmatch(r"analysis\.pending-\d{8}T\d{6}Z-\d+\.h5", os.path.basename(side[0])) is not None,
          "sidecar name analysis.pending-YYYYmmddTHHMMSSZ-PID.h5", side[0])
    for s in side:
        os.remove(s)

# ---- a writer that lets go within the wait: the group goes into the file
before = groups(h5)
p, ready = holder(h5, "a", 1.5)
rc, out, err = run(PROBE, {"PHASELAB_ANALYSIS_WAIT": "30"})
p.wait()
check(ready and rc == 0 and "busy" in err and sidecars() == [] and len(groups(h5)) == len(before) + 1
      and stored_lines(out) == [f"stored /probe_{len([g for g in before if g.startswith('probe_')]):03d} in {h5}"],
      "a writer that closes the file within the wait: the analysis waits and stores into analysis.h5", f"rc {rc}, {out[-200:]} {err[-300:]}")

# ---- another analysis holding the writer lock (.analysis.h5.lock): wait, then a sidecar
lock = open(os.path.join(ck, ".analysis.h5.lock"), "a+")
fcntl.flock(lock, fcntl.LOCK_EX)
rc, out, err = run(PROBE, {"PHASELAB_ANALYSIS_WAIT": "1"})
fcntl.flock(lock, fcntl.LOCK_UN)
lock.close()
side = sidecars()
check(rc == 0 and "another phaselab analysis" in err and len(side) == 1, "the writer lock held by another analysis: wait, then a sidecar",
      f"rc {rc}, {side}, {err[-300:]}")
for s in side:
    os.remove(s)

# ---- a bad PHASELAB_ANALYSIS_WAIT is named, the default is used, the result stored
rc, out, err = run(PROBE, {"PHASELAB_ANALYSIS_WAIT": "1e3"})
check(rc == 0 and "PHASELAB_ANALYSIS_WAIT='1e3'" in err and len(stored_lines(out)) == 1,
      "PHASELAB_ANALYSIS_WAIT=1e3: one warning naming it, then stored as usual", err[-300:])

# ---- two analyses at once: both groups land, with different numbers
before = groups(h5)
ps = [subprocess.Popen([tu.TRAIN] + PROBE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
outs = [p.communicate(timeout=120) for p in ps]
lines = [stored_lines(o)[0] if stored_lines(o) else "" for o, _ in outs]
after = groups(h5)
new = sorted(set(after) - set(before))
check(all(p.returncode == 0 for p in ps) and len(new) == 2 and sorted(l.split()[1][1:] for l in lines) == new and sidecars() == [],
      "two analyses at once: two new groups in analysis.h5, each named by its own stored line", f"{lines} {new} {[e[-200:] for _, e in outs]}")
now = contents(h5)
check(same({k: now[k] for k in c if k in now}, c), "the first groups are unchanged, with the same data, after the later analyses",
      f"{sorted(c)} vs {sorted(now)}")

# ---- files left unclean by a stopped in-place writer (old phaselab, h5py): superblock v0 whose end
# of allocation (bytes 40..47) stops before the last group's objects
def unclean_file(path, complete_second):
    """path: probe_000 (complete); then probe_001 (complete, or without `signal`) added in place and
    the superblock's end of allocation set back to where it was before: probe_001 dangles."""
    def add(f, name, seed, signal=True):
        g = f.create_group(name)
        g["residue"] = np.arange(8)
        g["acc"] = np.random.default_rng(seed).random((2, 8))
        if signal:
            g.attrs["signal"] = "acc"
    with h5py.File(path, "w", libver="earliest") as f:
        add(f, "probe_000", 0)
    size1 = os.path.getsize(path)
    with h5py.File(path, "a") as f:
        add(f, "probe_001", 1, complete_second)
    b = bytearray(open(path, "rb").read())
    assert b[:8] == b"\x89HDF\r\n\x1a\n" and b[8] == 0 and b[13] == 8, "expected a version-0 superblock with 8-byte offsets"
    b[40:48] = struct.pack("<Q", size1)
    open(path, "wb").write(b)
    return np.random.default_rng(0).random((2, 8)), np.random.default_rng(1).random((2, 8)), bytes(b)


for complete in (True, False):
    what = "a complete dangling group" if complete else "an incomplete dangling group"
    for f in glob.glob(os.path.join(ck, "analysis*")) + glob.glob(os.path.join(ck, ".analysis*")):
        os.remove(f)
    acc0, acc1, crafted = unclean_file(h5, complete)
    try:
        with h5py.File(h5, "r") as f:
            f["probe_001/acc"][()]
        unreadable = False
    except Exception:  # noqa: BLE001
        unreadable = True
    check(unreadable, f"{what}: the crafted file is unclean (h5py cannot read /probe_001 past the end of allocation)", "")
    rc, out, err = run(PROBE)
    damaged = glob.glob(os.path.join(ck, "analysis.damaged-*.h5"))
    with h5py.File(h5, "r") as f:
        names = sorted(f.keys())
        a0 = f["probe_000/acc"][()]
        a1 = f["probe_001/acc"][()] if "probe_001" in f else None
        new_total = f[names[-1]]["total"][()] if "total" in f[names[-1]] else None
    if complete:
        check(rc == 0 and names == ["probe_000", "probe_001", "probe_002"] and np.array_equal(a0, acc0) and np.array_equal(a1, acc1)
              and new_total is not None and (new_total == 2).all() and damaged == [],
              f"{what}: kept with its data, the new group is /probe_002 beside it (no aliasing)", f"rc {rc} {names} {err[-300:]}")
    else:
        check(rc == 0 and names == ["probe_000", "probe_001"] and np.array_equal(a0, acc0) and new_total is not None
              and (new_total == 2).all() and len(damaged) == 1 and "incomplete group /probe_001" in err and damaged[0] in err,
              f"{what}: left out, the old file kept as analysis.damaged-*.h5 (announced), the new group numbered from the complete ones",
              f"rc {rc} {names} {damaged} {err[-300:]}")
        if damaged:
            check(open(damaged[0], "rb").read() == crafted, "the damaged file is kept byte for byte", "")

# ---- an empty analysis.h5 (a writer stopped at its very start) holds nothing: replaced
for f in glob.glob(os.path.join(ck, "analysis*")):
    os.remove(f)
open(h5, "wb").close()
rc, out, err = run(PROBE)
check(rc == 0 and groups(h5) == ["probe_000"] and sidecars() == [], "an empty analysis.h5 is replaced by one with the new group",
      f"rc {rc} {err[-300:]}")

# ---- --out: a directory is refused before any work (exit 2); a missing parent is created
rc, out, err = run(PROBE + ["--out", d])
check(rc == 2 and "is a directory" in err and "checkpoint " not in out, "--out DIR: exit 2 before any work, naming it", f"rc {rc} {err[-300:]}")
newdir = os.path.join(d, "new", "sub")
rc, out, err = run(PROBE + ["--out", os.path.join(newdir, "a.h5")])
check(rc == 0 and os.path.exists(os.path.join(newdir, "a.h5")) and stored_lines(out) == [f"stored /probe_000 in {newdir}/a.h5"],
      "--out in a directory that does not exist yet: created", f"rc {rc} {err[-300:]}")

# ---- --out naming an HDF5 file that holds something else (a run's metrics.h5, written SWMR with
# libver latest as ./train writes it): refused before any work, the file byte for byte as it was
mh5 = os.path.join(d, "metrics_like.h5")
with h5py.File(mh5, "w", libver="latest") as f:
    f.create_dataset("train/step", data=np.arange(5), maxshape=(None,), chunks=True)
    f.swmr_mode = True
mbytes = open(mh5, "rb").read()
for what, args in [("--eval --probe", PROBE + ["--out", mh5]), ("--knockout", PROBE + ["--knockout", "0:0", "--calib", calib, "--out", mh5]),
                   ("--score", ["--score", ck, "--input", os.path.join(os.path.dirname(data), os.path.basename(data), "val_000.bin")
                                if os.path.isdir(data) else data, "--out", mh5])]:
    rc, out, err = run(args)
    check(rc == 2 and "not an analysis file" in err and "/train" in err and open(mh5, "rb").read() == mbytes
          and "stored" not in out,
          f"{what} --out a metrics-like HDF5 file: exit 2 naming /train, the file unchanged", f"rc {rc} {err[-300:]}")

# ... and while its writer has it open in SWMR mode, as a running ./train has its metrics.h5
live = h5py.File(mh5, "a", libver="latest")
live.swmr_mode = True
rc, out, err = run(PROBE + ["--out", mh5])
live.close()
check(rc == 2 and "not an analysis file" in err and "/train" in err and "stored" not in out,
      "--out a metrics-like file its writer holds open (SWMR): exit 2 before any work", f"rc {rc} {err[-300:]}")

# ---- --out naming an existing file that is not HDF5: refused before any work (the default analysis.h5
# in that state keeps the sidecar rule below)
txt = os.path.join(d, "notes.h5")
open(txt, "w").write("my notes\n")
rc, out, err = run(PROBE + ["--out", txt])
check(rc == 2 and "is not an HDF5 file" in err and open(txt).read() == "my notes\n" and "stored" not in out
      and not glob.glob(os.path.join(d, "notes.pending-*")),
      "--out an existing text file: exit 2 before any work, the file and its directory unchanged", f"rc {rc} {err[-300:]}")

# ---- not HDF5 at all: left as it is, the result goes to a sidecar
for f in glob.glob(os.path.join(ck, "analysis*")):
    os.remove(f)
open(h5, "wb").write(b"not an HDF5 file\n" * 10)
rc, out, err = run(PROBE)
side = sidecars()
check(rc == 0 and open(h5, "rb").read() == b"not an HDF5 file\n" * 10 and len(side) == 1 and "cannot be read as HDF5" in out
      and side[0] in out, "analysis.h5 that is not HDF5: left as it is, the result in a sidecar, and the line says why",
      f"rc {rc} {side} {out[-300:]} {err[-300:]}")
finish()
