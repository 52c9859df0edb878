"""What every launcher does around one rank's work (written once, used by inline, torchrun and xla): the
rank's threads, its progress bar, and the stop flag of a launched process (`process_stop`: the one place
a launcher installs it, for its ranks and for torch_xla's replicas that are threads of one process)."""

from __future__ import annotations

import contextlib

from xbench.bench.meters import contention
from xbench.launch import child
from xbench.rank import RankContext, RankResult, StopFlag
from xbench.sinks.console import Progress


def process_stop(bench=None) -> StopFlag:
    """This process's stop flag (launch/child.stop_on_signals: installed once, by the main thread; a
    replica thread, or a process forked from one that installed it, gets the same flag). With `bench` (the
    plan's bench section): after the first stop signal the process exits at the latest bench.stop_grace_s
    later (child.exit_within)."""
    flag = child.stop_on_signals()
    if bench is not None:
        child.exit_within(bench.stop_grace_s)
    return flag


def threads_asked(plan, share: int = 1) -> dict:
    """The rank's threads as the plan asks them (RankContext keywords; the root config, whose bench section
    the plan carries, serves as well on the record side): bench.threads, else this rank's
    `share` of the free physical cores (other processes' busy cores probed now, bench/meters/contention.py):
    torch's default (every core) oversubscribes a machine that others use, and 2 threads on a busy
    2-core machine ran 2.5-26x slower than one."""
    t = plan.bench.threads
    if t is not None:
        return {"threads": t, "threads_policy": "bench.threads"}
    if plan.bench.contention_probe_s > 0:
        free, how = contention.free_cores()
    else:
        free, how = contention.physical_cores(), "physical cores (bench.contention_probe_s=0: not probed)"
    n = max(1, free // share)
    return {
        "threads": n,
        "threads_policy": how + (f" // {share} ranks on this host = {n}" if share > 1 else ""),
    }


def world_size_warning(plan, started: int, what: str) -> tuple[str, ...]:
    """A launcher that started another number of ranks/devices than the plan's parallel section asked says
    so; `what` says what it started, e.g. "torchrun started 4 ranks"."""
    if started == plan.parallel.world_size:
        return ()
    return (f"parallel.world_size={plan.parallel.world_size} in the config, but {what}: the run used "
            f"{started} (measurements.world_size, measurements.devices)",)


def run_rank(work, ctx: RankContext, on_step=None, stop=None, draw: bool | None = None) -> RankResult:
    """The rank's work with its facts: a progress bar of its own when none was passed (on rank 0, or
    where `draw` says; `work.bar()` gives its totals), closed whatever happens; the launcher's warnings
    and the rank's figures added. A work that `signals_stop_it` and got no flag (a rank the torchrun
    command started) gets this process's; its stop carries the signal's name (child.reason_on_stop)."""
    totals = work.bar() if on_step is None and (ctx.rank == 0 if draw is None else draw) else None
    bar = Progress(*totals, enabled=True) if totals is not None else None
    guard = contextlib.nullcontext()
    if work.signals_stop_it:
        stop = stop or process_stop()
        guard = child.reason_on_stop(stop)
    try:
        with guard:
            result = work(ctx, on_step or bar, stop)
    finally:
        if bar is not None:
            bar.close()
    result.warnings = list(ctx.warnings) + result.warnings
    result.measurements.update(ctx.figures())
    return result
