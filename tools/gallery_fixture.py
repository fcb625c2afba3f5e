"""The synthetic sweep behind the figure gallery (tools/report --gallery, docs/gallery.md): runs of
a few variants x 3 seeds written as metrics.h5 files in the layout of trainer/metrics.h (root
attribute config, /train, /val, /probe with every evaluation, /gates for compressed models), and
for the W8/S8 seeds an analysis.h5 (analysis/analysis_h5.h) at the last checkpoint with a KV-head
knockout and a gate-cycling group. Every number comes from numpy's generator with fixed seeds,
so the same files (and figures) come out every time. Nothing here is a measurement."""
import os
import warnings

import h5py
import numpy as np

P, S, L, G, W = 24, 8, 2, 4, 8
PER_RESIDUE = 500
STEPS = np.array([150, 300, 450, 600], dtype=np.int64)
SEEDS = (1, 2, 3)
DESCRIPTION = ("six variants x 3 seeds, 4 evaluations each; full attention retrieves flatly from step 450, W8/S8 "
               "is blind at phase 7, W8/S8 with 1 KV head at several phases, W8/S4 and the staggered grid are "
               "nearly flat; W8/S4 has no prompts at residue 13 (a missing value).")

# name -> (attention, n_kv_heads, stride, grid, final accuracy by phase (8 values) as a function of the seed)
VARIANTS = {
    "full": ("full", 4, 8, "aligned", lambda s, rng: np.full(S, 99.4)),
    "full_kv1": ("full", 1, 8, "aligned", lambda s, rng: np.full(S, 96.0 - s)),
    "w8s8": ("compressed", 4, 8, "aligned", lambda s, rng: np.array([97, 95, 93, 80 if s == 2 else 96, 95, 97, 90, 2.0])),
    "w8s8_kv1": ("compressed", 1, 8, "aligned",
                 lambda s, rng: np.where(np.isin(np.arange(S), rng.choice(S, 4, replace=False)), 1.0, 98.0)),
    "w8s4": ("compressed", 4, 4, "aligned", lambda s, rng: np.array([86, 90, 88, 91, 86, 90, 88, 91.0])),
    "w8s8_staggered": ("compressed", 4, 8, "staggered", lambda s, rng: np.array([96, 94, 92, 95, 93, 96, 90, 85.0])),
}
# how far the final pattern has emerged at each evaluation (0: chance, 1: final)
EMERGE = {"full": [0, 0.01, 0.6, 1], "full_kv1": [0, 0, 0.3, 1]}
CHANCE = 100.0 / 128


def config_text(name, seed):
    att, kv, stride, grid, _ = VARIANTS[name]
    model = (f"[model]\nd_model = 128\nn_layers = {L}\nn_heads = 4\nn_kv_heads = {kv}\nhead_dim = 32\n"
             f"attention = {att}\n")
    if att == "compressed":
        model += f"window = 8\nstride = {stride}\nlocal = window\nn_local = 16\ncompressor = paper\ngrid = {grid}\ngate = scalar\n"
    return (model + f"\n[train]\nsteps = 600\nlr = 0.001\nseed = {seed}\ngate_coverage = 0\n\n[eval]\nresidues = {P}\n\n"
            f"[run]\nname = {name}-seed{seed}\ndir = runs/gallery\n")


def accuracy_rows(name, by_phase, rng):
    """[len(STEPS), P] accuracies in percent: the final pattern by_phase, faded in along EMERGE,
    sampled as binomial counts of PER_RESIDUE prompts per residue."""
    att, kv, stride, grid, _ = VARIANTS[name]
    fold = 8 if att == "full" else stride
    target = np.array([by_phase[r % fold] for r in range(P)])
    out = np.empty((len(STEPS), P))
    for i, e in enumerate(EMERGE.get(name, [0.02, 0.3, 0.8, 1])):
        prob = (CHANCE + e * (target - CHANCE)) / 100.0
        out[i] = 100.0 * rng.binomial(PER_RESIDUE, np.clip(prob, 0, 1)) / PER_RESIDUE
    if name == "w8s4":
        out[:, 13] = np.nan                          # a residue without prompts
    return out


