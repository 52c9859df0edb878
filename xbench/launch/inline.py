"""The only rank, in this process (or, `fresh`, in one freshly spawned process)."""

from __future__ import annotations

import contextlib
import os

from xbench import parallel
from xbench.launch import child, template
from xbench.launch.preamble import process_stop, run_rank, threads_asked
from xbench.rank import LaunchResult, RankContext


def context(plan) -> RankContext:
    """The one rank's facts from the plan's parallel and bench sections (xbench/plan.py)."""
    par = plan.parallel
    info = parallel.get(par.name)
    devices = par.world_size if info.devices_in_process else 1  # DataParallel: one process, N GPUs
    warnings = ()
    if not info.devices_in_process and par.world_size != 1:
        warnings = (f"parallel.world_size={par.world_size} is ignored by parallel={par.name} (one device)",)
    return RankContext(devices_per_rank=devices, **threads_asked(plan), warnings=warnings)


def _fresh_rank(work, ctx):
    """Entry point of the fresh process, spawned or forked from a sweep's template (module level:
    picklable)."""
    stop = process_stop()
    with child.reason_on_stop(stop):
        result = run_rank(work, ctx, None, stop)
    result.measurements["parent_pid"] = os.getppid()  # the runner, or the template it was forked from
    return result


def launch(work, on_step=None, stop=None, fresh: bool | str = False) -> LaunchResult:
    """`fresh`: False (this process), True (a spawned one) or template.FORK (one forked from the template)."""
    ctx = context(work.plan)
    if fresh == template.FORK:
        result = template.in_template(_fresh_rank, (work, ctx), stop, "the fresh process of this run")
    elif fresh:
        result = child.in_fresh_process(_fresh_rank, (work, ctx), stop, "the fresh process of this run")
    else:
        with _callers_torch_state():
            result = run_rank(work, ctx, on_step, stop)
    return LaunchResult.of([result])


@contextlib.contextmanager
def _callers_torch_state():
    """A rank in the caller's process (xbench.run from a notebook, a shared sweep) sets torch's intra-op
    threads and seeds its CPU generator: both are the caller's again afterwards. (Inter-op threads are set
    once per process by torch's rule, and a device's generators are the device's: neither is restorable
    here.)"""
    import torch

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
