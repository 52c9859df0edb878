"""Throughput's rank side: warm up until steady, size the timed windows, time them with the meters at their
edges, and report this rank's figures (the loop's rules live in bench/loop.py; the record side, which
launches this work and aggregates the ranks, is modes/throughput.py).

`ThroughputWork` is the picklable handle a launcher runs on every rank; `measure_rank` is one rank's
measurement; `_timed_windows` the windows with the meters (bench/meters/) entered on one stack.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from xbench.bench import loop, meters, profile
from xbench.bench.figures import build_figures, closing_figures
from xbench.bench.meters import breakdown, contention
from xbench.bench.worker import PreparedRank, check_finite, device_gpus, prepare_rank, rank_meters
from xbench.config.section import SectionView
from xbench.metrics.stats import summarize
from xbench.plan import Plan
from xbench.rank import (
    RankContext,
    RankResult,
    StopRequested,
    point_started_at,
    startup_phase,
    startup_phases,
)
from xbench.records.run_files import WINDOWS_FILE, CurveWriter

INPUT_BOUND_FRACTION = 0.1  # waiting for data more than this share of the window earns a warning


@dataclass(frozen=True)
class WindowPlan(SectionView):
    """How long to warm up and what to time (bench.*; `WindowPlan.of(cfg.bench)`); a batch-search trial uses a
    short one."""

    warmup_min_steps: int
    warmup_max_steps: int
    warmup_stable_steps: int
    warmup_cv_tol: float
    steps: int  # the floor (exactly this when min_window_s is 0)
    repeats: int
    min_window_s: float = 0.0  # windows sized to at least this at the warm-up's step time
    max_window_steps: int = 20000
    stall_factor: float = 5.0
    stall_fraction: float = 0.05
    stall_remeasure: int = 0


@dataclass
class ThroughputWork:
    """One rank's throughput measurement (picklable: it crosses into launched processes)."""

    plan: Plan  # resolved once on the record side (xbench/plan.py)
    batch_size: int | None = None  # per device; None: data.batch_size (the self-check and trials set it)
    windows: WindowPlan | None = None  # None: the config's bench.* windows
    show_progress: bool = True
    run_dir: str | None = None  # where bench.profile writes (None: this rank keeps no profile)
    live: bool = False  # rank 0 writes each closed window to run_dir/windows.jsonl for W&B (sinks/curve.py)

    signals_stop_it = False  # a rank the torchrun command started ends on a signal (launch/preamble.run_rank)

    def bar(self) -> tuple[int, int | None] | None:
        """The totals of the bar a launched rank 0 draws (launch/preamble.py), or None for no bar."""
        if not (self.show_progress and self.plan.progress):
            return None
        p = self.windows or WindowPlan.of(self.plan.bench)
        # Time-sized windows: the count is known after warm-up, so the bar counts without a total.
        return p.warmup_max_steps, None if p.min_window_s > 0 else p.steps * p.repeats

    def __call__(self, ctx: RankContext, on_step=None, stop=None) -> RankResult:
        live = window_log(self.run_dir, ctx) if self.live and self.run_dir else None
        return measure_rank(self.plan, ctx, self.windows or WindowPlan.of(self.plan.bench), self.batch_size,
                            on_step, stop, self.run_dir, live)


