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
from dataclasses import dataclass, field

# Every signal that asks a run to stop: a terminal (Ctrl-C, Ctrl-\, a closed window), a user (kill), a
# batch system (SIGTERM before SIGKILL on preemption, Slurm's --signal=USR1/USR2@T, a CPU-time limit).
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                                  "SIGXCPU") if hasattr(signal, n))

POINT_ENV = "XBENCH_POINT"  # "<pid of the runner's process>:<wall time the point started>"


def point_started_at() -> float:
    """Wall time this run started: the runner's mark (launch/isolation.begin_point), else this process's start."""
    import psutil

    try:
        return float(os.environ[POINT_ENV].split(":", 1)[1])
    except (KeyError, IndexError, ValueError):
        return psutil.Process().create_time()


@dataclass(frozen=True)
class RankContext:
    rank: int = 0
    world_size: int = 1  # ranks (processes, or replicas) in the run
    local_rank: int = 0  # rank on this host: the GPU it drives
    local_world_size: int = 1
    devices_per_rank: int = 1  # devices this rank's process drives (DataParallel, SPMD: several)
    threads: int | None = None  # torch intra-op threads for this rank (None: torch's default)
    threads_policy: str = "bench.threads"  # how `threads` was chosen (recorded)
    warnings: tuple[str, ...] = ()  # what the launcher saw that the config did not say

    @property
    def devices(self) -> int:
        """Devices of the whole run: every rank drives `devices_per_rank`."""
        return self.world_size * self.devices_per_rank

    def figures(self) -> dict:
        """This rank's facts for its measurements."""
        return {"local_rank": self.local_rank, "local_world_size": self.local_world_size,
                "threads_policy": self.threads_policy, "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
                "hostname": socket.gethostname(), "pid": os.getpid()}


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
