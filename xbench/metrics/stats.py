"""Summary statistics of repeated measurements (pure Python: the report uses them without torch).

Confidence intervals are valid for the sample size or absent:
- a 95% CI needs at least MIN_CI_SAMPLES values; with fewer there is none (`ci_note` says why), since
  a t interval from 2 values is 12.7 standard errors wide and, on the linear scale, routinely went
  below zero (-53 to 215 samples/s from two windows);
- quantities that cannot be negative (throughput, times, ratios of them) get their interval on the
  log scale: the t interval of the mean of log(x), mapped back, i.e. a CI of the geometric mean. It
  is never below zero and is asymmetric the way multiplicative noise is;
- the t quantile is computed for the exact degrees of freedom (Welch's fractional df included).
"""

from __future__ import annotations

import math
import statistics

MIN_CI_SAMPLES = 3  # fewer values give no confidence interval
# Two-sided 95% Student t quantiles, df = 1..30; beyond, the Cornish-Fisher expansion (error < 1e-5).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
        2.042)
_Z975 = 1.959964


def t95(df: float) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (fractional df interpolated)."""
    if not df or df <= 0 or math.isnan(df):
        return math.nan
    if df >= 30:
        z = _Z975
        return (z + (z**3 + z) / 4 / df + (5 * z**5 + 16 * z**3 + 3 * z) / 96 / df**2
                + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384 / df**3)
    if df < 1:
        return _T95[0]
    lo = int(df)
    if lo == df:
        return _T95[lo - 1]
    w = (1 / lo - 1 / df) / (1 / lo - 1 / (lo + 1))  # linear in 1/df between the tabulated neighbours
    return _T95[lo - 1] + w * (_T95[lo] - _T95[lo - 1])


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
    logs = [math.log(v) for v in values]
    return statistics.fmean(logs), statistics.stdev(logs) if len(logs) > 1 else 0.0, len(logs)


def ratio_ci95(a: tuple[float, float, int] | None, b: tuple[float, float, int] | None) -> tuple[float, float] | None:
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

