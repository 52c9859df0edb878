"""`python -m xbench [overrides]`: compose -> typed config -> compat check -> launch -> record -> sinks.

Every run that gets past composition leaves a record: `running` as soon as it starts, then `ok`,
`failed`, `oom`, `interrupted` or `diverged` with the reason. A single run exits non-zero when it
did not succeed; a `--multirun` sweep goes on to the next point and exits non-zero at the end if any
point failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from xbench.config import XBenchConfig, register_configs


def config_dir() -> str:
    """conf/ inside the installed package (wheel), else the checkout's top-level conf/ (editable)."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if packaged.is_dir() else here.parent / "conf")


class ConfigError(Exception):
    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


_FAILED_RUNS: list[str] = []
_STARTED = False  # a run got past composition (else a failure is Hydra's, before any record)
_PRELOADED: list[bool] = []
register_configs()


def _classify(exc: BaseException) -> str:
    """Which status an exception means. Out-of-memory is a result, not a crash."""
    from xbench.bench.batch_search import is_oom

    return "oom" if is_oom(exc) else "failed"


class _Signals:
    """First SIGINT/SIGTERM: ask the loop to stop and record what was measured. Second, or a step that
    does not return within `grace_s` (a hung step): `on_force(reason)` writes the record, then exit now."""

    def __init__(self, flag, grace_s: float = 30.0, on_force=None):
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

    from xbench.records.redact import redact
    from xbench.records.store import atomic_write_text

    path = Path(HydraConfig.get().sweep.dir) / "multirun.yaml"
    with contextlib.suppress(OSError, yaml.YAMLError):
        atomic_write_text(path, yaml.safe_dump(redact(yaml.safe_load(path.read_text())), sort_keys=False))


def run(dcfg: DictConfig):
    """One benchmark run from a composed config; returns the final RunRecord."""
    # Only torch-free imports before the first record write: if importing torch fails (a memory cap,
    # a broken install), the run still leaves a record saying so.
    from xbench import launch
    from xbench.bench.loop import Diverged, StopFlag, StopRequested
    from xbench.records.env import host_env
    from xbench.records.record import RunRecord
    from xbench.records.redact import redact, redact_text
    from xbench.records.store import new_run_id
    from xbench.sinks.console import Progress, summary
    from xbench.sinks.local import LocalSink

    global _STARTED
    _STARTED = True
    prior = None
    if dcfg.get("resume"):  # continue a train-to-target run: its stored config and run folder
        from xbench.bench.resume import resume_config

        dcfg, prior = resume_config(dcfg)
    cfg: XBenchConfig = OmegaConf.to_object(dcfg)
    if not launch.writes_record(cfg):  # a rank > 0 under torchrun, or a node > 0: rank 0 writes the record
        return _run_ranks_only(cfg)
    resolved = redact(OmegaConf.to_container(dcfg, resolve=True))  # what is stored and sent: no secrets
    record = RunRecord(run_id=prior["run_id"] if prior else new_run_id(cfg.store.run_name),
                       experiment=cfg.experiment, config=resolved)
    if prior:
        record.created_at = prior["created_at"]
    record.env = host_env()
    local = LocalSink(cfg.store.root)
    local.write(record)  # status "running": if the process is killed outright, the trace remains
    _redact_hydra_files()
    print(f"xbench: run {record.run_id} -> {local.run_dir(record)}", flush=True)

    def forced(reason: str):  # second signal or hung step: a final record before os._exit
        record.finish("interrupted", reason)
        local.write(record)

    stop = StopFlag()
    b = cfg.bench
    progress = Progress(b.warmup_max_steps, b.steps * b.repeats, enabled=cfg.logger.progress)
    try:
        with _Signals(stop, b.stop_grace_s, on_force=forced):
            from xbench import compat
            from xbench.platforms.detect import host_facts, torch_env

            facts = host_facts()
            record.env["torch"] = torch_env(facts)
            reasons = compat.check(cfg, facts)
            if reasons:
                raise ConfigError(reasons)
            if b.mode == "find_max_batch":
                from xbench.bench.batch_search import find_max_batch

                search = find_max_batch(cfg, facts, stop=stop, say=lambda s: print(s, file=sys.stderr))
            elif b.mode == "train_to_target":
                from xbench.bench.target import run_to_target

                result = run_to_target(cfg, facts, local.run_dir(record), on_step=progress, stop=stop)
                record.artifacts.update(result.artifacts)
            elif b.process_repeats > 1:  # the whole run again in fresh processes (launch/repeat.py)
                from xbench.launch.repeat import run_repeated

                result = run_repeated(cfg, facts, on_step=progress, stop=stop)
            else:
                result = launch.run(cfg, facts, on_step=progress, stop=stop)
        progress.close()
        if b.mode == "find_max_batch":
            record.measurements = search
            if search["max_batch_size_per_device"] is None:
                record.finish("oom", f"no batch size fits: batch {search['min_failing_batch_size_per_device']} "
                              "ran out of memory")
            else:
                record.finish("ok")
        else:
            from xbench.metrics.aggregate import across_processes, aggregate, noisy_spread
            from xbench.metrics.derived import derive
            from xbench.metrics.gates import record_gates

            ranks = [r.measurements for r in result.ranks]
            if b.mode == "train_to_target":
                record.measurements = ranks[0]
            elif getattr(result, "processes", None):  # bench.process_repeats > 1: windows of every process
                record.measurements = across_processes(result.processes, b.noisy_cv)
            else:
                record.measurements = aggregate(ranks, b.noisy_cv)
            record.series = result.ranks[0].series
            record.ranks = ranks if len(ranks) > 1 else []
            record.warnings += result.warnings
            if record.measurements.get("noisy"):
                record.warnings.append(f"noisy: spread above bench.noisy_cv={b.noisy_cv} "
                                       f"({noisy_spread(record.measurements, b.noisy_cv)})")
            if b.self_check:
                record.warnings += _self_check(cfg, facts, record.measurements, progress, stop)
            record.derived = derive(record.measurements, resolved, baseline=_baseline(cfg))
            record.warnings += record_gates(record.measurements, record.derived)
            record.finish("ok")
    except ConfigError as e:
        record.finish("failed", "config: " + "; ".join(e.reasons))
    except StopRequested as e:
        progress.close()
        record.measurements.update(e.partial)
        record.finish("interrupted", f"{stop.reason} during {e.partial.get('phase')}")
    except Diverged as e:
        progress.close()
        record.measurements.update(diverged_at_step=e.step, diverged_phase=e.phase,
                                   batch_size_per_device=cfg.data.batch_size)
        record.finish("diverged", str(e))
    except Exception as e:  # every other failure is a result too, with its reason
        progress.close()
        record.finish(_classify(e), redact_text(f"{type(e).__name__}: {e}"))
        record.ranks = getattr(e, "ranks", None) or record.ranks  # failed ranks' errors (launch.torchrun)
        record.artifacts["traceback"] = "traceback.txt"
        from xbench.records.store import atomic_write_text

        atomic_write_text(local.run_dir(record) / "traceback.txt", redact_text(traceback.format_exc()))
        if record.status == "oom":
            from xbench.bench.memory import memory_figures

            record.measurements["batch_size_per_device"] = cfg.data.batch_size
            record.measurements.update(memory_figures())
    path = local.write(record)  # the local record first, always
    if cfg.logger.name != "none":
        from xbench.sinks.wandb import WandbSink

        sink = WandbSink(OmegaConf.to_container(dcfg.logger.wandb, resolve=True),
                         say=lambda s: print(s, file=sys.stderr))
        record.artifacts.update(sink.publish(record, local.run_dir(record)))
        path = local.write(record)
    print(summary(record, path), flush=True)
    if record.status != "ok":
        _FAILED_RUNS.append(record.run_id)
    return record


