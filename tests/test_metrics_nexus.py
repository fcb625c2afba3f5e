"""The NeXus layout of metrics.h5 (trainer/metrics.c) as HDF5 viewers (silx, h5web, nexpy) read it.

Spawns the SWMR writer `build/tests/test_metrics --writer PATH` (tests/test_metrics.c: L = 2
layers, G = 3 KV heads, W = 5 offsets, P = 4 residues; row k has train step 10k), appends rows,
reads /entry with h5py while the writer still runs (SWMR through the hard links of /entry), then
checks the closed file from the reader's side, with rules taken from the NeXus NXroot / NXentry /
NXdata definitions, never from the writer's code:
  * root default -> an NXentry -> an NXdata whose signal is 1-D validation loss with a 1-D
    `step` axis of the same length;
  * every NXdata under /entry: a signal that exists, an `axes` entry per signal dimension, each
    axis 1-D with the length of that dimension, AXIS_indices pointing at it, auxiliary signals
    shaped like the signal, a title;
  * residue / layer / kv_head / branch / window_offset axes are 0..n-1 and attached as HDF5 dimension
    scales to the raw datasets (/val/loss_by_residue, /probe/acc_pp, /gates/profile, ...);
  * long_name of every plotted dataset ends with its units in parentheses where it has units;
  * NXentry carries title, program_name (with a version) and an ISO 8601 start_time;
  * the raw tables /train /val /probe /gates keep their paths and carry no NeXus class;
  * ./train resuming on a file of the older layout (no /entry, tables as NXdata) upgrades it;
  * on a metrics.h5 of a real few-step ./train run with the probe: every NXdata has @signal and
    @axes, every plotted signal and axis a long_name, every signal its units (PLOTTED_UNITS), and
    every dataset tools/report plots is one of them.
With nexusformat installed, also its checker (nxcheck): 0 errors. Scratch: build/scratch/test_metrics_nexus/."""
import datetime
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from pycheck import check, skip, finish  # noqa: E402

try:
    import nexusformat  # noqa: F401
