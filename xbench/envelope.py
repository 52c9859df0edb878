"""The one wrapper every run goes through: record first, signals, exception -> status, sinks.

    with RunEnvelope(cfg, resolved, run_id) as env:   # the record exists (status `running`) from here
        ...                                           # compat, then the mode fills env.record
    # the record is final: ok / failed / oom / interrupted / diverged, stored, sent to W&B, summarised

- Record first: the record is written before any device work, so even a killed process leaves a trace.
- Signals: the first SIGINT/SIGTERM asks the loop to stop after the step (`env.stop`); a second one,
  or a step that does not return within `bench.stop_grace_s` (a hung step), writes the record as
  interrupted and exits at once. The handlers stay in place until the record is stored.
- Exceptions become statuses with a reason (a ConfigError lists every reason; an out-of-memory is a
  result, `oom`, with the batch size); the traceback goes beside the record, redacted.
- Sinks: the local record first (always), then W&B (whose trouble never fails a run), then the console.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from xbench.bench.memory import is_oom, memory_figures
from xbench.rank import Diverged, StopFlag, StopRequested
from xbench.records.env import host_env
from xbench.records.record import RunRecord
from xbench.records.redact import redact, redact_text
from xbench.records.store import atomic_write_text
from xbench.sinks.console import summary
from xbench.sinks.local import LocalSink
from xbench.sinks.wandb import WandbSink


class ConfigError(Exception):
    """The config cannot run here; `reasons` holds every reason at once."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


class _Signals:
    """First SIGINT/SIGTERM: ask the loop to stop and record what was measured. Second, or a step that
    does not return within `grace_s` (a hung step): `on_force(reason)` writes the record, then exit now."""

    def __init__(self, flag: StopFlag, grace_s: float = 30.0, on_force=None):
        self.flag = flag
        self.grace_s = grace_s
        self.on_force = on_force
        self.previous = {}
        self.timer = None

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _force(self, reason: str, code: int):
        with contextlib.suppress(BaseException):
            print(f"\nxbench: {reason}; exiting now", file=sys.stderr, flush=True)
            if self.on_force:
                self.on_force(reason)
        os._exit(code)

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.flag.requested:
            self._force(f"second {name}: exited at once (after {self.flag.reason})", 128 + signum)
        self.flag.requested = True
        self.flag.reason = name
        print(f"\nxbench: {name} received; stopping after this step and saving the record "
              f"(send it again to exit at once; a step still running after {self.grace_s:g} s is abandoned)",
              file=sys.stderr, flush=True)
        self.timer = threading.Timer(self.grace_s, self._force,
                                     (f"{name}: the step did not return within bench.stop_grace_s="
                                      f"{self.grace_s:g} s (hung step)", 128 + signum))
        self.timer.daemon = True
        self.timer.start()

    def __exit__(self, *exc):
        if self.timer:
            self.timer.cancel()
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


def _redact_hydra_files() -> None:
    """Hydra's sweeper saves multirun.yaml (overrides included) before the first job: redact it.
    Single runs write nothing (hydra.output_subdir is null in conf/config.yaml)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    import yaml

    path = Path(HydraConfig.get().sweep.dir) / "multirun.yaml"
    with contextlib.suppress(OSError, yaml.YAMLError):
        atomic_write_text(path, yaml.safe_dump(redact(yaml.safe_load(path.read_text())), sort_keys=False))


class RunEnvelope:
    """Owns one run's record from its first write to its last (see the module docstring)."""

    def __init__(self, cfg, resolved: dict, run_id: str, created_at: str | None = None):
        self.cfg = cfg
        self.record = RunRecord(run_id=run_id, experiment=cfg.experiment, config=resolved)
        if created_at:
            self.record.created_at = created_at
        self.local = LocalSink(cfg.store.root)
        self.stop = StopFlag()
        self.progress = None  # the mode's console bar, set by the runner; closed here whatever happens
        # One W&B sink for the run: published at the end; a mode may open its run early to log as it goes.
        self.wandb = (WandbSink(self.record.config.get("logger", {}).get("wandb", {}),
                                say=lambda s: print(s, file=sys.stderr))
                      if cfg.logger.name != "none" else None)
        self._signals = _Signals(self.stop, cfg.bench.stop_grace_s, on_force=self._forced)

    @property
    def run_dir(self) -> Path:
        return self.local.run_dir(self.record)

    def _forced(self, reason: str) -> None:  # second signal or hung step: a final record before os._exit
        self.record.finish("interrupted", reason)
        self.local.write(self.record)

    def __enter__(self) -> RunEnvelope:
        self.record.env = host_env()
        self.local.write(self.record)  # status "running": if the process is killed outright, the trace remains
        _redact_hydra_files()
        print(f"xbench: run {self.record.run_id} -> {self.run_dir}", flush=True)
        self._signals.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self.progress is not None:
                self.progress.close()
            if exc is not None:
                if not isinstance(exc, Exception):
                    return False  # SystemExit and the like: not a result
                self._status_of(exc)
            elif self.record.status == "running":  # a mode that forgot to say: a bug, not a result
                self.record.finish("failed", "internal: the mode ended without a status")
            self._publish()
        finally:
            self._signals.__exit__(None, None, None)
        return True

    def _status_of(self, exc: Exception) -> None:
        rec, cfg = self.record, self.cfg
        if isinstance(exc, ConfigError):
            rec.finish("failed", "config: " + "; ".join(exc.reasons))
        elif isinstance(exc, StopRequested):
            # A stop after a phase had finished (e.g. during the self-check) keeps that phase's figures.
            if rec.measurements:
                rec.measurements["interrupted"] = exc.partial
            else:
                rec.measurements.update(exc.partial)
            rec.finish("interrupted", f"{self.stop.reason} during {exc.partial.get('phase')}")
        elif isinstance(exc, Diverged):
            rec.measurements.update(diverged_at_step=exc.step, diverged_phase=exc.phase,
                                    batch_size_per_device=cfg.data.batch_size)
            rec.finish("diverged", str(exc))
        else:  # every other failure is a result too, with its reason
            rec.finish("oom" if is_oom(exc) else "failed", redact_text(f"{type(exc).__name__}: {exc}"))
            rec.ranks = getattr(exc, "ranks", None) or rec.ranks  # failed ranks' errors (launch.torchrun)
            rec.artifacts["traceback"] = "traceback.txt"
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            atomic_write_text(self.run_dir / "traceback.txt", redact_text(text))
            if rec.status == "oom":
                rec.measurements["batch_size_per_device"] = cfg.data.batch_size
                rec.measurements.update(memory_figures())

    def _publish(self) -> None:
        """The local record first, always; then W&B; then the console summary."""
        path = self.local.write(self.record)
        if self.wandb is not None:
            self.record.artifacts.update(self.wandb.publish(self.record, self.run_dir))
            path = self.local.write(self.record)
        print(summary(self.record, path), flush=True)
