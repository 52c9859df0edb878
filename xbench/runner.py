"""One run from a composed config: which run it is, then the envelope, compat and the mode.

    run(dcfg) -> RunRecord
      resume?        -> the stored run's config and id (checked before its record is touched)
      writes_record? -> no (a rank > 0, a node > 0): join the ranks, write nothing
      RunEnvelope    -> record first, signals, exception -> status, sinks   (envelope.py)
        compat.check -> every reason at once, before any device work         (compat.py)
        baseline     -> the record named by `baseline=`, read before any device work
        mode.execute -> the mode runs its rank work through launch.run       (modes/)

Only torch-free imports happen before the first record write: if importing torch fails (a memory
cap, a broken install), the run still leaves a record saying so.
"""

from __future__ import annotations

import json
import os
import sys

from omegaconf import DictConfig, OmegaConf

from xbench import launch, runtimes
from xbench.config import XBenchConfig
from xbench.envelope import ConfigError, RunEnvelope
from xbench.launch import isolation
from xbench.records.record import RunRecord
from xbench.records.redact import redact
from xbench.records.store import CHECKPOINT_FILE, find_run, new_run_id, read_record


class ResumeRefused(SystemExit):
    """A `resume=` that would damage or cannot continue the stored run: said, nothing written."""

    def __init__(self, message: str):
        print(f"xbench: {message}", file=sys.stderr, flush=True)
        super().__init__(2)


def resume_config(dcfg: DictConfig) -> tuple[DictConfig, dict]:
    """`resume=<run id or folder>`: the stored record's config is authoritative (the model, data, goal
    and seed must be the ones the checkpoint was made with); only `resume`, `store`, `logger` and
    `fault` come from this command line. Checked before the stored record is touched."""
    try:
        path = find_run(dcfg.resume, dcfg.store.root)
    except FileNotFoundError as e:
        raise ResumeRefused(f"resume={dcfg.resume!r}: {e}") from None
    prior = json.loads(path.read_text())
    mode = (prior.get("config", {}).get("bench") or {}).get("mode")
    if mode != "train_to_target":
        raise ResumeRefused(f"resume={dcfg.resume!r}: that run is bench.mode={mode}; resume continues "
                            "train_to_target runs only (its record is left as it is)")
    if not (path.parent / CHECKPOINT_FILE).is_file():
        raise ResumeRefused(f"resume={dcfg.resume!r}: no {CHECKPOINT_FILE} in {path.parent} (set "
                            "goal.checkpoint_every_evals, or stop a run with SIGTERM, to leave one); its record "
                            "is left as it is")
    stored = OmegaConf.merge(OmegaConf.structured(XBenchConfig), prior["config"])
    stored.resume = dcfg.resume
    stored.store = dcfg.store
    stored.store.root = str(path.parent.parent)  # the checkpoint lives in that run's folder
    stored.logger = dcfg.logger
    stored.fault = dcfg.fault  # a drill belongs to one attempt, not to the run
    return stored, prior


def read_baseline(cfg) -> dict | None:
    """The stored record named by `baseline=` (run id under store.root, or a run folder), as a dict."""
    if not cfg.baseline:
        return None
    try:
        return read_record(find_run(cfg.baseline, cfg.store.root)).to_dict()
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError([f"baseline={cfg.baseline!r}: {e}"]) from None


def run(dcfg: DictConfig) -> RunRecord | None:
    """One benchmark run; the final RunRecord, or None in a process whose record another writes."""
    isolation.begin_point()  # this point's start-up counts from here, not from the sweep's start
    prior = None
    if dcfg.get("resume"):
        dcfg, prior = resume_config(dcfg)
        if prior.get("status") == "ok" and (prior.get("measurements") or {}).get("target_reached"):
            print(f"xbench: run {prior['run_id']} already reached its target; nothing to resume (its record is "
                  "unchanged)", file=sys.stderr, flush=True)
            return RunRecord.from_dict(prior)
    cfg: XBenchConfig = OmegaConf.to_object(dcfg)
    if not launch.writes_record(cfg):  # a rank > 0 under torchrun, or a node > 0: rank 0 writes the record
        join(cfg)
        return None
    resolved = redact(OmegaConf.to_container(dcfg, resolve=True))  # what is stored and sent: no secrets
    run_id = prior["run_id"] if prior else new_run_id(cfg.store.run_name)
    with RunEnvelope(cfg, resolved, run_id, prior["created_at"] if prior else None) as env:
        from xbench import compat, modes
        from xbench.modes.base import Run
        from xbench.platforms.detect import host_facts, torch_env

        facts = host_facts()
        env.record.env["torch"] = torch_env(facts)
        env.record.env.update(isolation.point_facts(cfg))
        _xla_device_first(cfg, facts)
        reasons = compat.check(cfg, facts)
        if reasons:
            raise ConfigError(reasons)
        mode = modes.get(cfg.bench.mode)
        env.progress = mode.progress(cfg)
        mode.execute(Run(cfg, facts, env.record, env.run_dir, resolved, env.stop, env.progress,
                         read_baseline(cfg)))
    return env.record


def _xla_device_first(cfg, facts) -> None:
    """An XLA runtime picks its PJRT device when torch_xla is imported (compat imports it): name the
    platform's device first, unless the user did (PJRT_DEVICE)."""
    if cfg.runtime.name in runtimes.RUNTIMES and "torch_xla" in runtimes.requires(cfg.runtime.name):
        os.environ.setdefault("PJRT_DEVICE", runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device))


def join(cfg: XBenchConfig) -> None:
    """Run this process's ranks and write nothing: the record is rank 0's. A failure exits non-zero."""
    from xbench import compat, modes
    from xbench.platforms.detect import host_facts

    facts = host_facts()
    if compat.check(cfg, facts):  # rank 0 records the reasons; this rank just does not start
        raise SystemExit(1)
    modes.get(cfg.bench.mode).join(cfg, facts)
