"""configs/paper/: exactly the 26 runs of the paper (23 compressed, 3 full-attention controls),
each carrying the variant keys its file name says and the common Qwen3-0.6B shape and budget;
and, when ./train is built, each file passes ./train --summary (the config alone: the data is not
here) with exit 0."""
import configparser
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = os.path.join(ROOT, "configs", "paper")

EXPECTED = (["w8s8_kv1_seed42", "w8s8_kv1_seed43", "w8s8_kv1_seed44", "w8s8_kv1_seed45",
             "w4s4_kv1", "w8s4_kv1", "w8s6_kv1", "w12s12_kv1", "w8s8_kv2", "w8s8_kv4", "w8s8_kv8",
             "w8s8_kv1_kvtied", "w8s8_kv1_uniform", "w8s8_kv1_uniform_kvtied_postnorm", "w8s8_kv1_vector",
             "w8s8_kv1_noqknorm", "w8s8_kv1_nogatebias", "w8s8_kv1_norope", "w8s8_kv1_rope16",
             "w8s8_kv1_tail", "w8s8_kv8_tail", "w8s4_kv1_deepseek_vector", "w8s4_kv1_deepseek_scalar"],
            ["full_kv1", "full_kv4", "full_kv8"])


def expected_keys(name):
    """What the name says, as {(section, key): value}; unnamed variant keys must be defaults."""
    parts = name.split("_")
    want = {}
    if parts[0] == "full":
        want[("model", "attention")] = "full"
        want[("model", "n_kv_heads")] = parts[1][2:]
        return want
    w, s = parts[0][1:].split("s")
    want.update({("model", "attention"): "compressed", ("model", "window"): w, ("model", "stride"): s,
                 ("model", "n_kv_heads"): parts[1][2:],
                 # defaults of docs/spec.md §2, overridden below by what the name says
                 ("model", "gate"): "scalar", ("model", "gate_bias"): "true", ("model", "kv_tied"): "false",
                 ("model", "post_norm"): "false", ("model", "qk_norm"): "true", ("model", "rope_dims"): "128",
                 ("model", "local"): "window", ("model", "compressor"): "paper", ("train", "seed"): "42"})
    for p in parts[2:]:
        if p.startswith("seed"):
            want[("train", "seed")] = p[4:]
        elif p in ("uniform", "vector", "scalar"):
            want[("model", "gate")] = p
        elif p == "kvtied":
            want[("model", "kv_tied")] = "true"
        elif p == "postnorm":
            want[("model", "post_norm")] = "true"
        elif p == "noqknorm":
            want[("model", "qk_norm")] = "false"
        elif p == "nogatebias":
            want[("model", "gate_bias")] = "false"
        elif p == "norope":
            want[("model", "rope_dims")] = "0"
        elif p.startswith("rope"):
            want[("model", "rope_dims")] = p[4:]
        elif p == "tail":
            want[("model", "local")] = "tail"
        elif p == "deepseek":
            want.update({("model", "compressor"): "deepseek", ("model", "kv_tied"): "true",
                         ("model", "rope_dims"): "16"})
        else:
            raise ValueError(f"unknown name part {p!r}")
    return want


COMMON = {("model", "d_model"): "1024", ("model", "n_layers"): "28", ("model", "n_heads"): "16",
          ("model", "head_dim"): "128", ("model", "d_ff"): "3072", ("model", "vocab_size"): "151936",
          ("model", "tie_embeddings"): "true", ("data", "seq_len"): "4096",
          ("data", "train"): "data/corpus/train_*.bin", ("data", "val"): "data/corpus/val_*.bin",
          ("train", "batch_tokens"): "2097152", ("train", "steps"): "47684", ("eval", "residues"): "24"}


def load(path):
    cp = configparser.ConfigParser(interpolation=None, comment_prefixes=(";", "#"), inline_comment_prefixes=None)
    cp.read(path)
    return cp


files = sorted(glob.glob(os.path.join(PAPER, "*.ini")))
names = [os.path.basename(f)[:-4] for f in files]
check(len(files) == 26, "exactly_26_paper_configs", f"{len(files)} files")
check(sorted(names) == sorted(EXPECTED[0] + EXPECTED[1]), "the_23_runs_and_3_controls",
      f"missing {sorted(set(EXPECTED[0] + EXPECTED[1]) - set(names))}, extra {sorted(set(names) - set(EXPECTED[0] + EXPECTED[1]))}")
check(abs(47684 * 2097152 - 100e9) <= 2097152 / 2, "steps_give_100B_tokens")

for f, name in zip(files, names):
    cp = load(f)
    try:
        want = expected_keys(name)
    except ValueError as e:
        check(False, f"{name}_name_parses", str(e))
        continue
    want.update(COMMON)
    wrong = [f"[{s}] {k} = {cp.get(s, k, fallback='(missing)')}, expected {v}"
             for (s, k), v in want.items() if cp.get(s, k, fallback=None) != v]
    if cp.get("model", "compressor", fallback="paper") == "deepseek":
        if int(cp.get("model", "window")) != 2 * int(cp.get("model", "stride")):
            wrong.append("deepseek needs window = 2 * stride")
    if cp.get("run", "name", fallback="") != name:
        wrong.append(f"[run] name = {cp.get('run', 'name', fallback='(missing)')}, expected {name}")
    check(not wrong, f"{name}_carries_its_variant_keys", "; ".join(wrong))

top = os.path.join(ROOT, "configs", "w8s8_kv8.ini")
if os.path.exists(top):
    cp = load(top)
    want = {**expected_keys("w8s8_kv8"), **COMMON}
    wrong = [f"[{s}] {k}" for (s, k), v in want.items() if cp.get(s, k, fallback=None) != v]
    check(not wrong, "top_level_w8s8_kv8", "; ".join(wrong))
else:
    check(False, "top_level_w8s8_kv8", "configs/w8s8_kv8.ini is missing")

# ---- dry runs ---------------------------------------------------------------------------------
train = os.path.join(ROOT, "train")
usable = False
why = "./train is not built"
if os.path.exists(train) and os.access(train, os.X_OK):
    try:
        r = subprocess.run([train, "--summary", files[0]], cwd=ROOT, capture_output=True, text=True, timeout=120)
        usable = r.returncode == 0
        why = f"./train --summary does not work yet (exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]})"
    except (OSError, subprocess.TimeoutExpired) as e:
        why = f"./train --summary does not work yet ({e})"
if not usable:
    skip("paper_configs_dry_run", why)
else:
    for f, name in zip(files + [top], names + ["top_w8s8_kv8"]):
        try:
            r = subprocess.run([train, "--summary", f], cwd=ROOT, capture_output=True, text=True, timeout=120)
            check(r.returncode == 0, f"{name}_dry_run", f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        except subprocess.TimeoutExpired:
            check(False, f"{name}_dry_run", "timed out after 120 s")
finish()