except ImportError:   # the HF tests' venv (build/venv-hf, $PHASELAB_HF_PYTHON) may have nexusformat
    py = os.environ.get("PHASELAB_HF_PYTHON") or os.path.join(ROOT, "build", "venv-hf", "bin", "python")
    if not os.environ.get("PHASELAB_HF_REEXEC") and os.access(py, os.X_OK) and subprocess.run(
            [py, "-c", "import h5py, numpy, nexusformat"], capture_output=True).returncode == 0:
        os.environ["PHASELAB_HF_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)

try:
    import h5py
    import numpy as np
except ImportError:  # pragma: no cover
    h5py = None

WRITER = os.path.join(ROOT, "build", "tests", "test_metrics")
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_metrics_nexus")
PATH = os.path.join(SCRATCH, "metrics.h5")
ROWS = 3
L, G, W, P = 2, 3, 5, 4


def text(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.shape == ():
        return text(v[()])
    return str(v)


def strings(v):
    if isinstance(v, (str, bytes)):
        return [text(v)]
    return [text(x) for x in v]


def nxdata_groups(entry):
    return {name: g for name, g in entry.items()
            if isinstance(g, h5py.Group) and text(g.attrs.get("NX_class", "")) == "NXdata"}


def check_nxdata(name, g):
    """Problems of one NXdata group ([] when it is well formed)."""
    bad = []
    signal = text(g.attrs.get("signal", ""))
    if signal not in g:
        return [f"signal {signal!r} missing"]
    sig = g[signal]
    axes = strings(g.attrs.get("axes", []))
    if len(axes) != sig.ndim:
        bad.append(f"axes {axes} for a {sig.ndim}-D signal")
    for d, ax in enumerate(axes):
        if ax == ".":
            bad.append(f"dim {d} has no axis")
            continue
        if ax not in g:
            bad.append(f"axis {ax} missing")
            continue
        a = g[ax]
        if a.ndim != 1 or a.shape[0] != sig.shape[d]:
            bad.append(f"axis {ax} shape {a.shape}, signal dim {d} has {sig.shape[d]}")
        idx = g.attrs.get(f"{ax}_indices")
        if idx is None or int(np.ravel(idx)[0]) != d:
            bad.append(f"{ax}_indices = {idx}, expected {d}")
    for aux in strings(g.attrs.get("auxiliary_signals", [])):
        if aux not in g or g[aux].shape != sig.shape:
            bad.append(f"auxiliary signal {aux} missing or shaped unlike the signal")
    if "title" not in g or not text(g["title"][()]):
        bad.append("no title")
    if signal + "_errors" in g:   # NXdata: SIGNAL_errors, the signal's uncertainties, same shape and units
        e = g[signal + "_errors"]
        if e.shape != sig.shape or text(e.attrs.get("units", "")) != text(sig.attrs.get("units", "")):
            bad.append(f"{signal}_errors shaped {e.shape} or in units {text(e.attrs.get('units', ''))!r}, unlike the signal")
    if not text(sig.attrs.get("long_name", "")):
        bad.append("signal has no long_name")
    units = sig.attrs.get("units")
    if units is not None and not text(sig.attrs["long_name"]).endswith(f"({text(units)})"):
        bad.append(f"long_name {text(sig.attrs['long_name'])!r} does not end with its units ({text(units)})")
    return bad


def check_old_file_resume():
    """A metrics.h5 of the layout before /entry (raw tables as NXdata, root default=train) gains
    /entry with every plot, and its tables lose their NeXus class, when ./train resumes on it."""
    train = os.path.join(ROOT, "train")
    if not os.access(train, os.X_OK):
        skip("resume upgrades an older metrics.h5", "./train not built")
        return
    d = os.path.join(SCRATCH, "old")
    os.makedirs(d)
    subprocess.run([train, "--make-synthetic", f"{d}/data", "--seq-len", "64", "--train-rows", "200", "--val-rows", "8"],
                   check=True, stdout=subprocess.DEVNULL)
    base = [os.path.join(ROOT, "configs", "test", "tiny.ini"), f"data.train={d}/data/train_*.bin",
            f"data.val={d}/data/val_*.bin", f"run.dir={d}/runs", "run.name=old", "eval.every=5", "checkpoint.every=5"]
    p = subprocess.run([train] + base + ["train.steps=5"], capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, "tiny run for the old-layout file", p.stdout[-300:] + p.stderr[-300:]):
        return
    path = f"{d}/runs/old/metrics.h5"
    with h5py.File(path, "r+") as f:   # back to the old layout: only step scales, no /entry
        for g in ("val", "probe", "gates"):
            for ds in f[g].values():
                for dim in list(ds.dims)[1:]:
                    for scale in list(dim.values()):
                        dim.detach_scale(scale)
        del f["entry"]
        f.attrs["default"] = "train"
        for g in ("train", "val", "probe", "gates"):
            f[g].attrs["NX_class"] = "NXdata"
            f[g].attrs["signal"] = "loss" if g in ("train", "val") else list(f[g].keys())[0]
            del f[g].attrs["description"]
    p = subprocess.run([train] + base + ["train.steps=10", "train.resume_schedule=stretch"], capture_output=True, text=True,
                       timeout=300)
    check(p.returncode == 0, "./train resumes on the old-layout file", p.stdout[-300:] + p.stderr[-300:])
    with h5py.File(path, "r") as f:
        entry = f.get("entry")
        ok = (entry is not None and text(f.attrs["default"]) == "entry" and text(entry.attrs["NX_class"]) == "NXentry"
              and list(entry["val_loss/step"][...]) == [5, 10] and "NX_class" not in f["train"].attrs
              and f["val/loss_by_residue"].dims[1][0] == entry["val_loss_by_residue/residue"])
        check(ok, "resume upgrades an older metrics.h5: /entry with both evaluations, scales attached, "
              "plain raw tables", f"{list(f.keys())} {dict(f.attrs)}")


# Every signal a NeXus plot of metrics.h5 may carry, with the unit its `units` attribute must name
# (and its long_name end with, in parentheses); None: a dimensionless quantity (a ratio, a rate
# multiplier, a norm of unit-free numbers), which carries no units attribute (NeXus: optional for
# NX_DIMENSIONLESS) and says what it is in long_name. A signal missing here fails the test: every
# plotted dataset has to be classified. The axes are index axes (step, residue, layer, ...): no units.
PLOTTED_UNITS = {"loss": "nats", "loss_by_residue": "nats", "acc_pp": "%", "acc_ip": "%", "mean_pp": "%", "worst_pp": "%",
                 "best_pp": "%", "mean_ip": "%", "worst_ip": "%", "best_ip": "%", "gap_pp": "percentage points",
                 "gap_ip": "percentage points", "tokens_per_sec": "tokens/s", "eff_static": "offsets",
                 "eff_window": "offsets", "lr": None, "grad_norm": None, "mfu": None, "profile": None,
                 "loss_by_phase": "nats", "p_residue": None, "p_phase": None}
INDEX_AXES = {"step", "residue", "layer", "kv_head", "branch", "window_offset", "phase"}
# the raw datasets tools/report reads and plots: each must be a signal or an axis of an NXdata plot
REPORT_READS = ["train/step", "train/loss", "val/step", "val/loss", "val/loss_by_residue", "probe/step", "probe/acc_pp",
                "probe/acc_ip", "probe/mean_pp", "probe/gap_pp", "gates/profile"]


def check_real_run_plotted():
    """A few-step ./train run (configs/test/tiny.ini, with the lookup probe): every NXdata under
    /entry has @signal naming a dataset and @axes naming one existing axis per dimension; every
    signal, auxiliary signal and axis has a long_name; signals carry the units attribute of
    PLOTTED_UNITS (long_name ending with it); and every dataset tools/report plots is one of them."""
    train = os.path.join(ROOT, "train")
    if not os.access(train, os.X_OK):
        skip("real run: NeXus attributes of every plotted dataset", "./train not built")
        return
    d = os.path.join(SCRATCH, "real")
    os.makedirs(d)
    subprocess.run([train, "--make-synthetic", f"{d}/data", "--seq-len", "160", "--train-rows", "120", "--val-rows", "4"],
                   check=True, stdout=subprocess.DEVNULL)
    probe = os.path.join(d, "probe.bin")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make-probe"), "--synthetic", "--out", probe,
                        "--per-residue", "1", "--max-len", "160", "--quiet"], capture_output=True, text=True)
    if not check(p.returncode == 0, "real run: make-probe", p.stderr[-300:]):
        return
    p = subprocess.run([train, os.path.join(ROOT, "configs", "test", "tiny.ini"), "data.seq_len=160", "train.batch_tokens=640",
                        f"data.train={d}/data/train_*.bin", f"data.val={d}/data/val_*.bin", f"eval.probe={probe}",
                        f"run.dir={d}/runs", "run.name=real", "train.steps=4", "eval.every=2", "checkpoint.every=1000"],
                       capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, "real run: a 4-step ./train with the probe", p.stdout[-300:] + p.stderr[-300:]):
        return
    with h5py.File(f"{d}/runs/real/metrics.h5", "r") as f:
        groups = nxdata_groups(f["entry"])
        plotted, bad = set(), []
        for name, g in sorted(groups.items()):
            signal = text(g.attrs.get("signal", ""))
            axes = strings(g.attrs.get("axes", [])) if "axes" in g.attrs else None
            if signal not in g or not isinstance(g[signal], h5py.Dataset):
                bad.append(f"{name}: @signal {signal!r} names no dataset")
                continue
            sig = g[signal]
            if axes is None or len(axes) != sig.ndim or any(a not in g for a in axes):
                bad.append(f"{name}: @axes {axes} for a {sig.ndim}-D signal")
                axes = [a for a in (axes or []) if a in g]
            sigs = [signal] + strings(g.attrs.get("auxiliary_signals", []))
            for k in sigs:
                ds = g[k]
                plotted.add(ds.id)
                ln = text(ds.attrs.get("long_name", ""))
                if k not in PLOTTED_UNITS:
                    bad.append(f"{name}/{k}: a plotted signal the test does not know (add it to PLOTTED_UNITS)")
                    continue
                unit = PLOTTED_UNITS[k]
                got = text(ds.attrs["units"]) if "units" in ds.attrs else None
                if not ln:
                    bad.append(f"{name}/{k}: no long_name")
                if unit is None and got is not None:
                    bad.append(f"{name}/{k}: dimensionless but units = {got!r}")
                if unit is not None and (got != unit or not ln.endswith(f"({unit})")):
                    bad.append(f"{name}/{k}: units {got!r}, long_name {ln!r}; expected units {unit!r} named in long_name")
            for a in axes:
                plotted.add(g[a].id)
                if not text(g[a].attrs.get("long_name", "")):
                    bad.append(f"{name}/{a}: axis without long_name")
                if a not in INDEX_AXES:
                    bad.append(f"{name}/{a}: an axis the test does not know")
        check(not bad and len(groups) >= 10, "real run: every NXdata has @signal, @axes, long_name and its units",
              "; ".join(bad)[:1500])
        vs = f.get("val_stats")
        ok = (vs is not None and vs["loss_by_residue"].shape[0] == 2 and np.all(np.isfinite(vs["loss_se_by_residue"][...]))
              and np.all(vs["loss_se_by_residue"][...] > 0) and np.allclose(vs["loss_by_residue"][...], f["val/loss_by_residue"][...],
                                                                           rtol=1e-5)
              and int(vs["windows"][-1]) == 3 and vs["loss_by_phase"].shape[1] == 4)
        check(ok, "real run: /val_stats has per-residue means equal to /val's, positive bootstrap SEs, n = 3 windows (4 rows of 160 tokens: floor(639/160)), "
              "4 phases (tiny.ini: stride 4)", f"{dict((k, vs[k][...]) for k in vs) if vs is not None else 'absent'}")
        missing = [k for k in REPORT_READS if k in f and f[k].id not in plotted]
        absent = [k for k in REPORT_READS if k not in f]
        check(not missing and not absent, "real run: every dataset tools/report plots is a NeXus signal or axis",
              f"not plotted in /entry: {missing}; absent: {absent}")


