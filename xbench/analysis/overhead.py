"""Compiled runtimes against eager over stored runs: speed-up and break-even step count.

One record holds one runtime, so this pairs rows: `eager_twins` is the one pairing rule, which this module's
`versus_eager` (per run), the report's overhead table and the findings' runtime comparison (per
configuration) all use. A non-eager group's twin is an eager group of the same workload on the same placement
(xbench/analysis/workload.py VERSUS_EAGER: only the runtime differs), of the same experiment when one exists
(a sweep's own eager run), and of several the one with the median steady step (the lower middle one of an
even count: a real run, not an average). The per-pair arithmetic is metrics.overhead.break_even.
"""

from __future__ import annotations

import re
import statistics

from xbench.analysis.rows import TP, Rows
from xbench.analysis.workload import VERSUS_EAGER, key
from xbench.metrics.overhead import break_even, steady_step_s


def compile_columns(rows: Rows) -> list[str]:
    """The compile-time measurements present (`compile_time_s`, `compile_graph_s`, ...)."""
    return sorted(c for c in rows.columns() if re.fullmatch(r"compile\w*_s", c))


def _step_s(rows) -> float | None:
    """A group's median steady step (1 / throughput where a record has no window figures)."""
    xs = [s for r in rows if (s := steady_step_s(r) or (1 / r[TP] if r.get(TP) else None))]
    return statistics.median(xs) if xs else None


def _eager_pools(groups) -> tuple[dict[tuple, list[int]], dict[int, float]]:
    """(workload key -> the indexes of its eager groups, each eager group's median steady step, computed
    once)."""
    eager: dict[tuple, list[int]] = {}
    step: dict[int, float] = {}
    for i, g in enumerate(groups):
        if g and g[0].get("runtime") == "eager" and (s := _step_s(g)):
            step[i] = s
            eager.setdefault(key(g[0], VERSUS_EAGER), []).append(i)
    return eager, step


def _median_twin(pool: list[int], groups, step: dict[int, float], experiment) -> int:
    """The eager group at the median steady step among the pool's (of the same experiment where some are)."""
    same = [j for j in pool if groups[j][0].get("experiment") == experiment] or pool
    mid = statistics.median_low(step[j] for j in same)
    return next(j for j in same if step[j] == mid)


def eager_twins(groups) -> dict[int, int]:
    """Index of each non-eager group (a list of rows of one configuration; one run is a group of one) -> the
    index of its eager twin (the module doc's rule); a group without one is left out."""
    eager, step = _eager_pools(groups)
    out: dict[int, int] = {}
    chosen: dict[tuple, int] = {}  # (workload key, experiment) -> its twin: 10,000 runs share a few hundred
    for i, g in enumerate(groups):
        k = key(g[0], VERSUS_EAGER) if g and g[0].get("runtime") != "eager" else None
        pool = eager.get(k) if k is not None else None
        if not pool:
            continue
        exp = g[0].get("experiment")
        if (k, exp) not in chosen:
            chosen[k, exp] = _median_twin(pool, groups, step, exp)
        out[i] = chosen[k, exp]
    return out


def versus_eager(rows) -> dict[str, dict]:
    """run_id -> {speedup_vs_eager, break_even_steps_vs_eager} for ok non-eager runs with an eager twin."""
    ok = list(Rows.of(rows).ok(None))
    return {ok[i]["run_id"]: break_even(ok[i], ok[j]) for i, j in eager_twins([[r] for r in ok]).items()}
