"""The contract between launchers, modes and a rank's work (torch-free, below all of them).

- `RankContext`: the facts of one rank, decided by the launcher that started it (its rank in the
  world, the devices it drives, the threads it may use). They travel here, never by rewriting the
  config: `cfg.data.batch_size` stays "per device" everywhere.
- `RankResult` / `LaunchResult`: what a rank hands back, and what a launcher gathers (rank 0 first).
- `StopFlag`, `StopRequested`, `Diverged`: how a signal reaches a running loop, and how a loop says
  it stopped early (both carry what was measured so far; both pickle across processes).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, field

# Every signal that asks a run to stop: a terminal (Ctrl-C, Ctrl-\, a closed window), a user (kill), a
# batch system (SIGTERM before SIGKILL on preemption, Slurm's --signal=USR1/USR2@T, a CPU-time limit).
STOP_SIGNALS = tuple(
    getattr(signal, n)
    for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGXCPU")
    if hasattr(signal, n)
)

POINT_ENV = "XBENCH_POINT"  # "<pid of the runner's process>:<wall time the point started>"
# This run's start-up phases so far, "name@wall time;..." in the order they began: in the environment, so the
# ranks a launcher starts carry on the runner's (a rank in a fresh process adds its own to its copy).
STARTUP_ENV = "XBENCH_STARTUP"
# from the process's start to the first mark: the interpreter, xbench's and Hydra's imports
FIRST_PHASE = "imports"


def process_started_at() -> float:
    """Wall time this process started, to the clock tick: /proc's start time (ticks since boot) against
    CLOCK_BOOTTIME. psutil's create_time adds the boot time /proc/stat rounds down to whole seconds, so it
    reads up to 1 s early (0.98 s on the VM this was written on); elsewhere (no /proc) it is the fallback."""
    try:
        with open("/proc/self/stat", "rb") as f:
            # field 22, starttime (the name may hold spaces)
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return psutil.Process().create_time()


def point_started_at() -> float:
    """Wall time this run started: the runner's mark (launch/isolation.begin_point), else this process's
    start."""
    try:
        return float(os.environ[POINT_ENV].split(":", 1)[1])
    except (KeyError, IndexError, ValueError):
        return process_started_at()


def _marks() -> list[tuple[str, float]]:
    out = []
    for item in filter(None, os.environ.get(STARTUP_ENV, "").split(";")):
        name, _, at = item.rpartition("@")
        try:
            out.append((name, float(at)))
        except ValueError:  # not ours to read: ignored
            continue
    return out


def startup_phase(name: str) -> None:
    """This run enters start-up phase `name` now (it lasts until the next one); an earlier point's marks (a
    sweep's, in the same process) are dropped."""
    start = point_started_at()
    kept = [m for m in _marks() if m[1] >= start]
    os.environ[STARTUP_ENV] = ";".join(f"{n}@{t!r}" for n, t in [*kept, (name, time.time())])


def startup_phases(end: float, start: float | None = None) -> dict[str, float]:
    """Seconds this run spent in each start-up phase from its start (`point_started_at`) to `end` (the end of
    its first step), in the order they began: each lasts until the next mark, the first (`FIRST_PHASE`) from
    the start, so they sum to `end - start`. A later sweep point's start is its first mark (under 1 ms apart):
    no `imports` of its own. A name marked twice adds up."""
    start = point_started_at() if start is None else start
    bounds = [(FIRST_PHASE, start), *((n, t) for n, t in _marks() if start <= t < end)]
    if len(bounds) > 1 and bounds[1][1] - start < 1e-3:
        bounds = [(bounds[1][0], start), *bounds[2:]]
    out: dict[str, float] = {}
    for (name, t), (_, t_next) in zip(bounds, [*bounds[1:], ("", end)]):
        out[name] = out.get(name, 0.0) + (t_next - t)
    return out


@dataclass(frozen=True)
class RankContext:
    rank: int = 0
    world_size: int = 1  # ranks (processes, or replicas) in the run
    local_rank: int = 0  # rank on this host: the GPU it drives
    local_world_size: int = 1
    devices_per_rank: int = 1  # devices this rank's process drives (DataParallel, SPMD: several)
    threads: int | None = None  # torch intra-op threads for this rank (None: torch's default)
    threads_policy: str = "bench.threads"  # how `threads` was chosen (recorded)
    # how a launched rank's process started: "template fork" (launch/template.py), "spawn", or ""
    # (no launcher's)
    process: str = ""
    warnings: tuple[str, ...] = ()  # what the launcher saw that the config did not say

    @property
    def devices(self) -> int:
        """Devices of the whole run: every rank drives `devices_per_rank`."""
        return self.world_size * self.devices_per_rank

    def figures(self) -> dict:
        """This rank's facts for its measurements."""
        return {
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "threads_policy": self.threads_policy,
            "rank_process": self.process or None,
            "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }


@dataclass
class RankResult:
    rank: int
    measurements: dict
    series: dict
    warnings: list[str] = field(default_factory=list)
    artifacts: dict = field(default_factory=dict)  # name -> path relative to the run folder


@dataclass
class LaunchResult:
    ranks: list[RankResult]  # rank 0 first
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, ranks: list[RankResult]) -> LaunchResult:
        seen: list[str] = []
        for w in (w for r in ranks for w in r.warnings):
            if w not in seen:
                seen.append(w)
        return cls(list(ranks), seen)


@dataclass
class StopFlag:
    """Set by a signal handler; the loop checks it once per step (one attribute read)."""

    requested: bool = False
    reason: str = ""


class StopRequested(Exception):
    """Raised inside the loop when a signal asked the run to stop; carries what was measured so far."""

    def __init__(self, partial: dict):
        super().__init__("stop requested")
        self.partial = partial

    def __reduce__(self):  # picklable: it crosses from a launched process to the parent
        return StopRequested, (self.partial,)


class Diverged(Exception):
    """The loss became NaN or inf; `step` counts over all steps (warm-up, then timed)."""

    def __init__(self, step: int, loss: float, phase: str | None = None):
        super().__init__(f"loss became {loss} at step {step}" + (f" ({phase})" if phase else ""))
        self.step, self.loss, self.phase = step, loss, phase

    def __reduce__(self):  # picklable: it crosses from a launched process to the parent
        return Diverged, (self.step, self.loss, self.phase)
