"""tools/report's statistics over seeds, checked against numbers computed here, independently of
tools/seedstats.py:
  - a fake sweep (metrics.h5 files written with h5py in the layout of trainer/metrics.h) whose last
    /probe/acc_pp row of every run is built from known per-seed values (a flat accuracy c with one
    residue c - d: mean c - d/P, worst c - d, gap d), grouped by config minus seed (train.seed,
    run.name; run.dir too), with an earlier probe row that must NOT be used for the final numbers;
  - report_groups.csv: n, mean and the Student-t 95% interval over seeds, mean +- t(0.975, n-1) s/sqrt(n),
    with t from a table (below) whose entries the test first checks against its own numerical
    integration of the t density;
  - report_tests.csv: Welch's t statistic, Welch-Satterthwaite df, the two-sided p (numerical
    integration of the t density, Simpson's rule) and Holm-Bonferroni adjusted p-values over the
    family of each metric (comparisons without a defined test are not counted);
  - report.md: the by-variant table states n and the intervals, the tests section names Welch and
    Holm, the phase profile against the step lists every evaluation with its n;
  - knockout maps of several seeds of one variant averaged with their t-interval (analysis.md);
  - tools/report --gallery writes the PNGs its Markdown page references, under 1 MB in all.
Scratch: build/scratch/test_report_stats/."""
import csv
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, finish, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(ROOT, "build", "scratch", "test_report_stats")
REPORT = [sys.executable, os.path.join(ROOT, "tools", "report")]
try:
    import h5py
    import matplotlib  # noqa: F401
except ImportError as e:
    skip("report_stats", f"h5py/matplotlib missing ({e})")
    finish()

# The 0.975 quantiles of Student's t for df = 1..10 (the two-sided 95% critical values of the
# usual t table, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, there to
# 3 decimals; 7 decimals here). Checked below against the numerical integral of the density.
T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 5: 2.5705818, 6: 2.4469119,
        7: 2.3646243, 8: 2.3060041, 9: 2.2621572, 10: 2.2281389}


def t_density(t, df):
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return c * (1 + t * t / df) ** (-(df + 1) / 2)


def simpson(f, a, b, n=4000):
    if b <= a:
        return 0.0
    h = (b - a) / n
    s = f(a) + f(b)
    for i in range(1, n):
        s += (4 if i % 2 else 2) * f(a + i * h)
    return s * h / 3


def t_two_sided(t, df):
    """P(|T| >= |t|) by integrating the density: up to |t| <= 1 directly, beyond as the tail
    integral over s = ln x (integrand f(e^s) e^s, which decays like e^(-df s)), cut where the rest
    is below e^-60 of it."""
    t = abs(t)
    if t <= 1:
        return 2 * (0.5 - simpson(lambda x: t_density(x, df), 0, t))
    a = math.log(t)
    return 2 * simpson(lambda s: t_density(math.exp(s), df) * math.exp(s), a, a + 60.0 / df, 40000)


for df, q in T975.items():
    check(abs(t_two_sided(q, df) - 0.05) < 2e-7, f"t_table_df{df}_is_the_0.975_quantile", f"{t_two_sided(q, df)}")

shutil.rmtree(SCRATCH, ignore_errors=True)
SWEEP = os.path.join(SCRATCH, "sweep")
P, S = 24, 8
STEPS = [300, 600]

