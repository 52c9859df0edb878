"""bench.mode=throughput: warm-up until steady, then timed windows; the studies' samples/s.

The record side: each rank runs `ThroughputWork` (bench/windows.py, the rank wing; the loop's rules live in
bench/loop.py); this module launches it, aggregates the ranks into global throughput (metrics/aggregate.py),
then derives FLOP/s, MFU and cost and finishes the record. Two add-ons run through the same launch path:
- whole-process repeats (`bench.process_repeats=N`): the whole run N times, each in fresh processes
  (an inline rank in a fresh spawned interpreter; torchrun/xla launchers start fresh ones anyway), so
  the spread covers what a new process draws afresh (allocator, thread placement, compile caches);
- the self-check (`bench.self_check=true`, `self_check` below): the same work at half the batch. A
  stop during it keeps the complete measurement (status ok, derived figures, a warning); the process
  still exits as interrupted and a sweep ends there.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from xbench import faults, launch
from xbench.bench import profile
from xbench.bench.windows import ThroughputWork
from xbench.metrics.aggregate import across_processes, aggregate, merge_processes, noisy_spread
from xbench.metrics.derived import derive
from xbench.metrics.gates import batch_scaling_gate, record_gates
from xbench.modes.base import Mode, Run
from xbench.plan import Plan
from xbench.rank import LaunchResult, StopRequested
from xbench.sinks.console import enter_startup_phase, human
from xbench.sinks.curve import WINDOWS_FILE, CurveTail

# ---------- the mode ----------

class Throughput(Mode):
    name = "throughput"

    def work(self, plan: Plan, run_dir=None) -> ThroughputWork:
        return ThroughputWork(plan, run_dir=str(run_dir) if run_dir is not None else None)

    def execute(self, run: Run) -> None:
        cfg, rec, b = run.cfg, run.record, run.cfg.bench
        work = self.work(run.plan, run.run_dir)
        tail = live_windows(run, work)
        try:
            with profile.environment(cfg, run.run_dir):
                enter_startup_phase("launch")
                if b.process_repeats > 1:
                    result, processes = repeated(work, run.progress, run.stop)
                    rec.measurements = across_processes(processes, b.noisy_cv)
                else:
                    result = launch.run(work, run.progress, run.stop)
                    rec.measurements = aggregate([r.measurements for r in result.ranks], b.noisy_cv)
        finally:
            if tail is not None:
                tail.stop()
        run.progress.close()
        rec.artifacts.update(result.ranks[0].artifacts)
        ranks = [r.measurements for r in result.ranks]
        rec.series = result.ranks[0].series
        rec.ranks = ranks if len(ranks) > 1 else []
        rec.warnings += result.warnings
        if rec.measurements.get("noisy"):
            rec.warnings.append(f"noisy: spread above bench.noisy_cv={b.noisy_cv} "
                                f"({noisy_spread(rec.measurements, b.noisy_cv)})")
        if rec.measurements.get("contended"):
            rec.warnings.append("contended: " + (rec.measurements.get("contended_reason")
                                                 or "on another rank or process (see ranks)"))
        if b.self_check:
            faults.at_phase(cfg.fault, "self_check")
            try:
                self_check(run)
            except StopRequested as e:  # the measurement itself is complete: keep it, derived figures too
                rec.measurements["self_check_interrupted"] = e.partial
                rec.warnings.append(f"self-check not done: {run.stop.reason or 'a stop'} arrived during it "
                                    f"({e.partial.get('phase')}); the measurement above is complete")
        faults.at_phase(cfg.fault, "derive")
        rec.derived = derive(rec.measurements, run.resolved, baseline=run.baseline)
        rec.warnings += record_gates(rec.measurements, rec.derived)
        rec.finish("ok")

    def join(self, plan: Plan, cfg) -> None:
        if plan.bench.process_repeats > 1:  # a node > 0 joins every repeat of node 0
            repeated(self.work(plan))
        else:
            super().join(plan, cfg)


def live_windows(run: Run, work: ThroughputWork) -> CurveTail | None:
    """Open the W&B run and tail rank 0's windows into it (None: no W&B, or it could not start). W&B starts
    before the ranks, in this thread: started in a thread beside the build (R4), its offline run's file was
    still being written when the run's finish returned (2 of 4 runs read back as cut short) and the overlap
    saved 0.1-0.3 s, within the noise."""
    path = Path(run.run_dir) / WINDOWS_FILE
    for stale in (path, Path(f"{path}.ack")):
        stale.unlink(missing_ok=True)
    if run.wandb is None:
        return None
    enter_startup_phase("wandb_start")
    if not run.wandb.start(run.record, run.run_dir):
        return None
    work.live = True
    tail = CurveTail(path, run.wandb.log_window, interval_s=0.02, ack=True)
    tail.start()
    return tail


def self_check(run: Run) -> None:
    """Measure again at half the batch: throughput must not fall as the batch grows (a missing sync or
    an untimed device shows up as the opposite). A step of the throughput mode, not a mode of its own: it
    runs after the main measurement, through the same launch path, and adds to the same record."""
    cfg, m = run.cfg, run.record.measurements
    half = max(1, cfg.data.batch_size // 2)
    if half == cfg.data.batch_size:
        run.record.warnings.append("self-check skipped: batch size 1 cannot be halved")
        return
    res = launch.run(ThroughputWork(run.plan, batch_size=half), run.progress, run.stop)
    run.progress.close()
    tp_small = aggregate([r.measurements for r in res.ranks])["throughput_samples_per_s"]
    points = [(half, tp_small), (cfg.data.batch_size, m["throughput_samples_per_s"])]
    m["self_check_batch_sizes"] = [p[0] for p in points]
    m["self_check_throughput_samples_per_s"] = [p[1] for p in points]
    run.record.warnings += batch_scaling_gate(points)


def repeated(work: ThroughputWork, on_step=None, stop=None):
    """The run `bench.process_repeats` times, each in fresh processes: (a LaunchResult whose ranks hold
    every process's windows, each process's rank measurements); (None, []) off the record writer."""
    n = work.plan.bench.process_repeats
    results: list[LaunchResult] = []
    for i in range(n):
        if stop is not None and stop.requested:  # asked between two repeats: start no new process
            raise StopRequested({"phase": "between process repeats", "process_repeat": i + 1})
        try:
            res = launch.run(work, on_step, stop, fresh=True)
        except StopRequested as e:
            e.partial["process_repeat"] = i + 1
            raise
        if res is None:  # not the record writer (a node > 0): run every repeat, report nothing
            continue
        results.append(res)
        tp = aggregate([r.measurements for r in res.ranks])["throughput_samples_per_s"]
        print(f"xbench: process repeat {i + 1}/{n}: {human(tp)} samples/s", file=sys.stderr, flush=True)
    if not results:
        return None, []
    processes = [[r.measurements for r in res.ranks] for res in results]
    ranks = [replace(r, measurements=m) for r, m in zip(results[0].ranks, merge_processes(processes))]
    warnings = list(results[0].warnings)
    for i, res in enumerate(results[1:], start=2):  # a later process's own warnings, once each
        warnings += [f"process repeat {i}: {w}" for w in res.warnings if w not in results[0].warnings]
    return LaunchResult(ranks, warnings), processes
