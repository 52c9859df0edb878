"""Summary statistics of repeated measurements (pure Python: the report uses them without torch).

Confidence intervals are valid for the sample size or absent:
- a 95% CI needs at least MIN_CI_SAMPLES values; with fewer there is none (`ci_note` says why), since
  a t interval from 2 values is 12.7 standard errors wide and, on the linear scale, routinely went
  below zero (-53 to 215 samples/s from two windows);
- quantities that cannot be negative (throughput, times, ratios of them) get their interval on the
  log scale: the t interval of the mean of log(x), mapped back, i.e. a CI of the geometric mean. It
  is never below zero and is asymmetric the way multiplicative noise is;
- the t quantile is computed (incomplete beta, bisection) for the exact degrees of freedom, Welch's
  fractional df included.
"""

from __future__ import annotations

import functools
import math
import statistics

MIN_CI_SAMPLES = 3  # fewer values give no confidence interval


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
                   -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _hill_t(df: float, two_tailed: float) -> float:
    """Hill's approximation of the t quantile (CACM algorithm 396, 1970) for real df: within ~1e-6
    relative for df >= 1, so Newton below needs a few steps to the double."""
    if df == 2.0:
        return math.sqrt(2.0 / (two_tailed * (2.0 - two_tailed)) - 2.0)
    if df == 1.0:
        return 1.0 / math.tan(two_tailed * math.pi / 2)
    a = 1.0 / (df - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2) * df
    y = (d * two_tailed) ** (2.0 / df)
    if y > 0.05 + a:  # the normal quantile, corrected
        x = statistics.NormalDist().inv_cdf(1 - two_tailed / 2)
        y = x * x
        if df < 5:
            c += 0.3 * (df - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = math.expm1(a * y * y)
    else:
        y = ((1.0 / (((df + 6.0) / (df * y) - 0.089 * d - 0.822) * (df + 2.0) * 3.0) + 0.5 / (df + 4.0)) * y
             - 1.0) * (df + 1.0) / (df + 2.0) + 1.0 / y
    return math.sqrt(df * y)


@functools.lru_cache(maxsize=4096)
def _t_quantile(df: float, two_tailed: float) -> float:
    """t with P(|T| > t) = two_tailed: Newton's method on the tail (its derivative is the t density)
    from Hill's approximation, kept inside the bracket it has narrowed (a step that leaves it bisects).
    ~5 incomplete betas instead of bisection's ~85: the report asks for thousands of Welch dfs."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    try:
        t = _hill_t(df, two_tailed) if df >= 1 else math.nan
    except (ValueError, OverflowError, ZeroDivisionError):
        t = math.nan
    if not (math.isfinite(t) and t > 0):  # Cornish-Fisher's first term; the bracket does the rest
        z = statistics.NormalDist().inv_cdf(1 - two_tailed / 2)
        t = z + (z ** 3 + z) / (4 * df)
    lo, hi = 0.0, math.inf
    for _ in range(200):
        p = _ibeta(df / 2, 0.5, df / (df + t * t))  # P(|T| > t)
        if p == two_tailed:
            return t
        if p > two_tailed:
            lo = t
        else:
            hi = t
        new = t + (p - two_tailed) / (2 * math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df)))
        if not lo < new < hi:
            new = 2 * t if hi == math.inf else (lo + hi) / 2
        if abs(new - t) <= 4e-16 * t or hi - lo <= 4e-16 * t:
            return new
        t = new
    return t


def t95(df: float) -> float:
    """The 0.975 quantile of Student's t with `df` (> 0, fractional allowed: Welch) degrees of freedom."""
    if df is None or math.isnan(df) or df <= 0:
        return math.nan
    return _t_quantile(round(float(df), 9), 0.05)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def olympic_mean(values: list[float]) -> float:
    """Mean after dropping the single best and worst value (plain mean under three values)."""
    xs = sorted(values)
    if len(xs) < 3:
        return statistics.fmean(xs) if xs else math.nan
    return statistics.fmean(xs[1:-1])


def ci_note(n: int) -> str | None:
    """Why there is no CI for `n` values (None when there is one)."""
    if n >= MIN_CI_SAMPLES:
        return None
    return f"no CI: {n} sample{'s' if n != 1 else ''} (a 95% CI needs {MIN_CI_SAMPLES} or more)"


def ci95(values: list[float]) -> tuple[float, float] | None:
    """95% CI: on the log scale (geometric mean) when every value is positive, else the t interval of
    the mean; None under MIN_CI_SAMPLES values."""
    n = len(values)
    if n < MIN_CI_SAMPLES:
        return None
    if all(v > 0 for v in values):
        logs = [math.log(v) for v in values]
        m, half = statistics.fmean(logs), t95(n - 1) * statistics.stdev(logs) / math.sqrt(n)
        return math.exp(m - half), math.exp(m + half)
    m, half = statistics.fmean(values), t95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return m - half, m + half


def log_moments(values: list[float]) -> tuple[float, float, int] | None:
    """(mean, sample std, n) of log(values): what a ratio's CI needs from each side; None if any <= 0."""
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return _log_moments(tuple(values))


@functools.lru_cache(maxsize=65536)
def _log_moments(values: tuple[float, ...]) -> tuple[float, float, int]:
    # cached: the report asks again for the same configuration's runs (scaling, baseline, findings), and
    # statistics.stdev is exact (fractions), ~0.3 ms a call
    logs = [math.log(v) for v in values]
    return statistics.fmean(logs), statistics.stdev(logs) if len(logs) > 1 else 0.0, len(logs)


def ratio_ci95(
    a: tuple[float, float, int] | None, b: tuple[float, float, int] | None
) -> tuple[float, float] | None:
    """95% CI of geomean(a) / geomean(b) from both sides' log moments (Welch's t on the log scale);
    None unless both sides have MIN_CI_SAMPLES values."""
    if a is None or b is None or a[2] < MIN_CI_SAMPLES or b[2] < MIN_CI_SAMPLES:
        return None
    (ma, sa, na), (mb, sb, nb) = a, b
    va, vb = sa * sa / na, sb * sb / nb
    se = math.sqrt(va + vb)
    d = ma - mb
    if se == 0:
        return math.exp(d), math.exp(d)
    df = (va + vb) ** 2 / ((va * va / (na - 1) if va else 0.0) + (vb * vb / (nb - 1) if vb else 0.0))
    half = t95(df) * se
    return math.exp(d - half), math.exp(d + half)


def summarize(values: list[float]) -> dict[str, float | None]:
    """median, mean, olympic mean, p10/p90, min/max, sample std, CV and a 95% CI (see `ci95`; None
    with `ci_note` under MIN_CI_SAMPLES values)."""
    n = len(values)
    if n == 0:
        return {"n": 0}
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    ci = ci95(values)
    return {
        "n": n,
        "median": statistics.median(values),
        "mean": mean,
        "olympic_mean": olympic_mean(values),
        "p10": percentile(values, 10),
        "p90": percentile(values, 90),
        "min": min(values),
        "max": max(values),
        "std": std,
        "cv": std / mean if mean else math.nan,
        "ci95_low": ci[0] if ci else None,
        "ci95_high": ci[1] if ci else None,
        "ci_note": ci_note(n),
    }