# variant -> (model lines, train lines, [(c, d, val_loss) per seed]); seeds 1..n
VARIANTS = {
    "full": ("attention = full\nn_kv_heads = 4\n", "",
             [(99.0, 2.0, 0.011), (98.5, 1.5, 0.013), (99.6, 3.0, 0.009), (97.9, 2.2, 0.015), (98.8, 1.0, 0.012)]),
    "full_kv1": ("attention = full\nn_kv_heads = 1\n", "",
                 [(60.0, 4.0, 1.1), (75.0, 6.0, 0.9), (80.0, 3.0, 0.8), (70.0, 5.0, 1.0)]),
    "w8s8": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 8\n", "",
             [(98.0, 96.0, 0.55), (97.0, 89.0, 0.52), (99.0, 97.0, 0.60), (96.0, 92.0, 0.50), (98.0, 95.0, 0.58)]),
    "w8s8_kv1": ("attention = compressed\nn_kv_heads = 1\nwindow = 8\nstride = 8\n", "",
                 [(98.0, 98.0, 1.3), (100.0, 100.0, 1.37), (99.0, 97.0, 1.2)]),
    "w8s8_shared": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 8\ncompressor = shared\n", "",
                    [(72.0, 7.0, 0.37), (66.0, 6.0, 0.39), (70.0, 9.0, 0.40)]),
    "w8s8_staggered": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 8\ngrid = staggered\n", "",
                       [(80.0, 31.0, 0.26), (95.0, 60.0, 0.52), (70.0, 12.0, 0.30)]),
    "w8s8_coverage": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 8\n", "gate_coverage = 0.1\n",
                      [(60.0, 52.0, 0.47), (50.0, 45.0, 0.55)]),
    "w4s4": ("attention = compressed\nn_kv_heads = 4\nwindow = 4\nstride = 4\n", "", [(60.0, 58.0, 0.40)]),
    # a plain W8/S6 beside w8s8: multi-rate 8,6,8,6 must still take W8/S8 (its largest stride) as its base
    "w8s6": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 6\n", "", [(70.0, 60.0, 0.30), (65.0, 50.0, 0.35)]),
    # the grid-free remedies (docs/spec.md §6): remedies of w8s8 too, also where their W/S are not w8s8's
    "w8s8_jitter": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 8\n", "phase_jitter = true\n",
                    [(50.0, 20.0, 0.45), (58.0, 30.0, 0.50)]),
    "w8_multirate": ("attention = compressed\nn_kv_heads = 4\nwindow = 8\nstride = 6\nhead_strides = 8,6,8,6\n", "",
                     [(96.0, 95.0, 0.49), (97.0, 93.0, 0.41), (94.0, 94.0, 0.58)]),
    "w16_learned": ("attention = compressed\nn_kv_heads = 4\nwindow = 16\nstride = 8\nboundaries = learned\n", "",
                    [(40.0, 11.0, 1.1), (55.0, 9.0, 0.71), (59.0, 14.0, 0.80)]),
}


def last_row(c, d):
    a = np.full(P, c)
    a[0] = c - d
    return a


def write_run(variant, seed, c, d, val):
    name = f"{variant}-seed{seed}"
    model, train, _ = VARIANTS[variant]
    d_run = os.path.join(SWEEP, name)
    os.makedirs(d_run)
    cfg = (f"[model]\nd_model = 32\n{model}\n[train]\nsteps = 600\nseed = {seed}\n{train}\n"
           f"[run]\nname = {name}\ndir = {'elsewhere' if seed == 2 else 'runs/sweep'}\n")
    with h5py.File(os.path.join(d_run, "metrics.h5"), "w") as f:
        f.attrs["config"] = cfg if seed % 2 else "[model]\nattention = nonsense\n"   # config.ini is read first
        f.attrs["code_version"] = "test"
        g = f.create_group("train")
        g["step"] = np.array(STEPS, dtype=np.int64)
        g["loss"] = np.array([2.0, val])
        g = f.create_group("val")
        g["step"] = np.array(STEPS, dtype=np.int64)
        g["loss"] = np.array([3.0, val])
        g["loss_by_residue"] = np.full((2, P), val)
        g = f.create_group("probe")
        g["step"] = np.array(STEPS, dtype=np.int64)
        early = np.full(P, 1.0 + seed)               # the earlier evaluation: never the final numbers
        for p, scale in (("pp", 1.0), ("ip", 0.99)):
            rows = np.stack([early, scale * last_row(c, d)])
            g[f"acc_{p}"] = rows
            g[f"mean_{p}"] = rows.mean(axis=1)
            g[f"worst_{p}"] = rows.min(axis=1)
            g[f"best_{p}"] = rows.max(axis=1)
            g[f"gap_{p}"] = rows.max(axis=1) - rows.min(axis=1)
    open(os.path.join(d_run, "config.ini"), "w").write(cfg)    # what ./train writes beside metrics.h5
    return d_run


