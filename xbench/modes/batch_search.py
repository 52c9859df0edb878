"""`bench.mode=find_max_batch`: the largest per-device batch that trains without running out of memory.

An explicit mode, never a fallback: a normal run that runs out of memory is recorded as `oom` with
its batch size. The search starts at `data.batch_size`, doubles while trials fit (halves while they
do not), then bisects between the largest fit and the smallest failure until they are within
`bench.max_batch_rtol` of each other (or adjacent). Each trial is a short real run through the
launch path of the run's strategy (warm-up of at most 2 steps, then one timed window of at least
TRIAL_STEPS steps and TRIAL_WINDOW_S seconds: in this process for an inline strategy, in fresh rank processes
for DDP or XLA) followed by cleanup (garbage collection, CUDA cache release, peak statistics reset inside the
next trial). On the CPU the trials run under `host_memory_guard`, so a batch too large for the host fails as
an allocation error, not as swapping. Inline trials stay in the run's process whatever `bench.isolation` says:
the guard and the recovery from an out-of-memory trial work in-process.

A trial's speed is its window's (samples over the window's wall time, as the throughput mode measures:
one step's time after a 2-step warm-up read 4.29, 45.1 and 5.18 samples/s at batches 4, 8, 16), with the
window's other processes (the contention meter, bench/meters/contention.py) beside it: a trial that shared
the machine is `contended`, and so is the search (the report flags its figures, records/batch_trials.py).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time

from xbench import launch
from xbench.bench.meters.memory import host_memory_guard, memory_figures
from xbench.bench.windows import ThroughputWork, WindowPlan
from xbench.metrics.aggregate import aggregate
from xbench.modes.base import Mode, Run
from xbench.plan import Plan
from xbench.rank import StopRequested
from xbench.records.record import is_oom

TRIAL_STEPS = 5  # a trial's timed window: at least this many steps ...
TRIAL_WINDOW_S = 0.5  # ... and at least this long at the warm-up's step time (a 1-ms step: 500 steps)


def _trial_plan(cfg) -> WindowPlan:
    """A trial: a warm-up of at most 2 steps, then one timed window (TRIAL_STEPS, TRIAL_WINDOW_S)."""
    return WindowPlan(warmup_min_steps=1, warmup_max_steps=2, warmup_stable_steps=1,
                      warmup_cv_tol=cfg.bench.warmup_cv_tol, steps=TRIAL_STEPS, repeats=1,
                      min_window_s=TRIAL_WINDOW_S, max_window_steps=cfg.bench.max_window_steps)


def _trial_figures(m: dict) -> dict:
    """A fitting trial's row from its aggregated measurements: the window's speed, what the window was, and
    who else used the machine in it."""
    tp = m["throughput_samples_per_s"]  # global samples over the (slowest rank's) window
    return {"throughput_samples_per_s": tp, "step_time_s": m["global_batch_size"] / tp if tp else None,
            "step_time_s_median": m.get("step_time_s_median"), "timed_steps": m["timed_steps_per_window"],
            "window_s": m["window_s"][0], "compiles_timed": m.get("compiles_timed"),
            "contended": bool(m.get("contended")), "contended_reason": m.get("contended_reason"),
            "other_cpu_cores_during": m.get("other_cpu_cores_during")}


def _said(bs: int, row: dict) -> str:
    """The console line of a trial: what its figure is (a window's), and whether it was contended."""
    if not row["fits"]:
        return f"find_max_batch: batch {bs} does not fit"
    text = (
        f"find_max_batch: batch {bs} fits: {row['throughput_samples_per_s']:.3g} samples/s over a timed "
        f"window of {row['timed_steps']} steps ({row['window_s']:.3g} s)"
    )
    return text + (f"; contended: {row['contended_reason']}" if row["contended"] else "")


def _cleanup() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class _OutOfTime(Exception):
    """bench.max_batch_search_s has passed: no new trial starts; the trials so far are the result."""


def find_max_batch(cfg, plan: Plan, stop=None, say=print) -> dict:
    """Run the search; return the measurements for the record (the trials included). No trial starts
    after `bench.max_batch_search_s` (`batch_search_time_bound_reached`). `plan`: the run's, resolved once
    by the runner after compat; every trial's work carries it (only the batch size differs)."""
    dev = plan.device_type
    limit, rtol = cfg.bench.max_batch_limit, cfg.bench.max_batch_rtol
    trials: list[dict] = []
    t_start = time.perf_counter()
    at_start = memory_figures(None if dev == "cpu" else dev)

    def trial(bs: int) -> bool:
        t0 = time.perf_counter()
        if trials and t0 - t_start >= cfg.bench.max_batch_search_s:  # the first trial always runs
            raise _OutOfTime
        row: dict = {"batch_size": bs}
        try:
            work = ThroughputWork(plan, batch_size=bs, windows=_trial_plan(cfg), show_progress=False)
            m = aggregate([r.measurements for r in launch.run(work, stop=stop, fresh=False).ranks])
            row.update(fits=True, **_trial_figures(m), host_rss_gib=m.get("peak_host_rss_gib"),
                       device_peak_allocated_gib=m.get("peak_device_allocated_gib"))
        except Exception as e:
            if not is_oom(e):
                raise  # a real failure is not a search result
            row.update(fits=False, error=f"{type(e).__name__}: {str(e)[:200]}",
                       **{k: v for k, v in memory_figures(None if dev == "cpu" else dev).items()
                          if k in ("host_rss_gib", "host_peak_rss_gib", "device_peak_allocated_gib",
                                   "device_total_gib", "host_address_space_limit_gib")})
        finally:
            _cleanup()
        row["seconds"] = time.perf_counter() - t0
        trials.append(row)
        say(_said(bs, row))
        return row["fits"]

    guard = host_memory_guard() if dev == "cpu" else contextlib.nullcontext()
    lo = hi = None  # largest batch that fitted, smallest that did not
    out_of_time = False
    try:
        with guard:
            bs = max(1, min(cfg.data.batch_size, limit))
            if trial(bs):
                lo = bs
                while lo * 2 <= limit:
                    if trial(lo * 2):
                        lo *= 2
                    else:
                        hi = lo * 2
                        break
            else:
                hi = bs
                while hi > 1:
                    if trial(hi // 2):
                        lo = hi // 2
                        break
                    hi //= 2
            while lo is not None and hi is not None and hi - lo > max(1, int(rtol * lo)):
                mid = (lo + hi) // 2
                if trial(mid):
                    lo = mid
                else:
                    hi = mid
    except _OutOfTime:
        out_of_time = True
    except StopRequested as e:  # interrupted: the trials so far are the partial result
        e.partial.update(phase="find_max_batch", batch_search_trials=trials)
        raise
    contended = [t for t in trials if t.get("contended")]
    return {
        "max_batch_size_per_device": lo,
        "min_failing_batch_size_per_device": hi,
        "batch_search_start": cfg.data.batch_size,
        "batch_search_limit": limit,
        "batch_search_limit_reached": hi is None and not out_of_time,
        "batch_search_time_bound_reached": out_of_time,
        "batch_search_trials": trials,
        "batch_search_s": time.perf_counter() - t_start,
        # Any trial's window shared with other processes: the search's speeds measured that load too.
        "contended": bool(contended),
        "other_cpu_cores_during": max(
            (
                t["other_cpu_cores_during"]
                for t in trials
                # the worst
                if t.get("other_cpu_cores_during") is not None
            ),
            default=None,
        ),
        "contended_reason": "; ".join(f"batch {t['batch_size']}: {t['contended_reason']}" for t in contended)
        or None,
        "host_vm_at_start_gib": at_start["host_vm_gib"],
        "host_address_space_limit_gib": memory_figures()["host_address_space_limit_gib"],
        **({"device_total_gib": at_start["device_total_gib"]} if "device_total_gib" in at_start else {}),
    }


class FindMaxBatch(Mode):
    name = "find_max_batch"

    @classmethod
    def rules(cls, cfg, facts) -> list[str]:
        out = []
        if launch.under_torchrun():
            out.append(
                "bench.mode=find_max_batch starts the ranks of each trial itself: run it with python -m "
                "xbench (not under the torchrun command)"
            )
        return out

    def execute(self, run: Run) -> None:
        search = find_max_batch(run.cfg, run.plan, stop=run.stop, say=lambda s: print(s, file=sys.stderr))
        run.record.measurements = search
        if search["max_batch_size_per_device"] is None:
            run.record.finish(
                "oom",
                f"no batch size fits: batch {search['min_failing_batch_size_per_device']} ran out of memory",
            )
        else:
            if search["contended"]:
                run.record.warnings.append(
                    f"contended: {search['contended_reason']} (those trials' samples/s "
                    "measured the load too; the memory figures stand)"
                )
            if search["batch_search_time_bound_reached"]:
                run.record.warnings.append(
                    "find_max_batch stopped at "
                    f"bench.max_batch_search_s={run.cfg.bench.max_batch_search_s:g}: the largest batch that "
                    "fitted so far, not the largest that fits"
                )
            run.record.finish("ok")