def window_log(run_dir: str, ctx: RankContext):
    """Rank 0's `live(i, window, samples)`: one line per closed window for the W&B tail, waiting (at most 2 s)
    until it is logged, so the logging is over before the next window starts. None on other ranks."""
    if ctx.rank != 0:
        return None
    out = CurveWriter(Path(run_dir) / WINDOWS_FILE, append=True, wait_s=2.0)

    def live(i: int, w, samples: int, first_step: int | None = None, wu=None) -> None:
        st = sorted(w.step_times_s)
        row = {"window": i, "window_s": w.wall_s, "window_steps": w.steps,
               # every rank runs the same batch: the run's samples over rank 0's clock
               "window_throughput_samples_per_s": samples * ctx.world_size / w.wall_s,
               "window_step_time_s_median": st[len(st) // 2] if st else None,
               "window_loss_last": w.losses[-1] if w.losses else None}
        # W&B's per-step history as it happens: this window's steps (warm-up's first)
        if first_step is not None:
            pre = (list(wu.step_times_s), list(wu.losses)) if wu is not None else ([], [])
            # steps_first: the series' index; steps_step: each row's optimizer step (a
            # re-measured window is a gap)
            row.update(
                steps_first=first_step - len(pre[0]),
                steps_timed_from=first_step,
                steps_step=list(range(len(pre[0]))) + list(range(w.first_step, w.first_step + w.steps)),
                steps_time_s=pre[0] + list(w.step_times_s),
                steps_loss=pre[1] + list(w.losses),
            )
        out.write(row)
    return live


def measure_rank(run: Plan, ctx: RankContext, plan: WindowPlan, batch_size: int | None = None,
                 on_step=None, stop=None, run_dir: str | None = None, live=None) -> RankResult:
    """Probe the machine, build the rank, warm it up, size and time `plan.repeats` windows, and report
    this rank's figures (`run`: the run's plan, xbench/plan.py; `plan`: its windows)."""
    bench, dev = run.bench, run.device_type
    main = batch_size is None  # the run's own measurement, not the self-check's or a batch-search trial's
    probe_s = bench.contention_probe_s if main else 0
    # other processes' load, read beside the build (its own CPU is this run's, subtracted)
    probed = contention.probe_beside(probe_s, device_gpus(dev, ctx.local_rank, ctx.devices_per_rank))
    _phase("build", main, on_step)
    p = prepare_rank(run, ctx, batch_size, on_step, stop)
    before = probed.result()
    _phase("first_step", main, on_step)
    # loop.py rule 10: how ranks stop together (one rank: at the next step)
    p.hooks.finish_window_s = loop.finish_window_s(bench.stop_grace_s, ctx.world_size)
    p.hooks.device_sync = p.work.runtime.sync
    wu = loop.warmup(p.hooks, plan.warmup_min_steps, plan.warmup_max_steps, plan.warmup_stable_steps,
                     plan.warmup_cv_tol)
    check_finite(wu.losses, 0, "warmup")
    # From this run's start (a sweep point's own, launch/isolation.py) to the end of its first step, by phase.
    started, first_step_end = point_started_at(), time.time() - (wu.time_s - wu.first_step_s)
    startup = {"startup_to_first_step_s": first_step_end - started}
    if main:
        startup["startup_phases_s"] = startup_phases(first_step_end, started)
    warnings = list(p.warnings)
    if not wu.stable:
        warnings.append(f"warm-up did not stabilise within {plan.warmup_max_steps} steps (compilations or "
                        f"step times still changing); the timed windows may include them")
    warnings += _oversubscribed(p, dev, before, ctx.local_world_size)
    step_s = loop.steady_step_s(wu, plan.warmup_stable_steps)
    steps, sized_by = loop.window_steps(p.hooks, step_s, plan.min_window_s, plan.steps, plan.max_window_steps)
    if p.hooks.on_step:  # the bar's total, now that the windows are sized (outside any window)
        p.hooks.on_step("timed", -1, window_steps=steps, windows=plan.repeats)
    sizing = {"timed_steps_per_window": steps, "window_sized_by": sized_by, "window_min_s": plan.min_window_s,
              "window_steps_floor": plan.steps, "warmup_step_s_steady": step_s}
    if sized_by == "cap":
        warnings.append(f"timed windows capped at bench.max_window_steps={plan.max_window_steps} steps "
                        f"({steps * step_s:.2g} s, under bench.min_window_s={plan.min_window_s})")
    # from the first window: the compile's *_timed figures (the memory meter: peaks)
    p.work.runtime.mark_timed()
    windows, meters = _timed_windows(run, p, plan, wu, warnings, steps, before, dev, live)
    wait_fraction = sum(w.data_wait_s for w in windows) / sum(w.wall_s for w in windows)
    if wait_fraction > INPUT_BOUND_FRACTION:
        warnings.append(f"input-bound: {wait_fraction:.0%} of the timed window waited for data "
                        f"(data.source={run.data.source}, num_workers={run.data.num_workers}); "
                        "this measures the loader, not the chip")
    m = _rank_figures(run.data, ctx, p, plan, wu, windows, meters)
    m.update(sizing, **startup)
    warnings += p.work.runtime.warnings()
    steady_s = sum(w.wall_s for w in windows) / sum(w.steps for w in windows)
    m.update(breakdown.split(p.hooks, dev, m, bench.breakdown_steps if main else 0, steps, steady_s))
    if m.get("xla_compiles_before_run"):
        warnings.append(
            f"compile figures read low: {m['xla_compiles_before_run']} XLA graph(s) were compiled "
            "earlier in this process and identical ones came from its cache (bench.isolation=shared); "
            "run it isolated for its own compile count and time"
        )
    artifacts = {}
    if bench.profile and main:  # the run's own batch (not the self-check's or a trial's)
        artifacts, notes = profile.capture(bench, p, run_dir, ctx.rank)
        warnings += notes
    return RankResult(ctx.rank, m, _series(wu, windows), warnings, artifacts)


def _phase(name: str, main: bool, on_step=None) -> None:
    """The run's own measurement enters start-up phase `name` (rank.startup_phase); rank 0's bar shows it."""
    if not main:
        return
    startup_phase(name)
    if on_step is not None:
        on_step("startup", -1, startup_phase=name)


def _oversubscribed(p: PreparedRank, dev: str, before: dict | None, ranks_on_host: int = 1) -> list[str]:
    """A CPU run asking for more threads than there are free physical cores waits for cores, not work; the
    threads are those of every rank on this host (the probe counts sibling ranks as the run's own)."""
    threads = p.threads.get("threads_intra")
    if before is None or dev not in ("cpu", "xla") or not threads:
        return []
    need = contention.cores_needed(threads, ranks_on_host)
    if need <= before["free_cores"]:
        return []
    asked = (
        f"{ranks_on_host} ranks x {threads} thread(s) = {need} threads"
        if ranks_on_host > 1
        else f"{need} threads"
    )
    return [f"oversubscribed: {asked}, but only {before['free_cores']} of {before['physical_cores']} "
            f"physical cores were free ({before['other_cores']:.1f} busy with other processes); the timings "
            "include waiting for cores (bench.threads, or leave it unset for the free cores)"]


def _timed_windows(run: Plan, p: PreparedRank, plan: WindowPlan, wu, warnings: list[str], steps: int,
                   before: dict | None = None, dev: str = "cpu", live=None):
    """The timed windows, with energy, utilisation, memory peaks and other processes' use metered at their
    edges (never inside a step): the meters (bench/meters/) enter on one stack at the first window's edge and
    exit on every path out (a divergence, an OOM, a stop, any exception). A stalled window (loop.py rule 8) is
    measured again, at most `plan.stall_remeasure` times, when every rank agrees one stalled; the meters
    forget it. `live` hears of each kept window once it has closed (W&B), before the next one starts. `run`:
    the run's plan, whose bench section sets the meters."""
    windows, stalls, dropped = [], [], []
    done_steps = wu.steps
    rank = rank_meters(run.bench, p, dev, before)
    with contextlib.ExitStack() as stack:
        for m in rank:
            stack.enter_context(m)
        try:
            while len(windows) < plan.repeats:
                with meters.window(rank):
                    w = loop.timed_window(p.hooks, steps)
                check_finite(w.losses, done_steps, "timed")
                # a re-measured window's steps were trained: the next one starts after
                w.first_step = done_steps
                done_steps += w.steps
                st = loop.stall(w, plan.stall_factor, plan.stall_fraction)
                # a stop on any rank: every rank's, here
                any_stalled = loop.window_end_stop(p.hooks, w, st.stalled)
                if any_stalled and len(dropped) < plan.stall_remeasure:
                    for m in rank:
                        m.discard()
                    dropped.append((w, st))
                    warnings.append(f"stalled window measured again: {st.outliers} step(s) over "
                                    f"{plan.stall_factor:g}x the median took {st.excess_s:.3g} s extra of "
                                    f"its {w.wall_s:.3g} s")
                    continue
                windows.append(w)
                stalls.append(st)
                if live is not None:
                    # the series' index of its first step
                    first = wu.steps + sum(x.steps for x in windows[:-1])
                    live(
                        len(windows) - 1,
                        w,
                        p.samples_per_step * w.steps,
                        first,
                        wu if len(windows) == 1 else None,
                    )
                if w.compiles_during:
                    warnings.append(
                        f"{w.compiles_during} compilation(s) during a timed window: not steady state"
                    )
        except StopRequested as e:  # interrupted: keep what was measured before the signal
            e.partial.update(_measured_so_far(p, wu, windows, e.partial))
            raise
        # e.g. a collective whose peer has gone: the launcher may keep this rank's windows
        except Exception as e:
            part = dict(getattr(e, "xbench_open_window", None) or {"phase": "timed"})
            e.xbench_partial = _measured_so_far(p, wu, windows, part)  # (launch/torchrun.py)
            raise
    figures = meters.collect(rank)
    kept = [i for i, st in enumerate(stalls) if st.stalled]
    figures.update({
        "outlier_steps_per_window": [st.outliers for st in stalls],
        "stall_excess_s_per_window": [st.excess_s for st in stalls],
        "stall_factor": plan.stall_factor,
        "stalled_windows_kept": len(kept),
        "stalled_windows_remeasured": len(dropped),
        "window_s_stalled": [w.wall_s for w, _ in dropped],
        "stall_excess_s_total": sum(st.excess_s for st in stalls) + sum(st.excess_s for _, st in dropped),
        "stalled": bool(kept or dropped),
    })
    if kept:
        warnings.append(
            f"stalled: {len(kept)} timed window(s) lost {sum(stalls[i].excess_s for i in kept):.3g} s to "
            f"outlier steps (over {plan.stall_factor:g}x the median) and are in the figures "
            f"(bench.stall_remeasure={plan.stall_remeasure})"
        )
    return windows, figures


def _measured_so_far(p: PreparedRank, wu, windows: list, part: dict) -> dict:
    """`part` (the open window's figures, if any) with the warm-up and the closed windows: an interrupted
    rank's figures."""
    part.update(warmup_steps=wu.steps, warmup_s=wu.time_s, first_step_s=wu.first_step_s,
                batch_size_per_device=p.batch_size, windows_completed=len(windows),
                window_s_completed=[x.wall_s for x in windows])
    samples = p.samples_per_step * (sum(x.steps for x in windows) + part.get("timed_steps", 0))
    seconds = sum(x.wall_s for x in windows) + part.get("window_s", 0.0)
    if samples and seconds > 0:
        part["throughput_samples_per_s_partial"] = samples / seconds
    return part


def _rank_figures(data, ctx, p: PreparedRank, plan: WindowPlan, wu, windows, meters: dict) -> dict:
    """This rank's measurements (the run's are aggregated from every rank's in the parent): what it built
    (bench/figures.py), its warm-up and windows, the meters' figures from the first window."""
    st = summarize([t for w in windows for t in w.step_times_s])
    m = {
        **build_figures(ctx.rank, p.work, p.batch_size, p.accumulate, p.threads, p.cpu_capability),
        "warmup_steps": wu.steps,
        "warmup_s": wu.time_s,
        "warmup_stable": wu.stable,
        "first_step_s": wu.first_step_s,
        "compiles_warmup": wu.compiles,
        "compiles_timed": None
        if windows[0].compiles_during is None
        else sum(w.compiles_during for w in windows),
        "timed_steps_per_window": windows[0].steps,
        "repeats": len(windows),
        "window_s": [w.wall_s for w in windows],
        "samples_per_window": p.samples_per_step * windows[0].steps,
        "step_time_source": windows[0].step_time_source,
        "step_time_s_median": st["median"],
        "step_time_s_mean": st["mean"],
        "step_time_s_p10": st["p10"],
        "step_time_s_p90": st["p90"],
        "step_time_cv": st["cv"],
        "data_wait_s": sum(w.data_wait_s for w in windows),
        "data_source": data.source,
        **p.data_info,
        "loss_first": wu.losses[0],
        "loss_last": windows[-1].losses[-1],
        **meters,  # peak_host_rss_gib, peak_device_* (bench/meters/memory.py): from the first window
        **closing_figures(p.work),
    }
    if "energy_j" in m:  # metered over the kept windows only (a remeasured one is discarded)
        m["energy_j_per_sample"] = m["energy_j"] / (p.samples_per_step * sum(w.steps for w in windows))
    return m


def _series(wu, windows) -> dict:
    """Per step: `step` is the optimizer step (from the run's first, warm-up included), so a re-measured
    window's steps, trained but not kept, leave a gap (xbench.parity compares two runs at the same step)."""
    steps = list(range(wu.steps)) + [w.first_step + i for w in windows for i in range(w.steps)]
    return {
        "step": steps,
        "phase": ["warmup"] * wu.steps + ["timed"] * (len(steps) - wu.steps),
        "loss": wu.losses + [v for w in windows for v in w.losses],
        "step_time_s": wu.step_times_s + [t for w in windows for t in w.step_times_s],
    }