RUN_DIRS = {}
for v, (_, _, seeds) in VARIANTS.items():
    for i, (c, d, val) in enumerate(seeds, 1):
        RUN_DIRS[(v, i)] = write_run(v, i, c, d, val)

# knockout of 3 seeds of w8s8 at step 600: L = 1, G = 2, head 1 not knocked out (NaN)
KO = {1: (80.0, 40.0), 2: (90.0, 30.0), 3: (70.0, 52.0)}   # seed -> (clean accuracy, accuracy with 0:0 knocked out)
for seed, (clean, ko) in KO.items():
    ck = os.path.join(RUN_DIRS[("w8s8", seed)], "checkpoints", "step_00000600")
    os.makedirs(ck)
    with h5py.File(os.path.join(ck, "analysis.h5"), "w") as f:
        g = f.create_group("knockout_000")
        g.attrs.update({"NX_class": "NXdata", "kind": "knockout", "checkpoint": ck, "step": np.int64(600),
                        "knockout": "0:0", "grid": "aligned"})
        acc = np.full((1, 2, 2, P), np.nan)
        acc[0, 0] = ko
        g["acc"] = acc
        g["acc_clean"] = np.full((2, P), clean)
        rel = np.full((1, 2, 2), np.nan)
        rel[0, 0] = 100 * (ko - clean) / clean
        g["rel_change_mean"] = rel
        relp = np.full((1, 2, 2, S), np.nan)
        relp[0, 0] = 100 * (ko - clean) / clean
        g["rel_change_phase"] = relp
        g.attrs["signal"] = "rel_change_mean"

OUT = os.path.join(SCRATCH, "out")
r = subprocess.run(REPORT + [SWEEP, "--out", OUT, "--prompts-per-residue", "500"], capture_output=True, text=True)
check(r.returncode == 0, "report_runs_on_the_fake_sweep", (r.stdout + r.stderr)[-800:])


# ---- expected numbers, computed here ----------------------------------------------------------
def interval(vals):
    n = len(vals)
    m = sum(vals) / n
    if n < 2:
        return n, m, math.nan, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in vals) / (n - 1))
    h = T975[n - 1] * sd / math.sqrt(n)
    return n, m, m - h, m + h


def per_seed(variant, metric):
    out = []
    scale = 0.99 if metric.endswith("_ip") else 1.0            # the ip row is 0.99 x the pp row
    for c, d, val in VARIANTS[variant][2]:
        out.append(val if metric == "val_loss" else
                   scale * {"mean": c - d / P, "worst": c - d, "gap": d}[metric.split("_")[0]])
    return out


def close(a, b, rel=1e-9, abs_=1e-9):
    if isinstance(a, str):
        a = float(a) if a not in ("", "nan") else math.nan
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= abs_ + rel * abs(b)


groups = {}
if os.path.exists(os.path.join(OUT, "report_groups.csv")):
    groups = {row["group"]: row for row in csv.DictReader(open(os.path.join(OUT, "report_groups.csv")))}
check(sorted(groups) == sorted(VARIANTS), "groups_are_config_minus_seed",
      f"{sorted(groups)} (seed 2 of every variant has another run.dir and its metrics.h5 a wrong config attribute: "
      "config.ini and the key without run.dir must group it)")
