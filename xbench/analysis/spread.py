"""How far the throughput of one configuration spreads, and whether that makes it noisy.

Repeated runs give the honest spread (run to run); a single run can only offer its own: the 95% CI
over whole-process repeats, else over its timed windows, else samples/s at its p90 and p10 steps.
A ratio of two configurations' throughputs (a speed-up, a time relative to a baseline) gets its 95%
CI from the same samples (`ratio`), so a table that calls a winner can say when the CI spans 1.
"""

from __future__ import annotations

import math
import statistics

from xbench.analysis.rows import TP, Rows, missing
from xbench.metrics.stats import log_moments, ratio_ci95

NOISY_CV_DEFAULT = 0.05  # bench.noisy_cv's default, for records that do not carry it


def cv_of(xs: list[float]) -> float | None:
    """Sample CV of `xs` in floats (statistics.stdev is exact and slow), computed on values scaled by their
    largest magnitude: a CV does not depend on the scale, and a 1e308 throughput squared overflows."""
    top = max((abs(x) for x in xs), default=0.0)
    if not top or not math.isfinite(top):
        return None
    scaled = [x / top for x in xs]
    mean = statistics.fmean(scaled)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in scaled) / (len(scaled) - 1))
    return sd / mean if mean else None


def spread(rows: Rows) -> tuple[float | None, float | None, float | None, str]:
    """(low, high, CV, source) of throughput: across runs when repeated, else within the one run."""
    ok = rows.ok()
    tps = ok.nums(TP)
    if len(tps) >= 2:
        return min(tps), max(tps), cv_of(tps), f"{len(tps)} runs min-max"
    if len(tps) == 1:
        r = ok[0]
        lo, hi = (
            r.get("throughput_process_ci95_low_samples_per_s"),
            r.get("throughput_process_ci95_high_samples_per_s"),
        )
        if lo is not None and hi is not None:  # whole-process repeats: the wider, run-to-run spread
            return lo, hi, r.get("throughput_process_cv"), f"{r.get('process_repeats')} processes ci95"
        lo, hi, cv = (
            r.get("throughput_ci95_low_samples_per_s"),
            r.get("throughput_ci95_high_samples_per_s"),
            r.get("throughput_cv"),
        )
        if lo is not None and hi is not None:
            return lo, hi, cv, "windows ci95"
        gb, p10, p90 = r.get("global_batch_size"), r.get("step_time_s_p10"), r.get("step_time_s_p90")
        if None not in (gb, p10, p90) and p10 > 0 and p90 > 0:
            return gb / p90, gb / p10, r.get("step_time_cv"), "steps p10-p90"
        return None, None, cv, ""
    return None, None, None, ""


def noisy(rows: Rows, cv_across_runs: float | None = None) -> str | None:
    """NOISY when a run flagged itself, or when repeated runs of one configuration spread more than
    the runs' own bound (bench.noisy_cv) from each other: every run steady, the machine not."""
    if any(r.get("noisy") for r in rows):
        return "NOISY"
    bound = min((r["noisy_cv"] for r in rows if r.get("noisy_cv") is not None), default=NOISY_CV_DEFAULT)
    if cv_across_runs is not None and not missing(cv_across_runs) and cv_across_runs > bound:
        return "NOISY (across runs)"
    return None


SPANS_ONE = "CI spans 1: no clear winner"


def moments(rows: Rows) -> tuple[float, float, int] | None:
    """Log moments of a configuration's throughput samples: one per run when it was repeated, else the
    run's own windows (or processes)."""
    ok = rows.ok()
    tps = ok.nums(TP)
    if len(tps) >= 2:
        return log_moments(tps)
    if len(tps) == 1:
        r = ok[0]
        m, sd, n = r.get("throughput_log_mean"), r.get("throughput_log_sd"), r.get("throughput_log_n")
        if None not in (m, sd, n):
            return m, sd, int(n)
    return None


def ratio(a: Rows, b: Rows) -> tuple[float | None, tuple[float, float] | None]:
    """(median(a) / median(b), 95% CI of the ratio or None) of two configurations' throughputs."""
    ta, tb = a.ok().median(TP), b.ok().median(TP)
    if not ta or not tb:
        return None, None
    return ta / tb, ratio_ci95(moments(a), moments(b))


def verdict(ci: tuple[float, float] | None, above: str, below: str) -> str:
    """What a ratio's CI says: `above` 1, `below` 1, spans 1, or that there is no CI."""
    if ci is None:
        return "no CI (fewer than 3 samples a side)"
    if ci[0] > 1:
        return above
    if ci[1] < 1:
        return below
    return SPANS_ONE


def ci_text(ci: tuple[float, float] | None, digits: int = 3) -> str | None:
    return None if ci is None else f"{ci[0]:.{digits}g}-{ci[1]:.{digits}g}"
