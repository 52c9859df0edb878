"""The measurement loop: warm-up, then timed windows. The rules the product stands on live here.

Rules
-----
1. Warm-up is separate from the timed window. It ends on evidence: at least `warmup_min_steps`, and
   over the last `warmup_stable_steps` steps the runtime's compile counter did not grow and the step
   times' coefficient of variation is within `warmup_cv_tol`; or at `warmup_max_steps`, in which case
   the record says warm-up never stabilised. Warm-up steps are synchronised one by one (they are
   not timed as throughput), so their times include compilation and show when it stopped.
2. Inside a timed window nothing reads device values on the host: the device is synchronised at
   the window's two edges only. Losses stay device tensors until the window has closed, except on
   the CPU, where the host is the device and the step has finished when it returns: there the
   runtime hands back a float (Runtime.keep_loss: a window of kept 4-byte tensors fragments the heap
   and slows the step's own allocations by several percent). Under CUDA graphs a loss that is a
   graph's output is cloned on the device before the next replay overwrites it (Runtime.keep_loss).
3. Per-step times come from CUDA events where the device has them, else from host timestamps taken
   after each step was issued (exact on the CPU, where eager execution is synchronous; on XLA they
   are host tracing/dispatch times and say so in `step_time_source`).
4. Throughput is global: samples of every rank in the window over the window's wall time.
5. Compilations during a timed window are counted and become a warning: the window was not steady state.
6. The harness's own per-step work is a handful of `perf_counter` calls and list stores; no
   logging, no allocation and no Python-level branching on device values inside the window.
7. Windows are sized by time, not by a step count: at least `min_window_s` at the warm-up's steady
   step time (the median of its last stable steps), never under the `steps` floor nor over the cap;
   every rank runs the same count (the largest any rank needs, agreed before the first window).
   A fixed count cannot serve a 2-ms step and a 2-s step alike: 30 steps of 2.3 ms is a 70-ms
   window, which measures the scheduler (step-time CV 0.65).
8. A window is stalled when its outlier steps (over `stall_factor` x the window's median step) cost
   more than `stall_fraction` of its wall time (a process stopped, swapped or descheduled for
   seconds); outliers are counted in every window. What is done about a stall is the mode's.
9. A finite blow-up is a divergence, not a measurement: once warm-up or a window has closed and its
   losses are read, a loss above `bench.diverge_loss_factor` x the run's first loss (4e20 after 2.3)
   raises Diverged, on every rank at the same point (the ranks agree first). NaN and inf are the
   modes' check (worker.check_finite). Training to a target also diverges when an accuracy is below
   half of chance (1/num_classes; top-5: 5/num_classes) after a full epoch (BelowChance).
10. A stop (a signal) ends one rank at the next step. Ranks of one run stop at the same step without a
   per-step collective: a rank that sees the stop inside a timed window runs the window to its end (every
   rank runs the same count), and the window's edge agreement, which is already there for stalls, also
   carries "anyone asked to stop", so every rank stops at that edge (`window_end_stop`). The window the
   stop arrived in is reported as the open one (`timed_steps`), not among `windows_completed`. When the
   window's other steps would take longer than `Hooks.finish_window_s` (a share of bench.stop_grace_s),
   the rank stops after the step as one rank does, and its figures say why (`stop_not_agreed`). A stop
   during warm-up (not timed: nothing to agree on yet) still stops a rank at its next step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from xbench.metrics import goals
from xbench.rank import Diverged, StopFlag, StopRequested

perf_counter = time.perf_counter


@dataclass
class Hooks:
    """What the loop needs from the runtime, the data and the console: plain callables."""

    step: Callable  # step(inputs, targets) -> loss tensor (not read on the host)
    next_batch: Callable[[], tuple]  # -> (inputs, targets) already on the device
    sync: Callable[[], None]  # waits for the device to finish all queued work
    compile_count: Callable[[], int | None] = lambda: None
    read_losses: Callable[[list], list[float]] = None  # device scalars -> floats, after a window
    make_timer: Callable[[int], object] | None = None  # steps -> device timer (CUDA events)
    on_step: Callable[[str, int], None] | None = None  # progress: (phase, step index)
    stop: StopFlag = field(default_factory=StopFlag)
    # Multi-rank runs: True only when every rank says True (ranks must leave warm-up at the same step,
    # or their collectives fall out of step and hang).
    agree: Callable[[bool], bool] = lambda ok: ok
    watch: LossWatch | None = None  # rule 9; None: no check for finite blow-ups
    # Rule 10: multi-rank runs only (0 on one rank): a stop seen inside a timed window lets the window run to
    # its end when its other steps should take at most this long (finish_window_s below).
    finish_window_s: float = 0.0
    # The device's own synchronisation, without the strategy's barrier: what a rank that stops without its
    # peers (rule 10) waits for (a barrier would meet a peer's gradient all-reduce and hang). None: `sync`.
    device_sync: Callable[[], None] | None = None


@dataclass
class LossWatch:
    """Rule 9: the run's first positive finite loss, and the steps seen so far (warm-up, then timed)."""

    factor: float = 1000.0
    first: float | None = None
    seen: int = 0

    def blown(self, losses: list[float]) -> tuple[int, float] | None:
        """(step, loss) of the first loss above factor x the first one, or None; counts the steps."""
        hit = None
        for i, v in enumerate(losses):
            if not math.isfinite(v):
                continue
            if self.first is None and v > 0:
                self.first = v
            elif self.first is not None and v > self.factor * self.first and hit is None:
                hit = (self.seen + i, v)
        self.seen += len(losses)
        return hit


