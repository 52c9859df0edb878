"""Launchers start the ranks a parallel strategy needs and gather their results; no model code here.

inline: this process is the only rank. Others (torchrun, xla) are added beside it and chosen by the
strategy's `launcher` field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xbench import parallel


@dataclass
class LaunchResult:
    ranks: list  # RankResult per rank, rank 0 first
    warnings: list[str] = field(default_factory=list)


def run(cfg, facts, on_step=None, stop=None) -> LaunchResult:
    strategy = parallel.get(cfg.parallel.name)
    if strategy.launcher == "inline":
        from xbench.launch.inline import run_inline

        return run_inline(cfg, facts, on_step, stop)
    raise ValueError(f"launcher {strategy.launcher!r} of strategy {strategy.name!r} is not available")