def main():
    if h5py is None:
        skip("NeXus layout of metrics.h5", "h5py not installed")
        return
    if not check(os.access(WRITER, os.X_OK), "writer binary built", f"{WRITER} missing: make build/tests/test_metrics"):
        return
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    w = subprocess.Popen([WRITER, "--writer", PATH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        check(w.stdout.readline().strip() == "open", "writer opens the file", "no 'open'")
        live = h5py.File(PATH, "r", swmr=True)
        for k in range(ROWS):
            w.stdin.write("next\n")
            w.stdin.flush()
            check(w.stdout.readline().strip() == f"row {k}", f"writer appends row {k}", "no answer")
        ds = live["entry/val_loss_by_residue/loss_by_residue"]
        ds.refresh()
        st = live["entry/val_loss_by_residue/step"]
        st.refresh()
        check(ds.shape == (ROWS, P) and list(st[...]) == [10 * k for k in range(ROWS)],
              "SWMR reader sees the appended rows through /entry while the writer runs",
              f"shape {ds.shape}, steps {st[...]}")
        live.close()
        w.stdin.write("close\n")
        w.stdin.flush()
        check(w.stdout.readline().strip() == "closed" and w.wait(timeout=20) == 0, "writer closes the file",
              f"status {w.poll()}")
    finally:
        if w.poll() is None:
            w.kill()
        w.wait()

    with h5py.File(PATH, "r") as f:
        # the default chain
        check(text(f.attrs.get("NX_class", "")) == "NXroot", "root is NXroot", f"{dict(f.attrs)}")
        entry_name = text(f.attrs.get("default", ""))
        entry = f.get(entry_name) if entry_name else None
        ok = entry is not None and text(entry.attrs.get("NX_class", "")) == "NXentry"
        check(ok, "root default names an NXentry", f"default {entry_name!r}")
        if not ok:
            return
        plot_name = text(entry.attrs.get("default", ""))
        plot = entry.get(plot_name) if plot_name else None
        ok = plot is not None and text(plot.attrs.get("NX_class", "")) == "NXdata"
        check(ok, "entry default names an NXdata", f"default {plot_name!r}")
        if ok:
            sig = plot[text(plot.attrs["signal"])]
            axes = strings(plot.attrs.get("axes", []))
            check(sig.ndim == 1 and axes == ["step"] and plot["step"].shape == sig.shape == (ROWS,)
                  and "validation cross-entropy" in text(sig.attrs.get("long_name", "")) and list(sig[...]) == [2.0 + k for k in range(ROWS)],
                  "default plot: 1-D validation loss against step, equal lengths",
                  f"signal {sig.name} {sig.shape} axes {axes}")
        # NXentry fields
        try:
            datetime.datetime.strptime(text(entry["start_time"][()]), "%Y-%m-%dT%H:%M:%SZ")
            iso = True
        except (KeyError, ValueError):
            iso = False
        check(iso and text(entry["program_name"][()]) == "phaselab"
              and text(entry["program_name"].attrs.get("version", "")) == "swmr-writer" and "title" in entry,
              "NXentry has title, program_name with version, ISO 8601 start_time",
              f"{list(entry.keys())}")
        # every NXdata
        groups = nxdata_groups(entry)
        want = {"val_loss", "val_loss_by_residue", "train_loss", "learning_rate", "throughput",
                "probe_pp_by_residue", "probe_ip_by_residue", "gate_profile", "val_loss_by_residue_se",
                "val_loss_by_phase", "val_loss_homogeneity"}
        check(want <= set(groups), "one NXdata per plot (train loss, lr, throughput, val loss, by residue, "
              "probe pp/ip, gate profile)", f"missing {sorted(want - set(groups))}")
        for name, g in sorted(groups.items()):
            bad = check_nxdata(name, g)
            check(not bad, f"/entry/{name}: signal, axes of equal lengths, indices, title, long_name with units",
                  "; ".join(bad))
        ph = groups.get("val_loss_by_phase")
        check(ph is not None and ph["loss_by_phase_errors"].shape == (ROWS, 2) and list(ph["phase"][...]) == [0, 1]
              and np.allclose(ph["loss_by_phase_errors"][...], 0.1) and ph["loss_by_phase_errors"] == f["val_stats/loss_se_by_phase"],
              "val_loss_by_phase: the bootstrap standard errors linked as loss_by_phase_errors, a phase axis 0..S-1",
              f"{list(ph.keys()) if ph is not None else None}")
        tl = groups.get("train_loss")
        check(tl is not None and text(tl.attrs["signal"]) == "loss" and "auxiliary_signals" not in tl.attrs,
              "training loss is plotted alone", f"{dict(tl.attrs) if tl is not None else None}")
        # dimension scales attached to the raw datasets
        attached = {"val/loss_by_residue": ["step", "residue"], "probe/acc_pp": ["step", "residue"],
                    "probe/acc_ip": ["step", "residue"],
                    "gates/profile": ["step", "layer", "kv_head", "branch", "window_offset"],
                    "gates/eff_static": ["step", "layer", "kv_head", "branch"]}
        sizes = {"residue": P, "layer": L, "kv_head": G, "branch": 2, "window_offset": W}
        for path, names in attached.items():
            ds = f[path]
            bad = []
            for d, n in enumerate(names):
                if len(ds.dims[d]) < 1:
                    bad.append(f"dim {d} has no scale")
                    continue
                sc = ds.dims[d][0]
                if not sc.name.endswith("/" + n):
                    bad.append(f"dim {d} scale {sc.name}")
                elif n != "step" and list(sc[...]) != list(range(sizes[n])):
                    bad.append(f"{n} values {list(sc[...])}")
            check(not bad, f"/{path} has dimension scales {names} attached", "; ".join(bad))
        check(f["entry/val_loss_by_residue/residue"] == f["val/loss_by_residue"].dims[1][0],
              "/entry/val_loss_by_residue/residue is the scale attached to /val/loss_by_residue", "another object")
        check(f["entry/val_loss/loss"] == f["val/loss"] and f["entry/train_loss/step"] == f["train/step"],
              "/entry plots are the raw datasets themselves (hard links)", "copies")
        # raw tables keep their paths, no NeXus class
        raw = {"train/loss", "train/lr", "train/tokens", "val/loss", "val/loss_by_residue", "probe/mean_pp",
               "probe/acc_pp", "gates/profile"}
        check(all(p in f for p in raw) and all("NX_class" not in f[g].attrs for g in ("train", "val", "probe", "gates")),
              "raw tables keep their paths and carry no NX_class", "")
        check(text(f["train/loss"].attrs.get("long_name", "")).endswith("(nats)")
              and text(f["probe/gap_pp"].attrs.get("long_name", "")).endswith("(percentage points)"),
              "units in long_name: training loss (nats), gap (percentage points)",
              text(f["train/loss"].attrs.get("long_name", "")))

    check_old_file_resume()
    check_real_run_plotted()
    try:
        import nexusformat  # noqa: F401
    except ImportError:
        skip("nexusformat's nxcheck finds no error", "nexusformat not installed")
        return
    out = subprocess.run([sys.executable, "-c", "import sys; from nexusformat.scripts.nxcheck import main; "
                          "sys.argv = ['nxcheck', sys.argv[1]]; sys.exit(main())", PATH],
                         capture_output=True, text=True, timeout=120)
    text_out = out.stdout + out.stderr
    m = re.search(r"Total number of errors: (\d+)", text_out)
    check(m is not None and m.group(1) == "0", "nexusformat's nxcheck finds no error",
          text_out[-800:] if m is None else f"{m.group(1)} errors:\n{text_out[-800:]}")
    m = re.search(r"Total number of warnings: (\d+)", text_out)
    print(f"# nxcheck: {m.group(0) if m else 'no warning count'}")


if __name__ == "__main__":
    main()
    finish()
