"""Launchers start the ranks a parallel strategy needs and gather their results; no model code here.

inline: this process is the only rank. torchrun: one process per rank (launch/torchrun.py), started
here through torchrun's launcher API or joined when already under torchrun. xla: a fresh process for
SPMD, or torch_xla.launch's processes (launch/xla.py). Chosen by the strategy's `launcher` field; a new
launcher is one more branch in `run` and in `writes_record`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xbench import parallel


@dataclass
class LaunchResult:
    ranks: list  # RankResult per rank, rank 0 first
    warnings: list[str] = field(default_factory=list)


def writes_record(cfg) -> bool:
    """False in a process whose run's record is written by another (a rank > 0, a node > 0)."""
    strategy = parallel.get(cfg.parallel.name)
    if strategy.launcher == "xla":  # a TPU pod slice: host 0's process
        from xbench.launch.xla import writes_record as xla_writes

        return xla_writes(cfg)
    if not strategy.multi_process:
        return True
    from xbench.launch.torchrun import writes_record as torchrun_writes

    return torchrun_writes(cfg)


def run(cfg, facts, on_step=None, stop=None) -> LaunchResult | None:
    """Every rank's results (rank 0 first), or None in a process that does not write the record."""
    strategy = parallel.get(cfg.parallel.name)
    if strategy.launcher == "inline":
        from xbench.launch.inline import run_inline

        result = run_inline(cfg, facts, on_step, stop)
        if strategy.name == "single" and cfg.parallel.world_size != 1:
            result.warnings.append(f"parallel.world_size={cfg.parallel.world_size} is ignored by "
                                   "parallel=single (one device)")
        return result
    if strategy.launcher == "torchrun":
        from xbench.launch.torchrun import run_torchrun

        return run_torchrun(cfg, facts, on_step, stop)
    if strategy.launcher == "xla":
        from xbench.launch.xla import run_xla

        return run_xla(cfg, facts, on_step, stop)
    raise ValueError(f"launcher {strategy.launcher!r} of strategy {strategy.name!r} is not available")