def check_blowup(h: Hooks, losses: list[float], phase: str) -> None:
    """Rule 9 after losses are read: every rank raises Diverged at the same point when any rank blew up."""
    if h.watch is None:
        return
    hit = h.watch.blown(losses)
    if not h.agree(hit is None):
        finite = [v for v in losses if math.isfinite(v)]
        step, loss = hit or (h.watch.seen - len(losses), max(finite, default=float("nan")))
        raise Diverged(step, loss, phase)


def chance_level(metric: str, num_classes: int) -> float | None:
    """What guessing scores on `metric` over `num_classes` classes (metrics/goals.py); None for a metric that
    is not an accuracy."""
    g = goals.GOALS.get(metric)
    return g.chance(num_classes) if g else None


class BelowChance(Diverged):
    """Rule 9 for train_to_target: an accuracy below half of chance after a full epoch."""

    def __init__(self, step: int, value: float, chance: float, metric: str = "top1"):
        Exception.__init__(
            self,
            f"{metric} {value:.4g} is below half of chance ({chance:.4g}) after a full epoch, "
            f"at step {step}: the training diverged",
        )
        self.step, self.loss, self.phase, self.chance, self.metric = step, value, "train", chance, metric

    def __reduce__(self):  # picklable: it crosses from a launched process to the parent
        return BelowChance, (self.step, self.loss, self.chance, self.metric)


@dataclass
class WarmupResult:
    steps: int
    time_s: float
    first_step_s: float
    step_times_s: list[float]
    losses: list[float]
    compiles: int | None
    stable: bool


@dataclass
class WindowResult:
    steps: int
    wall_s: float
    step_times_s: list[float]
    step_time_source: str  # cuda_events | host
    losses: list[float]
    compiles_during: int | None
    data_wait_s: float
    # rule 10: the steps done when this rank saw a stop (it ran on to the end)
    stop_seen_at_step: int | None = None
    # The optimizer step of its first step, counted from the run's first (warm-up and re-measured windows
    # included): what a loss is compared at (xbench.parity). Set by the caller, which knows the steps
    # before it.
    first_step: int | None = None


