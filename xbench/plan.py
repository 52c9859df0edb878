"""The plan: what the record side resolves once, after compat, and hands down to every rank instead of the
config and the host's facts: the device type, the runtime, the strategy and its launcher, the precision,
the shapes from the data, and the config's sections a rank applies.

`resolve(cfg, facts)` runs in the process that launches the ranks (the record writer, or a process that
joins them: a rank > 0 under the torchrun command, a node > 0), after compat.check passed; the plan is
frozen and travels inside the rank work (pickled into launched processes). A rank reads what was resolved
here and never resolves it again from HostFacts, and it never sees the root config: the sections it
applies (model, data, optim, bench, parallel, runtime, goal, fault) are the schema's own typed sections
(config.py), under the root's names, so `plan.bench.seed` reads as `cfg.bench.seed` did; of the platform
only its name and its device setting come along (`PlatformName`), never its prices; the store, the
logger (but whether to draw a progress bar), W&B, sweep and record-side settings stay behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from xbench import parallel
from xbench.config import (
    BenchConfig,
    DataConfig,
    FaultConfig,
    GoalConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    RuntimeConfig,
    XBenchConfig,
)
from xbench.data.spec import InputSpec
from xbench.platforms.detect import HostFacts, device_type


@dataclass(frozen=True)
class PlatformName:
    """What a rank knows of the platform: its name (the MLPerf log's) and the device it asked for (the
    XLA launcher's PJRT device)."""

    name: str
    device: str


@dataclass(frozen=True)
class Plan:
    device_type: str  # cpu | cuda | xla on this host (platforms.detect.device_type)
    strategy: str  # parallel.name
    launcher: str  # inline | torchrun | xla: the strategy's registry line (launch/)
    precision: str  # precision.name (each rank builds its Precision on its device: a scaler is its own)
    spec: InputSpec  # the shapes from the data (data/spec.py)
    # The sections a rank applies, as compat checked them (config.py's dataclasses).
    model: ModelConfig
    data: DataConfig
    optim: OptimConfig
    bench: BenchConfig
    parallel: ParallelConfig
    runtime: RuntimeConfig
    goal: GoalConfig  # train_to_target's targets, evaluations, checkpoints
    fault: FaultConfig  # a deliberate fault (the drill, tests); kind None: none
    platform: PlatformName
    resume: str | None = None  # train_to_target: the run whose checkpoint this one continues
    progress: bool = True  # logger.progress: rank 0 of a launched process draws the bar


# The Plan's fields that are the root config's of the same name, read as they are.
SECTIONS = ("model", "data", "optim", "bench", "parallel", "runtime", "goal", "fault", "resume")


def resolve(cfg: XBenchConfig, facts: HostFacts) -> Plan:
    """The plan of `cfg` on this host (after compat.check: the names are known and fit)."""
    return Plan(
        device_type=device_type(cfg.platform.device, cfg.runtime.name, facts),
        strategy=cfg.parallel.name,
        launcher=parallel.get(cfg.parallel.name).launcher,
        precision=cfg.precision.name,
        spec=InputSpec.from_data(cfg.data),
        platform=PlatformName(cfg.platform.name, cfg.platform.device),
        progress=cfg.logger.progress,
        **{name: getattr(cfg, name) for name in SECTIONS},
    )