for v in VARIANTS:
    row = groups.get(v, {})
    bad = []
    for m in ("mean_pp", "worst_pp", "gap_pp", "mean_ip", "gap_ip", "val_loss"):
        n, mean, lo, hi = interval(per_seed(v, m))
        got = [row.get(f"{m}_n"), row.get(f"{m}_mean"), row.get(f"{m}_lo"), row.get(f"{m}_hi")]
        if got[0] != str(n) or not all(close(g, w, 1e-7, 1e-7) for g, w in zip(got[1:], (mean, lo, hi))):
            bad.append(f"{m}: {got} != {[n, mean, lo, hi]}")
    check(not bad and row.get("n") == str(len(VARIANTS[v][2])), f"group_interval_{v}", "; ".join(bad) or str(row)[:300])
check(groups.get("w8s8", {}).get("control") == "full" and groups.get("w8s8_kv1", {}).get("control") == "full_kv1",
      "control_is_full_attention_with_the_same_kv_heads",
      f"{groups.get('w8s8', {}).get('control')} {groups.get('w8s8_kv1', {}).get('control')}")
check(groups.get("w8s8", {}).get("gap_pp_vs_control") == "above" and groups.get("full", {}).get("control_retrieving") == "yes"
      and groups.get("full_kv1", {}).get("control_retrieving") == "no", "gap_above_control_and_retrieving_flags",
      f"{groups.get('w8s8', {}).get('gap_pp_vs_control')} {groups.get('full', {}).get('control_retrieving')} "
      f"{groups.get('full_kv1', {}).get('control_retrieving')}")

# comparisons: variant vs control, remedy vs base, remedy vs remedy
REMEDIES = ["w16_learned", "w8_multirate", "w8s8_coverage", "w8s8_jitter", "w8s8_shared", "w8s8_staggered"]
CONTROL = {"w8s8": "full", "w8s8_kv1": "full_kv1", "w8s8_shared": "full", "w8s8_staggered": "full",
           "w8s8_coverage": "full", "w4s4": "full", "w8s6": "full", "w8s8_jitter": "full", "w8_multirate": "full", "w16_learned": "full"}
PAIRS = [(v, c) for v, c in CONTROL.items()] + [(r_, "w8s8") for r_ in REMEDIES] + \
        [(a, b) for i, a in enumerate(REMEDIES) for b in REMEDIES[i + 1:]]


def welch(a, b):
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan, math.nan, math.nan
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se2 = va / na + vb / nb
    df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    t = (ma - mb) / math.sqrt(se2)
    return t, df, t_two_sided(t, df)


def holm_adjust(ps):
    idx = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    m = len(idx)
    out, run = [math.nan] * len(ps), 0.0
    for k, i in enumerate(idx):
        run = max(run, min(1.0, (m - k) * ps[i]))
        out[i] = run
    return out, m


tests = list(csv.DictReader(open(os.path.join(OUT, "report_tests.csv")))) if os.path.exists(os.path.join(OUT, "report_tests.csv")) else []
for metric in ("gap_pp", "mean_pp", "worst_pp", "val_loss"):
    rows = {(t["a"], t["b"]): t for t in tests if t["metric"] == metric}
    check(sorted(rows) == sorted(PAIRS), f"tests_family_{metric}", f"{sorted(rows)} != {sorted(PAIRS)}")
    want = [welch(per_seed(a, metric), per_seed(b, metric)) for a, b in PAIRS]
    adj, m = holm_adjust([w[2] for w in want])
    bad = []
    for (a, b), (t, df, p), pa in zip(PAIRS, want, adj):
        got = rows.get((a, b), {})
        if not (close(got.get("t", "nan"), t, 1e-9) and close(got.get("df", "nan"), df, 1e-9) and
                close(got.get("p", "nan"), p, 1e-5, 1e-12) and close(got.get("p_holm", "nan"), pa, 1e-5, 1e-12)
                and got.get("family_m") == str(m)):
            bad.append(f"{a} vs {b}: got t {got.get('t')} df {got.get('df')} p {got.get('p')} holm {got.get('p_holm')} "
                       f"m {got.get('family_m')}; want {t} {df} {p} {pa} {m}")
    check(not bad, f"welch_and_holm_{metric}", "; ".join(bad)[:1500])

