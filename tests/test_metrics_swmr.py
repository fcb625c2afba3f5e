"""SWMR check of the metrics.h5 writer (trainer/metrics.c) from the reader's side.

Spawns `build/tests/test_metrics --writer PATH` (tests/test_metrics.c), which opens a new
metrics file in SWMR mode and appends one row to every group each time it reads "next" on
stdin, answering "row K". While that writer process is still running with the file open,
the superblock must carry the SWMR-writing flags and h5py readers opened with swmr=True must
see each row as soon as the writer says it is
written (after refresh()), with the values the writer mode documents:
  row k: train step 10k, tokens 1000k, loss 1/(k+1); val loss 2+k, loss_by_residue[r] = r+k;
         probe acc_pp[r] = 10(r+1)+k, acc_ip NaN, mean_pp = 25+k (P = 4); gates
         eff_static[l,g,b] = (l*G + g)*2 + b + k with L=2, G=3.
After "close", h5dump must read the closed file, and h5py (non-SWMR) must read the layout,
dimension scales and the /entry default (the NeXus layout itself: tests/test_metrics_nexus.py). Scratch: build/scratch/test_metrics_swmr/."""
import math
import os
import selectors
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from pycheck import check, skip, finish  # noqa: E402

import numpy as np  # noqa: E402

try:
    import h5py
except ImportError:  # pragma: no cover
    h5py = None

WRITER = os.path.join(ROOT, "build", "tests", "test_metrics")
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_metrics_swmr")
PATH = os.path.join(SCRATCH, "metrics.h5")
ROWS = 4
TIMEOUT_S = 20


def as_str(value):
    return value.decode() if isinstance(value, bytes) else str(value)