def _self_check(cfg, facts, measurements: dict, progress, stop) -> list[str]:
    """Measure again at half the batch: throughput must not fall as the batch grows (a missing sync
    or an untimed device shows up as the opposite)."""
    from dataclasses import replace

    from xbench import launch
    from xbench.metrics.aggregate import aggregate
    from xbench.metrics.gates import batch_scaling_gate

    half = max(1, cfg.data.batch_size // 2)
    if half == cfg.data.batch_size:
        return ["self-check skipped: batch size 1 cannot be halved"]
    small = replace(cfg, data=replace(cfg.data, batch_size=half))
    res = launch.run(small, facts, on_step=progress, stop=stop)
    progress.close()
    tp_small = aggregate([r.measurements for r in res.ranks])["throughput_samples_per_s"]
    points = [(half, tp_small), (cfg.data.batch_size, measurements["throughput_samples_per_s"])]
    measurements["self_check_batch_sizes"] = [p[0] for p in points]
    measurements["self_check_throughput_samples_per_s"] = [p[1] for p in points]
    return batch_scaling_gate(points)


def _baseline(cfg) -> dict | None:
    """The stored record named by `baseline=` (run id under store.root, or a run folder), as a dict."""
    if not cfg.baseline:
        return None
    from xbench.records.store import find_run, read_record

    return read_record(find_run(cfg.baseline, cfg.store.root)).to_dict()


def _run_ranks_only(cfg: XBenchConfig) -> None:
    """Run this process's ranks and write nothing: the record is rank 0's. A failure exits non-zero."""
    from xbench import compat, launch
    from xbench.platforms.detect import host_facts

    facts = host_facts()
    reasons = compat.check(cfg, facts)
    if reasons:  # rank 0 records the reasons; this rank just does not start
        raise SystemExit(1)
    if cfg.bench.process_repeats > 1:  # node > 0 joins every repeat of node 0
        from xbench.launch.repeat import run_repeated

        run_repeated(cfg, facts)
    else:
        launch.run(cfg, facts)


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(dcfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.get().mode == RunMode.MULTIRUN and not _PRELOADED:
        from xbench.runtimes import preload_xla

        _PRELOADED.append(True)  # a sweep reaching an XLA runtime needs torch_xla before any backward
        preload_xla(" ".join(sys.argv) + str(OmegaConf.to_container(HydraConfig.get().sweeper)))
    record = run(dcfg)
    if record is None:  # a rank > 0: rank 0 writes the record and sets the exit status
        return
    if record.status == "interrupted":  # a preempted machine or Ctrl-C: the rest of a sweep is not run
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            print("xbench: interrupted; the remaining points of the sweep are skipped", file=sys.stderr)
        raise SystemExit(130)
    if record.status != "ok" and HydraConfig.get().mode != RunMode.MULTIRUN:
        raise SystemExit(1)


def cli() -> None:
    from xbench.records.redact import RedactingStream, argv_secret_values

    # The console is an output too: secret override values and secret environment values never reach it
    # (Hydra echoes overrides when it launches a sweep and in compose errors).
    sys.stdout = RedactingStream(sys.stdout, argv_secret_values(sys.argv))
    sys.stderr = RedactingStream(sys.stderr, argv_secret_values(sys.argv))
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None) and not _STARTED:  # Hydra refused the config: add what is allowed
            from xbench.hints import compose_hints

            for line in compose_hints(sys.argv[1:]):
                print(f"xbench: {line}", file=sys.stderr)
        raise
    if _FAILED_RUNS:  # multirun: every point ran; say which did not succeed
        print(f"xbench: {len(_FAILED_RUNS)} run(s) did not succeed: {', '.join(_FAILED_RUNS)}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    cli()
