"""configs/remedies/ and the mini remedy configs: each file carries the docs/spec.md §2b keys its name
says (and the paper shape / budget of configs/paper/ for the paper-scale runs), and, when
./train is built, each passes ./train --summary (the config alone) with exit 0; the parameter count of `shared` is below
the paper compressor's and its FLOPs are the same (the per-offset maps' memory, not their FLOPs)."""
import configparser
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train")


def read(path):
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    cp.read(path)
    return cp


def expected(name):
    parts = name.split("_")
    want = {("model", "compressor"): "paper", ("model", "grid"): "aligned", ("train", "gate_coverage"): "0"}
    if "shared" in parts:
        want[("model", "compressor")] = "shared"
    if "staggered" in parts:
        want[("model", "grid")] = "staggered"
    if "nogatebias" in parts:
        want[("model", "gate_bias")] = "false"
    return want


def summary(path):
    p = subprocess.run([TRAIN, "--summary", path], capture_output=True, text=True, timeout=120)
    params = re.search(r"^parameters: (\d+)", p.stdout, re.M)
    flops = re.search(r"FLOPs per token .*?: ([0-9.e+]+)", p.stdout)
    return p.returncode, p.stderr, int(params.group(1)) if params else None, float(flops.group(1)) if flops else None


def main():
    files = sorted(glob.glob(os.path.join(ROOT, "configs", "remedies", "*.ini")))
    check(len(files) == 8, "configs/remedies/ holds the 8 remedy runs", f"{len(files)} files")
    paper = read(os.path.join(ROOT, "configs", "paper", "w8s8_kv8.ini"))
    for f in files:
        name = os.path.basename(f)[:-4]
        cp = read(f)
        want = expected(name)
        kv = re.search(r"_kv(\d+)", name).group(1)
        want[("model", "n_kv_heads")] = kv
        if "coverage" in name:
            want.pop(("train", "gate_coverage"))
            check(float(cp.get("train", "gate_coverage", fallback="0")) > 0, f"{name}: gate_coverage > 0")
        bad = [f"[{s}] {k} = {cp.get(s, k, fallback=None)!r}, expected {v!r}" for (s, k), v in want.items()
               if cp.get(s, k, fallback=None) != v]
        for sec, key in (("model", "d_model"), ("model", "n_layers"), ("model", "window"), ("model", "stride"),
                         ("data", "seq_len"), ("data", "train"), ("data", "val"), ("data", "tokenizer"), ("train", "steps"), ("train", "batch_tokens"), ("train", "lr")):
            if cp.get(sec, key, fallback=None) != paper.get(sec, key, fallback=None):
                bad.append(f"[{sec}] {key} differs from configs/paper/w8s8_kv8.ini")
        check(not bad, f"{name}: keys as its name says, paper shape and budget", "; ".join(bad))
    minis = [os.path.join(ROOT, "configs", "mini", n + ".ini") for n in ("w8s8_shared", "w8s8_staggered", "w8s8_coverage")]
    for f in minis:
        check(os.path.exists(f), f"mini config {os.path.basename(f)} exists")
    if not os.access(TRAIN, os.X_OK):
        for f in files + minis:
            skip(f"dry-run {os.path.basename(f)}", "./train not built")
        finish()
    for f in files + minis:
        rc, err, _, _ = summary(f)
        check(rc == 0, f"dry-run {os.path.relpath(f, ROOT)}", err.strip()[-300:])
    for base, shared in (("paper/w8s8_kv8.ini", "remedies/w8s8_kv8_shared.ini"),
                         ("paper/w8s8_kv1_seed42.ini", "remedies/w8s8_kv1_shared.ini"),
                         ("mini/w8s8.ini", "mini/w8s8_shared.ini")):
        _, _, pb, fb = summary(os.path.join(ROOT, "configs", base))
        _, _, ps, fs = summary(os.path.join(ROOT, "configs", shared))
        check(ps is not None and pb is not None and ps < pb and fs == fb,
              f"{shared}: fewer parameters than {base}, same FLOPs", f"params {ps} vs {pb}, FLOPs {fs} vs {fb}")
    finish()


if __name__ == "__main__":
    main()