def cv(values: list[float]) -> float:
    """Coefficient of variation (population std / mean); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean > 0 else 0.0


def _delta(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def warmup(h: Hooks, min_steps: int, max_steps: int, stable_steps: int, cv_tol: float) -> WarmupResult:
    times: list[float] = []
    counts: list[int | None] = []
    losses = []
    start = perf_counter()
    h.sync()
    for i in range(max(1, max_steps)):
        t0 = perf_counter()
        inputs, targets = h.next_batch()
        losses.append(h.step(inputs, targets))
        h.sync()
        times.append(perf_counter() - t0)
        counts.append(h.compile_count())
        if h.on_step:
            h.on_step("warmup", i)
        if h.stop.requested:
            raise StopRequested({"phase": "warmup", "warmup_steps": i + 1, "warmup_step_times_s": times})
        n = i + 1
        if n >= max(min_steps, stable_steps + 1):
            recent = times[-stable_steps:]
            flat = counts[-1] == counts[-stable_steps - 1]  # None == None on runtimes that never compile
            if h.agree(flat and cv(recent) <= cv_tol):
                losses = h.read_losses(losses)
                check_blowup(h, losses, "warmup")
                return WarmupResult(n, perf_counter() - start, times[0], times, losses,
                                    counts[-1], True)
    losses = h.read_losses(losses)
    check_blowup(h, losses, "warmup")
    return WarmupResult(len(times), perf_counter() - start, times[0], times, losses,
                        counts[-1], False)


def steady_step_s(wu: WarmupResult, stable_steps: int) -> float:
    """The warm-up's steady step time: the median of its last `stable_steps` steps."""
    return statistics.median(wu.step_times_s[-max(1, stable_steps):])


def window_steps(h: Hooks, step_s: float, min_window_s: float, floor: int, cap: int) -> tuple[int, str]:
    """(steps per timed window, how they were chosen: time | steps floor | cap), agreed by every rank:
    the smallest count that covers every rank's need, found by bisection over `h.agree` (each rank's
    steps-for-time differ slightly; ranks running different counts would hang in their collectives)."""
    floor, cap = max(1, floor), max(1, floor, cap)
    if min_window_s <= 0 or not step_s or step_s <= 0:
        return floor, "steps floor"
    want = math.ceil(min_window_s / step_s)
    need = min(cap, max(floor, want))
    lo, hi = floor, cap
    while lo < hi:
        mid = (lo + hi) // 2
        if h.agree(need <= mid):
            hi = mid
        else:
            lo = mid + 1
    if lo == floor and want <= floor:
        return lo, "steps floor"
    return lo, "cap" if lo == cap and want > cap else "time"


@dataclass
class Stall:
    outliers: int  # steps over factor x the window's median
    excess_s: float  # their time beyond the median
    stalled: bool  # excess_s above fraction x the window's wall time


def stall(w: WindowResult, factor: float, fraction: float) -> Stall:
    """The window's outlier steps and whether they stalled it (rule 8)."""
    times = w.step_times_s
    if len(times) < 3 or factor <= 0:
        return Stall(0, 0.0, False)
    med = statistics.median(times)
    out = [t for t in times if t > factor * med]
    excess = sum(t - med for t in out)
    return Stall(len(out), excess, bool(out) and excess > fraction * w.wall_s)


def timed_window(h: Hooks, steps: int) -> WindowResult:
    """One timed window of `steps` steps, synchronised at its edges only (see the module rules)."""
    stamps = [0.0] * steps
    losses = [None] * steps
    timer = h.make_timer(steps) if h.make_timer else None
    step, next_batch, on_step, stop = h.step, h.next_batch, h.on_step, h.stop
    wait = 0.0
    stop_seen = None
    h.sync()
    c0 = h.compile_count()  # after the edge sync: what it compiles (work traced before) is not the window's
    t0 = perf_counter()
    if timer:
        timer.start()
    i = 0
    try:
        for i in range(steps):
            tb = perf_counter()
            inputs, targets = next_batch()
            ta = perf_counter()
            wait += ta - tb
            losses[i] = step(inputs, targets)
            if timer:
                timer.mark(i)
            stamps[i] = perf_counter()
            if on_step:
                on_step("timed", i)
            if stop.requested and stop_seen is None:
                done = i + 1
                left_s = (stamps[i] - t0) / done * (steps - done)  # at the window's pace so far (rule 10)
                if h.finish_window_s > 0 and left_s <= h.finish_window_s:
                    stop_seen = done  # run on to the edge: the ranks stop there together
                else:
                    _stop_now(h, done, steps, left_s, stamps, t0)
    except StopRequested:
        raise
    except Exception as e:
        # e.g. a collective whose peer stopped a step earlier (rule 10's unagreed stop): the steps this
        # window finished are still measured (bench/windows.py keeps them for the record)
        e.xbench_open_window = _timed_partial(i, stamps[i - 1] - t0 if i else 0.0,
                                              _host_step_times(stamps[:i], t0) if i else [])
        raise

    h.sync()
    t1 = perf_counter()
    if timer:
        step_times, source = timer.elapsed_s(), "cuda_events"
    else:
        step_times, source = _host_step_times(stamps, t0), "host"
    losses = h.read_losses(losses)
    check_blowup(h, losses, "timed")
    return WindowResult(steps, t1 - t0, step_times, source, losses,
                        _delta(h.compile_count(), c0), wait, stop_seen)


