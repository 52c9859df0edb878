"""One run from a composed config: which run it is, then the envelope, compat and the mode.

    run(dcfg) -> RunRecord
      names          -> store.run_name must name one folder under the store       (Refused)
      resume?        -> the stored run, checked whole before anything is written  (Refused)
      writes_record? -> no (a rank > 0, a node > 0): join the ranks, write nothing
      baseline       -> the record named by `baseline=`, read before anything     (Refused)
      RunEnvelope    -> record first, signals, exception -> status, sinks          (envelope.py)
        compat.check -> every reason at once, before any device work             (compat.py)
        mode.execute -> the mode runs its rank work through launch.run           (modes/)

A refusal writes nothing and costs no device time: a mistyped `resume=` or `baseline=` never touches
a stored record. Only torch-free imports happen before the first record write: if importing torch
fails (a memory cap, a broken install), the run still leaves a record saying so.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from xbench import faults, launch, runtimes
from xbench.config import XBenchConfig
from xbench.envelope import EXIT_UNSAVED, SIGNALS, ConfigError, RunEnvelope
from xbench.hints import unknown_keys
from xbench.launch import isolation
from xbench.rank import startup_phase
from xbench.records import safe_io
from xbench.records.record import RunRecord
from xbench.records.redact import config_secret_values, redact, remember
from xbench.records.store import (
    CHECKPOINT_FILE,
    RunLock,
    RunLocked,
    find_run,
    name_problem,
    new_run_id,
    read_record,
    read_record_dict,
)
from xbench.sinks.console import enter_startup_phase


class Refused(Exception):
    """A run that must not start (a bad `resume=`, `baseline=` or run name): nothing was written."""


def check_resume(dcfg: DictConfig) -> tuple[dict, Path]:
    """The stored record named by `resume=` and its path, checked whole: readable, valid, in the folder
    its run id names, a train_to_target run. Nothing is written."""
    ref = dcfg.resume
    try:
        path = find_run(ref, dcfg.store.root)
        prior = read_record_dict(path)
        RunRecord.from_dict(prior)
    except (OSError, ValueError) as e:
        raise Refused(f"resume={ref!r}: {e}") from None
    if name_problem(prior["run_id"], "run_id") or path.parent.name != prior["run_id"]:
        raise Refused(
            f"resume={ref!r}: {path.parent} holds the record of run {prior['run_id']!r} (a renamed or "
            "copied folder?); a resumed run writes to the folder its id names, so it is not resumed"
        )
    mode = (prior.get("config", {}).get("bench") or {}).get("mode")
    if mode != "train_to_target":
        raise Refused(
            f"resume={ref!r}: that run is bench.mode={mode}; resume continues train_to_target runs only "
            "(its record is left as it is)"
        )
    return prior, path


def interpolations(tree, where: str = "") -> list[str]:
    """Keys of a stored config whose string value OmegaConf would resolve (`${...}`: `${oc.env:NAME}` reads
    the environment of whoever resumes, a resolver runs): a stored record is data, never resolved again."""
    if isinstance(tree, dict):
        return [
            k for key, v in tree.items() for k in interpolations(v, f"{where}.{key}" if where else str(key))
        ]
    if isinstance(tree, list):
        return [k for i, v in enumerate(tree) for k in interpolations(v, f"{where}[{i}]")]
    return [where] if isinstance(tree, str) and "${" in tree else []


def resume_config(dcfg: DictConfig, prior: dict, path: Path) -> DictConfig:
    """`resume=<run id or folder>`: the stored record's config is authoritative (the model, data, goal
    and seed must be the ones the checkpoint was made with); only `resume`, `store`, `logger` and
    `fault` come from this command line."""
    if not (path.parent / CHECKPOINT_FILE).is_file():
        raise Refused(
            f"resume={dcfg.resume!r}: no {CHECKPOINT_FILE} in {path.parent} "
            "(set goal.checkpoint_every_evals, or stop a run with SIGTERM, to leave one); its record is left "
            "as it is"
        )
    config = copy.deepcopy(prior["config"])
    if planted := interpolations(config):  # xbench stores configs resolved: none of its records holds one
        raise Refused(
            f"resume={dcfg.resume!r}: the stored config holds an interpolation at {', '.join(planted[:5])}"
            f"{' ...' if len(planted) > 5 else ''} (`${{...}}`, which would be resolved here: "
            "`${oc.env:NAME}` reads this machine's environment into the shared record); a stored config is "
            "data, so the run is not resumed and its record is left as it is"
        )
    unknown = unknown_keys(config)
    for keys in unknown:  # an older xbench let `+bench.step=5` through; it had no effect on the run
        node = config
        for k in keys[:-1]:
            node = node[k]
        node.pop(keys[-1], None)
    if unknown:
        print(f"xbench: resume: the stored config has keys this xbench does not know "
              f"({', '.join('.'.join(k) for k in unknown)}); they had no effect on the run and are left out",
              file=sys.stderr, flush=True)
    try:
        stored = OmegaConf.merge(OmegaConf.structured(XBenchConfig), config)
    except Exception as e:
        raise Refused(f"resume={dcfg.resume!r}: the stored config does not fit this xbench's schema ({e}); "
                      "its record is left as it is") from None
    stored.resume = dcfg.resume
    stored.store = dcfg.store
    stored.store.root = str(path.parent.parent)  # the checkpoint lives in that run's folder
    stored.logger = dcfg.logger
    stored.fault = dcfg.fault  # a drill belongs to one attempt, not to the run
    return stored


def read_baseline(cfg) -> dict | None:
    """The stored record named by `baseline=` (run id under store.root, or a run folder), as a dict."""
    if not cfg.baseline:
        return None
    try:
        return read_record(find_run(cfg.baseline, cfg.store.root)).to_dict()
    except (OSError, ValueError) as e:
        raise Refused(f"baseline={cfg.baseline!r}: {e}") from None


def run(dcfg: DictConfig) -> RunRecord | None:
    """One benchmark run; the final RunRecord, or None in a process whose record another writes."""
    isolation.begin_point()  # this point's start-up counts from here, not from the sweep's start
    startup_phase("record")  # refusals, the config, the record's first write
    if dcfg.store.run_name is not None and (why := name_problem(str(dcfg.store.run_name), "store.run_name")):
        raise Refused(why)
    prior = lock = None
    if dcfg.get("resume"):
        prior, path = check_resume(dcfg)
        m = prior.get("measurements") or {}
        if prior.get("status") == "ok" and m.get("target_reached"):
            print(
                f"xbench: run {prior['run_id']} already reached its target; nothing to resume (its record is "
                "unchanged)",
                file=sys.stderr,
                flush=True,
            )
            return RunRecord.from_dict(prior)
        dcfg = resume_config(dcfg, prior, path)
    cfg: XBenchConfig = OmegaConf.to_object(dcfg)
    if not launch.writes_record(cfg):  # a rank > 0 under torchrun, or a node > 0: rank 0 writes the record
        join(cfg)
        return None
    baseline = read_baseline(cfg)
    container = OmegaConf.to_container(dcfg, resolve=True)
    remember(config_secret_values(container))  # values under secret keys: redacted wherever they travel
    resolved = redact(container)  # what is stored and sent: no secrets
    if prior is not None:
        try:  # a second resume of a run that is still going is refused, nothing written
            lock = RunLock(path.parent).acquire()
        except RunLocked as e:
            raise Refused(f"resume={dcfg.resume!r}: {e}") from None
        except safe_io.LinkRefused as e:  # a .lock planted as a link in a shared store: nothing written
            raise Refused(f"resume={dcfg.resume!r}: {e.strerror}: {e.filename}") from None
    run_id = prior["run_id"] if prior else new_run_id(cfg.store.run_name)
    with RunEnvelope(cfg, resolved, run_id, prior, lock) as env:
        enter_startup_phase("torch_import")  # the run path's modules below import torch
        from xbench import compat, modes
        from xbench.modes.base import Run
        from xbench.plan import resolve
        from xbench.platforms.detect import host_facts, torch_env

        enter_startup_phase("checks")  # the host's facts, compat, the plan
        facts = host_facts()
        env.record.env["torch"] = torch_env(facts)
        env.record.env.update(isolation.point_facts(cfg))
        _xla_device_first(cfg, facts)
        reasons = compat.check(cfg, facts)
        if reasons:
            raise ConfigError(reasons)
        plan = resolve(cfg, facts)  # once, after compat: what every rank's work carries (xbench/plan.py)
        faults.at_phase(cfg.fault, "start-up")
        env.check_stop("start-up")
        mode = modes.get(cfg.bench.mode)
        env.progress = mode.progress(cfg)
        mode.execute(
            Run(
                cfg,
                facts,
                plan,
                env.record,
                env.run_dir,
                resolved,
                env.stop,
                env.progress,
                baseline,
                env.wandb,
            )
        )
    if env.unsaved:
        raise SystemExit(EXIT_UNSAVED)
    return env.record


def _xla_device_first(cfg, facts) -> None:
    """An XLA runtime picks its PJRT device when torch_xla is imported (compat imports it): name the
    platform's device first, unless the user did (PJRT_DEVICE)."""
    if cfg.runtime.name in runtimes.RUNTIMES and "torch_xla" in runtimes.requires(cfg.runtime.name):
        os.environ.setdefault(
            "PJRT_DEVICE", runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device)
        )


def join(cfg: XBenchConfig) -> None:
    """Run this process's ranks and write nothing: the record is rank 0's. A failure exits non-zero."""
    from xbench import compat, modes
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts

    SIGNALS.uninstall()  # no record to save here: a signal from the launcher ends this rank as it always did
    facts = host_facts()
    if compat.check(cfg, facts):  # rank 0 records the reasons; this rank just does not start
        raise SystemExit(1)
    modes.get(cfg.bench.mode).join(resolve(cfg, facts), cfg)
