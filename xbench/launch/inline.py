"""Run the only rank in this process."""

from __future__ import annotations

from xbench.bench.worker import RankContext, run_rank
from xbench.launch import LaunchResult


def run_inline(cfg, facts, on_step=None, stop=None) -> LaunchResult:
    result = run_rank(cfg, facts, RankContext(0, 1, 0), on_step=on_step, stop=stop)
    return LaunchResult(ranks=[result], warnings=list(result.warnings))
