"""What every mode gives the runner, and what the runner gives a mode (`Run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from xbench import launch
from xbench.config import XBenchConfig
from xbench.plan import Plan
from xbench.platforms.detect import HostFacts
from xbench.rank import StopFlag
from xbench.records.record import RunRecord
from xbench.sinks.console import Progress


@dataclass
class Run:
    """One run as the runner hands it to a mode: the record is already stored (status `running`); the
    mode fills it as results arrive, so an interruption keeps whatever was complete."""

    cfg: XBenchConfig
    facts: HostFacts
    plan: Plan  # resolved once after compat (xbench/plan.py): what the rank work carries down
    record: RunRecord
    run_dir: Path
    resolved: dict  # the resolved, redacted config (what derived figures read)
    stop: StopFlag = field(default_factory=StopFlag)
    progress: object = None  # on_step(phase, i) for inline ranks; has close()
    baseline: dict | None = None  # the record named by `baseline=`, read before any device work
    # the envelope's W&B sink (None: logger=none); a mode may start it early and log live
    wandb: object = None


def console_progress(cfg) -> Progress:
    """The run's console bar: warm-up, then timed (or training) steps."""
    b = cfg.bench
    return Progress(b.warmup_max_steps, b.steps * b.repeats, enabled=cfg.logger.progress)


class Mode:
    name = "base"

    @classmethod
    def rules(cls, cfg, facts) -> list[str]:
        """Why `cfg` cannot run in this mode (compat collects these with every other reason)."""
        return []

    def progress(self, cfg) -> Progress:
        """The console progress of this mode (closed by the runner whatever happens)."""
        return console_progress(cfg)

    def work(self, plan: Plan, run_dir=None):
        """The rank work every rank runs (picklable: it crosses into launched processes), carrying `plan`."""
        raise NotImplementedError

    def execute(self, run: Run) -> None:
        """Run every rank, fill run.record (measurements, series, warnings, derived) and finish it."""
        raise NotImplementedError

    def join(self, plan: Plan, cfg) -> None:
        """A process that does not write the record (a rank > 0 under torchrun, a node > 0): run its
        ranks only; rank 0 records the results. `cfg`: the root config, for what only the record side
        reads (the store); the ranks get the plan."""
        launch.run(self.work(plan))
