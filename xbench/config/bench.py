"""bench: the measurement policy (see xbench/bench/loop.py for the rules)."""

from __future__ import annotations

from dataclasses import dataclass

from xbench.config.knobs import BIG, knob

# Where each run's rank work runs (xbench/launch/isolation.py)
ISOLATION = ("auto", "process", "shared", "spawn")
# ATen's CPU vector kernels on x86 (ATEN_CPU_CAPABILITY); null: the best this CPU has
CPU_CAPABILITIES = (None, "default", "avx2", "avx512")
PROFILERS = (None, "torch", "xla")


@dataclass
class BenchConfig:
    mode: str = "throughput"  # throughput | train_to_target | find_max_batch
    warmup_min_steps: int = knob(3, ge=0, le=1000000)
    warmup_max_steps: int = knob(50, ge=1, le=1000000)
    # compile counters flat and step times within tolerance over this many steps
    warmup_stable_steps: int = knob(3, ge=1, le=1000000)
    warmup_cv_tol: float = knob(0.15, gt=0, le=1e6)
    # Timed windows are sized by time: at least `min_window_s` at the warm-up's steady step time, never
    # under `steps` (a floor, which wins over the cap) nor over `max_window_steps`; min_window_s=0 gives
    # exactly `steps`.
    steps: int = knob(10, ge=1, le=10000000)
    min_window_s: float = knob(2.0, ge=0, le=86400)
    max_window_steps: int = knob(20000, ge=1, le=100000000)
    # timed windows; median and spread over them (a 95% CI needs 3 or more)
    repeats: int = knob(5, ge=1, le=100000)
    # Whole-process repeats: the run (warm-up + `repeats` windows) N times, each in a fresh process;
    # the spread across processes shows run-to-run variance a window repeat cannot see (throughput mode).
    # 1: one process, no repeat.
    process_repeats: int = knob(1, ge=1, le=10000)
    noisy_cv: float = knob(0.05, gt=0, le=100)  # a coefficient of variation above this flags the result noisy
    # Stalls: a step over `stall_factor` x its window's median is an outlier (counted per window); a
    # window whose outliers cost more than `stall_fraction` of it is stalled, flagged, and measured
    # again up to `stall_remeasure` times (0: kept as measured, flagged).
    stall_factor: float = knob(5.0, gt=1, le=1e6)
    stall_fraction: float = knob(0.05, gt=0, le=1)
    stall_remeasure: int = knob(1, ge=0, le=1000)
    # Other processes' CPU/GPU use probed this long before the rank builds (0: no probe; the default
    # thread count then is the physical cores).
    contention_probe_s: float = knob(0.25, ge=0, le=60)
    # Where each run's rank work runs: `process` (a fresh process, forked from the sweep's warm template where
    # that is safe, else spawned: compile caches, start-up, memory peaks and allocator state belong to the run
    # alone), `spawn` (a freshly spawned interpreter, never forked), `shared` (this process), or `auto`
    # (process for the points of a --multirun sweep, shared for a single run).
    isolation: str = knob("auto", choices=ISOLATION)
    # Host (dispatch) vs device time per step, profiled over at most this many steps after the windows
    # (bench/meters/breakdown.py; XLA uses its own clocks); 0: off.
    breakdown_steps: int = knob(3, ge=0, le=100000)
    self_check: bool = False  # also measure at half the batch; flag throughput that falls as the batch grows
    seed: int = knob(0, ge=0, le=2**32 - 1)
    # torch intra-op threads (None: the free physical cores, probed at start)
    threads: int | None = knob(None, ge=1, le=65536)
    # ATen's CPU vector kernels (ATEN_CPU_CAPABILITY, read when torch starts, so the run goes to fresh
    # processes): default (no SIMD, the "stock build") | avx2 | avx512; None: the best this CPU has.
    cpu_capability: str | None = knob(None, choices=CPU_CAPABILITIES)
    interop_threads: int | None = knob(None, ge=1, le=65536)  # None: torch's default
    # device/CPU utilisation sampling period during timed windows; 0 = off
    util_interval_s: float = knob(0.1, ge=0, le=60)
    # find_max_batch: doubling stops at this per-device batch; bisection stops within this relative gap
    max_batch_limit: int = knob(65536, ge=1, le=2**24)
    max_batch_rtol: float = knob(0.05, ge=0, lt=1)
    # find_max_batch: no new trial starts after this long; the fits so far are the result
    max_batch_search_s: float = knob(3600.0, gt=0, le=604800)
    # A finite blow-up is a divergence too: a loss above this x the run's first loss ends the run `diverged`
    diverge_loss_factor: float = knob(1000.0, gt=1, le=1e30)
    # After SIGINT/SIGTERM, a step that has not returned within this many seconds (a hung step) is
    # abandoned: the record is written as interrupted and the process exits.
    stop_grace_s: float = knob(30.0, gt=0, le=3600)
    # A profile of `profile_steps` more steps after the timed windows (never inside them; bench/profile.py):
    # torch (torch.profiler: Chrome trace, TensorBoard) | xla (XLA metrics report, HLO dump) | None
    profile: str | None = knob(None, choices=PROFILERS)
    profile_steps: int = knob(5, ge=1, le=100000)
    # A label, not a setting: `-m bench.round=0,1,2 runtime=eager,compile` runs the modes interleaved
    # (Hydra varies the last override fastest), and the report groups the rounds into one row.
    round: int = knob(0, ge=0, le=BIG)
