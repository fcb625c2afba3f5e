"""The look of tools/report's figures, in one place: a colour-blind-safe palette, legends outside
the data, integer ticks for phases and residues, NaN drawn as missing (hatched grey, never as a
colour of the scale), heat-map cell labels that stay readable on dark cells, bands for intervals,
and the PNG writer (constrained layout, fixed dpi, no timestamp or version in the file, so the
same figure gives the same bytes).

Palette: Okabe & Ito, "Color Universal Design" (2008), the eight colours distinguishable under
the common colour-vision deficiencies, ordered here so that neighbouring entries differ in
lightness as well as hue; the full-attention controls are drawn in greys with dashed lines.
Sequential maps are viridis; signed changes use RdBu (ColorBrewer's diverging map marked
colour-blind safe) centred on 0."""
import textwrap

import matplotlib
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

# Okabe-Ito, reordered: blue, orange, bluish green, vermillion, sky blue, reddish purple, yellow, black
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"]
CONTROL_GREYS = ["#4D4D4D", "#999999", "#262626", "#BBBBBB"]
LINESTYLES = ["-", (0, (5, 1.5)), (0, (1, 1.2)), (0, (6, 2, 1, 2))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
MISSING = "#BDBDBD"          # the face of a NaN cell (hatched)
SEQUENTIAL = "viridis"
DIVERGING = "RdBu"

matplotlib.rcParams.update({
    "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "figure.titlesize": 10,
    "axes.grid": True, "grid.alpha": 0.3, "image.cmap": SEQUENTIAL,
    "hatch.color": "#7F7F7F", "savefig.facecolor": "white",
})


# fig.legend(loc="outside ...") exists from matplotlib 3.7 on (legend_outside falls back before)
OUTSIDE_LOC = tuple(int(x) for x in matplotlib.__version__.split(".")[:2] if x.isdigit()) >= (3, 7)

def style_of(i, control=False):
    """dict(color, linestyle, marker) of the i-th series: Okabe-Ito colours, then the same colours
    with another line style (so more than eight series stay distinct); controls in greys, dashed."""
    if control:
        return dict(color=CONTROL_GREYS[i % len(CONTROL_GREYS)], linestyle="--", marker=MARKERS[(i + 1) % len(MARKERS)])
    return dict(color=OKABE_ITO[i % len(OKABE_ITO)], linestyle=LINESTYLES[(i // len(OKABE_ITO)) % len(LINESTYLES)],
                marker=MARKERS[i % len(MARKERS)])


def figure(w, h, rows=1, cols=1, **kw):
    """plt.subplots with constrained layout (nothing clipped, legends outside fit)."""
    kw.setdefault("squeeze", False)
    return plt.subplots(rows, cols, figsize=(w, h), layout="constrained", **kw)


def wrap(text, width=80):
    """A title wrapped to lines of at most width characters (constrained layout keeps it whole)."""
    return "\n".join(textwrap.fill(line, width) for line in str(text).split("\n"))


def integer_ticks(ax, n=None, axis="x", step=None):
    """Integer ticks on an axis of phases or residues 0..n-1 (every one when n <= 12, else every
    `step`, default n // 6 rounded to a divisor-friendly 2, 3, 4, 6 or 8)."""
    a = ax.xaxis if axis == "x" else ax.yaxis
    if n is None:
        a.set_major_locator(MaxNLocator(integer=True))
        return
    if step is None:
        step = 1 if n <= 12 else next((s for s in (2, 3, 4, 6, 8, 12) if n / s <= 8), max(1, n // 8))
    ticks = list(range(0, n, step))
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)


def legend_outside(fig, axes=None, handles=None, labels=None, title=None, ncol=1, loc="outside right center"):
    """One legend for the figure, outside every axes (constrained layout makes room for it)."""
    if handles is None:
        handles, labels, seen = [], [], set()
        for ax in np.ravel(axes if axes is not None else fig.axes):
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in seen and not l.startswith("_"):
                    seen.add(l)
                    handles.append(h)
                    labels.append(l)
    if not handles:
        return None
    if not OUTSIDE_LOC:
        # matplotlib < 3.7 (Debian 12 ships 3.6) has no "outside ..." locations: anchor the legend
        # just outside the axes' area and let save_png's tight bounding box take it in
        where, _, side = loc.partition("outside ")[2].partition(" ")
        anchor = {"right": ("center left", (1.0, 0.5)), "left": ("center right", (0.0, 0.5)),
                  "lower": ("upper center", (0.5, 0.0)), "upper": ("lower center", (0.5, 1.0))}
        at, box = anchor.get(where, anchor["right"])
        return fig.legend(handles, labels, loc=at, bbox_to_anchor=box, ncol=ncol, title=title, frameon=False)
    return fig.legend(handles, labels, loc=loc, ncol=ncol, title=title, frameon=False)


def band(ax, x, mean, lo, hi, color, label=None, alpha=0.2, **kw):
    """A line of the means with its interval as a shaded band (points where the interval is NaN
    get no band; isolated points get error bars so that a band of one point is still visible)."""
    x, mean, lo, hi = (np.asarray(v, dtype=float) for v in (x, mean, lo, hi))
    line = ax.plot(x, mean, color=color, label=label, **kw)[0]
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.sum() >= 2:
        ax.fill_between(x, np.where(ok, lo, np.nan), np.where(ok, hi, np.nan), color=color, alpha=alpha, lw=0)
    if ok.any() and (ok.sum() == 1 or len(x) == 1):
        ax.errorbar(x[ok], mean[ok], yerr=[np.fmax(mean[ok] - lo[ok], 0), np.fmax(hi[ok] - mean[ok], 0)], fmt="none",
                    ecolor=color, capsize=3)
    return line


def mark_missing(ax, x, y, ybase=None, label="no data (NaN)"):
    """Marks the x positions where y is NaN: a grey hatched span and an 'x' at the bottom, so a
    missing value is never read as a value (returns a legend handle, or None when nothing is NaN)."""
    y = np.asarray(y, dtype=float)
    miss = [xx for xx, yy in zip(x, y) if not np.isfinite(yy)]
    if not miss:
        return None
    for xx in miss:
        ax.axvspan(xx - 0.45, xx + 0.45, facecolor=MISSING, alpha=0.35, hatch="///", edgecolor="#7F7F7F", lw=0)
    return mpatches.Patch(facecolor=MISSING, alpha=0.5, hatch="///", edgecolor="#7F7F7F", label=label)


def heatmap(ax, M, vmin, vmax, cmap=DIVERGING, fmt=None, labels=None, fontsize=7):
    """imshow of M (rows = y) with NaN cells drawn hatched grey and labelled 'n/a'; the cell text
    (fmt(v) or labels[i][j]) is white on dark cells and black on light ones."""
    M = np.asarray(M, dtype=float)
    cm = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    norm = matplotlib.colors.Normalize(vmin=vmin, vmax=vmax)
    im = ax.imshow(np.ma.masked_invalid(M), cmap=cm, norm=norm, aspect="auto", origin="lower")
    R, C = M.shape
    for i in range(R):
        for j in range(C):
            v = M[i, j]
            if not np.isfinite(v):
                ax.add_patch(mpatches.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=MISSING, hatch="///",
                                                edgecolor="#7F7F7F", lw=0))
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=fontsize, color="black")
                continue
            text = labels[i][j] if labels is not None else (fmt(v) if fmt else None)
            if text:
                r, g, b, _ = cm(norm(v))
                lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
                ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                        color="white" if lum < 0.45 else "black")
    ax.grid(False)
    return im


def missing_handle(label="no data (NaN)"):
    return mpatches.Patch(facecolor=MISSING, hatch="///", edgecolor="#7F7F7F", label=label)


def save_png(fig, fh, dpi):
    """Writes the figure as PNG to the open file fh: fixed dpi, no metadata that changes between
    runs (the Software entry names the matplotlib version)."""
    fig.savefig(fh, format="png", dpi=dpi, metadata={"Software": None}, **({} if OUTSIDE_LOC else {"bbox_inches": "tight"}))
