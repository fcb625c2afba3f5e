"""make mini-sweep (tools/mini-sweep) on a 2-run grid of tiny models: the grid is every config
given x the seeds, run as parallel one-thread jobs, resumable; the report's columns and the
README's promises agree with what the sweep writes:
  - configs/mini/README.md's config table lists exactly the files configs/mini/*.ini;
  - its default seeds are the ones tools/mini-sweep uses;
  - its list of report.csv columns is the header tools/report writes.
The README is read, never regenerated, so a drift between the two fails here."""
import csv
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(ROOT, "build", "scratch", "test_mini_sweep")
shutil.rmtree(S, ignore_errors=True)
os.makedirs(S)
README = open(os.path.join(ROOT, "configs", "mini", "README.md")).read()
TOOL = open(os.path.join(ROOT, "tools", "mini-sweep")).read()

# ---- the README's promises ----------------------------------------------------------------------
listed = sorted(set(re.findall(r"^\| `([a-z0-9_]+\.ini)` \|", README, re.M)))
present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "configs", "mini", "*.ini")))
check(listed == present and len(present) >= 8, "readme_lists_every_mini_config",
      f"README: {listed}; configs/mini: {present}")
m = re.search(r"seeds? \*\*([0-9, ]+)\*\*", README)
d = re.search(r"^SEEDS=\$\{SEEDS:-([0-9,]+)\}", TOOL, re.M)
check(m is not None and d is not None and m.group(1).replace(" ", "") == d.group(1) and d.group(1).count(",") >= 1,
      "readme_seeds_are_the_default", f"README {m and m.group(1)}, tools/mini-sweep {d and d.group(1)}")
# one recipe for every run: [data], [train] (but a remedy's own train.gate_coverage), [eval] and
# [checkpoint] are the same in every configs/mini/*.ini, and the README names the loss it uses
import configparser  # noqa: E402
recipes = {}
for p in sorted(glob.glob(os.path.join(ROOT, "configs", "mini", "*.ini"))):
    c = configparser.ConfigParser(inline_comment_prefixes=(";",))
    c.read(p)
    recipe = tuple((sec, tuple(sorted((k, v) for k, v in c[sec].items() if (sec, k) != ("train", "gate_coverage"))))
                   for sec in ("data", "train", "eval", "checkpoint"))
    recipes.setdefault(recipe, []).append(os.path.basename(p))
loss = dict(dict(next(iter(recipes))).get("data", ())).get("loss_targets", "all") if recipes else None
check(len(recipes) == 1 and f"`loss_targets = {loss}`" in README, "every_mini_config_has_one_recipe",
      f"{len(recipes)} recipes: {list(recipes.values())}; loss_targets {loss}")
# the recipe the README's first bullets describe is the one in the configs: the stage boundary,
# the stage-0 length, the steps, the learning rate and the batch
if recipes:
    rc = {sec: dict(kv) for sec, kv in next(iter(recipes))}
    boundary = rc["data"].get("stages", "").split(":")[0].strip()
    promised = [f"steps 1-{boundary}", f"`train_seq_len = {rc['data'].get('train_seq_len', '')}`",
                f"steps {int(boundary) + 1 if boundary.isdigit() else '?'}-{rc['train']['steps']}",
                f"lr {rc['train']['lr']}", f"`batch_tokens = {rc['train']['batch_tokens']}`",
                f"{rc['train']['warmup_steps']} warm-up steps"]
    missing = [p for p in promised if p not in README]
    check(not missing, "readme_states_the_configs_recipe", f"not in configs/mini/README.md: {missing}")
cols = re.search(r"report\.csv columns:\n```\n(.*?)\n```", README, re.S)
readme_cols = cols.group(1).replace("\n", " ").split() if cols else []
check(len(readme_cols) > 20, "readme_lists_report_columns", f"{len(readme_cols)} columns found")

