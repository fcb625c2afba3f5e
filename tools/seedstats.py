"""Statistics over seeds for tools/report: the mean of a quantity over the seeds of one variant
with its Student-t 95% interval, Welch's t-test of two variants, the Holm-Bonferroni correction
of a family of tests. Pure Python (math only; scipy is not required).

  mean_interval(values)      n, mean, sample sd (n - 1), and the interval
                             mean +- t_{0.975, n-1} sd / sqrt(n)   (NaN bounds for n < 2)
  welch(a, b)                Welch's unequal-variance t-test, two-sided:
                             se^2 = s_a^2/n_a + s_b^2/n_b, t = (mean_a - mean_b) / se,
                             df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))
                             (Welch-Satterthwaite), p = P(|T_df| >= |t|), and the 95% interval of
                             mean_a - mean_b, +- t_{0.975, df} se. NaN where n_a or n_b < 2 or
                             se = 0 (no spread in either group: the test is undefined)
  holm(pvalues)              Holm's step-down adjusted p-values: sort the m finite p ascending,
                             p'_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); NaN stays NaN and is
                             not counted in m
  t_quantile(q, df)          the q quantile of Student's t with df degrees of freedom (df > 0,
                             not necessarily an integer)
  t_sf2(t, df)               the two-sided tail P(|T_df| >= |t|)

The t distribution's tail is the regularised incomplete beta function,
P(|T_df| >= |t|) = I_x(df/2, 1/2) with x = df / (df + t^2), evaluated by its continued fraction
(modified Lentz, relative accuracy about 1e-14); the quantile is found by bisection on it.
Every value NaN or infinite is left out of a sample before anything is computed."""
import math

LEVEL = 0.95


def finite(values):
    """The values that are finite numbers (NaN, inf and None left out), as floats."""
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf2(t, df):
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if not (math.isfinite(df) and df > 0) or math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q, df):
    """The q quantile (0 < q < 1) of Student's t with df > 0 degrees of freedom."""
    if not (0.0 < q < 1.0) or not (math.isfinite(df) and df > 0):
        return math.nan
    if q == 0.5:
        return 0.0
    tail2 = 2.0 * min(q, 1.0 - q)             # the two-sided tail the |quantile| leaves
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > tail2:              # bracket: the tail falls as t grows
        hi *= 2.0
        if hi > 1e300:
            return math.nan
    for _ in range(300):
        mid = 0.5 * (lo + hi)
        if t_sf2(mid, df) > tail2:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    t = 0.5 * (lo + hi)
    return t if q > 0.5 else -t


def mean_interval(values, level=LEVEL):
    """dict(n, mean, sd, lo, hi, half) of the finite values: the Student-t interval of the mean
    at `level` (two-sided). n = 0: all NaN; n = 1: mean only (sd, lo, hi, half NaN)."""
    v = finite(values)
    n = len(v)
    if n == 0:
        return dict(n=0, mean=math.nan, sd=math.nan, lo=math.nan, hi=math.nan, half=math.nan)
    m = math.fsum(v) / n
    if n == 1:
        return dict(n=1, mean=m, sd=math.nan, lo=math.nan, hi=math.nan, half=math.nan)
    sd = math.sqrt(math.fsum((x - m) ** 2 for x in v) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return dict(n=n, mean=m, sd=sd, lo=m - half, hi=m + half, half=half)


def welch(a, b, level=LEVEL):
    """Welch's two-sided t-test of mean(a) = mean(b): dict(n_a, n_b, mean_a, mean_b, diff, se, t,
    df, p, lo, hi) with [lo, hi] the interval of mean_a - mean_b; why (a string) says why the test
    is undefined (then t, df, p, lo, hi are NaN)."""
    a, b = finite(a), finite(b)
    na, nb = len(a), len(b)
    ma = math.fsum(a) / na if na else math.nan
    mb = math.fsum(b) / nb if nb else math.nan
    out = dict(n_a=na, n_b=nb, mean_a=ma, mean_b=mb, diff=ma - mb, se=math.nan, t=math.nan, df=math.nan,
               p=math.nan, lo=math.nan, hi=math.nan, why="")
    if na < 2 or nb < 2:
        out["why"] = f"fewer than 2 seeds (n = {na}, {nb})"
        return out
    va = math.fsum((x - ma) ** 2 for x in a) / (na - 1)
    vb = math.fsum((x - mb) ** 2 for x in b) / (nb - 1)
    ea, eb = va / na, vb / nb
    se2 = ea + eb
    if se2 <= 0.0:
        out["why"] = "no spread over seeds in either group"
        return out
    se = math.sqrt(se2)
    df = se2 * se2 / (ea * ea / (na - 1) + eb * eb / (nb - 1))
    t = (ma - mb) / se
    half = t_quantile(0.5 + level / 2.0, df) * se
    out.update(se=se, t=t, df=df, p=t_sf2(t, df), lo=out["diff"] - half, hi=out["diff"] + half)
    return out


def holm(pvalues):
    """Holm-Bonferroni adjusted p-values, in the order given; NaN entries stay NaN and do not count
    in the family size m."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
