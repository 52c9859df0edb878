"""How far the throughput of one configuration spreads, and whether that makes it noisy.

Repeated runs give the honest spread (run to run); a single run can only offer its own: the 95% CI
over whole-process repeats, else over its timed windows, else samples/s at its p90 and p10 steps.
"""

from __future__ import annotations

import math
import statistics

from xbench.analysis.rows import TP, Rows, missing

NOISY_CV_DEFAULT = 0.05  # bench.noisy_cv's default, for records that do not carry it


def spread(rows: Rows) -> tuple[float | None, float | None, float | None, str]:
    """(low, high, CV, source) of throughput: across runs when repeated, else within the one run."""
    ok = rows.ok()
    tps = ok.nums(TP)
    if len(tps) >= 2:
        mean = statistics.fmean(tps)  # the sample standard deviation in floats (statistics.stdev is exact and slow)
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in tps) / (len(tps) - 1))
        return min(tps), max(tps), sd / mean if mean else None, f"{len(tps)} runs min-max"
    if len(tps) == 1:
        r = ok[0]
        lo, hi = r.get("throughput_process_ci95_low_samples_per_s"), r.get("throughput_process_ci95_high_samples_per_s")
        if lo is not None and hi is not None:  # whole-process repeats: the wider, run-to-run spread
            return lo, hi, r.get("throughput_process_cv"), f"{r.get('process_repeats')} processes ci95"
        lo, hi, cv = r.get("throughput_ci95_low_samples_per_s"), r.get("throughput_ci95_high_samples_per_s"), \
            r.get("throughput_cv")
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