# ---- a 2-run grid: one tiny config x seeds 1,2 --------------------------------------------------
tiny = os.path.join(S, "tiny_mini.ini")
open(tiny, "w").write("""[model]
d_model = 32
n_layers = 1
n_heads = 2
n_kv_heads = 1
head_dim = 16
d_ff = 64
vocab_size = 256
attention = compressed
window = 8
stride = 8

[data]
seq_len = 256

[train]
steps = 3
batch_tokens = 512
micro_batch = 2
lr = 3e-3
warmup_steps = 1

[eval]
every = 0
val_tokens = 512
residues = 24

[checkpoint]
every = 0
keep = 1

[run]
device = cpu
log_every = 1
""")
if not os.access(os.path.join(ROOT, "train"), os.X_OK):
    skip("mini_sweep_runs", "./train is not built")
    finish()
env = dict(os.environ, MINI_DATA=os.path.join(S, "data"))
cmd = ["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--configs", tiny, "--seeds", "1,2", "--jobs", "2",
       "--per-residue", "4", "--out", os.path.join(S, "runs")]
r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
out = r.stdout + r.stderr
check(r.returncode == 0, "mini_sweep_runs", out[-1500:])
runs = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(S, "runs", "*", "metrics.h5")))
check(runs == ["tiny_mini-seed1", "tiny_mini-seed2"], "grid_is_configs_times_seeds", str(runs))
check(out.count("sweep: start") == 2 and "2 of 2 runs finished" in out, "runs_in_parallel_jobs", out[-800:])
for name in runs:
    cfg = open(os.path.join(S, "runs", name, "config.ini")).read()
    check(re.search(r"^threads\s*=\s*1\s*$", cfg, re.M) is not None and
          re.search(r"^seed\s*=\s*" + name[-1] + r"\s*$", cfg, re.M) is not None and
          os.path.join(S, "data", "probe_mini.bin") in cfg, f"{name}_one_thread_its_seed_and_the_probe",
          cfg[-600:])

rep = os.path.join(S, "runs", "report", "report.csv")
rows = list(csv.reader(open(rep))) if os.path.exists(rep) else []
check(bool(rows) and rows[0] == readme_cols, "report_columns_are_the_readmes",
      f"report: {rows[0] if rows else None}\nREADME: {readme_cols}")
if rows:
    h = rows[0]
    body = [dict(zip(h, x)) for x in rows[1:]]
    check(sorted(b["seed"] for b in body) == ["1", "2"] and {b["variant"] for b in body} == {"tiny_mini"},
          "report_rows_are_the_grid", str([(b["run"], b["seed"], b["variant"]) for b in body]))
    check(all(b["step"] == "3" and b["mean_pp"] not in ("", "nan") and len(b["fold_pp"].split()) == 8 for b in body),
          "report_has_probe_and_fold_by_phase", str(body)[:800])
md = open(os.path.join(S, "runs", "report", "report.md")).read() if os.path.exists(rep) else ""
check("## By variant" in md and "| tiny_mini | 2 |" in md, "report_md_groups_seeds", md[-600:])
for png in ("probe_by_variant.png", "probe_folded_by_variant.png"):
    check(os.path.getsize(os.path.join(S, "runs", "report", png)) > 1000 if os.path.exists(os.path.join(S, "runs", "report", png)) else False,
          f"plot_{png}")

# ---- running it again resumes (nothing retrained) -------------------------------------------------
mt = {n: os.path.getmtime(os.path.join(S, "runs", n, "metrics.h5")) for n in runs}
r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
logs = "".join(open(p).read() for p in glob.glob(os.path.join(S, "runs", "*.out")))
check(r.returncode == 0 and logs.count("already at step") == 2, "rerun_resumes", (r.stdout + r.stderr)[-600:] + logs[-400:])

# ---- bad input --------------------------------------------------------------------------------------
r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--jobs", "0"], cwd=ROOT, env=env,
                   capture_output=True, text=True)
check(r.returncode == 2 and "--jobs 0" in r.stderr, "bad_jobs_is_an_error", r.stderr)
r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--configs", os.path.join(S, "none*.ini")],
                   cwd=ROOT, env=env, capture_output=True, text=True)
check(r.returncode == 2 and "no config matches" in r.stderr, "no_config_is_an_error", r.stderr)
finish()
