"""Summary statistics of repeated measurements (pure Python: the report uses them without torch)."""

from __future__ import annotations

import math
import statistics

# Two-sided 95% Student t quantiles for small samples (df = n - 1); the normal value beyond.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000,
        120: 1.980}


def t95(df: int) -> float:
    if df <= 0:
        return math.nan
    if df > 120:
        return 1.960
    return _T95[max(k for k in _T95 if k <= df)]  # the nearest tabulated df below: slightly wide


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


def summarize(values: list[float]) -> dict[str, float]:
    """median, mean, olympic mean, p10/p90, min/max, sample std, CV and a 95% CI of the mean."""
    n = len(values)
    if n == 0:
        return {"n": 0}
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
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
        "ci95_low": mean - half if n > 1 else math.nan,
        "ci95_high": mean + half if n > 1 else math.nan,
    }