# ---- report.md ------------------------------------------------------------------------------------
md = open(os.path.join(OUT, "report.md")).read() if os.path.exists(os.path.join(OUT, "report.md")) else ""
n, mean, lo, hi = interval(per_seed("w8s8", "gap_pp"))
row = next((l for l in md.splitlines() if l.startswith("| w8s8 | 5 |")), "")
check(f"{mean:.1f} [{lo:.1f}, {hi:.1f}]" in row and "| 1, 2, 3, 4, 5 |" in row, "markdown_group_row_has_n_and_interval",
      f"want '{mean:.1f} [{lo:.1f}, {hi:.1f}]' in {row!r}")
n1 = next((l for l in md.splitlines() if l.startswith("| w4s4 | 1 |")), "")
check("(no interval)" in n1, "markdown_single_seed_says_no_interval", n1)
check("Student-t" in md and "Welch" in md and "Holm-Bonferroni" in md and "n = the number of seeds" in md,
      "markdown_states_the_interval_test_and_correction", "")
prof = [l for l in md.split("## Phase profile against the training step")[-1].splitlines() if l.startswith("| w8s8 | ")]
n_e, m_e, lo_e, hi_e = interval([d for _, d, _ in VARIANTS["w8s8"][2]])
check(len(prof) == 2 and prof[0].startswith("| w8s8 | 300 | 5 | ") and prof[1].startswith("| w8s8 | 600 | 5 | ")
      and f"{m_e:.1f} [{lo_e:.1f}, {hi_e:.1f}]" in prof[1] and "0.0 [0.0, 0.0]" in prof[0],
      "markdown_phase_profile_every_step_with_n", "\n".join(prof))
for png in ("group_summary.png", "phase_by_step.png", "probe_by_variant.png", "probe_folded_by_variant.png"):
    check(os.path.exists(os.path.join(OUT, png)), f"writes_{png}")

# ---- knockout averaged over seeds -------------------------------------------------------------
amd = open(os.path.join(OUT, "analysis.md")).read() if os.path.exists(os.path.join(OUT, "analysis.md")) else ""
deltas = [ko - clean for clean, ko in KO.values()]
rels = [100 * (ko - clean) / clean for clean, ko in KO.values()]
_, dm, dlo, dhi = interval(deltas)
_, rm, rlo, rhi = interval(rels)
want = f"| 0:0 | {dm:.1f} [{dlo:.1f}, {dhi:.1f}] | {rm:.1f} [{rlo:.1f}, {rhi:.1f}] | 3 |"
check("KV-head knockout 0:0 averaged over seeds (step 600)" in amd and want in amd and "| 0:1 | – | – | 0 |" in amd,
      "knockout_averaged_over_seeds_with_intervals", f"want {want!r} in:\n" + amd[-800:])
check(os.path.exists(os.path.join(OUT, "knockout_seeds_w8s8_step_600.png")), "writes_seed_averaged_knockout_map")

# ---- the gallery --------------------------------------------------------------------------------
gal = os.path.join(SCRATCH, "gallery")
r = subprocess.run(REPORT + [gal, "--gallery", "--gallery-md", os.path.join(SCRATCH, "gallery.md")],
                   capture_output=True, text=True, timeout=500)
page = open(os.path.join(SCRATCH, "gallery.md")).read() if r.returncode == 0 else ""
import re  # noqa: E402
refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
missing = [x for x in refs if not os.path.exists(os.path.join(SCRATCH, x))]
size = sum(os.path.getsize(os.path.join(gal, f)) for f in os.listdir(gal)) if os.path.isdir(gal) else 0
check(r.returncode == 0 and len(refs) >= 6 and not missing and 0 < size < 1_000_000, "gallery_pngs_referenced_and_small",
      f"rc {r.returncode}, {len(refs)} images, missing {missing}, {size} bytes; {r.stderr[-400:]}")
finish()
