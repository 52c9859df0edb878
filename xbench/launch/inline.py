"""The only rank, in this process (or, `fresh`, in one freshly spawned process)."""

from __future__ import annotations

from xbench import parallel
from xbench.launch import child
from xbench.launch.preamble import process_stop, run_rank, threads_asked
from xbench.rank import LaunchResult, RankContext


def context(plan) -> RankContext:
    """The one rank's facts from the plan's parallel and bench sections (bench/plan.py)."""
    par = plan.parallel
    info = parallel.get(par.name)
    devices = par.world_size if info.devices_in_process else 1  # DataParallel: one process, N GPUs
    warnings = ()
    if not info.devices_in_process and par.world_size != 1:
        warnings = (f"parallel.world_size={par.world_size} is ignored by parallel={par.name} (one device)",)
    return RankContext(devices_per_rank=devices, **threads_asked(plan), warnings=warnings)


def _fresh_rank(work, ctx):
    """Entry point of the fresh process (module level: picklable)."""
    stop = process_stop()
    with child.reason_on_stop(stop):
        return run_rank(work, ctx, None, stop)


def launch(work, on_step=None, stop=None, fresh: bool = False) -> LaunchResult:
    ctx = context(work.plan)
    if fresh:
        result = child.in_fresh_process(_fresh_rank, (work, ctx), stop, "the fresh process of this run")
    else:
        result = run_rank(work, ctx, on_step, stop)
    return LaunchResult.of([result])