def _stop_now(h: Hooks, done: int, steps: int, left_s: float, stamps: list[float], t0: float) -> NoReturn:
    """A stop after step `done` of the window: what it measured so far (rule 10: on a multi-rank run, why
    this rank did not wait for the window's edge)."""
    (h.device_sync if h.finish_window_s > 0 and h.device_sync else h.sync)()  # its peers are still stepping
    partial = _timed_partial(done, perf_counter() - t0, _host_step_times(stamps[:done], t0))
    if h.finish_window_s > 0:
        partial["stop_not_agreed"] = (
            f"stopped after step {done} of the window's {steps} without the other ranks: its other "
            f"{steps - done} steps (~{left_s:.3g} s) would outlast {h.finish_window_s:.3g} s, the share "
            f"of bench.stop_grace_s a window may run on after a stop")
    raise StopRequested(partial)


# of bench.stop_grace_s; the rest: the edge agreement, the gather, leaving the figures
FINISH_WINDOW_SHARE = 0.5


def finish_window_s(stop_grace_s: float, world_size: int) -> float:
    """Rule 10: how long a window may run on after a stop (0 on one rank: it stops at the next step)."""
    return FINISH_WINDOW_SHARE * stop_grace_s if world_size > 1 else 0.0


def window_end_stop(h: Hooks, w: WindowResult, stalled: bool) -> bool:
    """At a timed window's edge, every rank's verdict: True when any rank's window stalled (rule 8); raises
    StopRequested on every rank, at this edge, when any rank was asked to stop (rule 10; `w` then is the
    window the stop arrived in, run to its end). One collective when nothing happened (as the stall check
    alone took), a second only when the first said no."""
    # Read once: both answers must come from the same reading. One rank reads it at its next step instead
    # (this window is whole: it counts among the closed ones, as before rule 10).
    asked = h.stop.requested and h.finish_window_s > 0
    if h.agree(not (stalled or asked)):
        return False
    if h.agree(not asked):
        return True
    partial = _timed_partial(w.steps, w.wall_s, list(w.step_times_s))
    partial.update(stop_at_window_end=True, stop_seen_at_step=w.stop_seen_at_step,
                   ranks_agreed=True)  # every rank raises here
    raise StopRequested(partial)


def _host_step_times(stamps: list[float], t0: float) -> list[float]:
    """Each step's time from the host stamps taken after it (the first from the window's start)."""
    return [stamps[0] - t0] + [b - a for a, b in zip(stamps, stamps[1:])]


def _timed_partial(steps: int, window_s: float, step_times_s: list[float]) -> dict:
    """What a stop in the timed phase keeps of the window it arrived in (both stop paths of rule 10)."""
    return {"phase": "timed", "timed_steps": steps, "window_s": window_s, "timed_step_times_s": step_times_s}


class CudaEventTimer:
    """Per-step device times from CUDA events recorded on the stream; read after the window only."""

    def __init__(self, steps: int):
        import torch

        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]

    def start(self) -> None:
        self._events[0].record()

    def mark(self, i: int) -> None:
        self._events[i + 1].record()

    def elapsed_s(self) -> list[float]:
        ev = self._events
        ev[-1].synchronize()
        return [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(len(ev) - 1)]
