"""The one wrapper every run goes through: record first, signals, exception -> status, sinks.

    with RunEnvelope(cfg, resolved, run_id) as env:   # the record exists (status `running`) from here
        ...                                           # compat, then the mode fills env.record
    # the record is final: ok / failed / oom / interrupted / diverged, stored, sent to W&B, summarised

- Record first: the record is written before any device work, so even a killed process leaves a trace.
  A store that cannot take that first write stops the run before any work (exit 74).
- Signals (`SIGNALS`, one per process, `rank.STOP_SIGNALS`: INT, TERM, HUP, QUIT, USR1, USR2, XCPU):
  the first asks the loop to stop after the step (`env.stop`), at any phase: start-up, warm-up, the
  window, the self-check, derive, the sinks, between sweep points. A second one, or a step that does
  not return within `bench.stop_grace_s` (a hung step), writes the record, kills the run's child
  processes and exits at once. The CLI installs the handlers for the whole process (a signal between
  two sweep points ends the sweep); a run started by other code installs them for its own duration.
- Exceptions become statuses with a reason (a ConfigError lists every reason; an out-of-memory is a
  result, `oom`, with the batch size); the traceback goes beside the record, redacted.
- Sinks: the local record first (always; a store that fails at the end sends the record to a fallback
  folder the console names, or prints it, and the run exits 74), then W&B (whose trouble never fails
  a run), then the console.
- Resume (`prior`): the attempt writes its own `attempt-<time>.json`; it replaces the run's
  record.json only when it carried the run on (ended ok or diverged, or interrupted after a new
  checkpoint). A refused, failed or killed attempt leaves the previous record as it was.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from xbench import faults
from xbench.bench.meters.memory import memory_figures
from xbench.rank import STOP_SIGNALS, Diverged, StopFlag, StopRequested
from xbench.records import safe_io
from xbench.records.env import host_env
from xbench.records.record import RunRecord, is_oom
from xbench.records.redact import redact, redact_text
from xbench.records.store import ATTEMPT_PREFIX, RECORD_FILE, RunLock, atomic_write_text, record_text
from xbench.sinks.console import STARTUP_LINE, summary
from xbench.sinks.local import LocalSink
from xbench.sinks.wandb import WandbSink

EXIT_UNSAVED = 74  # sysexits EX_IOERR: the result exists, but not where the store said


class ConfigError(Exception):
    """The config cannot run here; `reasons` holds every reason at once."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def say(text: str) -> None:
    """A line on stderr that never fails (the terminal may be gone: SIGHUP, a closed pipe)."""
    with contextlib.suppress(Exception):
        print(text, file=sys.stderr, flush=True)


class StopAtOnce(BaseException):
    """A stop raised by the signal handler itself, in a phase where nothing is measured yet (start-up).
    A BaseException, as KeyboardInterrupt is: it lands wherever the main thread is (inside torch's
    imports), and an `except Exception` there swallowed it as a StopRequested (the import went on to its
    end: a SIGTERM at a sweep's first point took 11-18 s on a loaded 2-core machine, 0.3 s on a quiet
    one). The envelope records it as the StopRequested it stands for (`partial`)."""

    def __init__(self, partial: dict):
        super().__init__("stop requested")
        self.partial = partial


class _Signals:
    """First stop signal: ask the loop to stop and record what was measured. Second, or a step that
    does not return within `grace_s` (a hung step): `on_force(reason)` writes the record, the run's
    child processes are killed, the process exits now."""

    def __init__(self):
        self.flag = StopFlag()
        self.grace_s = 30.0
        self.on_force = None  # the current run's "write the record now" (None between runs)
        self.previous: dict = {}
        self.timer: threading.Timer | None = None
        # A phase in which nothing is measured yet (start-up: imports, compat, the plan): a first signal stops
        # it at once, from the handler, instead of after imports that take seconds (a sweep's point in
        # start-up too).
        self.at_once: str | None = None

    @property
    def installed(self) -> bool:
        return bool(self.previous)

    def install(self) -> bool:
        """Handle every stop signal from now on (main thread only); False if already installed."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return False
        self.flag = StopFlag()
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return True

    def uninstall(self) -> None:
        self.cancel_timer()
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def cancel_timer(self) -> None:
        if self.timer:
            self.timer.cancel()
            self.timer = None

    def _force(self, reason: str, code: int):
        say(f"\nxbench: {reason}; exiting now")
        on_force = self.on_force
        if on_force is not None:
            with contextlib.suppress(BaseException):
                on_force(reason)
        with contextlib.suppress(BaseException):  # children die with their parent (launch/child.py)
            import psutil

            for p in psutil.Process().children(recursive=True):
                p.kill()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.flag.requested:
            self._force(f"second {name}: exited at once (after {self.flag.reason})", 128 + signum)
        self.flag.requested = True
        self.flag.reason = name
        phase, self.at_once = self.at_once, None
        if phase is not None:
            say(
                f"\nxbench: {name} received during {phase} (nothing measured yet); stopping now and saving "
                "the record"
            )
        else:
            say(
                f"\nxbench: {name} received; stopping after this step (or phase) and saving the record "
                f"(send it again to exit at once; a step still running after {self.grace_s:g} s is abandoned)"
            )
        self.timer = threading.Timer(self.grace_s, self._force,
                                     (f"{name}: the step did not return within bench.stop_grace_s="
                                      f"{self.grace_s:g} s (hung step)", 128 + signum))
        self.timer.daemon = True
        self.timer.start()
        if phase is not None:  # raised where the main thread is (an import, compat): the envelope records it
            raise StopAtOnce({"phase": phase})


SIGNALS = _Signals()


def redact_hydra_files() -> None:
    """Hydra's sweeper saves multirun.yaml (overrides included) before the first job: redact it.
    Single runs write nothing (hydra.output_subdir is null in conf/config.yaml)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return
    import yaml

    path = Path(HydraConfig.get().sweep.dir) / "multirun.yaml"
    with contextlib.suppress(OSError, ValueError, yaml.YAMLError):
        text = safe_io.read_limited(path, safe_io.MAX_YAML_BYTES, "sweep file").decode("utf-8")
        clean = yaml.safe_dump(redact(safe_io.load_yaml(text)), sort_keys=False)
        if clean != text:
            atomic_write_text(path, clean)


