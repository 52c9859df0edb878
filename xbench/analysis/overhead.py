"""Compiled runtimes against eager over stored runs: speed-up and break-even step count.

One record holds one runtime, so this pairs rows: each ok non-eager run with the eager runs of the
same workload on the same placement (xbench/analysis/workload.py VERSUS_EAGER: only the runtime
differs). Of several eager twins the one with the median steady step is used (a real run, not an
average). The per-pair arithmetic is metrics.overhead.break_even.
"""

from __future__ import annotations

import re
import statistics

from xbench.analysis.rows import Rows
from xbench.analysis.workload import VERSUS_EAGER, key
from xbench.metrics.overhead import break_even, steady_step_s


def compile_columns(rows: Rows) -> list[str]:
    """The compile-time measurements present (`compile_time_s`, `compile_graph_s`, ...)."""
    return sorted(c for c in rows.columns() if re.fullmatch(r"compile\w*_s", c))


def versus_eager(rows) -> dict[str, dict]:
    """run_id -> {speedup_vs_eager, break_even_steps_vs_eager} for ok non-eager runs with an eager twin."""
    ok = Rows.of(rows).ok(None)
    eager: dict[tuple, list[dict]] = {}
    for r in ok:
        if r.get("runtime") == "eager" and steady_step_s(r):
            eager.setdefault(key(r, VERSUS_EAGER), []).append(r)
    out = {}
    for r in ok:
        twins = eager.get(key(r, VERSUS_EAGER)) if r.get("runtime") != "eager" else None
        if twins:
            mid = statistics.median_low(steady_step_s(t) for t in twins)
            out[r["run_id"]] = break_even(r, next(t for t in twins if steady_step_s(t) == mid))
    return out
