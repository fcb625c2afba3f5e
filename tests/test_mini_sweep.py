"""make mini-sweep (tools/mini-sweep) on a 2-run grid of tiny models: the grid is every config
given x the seeds, run as parallel one-thread jobs, resumable; the report's columns and the
README's promises agree with what the sweep writes:
  - configs/mini/README.md's config table lists exactly the files configs/mini/*.ini;
  - the row sets (configs/mini/rows/*.rows: claims with every claim row x 5 seeds, quick with the
    main contrast x 3 seeds, ...) name existing configs, cover all of them, and the README lists
    each with its cost; the README's seeds are the claims row set's; --dry-run prints the plan;
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
# ---- row sets (configs/mini/rows/NAME.rows): seeds as an axis --------------------------------------
def read_rows(path):
    seeds, cfgs = None, []
    for line in open(path):
        line = line.split("#")[0].strip()
        if line.startswith("seeds"):
            seeds = [int(x) for x in line.split("=", 1)[1].replace(" ", "").split(",")]
        elif line.startswith("run_s"):   # the row set's measured cost of a run (the estimate's)
            continue
        elif line:
            cfgs.append(line)
    return seeds, cfgs


ROWS = {os.path.basename(p)[:-5]: read_rows(p) for p in sorted(glob.glob(os.path.join(ROOT, "configs", "mini", "rows", "*.rows")))}
claims_seeds, claims = ROWS.get("claims", (None, []))
CLAIM_ROWS = ["full.ini", "full_kv1.ini", "w8s8.ini", "w8s8_kv1.ini", "w8s4.ini", "w8s8_tail.ini", "w8s8_shared.ini",
              "w8s8_staggered.ini", "w8s8_coverage.ini"]
check(claims_seeds is not None and len(claims_seeds) >= 5 and set(CLAIM_ROWS) <= set(claims),
      "claims_row_set_has_every_claim_row_with_5_seeds", f"{claims_seeds} {claims}")
q_seeds, quick = ROWS.get("quick", (None, []))
check(q_seeds is not None and len(q_seeds) >= 3 and {"full.ini", "w8s8.ini"} <= set(quick), "quick_row_set_has_the_contrast",
      f"{q_seeds} {quick}")
bad = [(n, c) for n, (_, cs) in ROWS.items() for c in cs if c not in present]
covered = {c for _, cs in ROWS.values() for c in cs}
check(not bad and covered == set(present), "row_sets_name_existing_configs_and_cover_all",
      f"unknown {bad}; in no row set: {sorted(set(present) - covered)}")
m = re.search(r"seeds? \*\*([0-9, ]+)\*\*", README)
check(m is not None and claims_seeds is not None and [int(x) for x in m.group(1).replace(" ", "").split(",")] == claims_seeds,
      "readme_seeds_are_the_claims_row_set", f"README {m and m.group(1)}, claims.rows {claims_seeds}")
missing = [n for n in ROWS if not re.search(r"^\| `" + n + r"`", README, re.M)]
check(not missing and "estimated" in README, "readme_lists_every_row_set_with_its_cost", f"not in the README's row-set table: {missing}")
for env, want in (({"QUICK": "1"}, f"{len(quick) * len(q_seeds or [])} runs"), ({}, f"{len(claims) * len(claims_seeds or [])} runs")):
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--dry-run", "--jobs", "2"], cwd=ROOT,
                       env=dict(os.environ, **env), capture_output=True, text=True)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(r.returncode == 0 and want in first and "estimated" in first and r.stdout.count("./train ") == int(want.split()[0]),
          f"dry_run_plan_{'quick' if env else 'claims'}", first + r.stderr[-300:])
# a row set's own cost of a run (`run_s = N`) enters the estimate; a config named by two row sets
# costs the dearer; the default is the tool's RUN_S. Row sets in a scratch folder (MINI_ROWS_DIR).
RUN_S = int(re.search(r"^RUN_S=(\d+)$", TOOL, re.M).group(1))
rows_dir = os.path.join(S, "rows")
os.makedirs(rows_dir)
for name, text in (("a", "seeds = 1,2\nrun_s = 600   # measured\nfull.ini\n"), ("b", "seeds = 1\nw8s8.ini\n"),
                   ("c", "seeds = 3\nrun_s = 900\nfull.ini\n"), ("bad", "seeds = 1\nrun_s = 0\nfull.ini\n")):
    open(os.path.join(rows_dir, name + ".rows"), "w").write(text)
def plan_minutes(rows):
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--dry-run", "--jobs", "2", "--rows", rows],
                       cwd=ROOT, env=dict(os.environ, MINI_ROWS_DIR=rows_dir), capture_output=True, text=True)
    m = re.search(r"estimated (\d+) min", r.stdout)
    return r, (int(m.group(1)) if m else None)
for rows, secs, costs in (("a,b", 2 * 600 // 2 + 1 * RUN_S // 2, f"{RUN_S} s/600 s"), ("a,c", 3 * 900 // 2, "900 s"),
                          ("b", RUN_S // 2, f"{RUN_S} s a run")):
    r, minutes = plan_minutes(rows)
    check(r.returncode == 0 and minutes == (secs + 59) // 60 and costs in r.stdout.splitlines()[0],
          f"estimate_uses_row_set_run_s_{rows.replace(',', '_')}", f"want {(secs + 59) // 60} min, {costs}: {r.stdout[:300]}{r.stderr}")
r, _ = plan_minutes("bad")
check(r.returncode == 2 and "bad.rows:2: run_s = 0" in r.stderr and "positive integer" in r.stderr, "bad_run_s_is_an_error",
      r.stderr)
r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--dry-run"], cwd=ROOT,
                   env=dict(os.environ, ROWS="nosuchset"), capture_output=True, text=True)
check(r.returncode == 2 and "no row set 'nosuchset'" in r.stderr and "claims" in r.stderr, "unknown_row_set_is_an_error", r.stderr)
# one recipe for every run: [data], [train] (but a remedy's own train.gate_coverage or train.phase_jitter), [eval] and
# [checkpoint] are the same in every configs/mini/*.ini, and the README names the loss it uses
import configparser  # noqa: E402
# A config may carry a control-specific recipe (the 1-KV control): it says so in its header, the
# README has a section on it, and it is left out of the shared recipe (checked below, and its own
# data reaches its runs: the dry-run check further down).
REMEDY_TRAIN_KEYS = {("train", "gate_coverage"), ("train", "phase_jitter")}   # docs/spec.md §2b.3, §6.2
# The probe's period P (eval.residues) and its file follow the config's strides: P 24 with
# probe_mini.bin, P 32 with probe_mini_p32.bin (the v4 stacks: HCA's m = 32 must divide P,
# docs/spec.md §3.7); checked below instead of being one value for all.
PROBE_KEYS = {("eval", "residues"), ("eval", "probe")}
PROBE_OF_P = {"24": "runs/data/probe_mini.bin", "32": "runs/data/probe_mini_p32.bin"}
recipes = {}
own_recipe = []
for p in sorted(glob.glob(os.path.join(ROOT, "configs", "mini", "*.ini"))):
    if "CONTROL-SPECIFIC RECIPE" in open(p).read():
        own_recipe.append(os.path.basename(p))
        continue
    c = configparser.ConfigParser(inline_comment_prefixes=(";",))
    c.read(p)
    recipe = tuple((sec, tuple(sorted((k, v) for k, v in c[sec].items() if (sec, k) not in REMEDY_TRAIN_KEYS | PROBE_KEYS)))
                   for sec in ("data", "train", "eval", "checkpoint"))
    recipes.setdefault(recipe, []).append(os.path.basename(p))
    P = c["eval"].get("residues", "24")
    strides = [int(v) for k, v in c["model"].items() if k in ("stride", "csa_stride", "hca_stride")]
    strides += [int(x) for x in c["model"].get("head_strides", "").replace(" ", "").split(",") if x]
    check(c["eval"].get("probe") == PROBE_OF_P.get(P) and all(int(P) % st == 0 for st in strides),
          f"probe_period_fits_strides_{os.path.basename(p)[:-4]}", f"P {P}, probe {c['eval'].get('probe')}, strides {strides}")
loss = dict(dict(next(iter(recipes))).get("data", ())).get("loss_targets", "all") if recipes else None
check(all(os.path.basename(f) in README for f in PROBE_OF_P.values()), "readme_names_every_probe_file", str(PROBE_OF_P))
check(len(recipes) == 1 and f"`loss_targets = {loss}`" in README, "every_mini_config_has_one_recipe",
      f"{len(recipes)} recipes: {list(recipes.values())}; loss_targets {loss}")
check(all(f"`{n}`" in README for n in own_recipe) and len(own_recipe) <= 1, "control_specific_recipes_are_documented",
      f"own recipes {own_recipe}")
# its runs get its own data, not the shared recipe's (tools/mini-sweep groups runs by data)
if own_recipe:
    own = os.path.join("configs", "mini", own_recipe[0])
    p = subprocess.run([os.path.join(ROOT, "tools", "mini-sweep"), "--dry-run", "--configs", own, "--seeds", "1"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    train_line = [l for l in p.stdout.splitlines() if l.startswith("./train") and own_recipe[0] in l]
    want = configparser.ConfigParser(inline_comment_prefixes=(";",))
    want.read(os.path.join(ROOT, own))
    check(p.returncode == 0 and len(train_line) == 1 and f"data.train={want['data']['train']}" in train_line[0] and
          f"data.stages={want['data']['stages']}" in train_line[0], "control_specific_recipe_keeps_its_data",
          p.stdout[-600:])
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
          os.path.join(S, "data", "probe_mini.4x24.bin") in cfg, f"{name}_one_thread_its_seed_and_the_probe",
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

# ---- another probe size: the finished runs are never pooled with runs on another probe -------------
probe4 = os.path.join(S, "data", "probe_mini.4x24.bin")
pm = os.path.getmtime(probe4) if os.path.exists(probe4) else None
mt = {n: os.path.getmtime(os.path.join(S, "runs", n, "metrics.h5")) for n in runs}
r = subprocess.run(cmd[:cmd.index("--per-residue") + 1] + ["5"] + cmd[cmd.index("--per-residue") + 2:], cwd=ROOT, env=env,
                   capture_output=True, text=True)
check(r.returncode == 2 and all(os.path.join(S, "runs", n) + f" (eval.probe {probe4})" in r.stderr for n in runs) and
      "another probe" in r.stderr and "--per-residue" in r.stderr, "other_probe_size_refused_naming_the_runs",
      f"exit {r.returncode}: {r.stderr[-800:]}")
check(pm is not None and os.path.getmtime(probe4) == pm and not os.path.exists(os.path.join(S, "data", "probe_mini.5x24.bin"))
      and all(os.path.getmtime(os.path.join(S, "runs", n, "metrics.h5")) == t for n, t in mt.items()),
      "other_probe_size_builds_and_runs_nothing", str(sorted(os.listdir(os.path.join(S, "data")))))

# ---- bad input --------------------------------------------------------------------------------------
r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--jobs", "0"], cwd=ROOT, env=env,
                   capture_output=True, text=True)
check(r.returncode == 2 and "--jobs 0" in r.stderr, "bad_jobs_is_an_error", r.stderr)
r = subprocess.run(["bash", os.path.join(ROOT, "tools", "mini-sweep"), "--configs", os.path.join(S, "none*.ini")],
                   cwd=ROOT, env=env, capture_output=True, text=True)
check(r.returncode == 2 and "no config matches" in r.stderr, "no_config_is_an_error", r.stderr)
finish()