class Writer:
    """The writer process, driven one line at a time with a timeout on every answer."""

    def __init__(self, path):
        self.proc = subprocess.Popen([WRITER, "--writer", path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def answer(self):
        if not self.sel.select(TIMEOUT_S):
            return "timeout"
        return self.proc.stdout.readline().strip() or "eof (writer exited with %s)" % self.proc.poll()

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def check_row(f, k, label):
    """Rows 0..k of every group as the writer mode writes them."""
    for name in ("train/step", "train/loss", "train/tokens", "val/step", "val/loss_by_residue",
                 "probe/step", "probe/mean_pp", "probe/acc_ip", "gates/step", "gates/eff_static"):
        f[name].refresh()
    n = k + 1
    steps = f["train/step"][...]
    check(list(steps) == [10 * i for i in range(n)], f"{label}: /train/step has {n} rows",
          f"got {list(steps)}")
    check(len(f["train/loss"]) >= n and abs(f["train/loss"][k] - 1.0 / (k + 1)) < 1e-12
          and f["train/tokens"][k] == 1000 * k, f"{label}: /train loss and tokens of row {k}",
          f"loss rows {len(f['train/loss'])}")
    by = f["val/loss_by_residue"]
    check(len(f["val/step"]) == n and by.shape[1:] == (4,) and list(by[k]) == [r + k for r in range(4)],
          f"{label}: /val/loss_by_residue row {k}", f"shape {by.shape}")
    check(len(f["probe/step"]) == n and f["probe/mean_pp"][k] == 25 + k
          and all(math.isnan(x) for x in f["probe/acc_ip"][k]),
          f"{label}: /probe row {k} (mean_pp, NaN acc_ip)", f"mean_pp {f['probe/mean_pp'][...]}")
    es = f["gates/eff_static"]
    want = np.arange(12, dtype=np.float32).reshape(2, 3, 2) + k
    check(len(f["gates/step"]) == n and es.shape[1:] == (2, 3, 2) and np.array_equal(es[k], want),
          f"{label}: /gates/eff_static row {k} is [L,G,2]", f"shape {es.shape}")


def main():
    if h5py is None:
        skip("h5py reads the metrics file", "h5py not installed")
        return
    if not check(os.access(WRITER, os.X_OK), "writer binary built",
                 f"{WRITER} missing: run `make build/tests/test_metrics`"):
        return
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    writer = Writer(PATH)
    try:
        hello = writer.answer()
        if not check(hello == "open", "writer opens the file in SWMR mode", hello):
            return
        with open(PATH, "rb") as raw:  # superblock v2/v3: signature, version, sizes, flags
            head = raw.read(12)
        check(head[:8] == b"\x89HDF\r\n\x1a\n" and head[8] >= 3 and head[11] & 0x05 == 0x05,
              "superblock v3 marks the file open for SWMR writing",
              f"version {head[8]}, consistency flags {head[11]:#x} (expected bits 0x1 and 0x4)")
        early = h5py.File(PATH, "r", swmr=True)  # opened before any row exists
        check(early.swmr_mode and len(early["train/step"]) == 0, "SWMR reader opens while the writer runs, 0 rows",
              f"rows {len(early['train/step'])}")
        late = None
        for k in range(ROWS):
            reply = writer.send("next")
            if not check(reply == f"row {k}", f"writer appends row {k}", reply):
                return
            check(writer.proc.poll() is None, f"writer still running after row {k}", "it exited")
            check_row(early, k, f"reader opened before row 0, after row {k}")
            if k == 1:
                late = h5py.File(PATH, "r", swmr=True)  # opened mid-run
            if late is not None:
                check_row(late, k, f"reader opened after row 1, after row {k}")
        # a reader never sees a step without the rest of its row: data rows >= len(step)
        for group in ("train", "val", "probe", "gates"):
            for name, ds in early[group].items():
                ds.refresh()
                check(ds.shape[0] >= len(early[group]["step"]), f"/{group}/{name} has every row of step",
                      f"{ds.shape[0]} rows")
        early.close()
        late.close()
        reply = writer.send("close")
        check(reply == "closed", "writer closes the file", reply)
        writer.proc.wait(timeout=TIMEOUT_S)
        check(writer.proc.returncode == 0, "writer exits 0", f"status {writer.proc.returncode}")
    finally:
        writer.kill()

    h5dump = shutil.which("h5dump")
    if h5dump is None:
        skip("h5dump reads the closed file", "h5dump not installed")
    else:
        out = subprocess.run([h5dump, "-H", PATH], capture_output=True, text=True, timeout=TIMEOUT_S)
        check(out.returncode == 0 and 'DATASET "eff_static"' in out.stdout and 'GROUP "probe"' in out.stdout,
              "h5dump -H reads the closed file", out.stderr.strip()[:300])
        out = subprocess.run([h5dump, "-d", "/train/step", PATH], capture_output=True, text=True, timeout=TIMEOUT_S)
        check(out.returncode == 0 and "0, 10, 20, 30" in out.stdout, "h5dump -d /train/step prints the steps",
              out.stdout[-300:] + out.stderr[-300:])

    with h5py.File(PATH, "r") as f:
        check(as_str(f.attrs["NX_class"]) == "NXroot" and as_str(f.attrs["code_version"]) == "swmr-writer"
              and "name = swmr" in as_str(f.attrs["config"]), "root NX_class, code_version, config via h5py",
              f"{dict(f.attrs)}")
        groups = sorted(f.keys())
        check(groups == ["entry", "gates", "probe", "train", "val", "val_stats"], "groups entry train val val_stats probe gates",
              f"{groups}")
        want = {"train": {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_sec", "mfu"},
                "val": {"step", "loss", "loss_by_residue"},
                "probe": {"step", "acc_pp", "acc_ip", "mean_pp", "worst_pp", "best_pp", "gap_pp",
                          "mean_ip", "worst_ip", "best_ip", "gap_ip",
                          # phase-effect test (docs/spec.md §3.7)
                          "chi2_pp", "p_pp", "chi2_phase_pp", "p_phase_pp",
                          "chi2_ip", "p_ip", "chi2_phase_ip", "p_phase_ip"},
                "gates": {"step", "eff_static", "eff_window", "profile"}}
        for group, names in want.items():
            g = f[group]
            check(set(g.keys()) == names, f"/{group} holds exactly the trainer/metrics.h datasets", f"{sorted(g.keys())}")
            check("NX_class" not in g.attrs and as_str(g.attrs.get("description", "")),
                  f"/{group} is a plain described table (the NXdata plots are under /entry)", f"{dict(g.attrs)}")
            # the step scale is one object reachable from several paths (/entry links to it)
            scales_ok = all(g[n].dims[0][0] == g["step"] for n in names - {"step"})
            check(scales_ok and g["step"].maxshape[0] is None, f"/{group} datasets use step as dim-0 scale",
                  "a dataset lacks the scale")
        check(as_str(f.attrs.get("default", "")) == "entry" and as_str(f["entry"].attrs.get("NX_class", "")) == "NXentry",
              "root default is the NXentry /entry (layout: tests/test_metrics_nexus.py)", f"{dict(f.attrs)}")
        prof = f["gates/profile"]
        check(prof.shape == (ROWS, 2, 3, 2, 5) and prof.dims[4].label == "offset", "/gates/profile [n,L,G,2,W]",
              f"shape {prof.shape} label {prof.dims[4].label!r}")


if __name__ == "__main__":
    main()
    finish()