def advanced(record: RunRecord) -> bool:
    """Whether a resume attempt carried its run on, so that its record may replace the previous one."""
    return record.status in ("ok", "diverged") or (record.status == "interrupted"
                                                   and bool(record.measurements.get("checkpoint")))


class RunEnvelope:
    """Owns one run's record from its first write to its last (see the module docstring)."""

    def __init__(
        self, cfg, resolved: dict, run_id: str, prior: dict | None = None, lock: RunLock | None = None
    ):
        self.cfg = cfg
        self.record = RunRecord(run_id=run_id, experiment=cfg.experiment, config=resolved)
        self.prior = prior
        if prior is not None:
            self.record.created_at = prior.get("created_at") or self.record.created_at
        attempt = f"{ATTEMPT_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
        self.local = LocalSink(cfg.store.root, attempt if prior is not None else RECORD_FILE)
        self.lock = lock
        self.stop = SIGNALS.flag
        self.progress = None  # the mode's console bar, set by the runner; closed here whatever happens
        STARTUP_LINE.enabled = bool(cfg.logger.progress)
        self._owns_signals = False
        # One W&B sink for the run: published at the end; a mode may open its run early to log as it goes.
        self.wandb = (WandbSink(self.record.config.get("logger", {}).get("wandb", {}), say=say)
                      if cfg.logger.name != "none" else None)

    @property
    def run_dir(self) -> Path:
        return self.local.run_dir(self.record)

    @property
    def unsaved(self) -> bool:
        """The final record is not in the store (a fallback folder, or only the console, holds it)."""
        return self.local.unsaved is not None

    def check_stop(self, phase: str) -> None:
        """Between phases: a stop asked before any step ran ends the run here, recorded. Start-up (from the
        first record write to its check_stop) is stopped at once from the signal handler
        (`_Signals.at_once`)."""
        if phase == "start-up":
            SIGNALS.at_once = None
        if self.stop.requested:
            raise StopAtOnce({"phase": phase})

    def _forced(self, reason: str) -> None:  # second signal or hung step: a final record before os._exit
        if self.record.status == "running":
            self.record.finish("interrupted", reason)
        else:  # already final (the signal came during W&B or the summary): keep its status
            self.record.warnings.append(f"{reason} after the record was final")
        self._write()

    def __enter__(self) -> RunEnvelope:
        # the record and the lock are ours from here: a signal asks until the end of __enter__
        SIGNALS.at_once = None
        self.record.env = host_env()
        try:
            if self.lock is None:
                self.lock = RunLock(self.run_dir).acquire()
            # what a killed earlier attempt's torn writes left (we own the folder)
            safe_io.clean_temp(self.run_dir)
            # status "running": if the process is killed outright, the trace remains
            self.local.write_strict(self.record)
        except OSError as e:
            say(
                f"xbench: the store cannot take run {self.record.run_id} ({type(e).__name__}: {e}); nothing "
                f"was run (store.root={self.cfg.store.root})"
            )
            if self.lock is not None:
                self.lock.release()
            raise SystemExit(EXIT_UNSAVED) from None
        redact_hydra_files()
        with contextlib.suppress(Exception):
            print(f"xbench: run {self.record.run_id} -> {self.run_dir}", flush=True)
        self._owns_signals = SIGNALS.install()
        self.stop = SIGNALS.flag
        SIGNALS.grace_s = self.cfg.bench.stop_grace_s
        SIGNALS.on_force = self._forced
        # Until check_stop("start-up"): nothing measured, nothing to finish first. Set last, on the main
        # thread (where the handler raises): no call follows before the `with` body, so no signal lands
        # outside it.
        if threading.current_thread() is threading.main_thread():
            SIGNALS.at_once = "start-up"
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        SIGNALS.at_once = None  # a signal from here on asks, it never raises inside the record's last writes
        STARTUP_LINE.close()
        try:
            if self.progress is not None:
                with contextlib.suppress(Exception):
                    self.progress.close()
            if isinstance(exc, KeyboardInterrupt):  # someone else's SIGINT handler: still a stop
                exc = StopRequested({"phase": "unknown"})
                self.stop.reason = self.stop.reason or "SIGINT"
            elif isinstance(exc, StopAtOnce):  # the handler's own: recorded like any stop, not re-raised
                exc = StopRequested(exc.partial)
            # SystemExit and the like: recorded, re-raised
            if exc is not None and not isinstance(exc, Exception):
                self.record.finish(
                    "failed", f"the run exited ({type(exc).__name__} {exc}) before it finished"
                )
            elif exc is not None:
                self._status_of(exc)
            elif self.record.status == "running":  # a mode that forgot to say: a bug, not a result
                self.record.finish("failed", "internal: the mode ended without a status")
            self._publish()
        finally:
            SIGNALS.on_force = None
            if self._owns_signals:
                SIGNALS.uninstall()
            if self.lock is not None:
                self.lock.release()
        return exc is None or isinstance(exc, Exception)

    def _status_of(self, exc: Exception) -> None:
        rec, cfg = self.record, self.cfg
        if isinstance(exc, ConfigError):
            rec.finish("failed", "config: " + "; ".join(exc.reasons))
        elif isinstance(exc, StopRequested):
            # Every rank's partial figures of a signalled multi-rank run (launch/torchrun.py),
            # rank 0's at the top.
            partials = exc.partial.pop("rank_partials", None)
            if partials and len(partials) > 1:
                rec.ranks = [
                    p if p is not None else {"rank": i, "figures": None} for i, p in enumerate(partials)
                ]
            # A stop after a phase had finished keeps that phase's figures.
            if rec.measurements:
                rec.measurements["interrupted"] = exc.partial
            else:
                rec.measurements.update(exc.partial)
            rec.finish("interrupted", f"{self.stop.reason or 'stop'} during {exc.partial.get('phase')}")
        elif isinstance(exc, Diverged):
            rec.measurements.update(diverged_at_step=exc.step, diverged_phase=exc.phase,
                                    batch_size_per_device=cfg.data.batch_size)
            rec.finish("diverged", str(exc))
        else:  # every other failure is a result too, with its reason
            rec.finish("oom" if is_oom(exc) else "failed", redact_text(f"{type(exc).__name__}: {exc}"))
            rec.ranks = getattr(exc, "ranks", None) or rec.ranks  # failed ranks' errors (launch.torchrun)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            if self.local.write_file(rec, "traceback.txt", redact_text(text)) is not None:
                rec.artifacts["traceback"] = "traceback.txt"
            if rec.status == "oom":
                rec.measurements["batch_size_per_device"] = cfg.data.batch_size
                rec.measurements.update(memory_figures())

    def _write(self) -> Path | None:
        if self.prior is not None and advanced(self.record) and self.local.name != RECORD_FILE:
            attempt = self.run_dir / self.local.name
            self.local.name = RECORD_FILE  # this attempt carried the run on: its record is the run's now
            path = self.local.write(self.record)
            if path is not None and path.parent == self.run_dir:
                with contextlib.suppress(OSError):
                    attempt.unlink()
            return path
        return self.local.write(self.record)

    def _publish(self) -> None:
        """The local record first, always; then W&B; then the console summary."""
        path = self._write()
        faults.at_phase(self.cfg.fault, "sinks")
        if self.wandb is not None:
            self.record.artifacts.update(self.wandb.publish(self.record, self.run_dir))
            path = self._write()
        with contextlib.suppress(Exception):
            print(summary(self.record, path or "(nowhere: see below)"), flush=True)
        faults.at_phase(self.cfg.fault, "end")
        if self.prior is not None and self.local.name != RECORD_FILE:
            say(f"xbench: this resume attempt ended {self.record.status}; the run's record is left as it was "
                f"({self.run_dir / RECORD_FILE}); this attempt's record: {path}")
        if self.local.unsaved is None:
            return
        if path is not None:
            say(
                f"xbench: the store could not take the record ({self.local.unsaved}); it was written to "
                f"{path} instead: move {path.parent} into {self.cfg.store.root} once the store is fixed"
            )
        else:  # no folder at all: the console is the last place the result can go
            say(f"xbench: the record could not be written anywhere ({self.local.unsaved}); here it is:")
            with contextlib.suppress(Exception):
                print(record_text(self.record), flush=True)
