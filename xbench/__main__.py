"""`python -m xbench [overrides]`: compose -> typed config -> compat check -> launch -> record -> sinks.

Every run that gets past composition leaves a record: `running` as soon as it starts, then `ok`,
`failed`, `oom`, `interrupted` or `diverged` with the reason. A single run exits non-zero when it
did not succeed; a `--multirun` sweep goes on to the next point and exits non-zero at the end if any
point failed.
"""

from __future__ import annotations

import os
import signal
import sys
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
register_configs()


def _classify(exc: BaseException) -> str:
    """Which status an exception means. Out-of-memory is a result, not a crash."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower() \
            or "can't allocate memory" in str(exc).lower():
        return "oom"
    return "failed"


class _Signals:
    """First SIGINT/SIGTERM: ask the loop to stop and record what was measured. Second: exit now."""

    def __init__(self, flag):
        self.flag = flag
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.flag.requested:
            os._exit(128 + signum)
        self.flag.requested = True
        self.flag.reason = signal.Signals(signum).name
        print(f"\nxbench: {self.flag.reason} received; stopping after this step and saving the record "
              "(send it again to exit at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


def run(dcfg: DictConfig):
    """One benchmark run from a composed config; returns the final RunRecord."""
    from xbench import compat, launch
    from xbench.bench.loop import StopFlag, StopRequested
    from xbench.bench.worker import Diverged
    from xbench.metrics.aggregate import aggregate
    from xbench.metrics.derived import derive
    from xbench.metrics.gates import record_gates
    from xbench.platforms.detect import host_facts, torch_env
    from xbench.records.env import host_env
    from xbench.records.record import RunRecord
    from xbench.records.store import new_run_id
    from xbench.sinks.console import Progress, summary
    from xbench.sinks.local import LocalSink
    from xbench.sinks.wandb import WandbSink

    prior = None
    if dcfg.get("resume"):  # continue a train-to-target run: its stored config and run folder
        from xbench.bench.resume import resume_config

        dcfg, prior = resume_config(dcfg)
    cfg: XBenchConfig = OmegaConf.to_object(dcfg)
    resolved = OmegaConf.to_container(dcfg, resolve=True)
    record = RunRecord(run_id=prior["run_id"] if prior else new_run_id(cfg.store.run_name),
                       experiment=cfg.experiment, config=resolved)
    if prior:
        record.created_at = prior["created_at"]
    record.env = host_env()
    local = LocalSink(cfg.store.root)
    local.write(record)  # status "running": if the process is killed outright, the trace remains
    print(f"xbench: run {record.run_id} -> {local.run_dir(record)}", flush=True)

    stop = StopFlag()
    b = cfg.bench
    progress = Progress(b.warmup_max_steps, b.steps * b.repeats, enabled=cfg.logger.progress)
    try:
        with _Signals(stop):
            facts = host_facts()
            record.env["torch"] = torch_env(facts)
            reasons = compat.check(cfg, facts)
            if reasons:
                raise ConfigError(reasons)
            if b.mode == "train_to_target":
                from xbench.bench.target import run_to_target

                result = run_to_target(cfg, facts, local.run_dir(record), on_step=progress, stop=stop)
                record.artifacts.update(result.artifacts)
            else:
                result = launch.run(cfg, facts, on_step=progress, stop=stop)
        progress.close()
        ranks = [r.measurements for r in result.ranks]
        record.measurements = aggregate(ranks, b.noisy_cv) if b.mode != "train_to_target" else ranks[0]
        record.series = result.ranks[0].series
        record.ranks = ranks if len(ranks) > 1 else []
        record.warnings += result.warnings
        if record.measurements.get("noisy"):
            record.warnings.append(f"noisy: spread above bench.noisy_cv={b.noisy_cv} "
                                   "(see throughput_cv / step_time_cv)")
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
        record.measurements["diverged_at_step"] = e.step
        record.finish("diverged", str(e))
    except Exception as e:  # every other failure is a result too, with its reason
        progress.close()
        record.finish(_classify(e), f"{type(e).__name__}: {e}")
        record.artifacts["traceback"] = "traceback.txt"
        (local.run_dir(record) / "traceback.txt").write_text(traceback.format_exc())
        if record.status == "oom":
            record.measurements["batch_size_per_device"] = cfg.data.batch_size
    path = local.write(record)  # the local record first, always
    if cfg.logger.name != "none":
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


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(dcfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    record = run(dcfg)
    if record.status != "ok" and HydraConfig.get().mode != RunMode.MULTIRUN:
        raise SystemExit(1 if record.status != "interrupted" else 130)


def cli() -> None:
    main()
    if _FAILED_RUNS:  # multirun: every point ran; say which did not succeed
        print(f"xbench: {len(_FAILED_RUNS)} run(s) did not succeed: {', '.join(_FAILED_RUNS)}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    cli()
