"""Whole-process repeats (`bench.process_repeats=N`): the run N times, each in fresh processes.

A window repeat (`bench.repeats`) sees the variance within one process; what a new process draws
afresh (allocator state, thread placement, memory layout, compile caches) only shows across
processes. Each repeat is a whole run (warm-up + `bench.repeats` windows):
- inline strategies: in a fresh spawned interpreter (a new one-worker pool per repeat);
- torchrun / xla launchers start fresh processes anyway: launch.run is called once per repeat.
The RepeatedResult's ranks hold every process's windows (metrics.aggregate.merge_processes);
`processes` keeps each process's rank measurements for the process-level spread (across_processes).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context

from xbench import parallel
from xbench.launch import LaunchResult
from xbench.launch.child import progress, reason_on_stop, stop_on_signals, wait


@dataclass
class RepeatedResult(LaunchResult):
    processes: list[list[dict]] = field(default_factory=list)  # per process: its ranks' measurements


def _repeat_process(cfg, facts):
    """Entry point of one repeat's fresh interpreter (module level: picklable)."""
    from xbench import launch

    stop = stop_on_signals()
    on_step = progress(cfg)
    with reason_on_stop(stop):
        result = launch.run(cfg, facts, on_step, stop)
    if hasattr(on_step, "close"):
        on_step.close()
    for r in result.ranks:
        r.measurements["pid"] = os.getpid()
    return result


def _in_fresh_process(cfg, facts, stop) -> LaunchResult:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return wait(pool.submit(_repeat_process, cfg, facts), stop, "the process of a process repeat")


def run_repeated(cfg, facts, on_step=None, stop=None) -> RepeatedResult | None:
    """The run `cfg.bench.process_repeats` times; None in a process that does not write the record."""
    from xbench import launch
    from xbench.bench.loop import StopRequested
    from xbench.metrics.aggregate import aggregate, merge_processes

    n = cfg.bench.process_repeats
    one = replace(cfg, bench=replace(cfg.bench, process_repeats=1))
    fresh = parallel.get(cfg.parallel.name).launcher == "inline"
    results = []
    for i in range(n):
        if stop is not None and stop.requested:  # asked between two repeats: start no new process
            raise StopRequested({"phase": "between process repeats", "process_repeat": i + 1})
        try:
            res = _in_fresh_process(one, facts, stop) if fresh else launch.run(one, facts, on_step, stop)
        except StopRequested as e:
            e.partial["process_repeat"] = i + 1
            raise
        if res is None:  # not the record writer (a node > 0): run every repeat, report nothing
            continue
        results.append(res)
        tp = aggregate([r.measurements for r in res.ranks])["throughput_samples_per_s"]
        print(f"xbench: process repeat {i + 1}/{n}: {tp:.4g} samples/s", file=sys.stderr, flush=True)
    if not results:
        return None
    processes = [[r.measurements for r in res.ranks] for res in results]
    ranks = [replace(r, measurements=m) for r, m in zip(results[0].ranks, merge_processes(processes))]
    warnings = list(results[0].warnings)
    for i, res in enumerate(results[1:], start=2):  # a later process's own warnings, once each
        warnings += [f"process repeat {i}: {w}" for w in res.warnings if w not in results[0].warnings]
    return RepeatedResult(ranks, warnings, processes)