def write_run(root, name, seed):
    rng = np.random.default_rng(1000 * (list(VARIANTS).index(name) + 1) + seed)
    d = os.path.join(root, f"{name}-seed{seed}")
    os.makedirs(d, exist_ok=True)
    att = VARIANTS[name][0]
    with h5py.File(os.path.join(d, "metrics.h5"), "w") as f:
        f.attrs["config"] = config_text(name, seed)
        f.attrs["code_version"] = "gallery"
        steps = np.arange(10, 610, 10, dtype=np.int64)
        g = f.create_group("train")
        g["step"] = steps
        g["tokens"] = steps * 16384
        late = 1.0 if att == "compressed" else 2.5
        g["loss"] = 2.5 * np.exp(-steps / (150.0 * late)) + 0.05 + rng.normal(0, 0.03, len(steps))
        for k in ("lr", "grad_norm", "tokens_per_sec", "mfu"):
            g[k] = rng.random(len(steps))
        pattern = np.asarray(VARIANTS[name][4](seed, rng), dtype=float)
        acc = {p: accuracy_rows(name, pattern, rng) for p in ("pp", "ip")}
        g = f.create_group("val")
        g["step"] = STEPS
        base = 2.45 * (1 - np.nanmean(acc["pp"], axis=1) / 100.0) + 0.01
        g["loss"] = base
        g["loss_by_residue"] = base[:, None] * (1 + 0.1 * rng.standard_normal((len(STEPS), P)))
        g = f.create_group("probe")
        g["step"] = STEPS
        for p, a in acc.items():
            g[f"acc_{p}"] = a
            g[f"mean_{p}"] = np.nanmean(a, axis=1)
            g[f"worst_{p}"] = np.nanmin(a, axis=1)
            g[f"best_{p}"] = np.nanmax(a, axis=1)
            g[f"gap_{p}"] = np.nanmax(a, axis=1) - np.nanmin(a, axis=1)
            for t in ("chi2", "p", "chi2_phase", "p_phase"):
                g[f"{t}_{p}"] = np.full(len(STEPS), np.nan)
        if att == "compressed":
            g = f.create_group("gates")
            g["step"] = STEPS
            g["eff_static"] = (1 + 7 * rng.random((len(STEPS), L, G, 2))).astype(np.float32)
            g["eff_window"] = (1 + 7 * rng.random((len(STEPS), L, G, 2))).astype(np.float32)
            prof = rng.gamma(0.6, 1.0, (len(STEPS), L, G, 2, W))
            g["profile"] = (W * prof / prof.sum(axis=-1, keepdims=True)).astype(np.float32)
    if name == "w8s8":
        write_analysis(d, seed, acc["pp"][-1], acc["ip"][-1], rng)


def write_analysis(run_dir, seed, clean_pp, clean_ip, rng):
    ck = os.path.join(run_dir, "checkpoints", "step_00000600")
    os.makedirs(ck, exist_ok=True)
    clean = np.stack([clean_pp, clean_ip])                   # [2, P]
    warnings.simplefilter("ignore", RuntimeWarning)          # nanmean of the head that was not knocked out
    with h5py.File(os.path.join(ck, "analysis.h5"), "w") as f:
        f.attrs["NX_class"] = "NXroot"
        f.attrs["creator"] = "phaselab"

        def group(name, kind, attrs, data):
            g = f.create_group(name)
            g.attrs["NX_class"] = "NXdata"
            g.attrs["kind"] = kind
            g.attrs["checkpoint"] = ck
            g.attrs["step"] = np.int64(600)
            for k, v in attrs.items():
                g.attrs[k] = v
            for k, v in data.items():
                g[k] = np.asarray(v, dtype=np.float64)
            g.attrs["signal"] = next(iter(data))
        # knockout: layer 1 heads carry the lookup (a large drop), layer 0 little; head 0:3 not knocked out
        drop = np.array([[2, 4, 1, np.nan], [60, 35, 75, 20.0]]) * (1 + 0.15 * rng.standard_normal((L, G)))
        acc = np.clip(clean[None, None] - drop[:, :, None, None] * (clean[None, None] / 100.0), 0, 100)
        acc[0, 3] = np.nan
        cm = np.nanmean(clean, axis=1)
        rel = 100 * (np.nanmean(acc, axis=3) - cm[None, None]) / cm[None, None]
        fold = np.stack([np.nanmean(acc[..., j::S], axis=3) for j in range(S)], axis=3)     # [L, G, 2, S]
        cfold = np.stack([np.nanmean(clean[:, j::S], axis=1) for j in range(S)], axis=1)     # [2, S]
        with np.errstate(divide="ignore", invalid="ignore"):
            relp = np.where(cfold[None, None] > 0, 100 * (fold - cfold[None, None]) / cfold[None, None], np.nan)
        group("knockout_000", "knockout", {"knockout": "0:0,0:1,0:2,1:0,1:1,1:2,1:3", "grid": "aligned",
                                           "calibration": "calib.bin"},
              {"rel_change_mean": rel, "rel_change_phase": relp, "acc": acc, "acc_clean": clean,
               "grid_offset": np.zeros(G)})
        # gate cycling: rolling the gates by delta moves the blind phase by delta (the prediction), plus noise
        a0 = np.stack([np.nanmean(clean[:, j::S], axis=1) for j in range(S)], axis=1)        # [2, S]
        deltas = np.arange(S)
        pred = np.stack([np.roll(a0, d, axis=1) for d in deltas])                          # [S, 2, S]
        meas = np.clip(pred * (0.85 + 0.1 * rng.random(pred.shape)) + rng.normal(0, 4, pred.shape), 0, 100)
        meas[0] = a0
        corr = np.array([[np.corrcoef(meas[k, p], pred[k, p])[0, 1] for p in range(2)] for k in deltas])
        group("gate_cycle_000", "gate_cycle", {"layers": "all"},
              {"acc_phase": meas, "predicted_phase": pred, "delta": deltas, "correlation": corr})


def write_sweep(root):
    """Writes the whole synthetic sweep under root (one directory per run)."""
    os.makedirs(root, exist_ok=True)
    for name in VARIANTS:
        for seed in SEEDS:
            write_run(root, name, seed)
    return root
