"""Runs that live only in W&B, as run records, so `python -m xbench.report` draws the same tables from them:
`wandb:ENTITY/PROJECT` reads a W&B project through `wandb.Api` (needs credentials), `wandb-offline:DIR` the
offline run folders under DIR (`.../wandb/offline-run-*/run-*.wandb`, as `wandb sync` would upload them).

sinks/wandb.py logs a record as: the config tree (plus `env`, `comparison`, `xbench_version`), every scalar
figure in the summary under its tidy name (plus status, reason, run_id, the warnings joined, CIs as low/high,
`gpu_util_percent/<gpu>`), each timed window and evaluation point in the history. This turns that back into a
record; the summary also holds the last value of each history series (W&B's doing), which are left out.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from xbench.records import batch_trials
from xbench.records.record import SAMPLE_LISTS, STATUSES, RunRecord
from xbench.records.wandb_files import read_offline_run

API, OFFLINE = "wandb:", "wandb-offline:"
# History series (sinks/wandb.py): the summary's copy of their last value is not a figure of the run.
HISTORY_ONLY = {"step", "window", "loss", "step_time_s", "phase_timed", "step_throughput_samples_per_s", "eval",
                "attempt", "epoch", "wall_s", "train_loss", "lr"}
CI = re.compile(r"(.+)_ci95_(low|high)_samples_per_s$")
GPU = "gpu_util_percent/"


def is_source(store) -> bool:
    return str(store).startswith((API, OFFLINE))


def _curve(history: list[dict], metric: str | None) -> dict:
    """The evaluation curve (train to target) from the history's evaluation rows, as record.series holds it."""
    rows = [h for h in history if "eval" in h and metric in h]
    if not rows:
        return {}
    keys = ("eval", "epoch", "train_time_s", "samples_seen", metric)
    return {k: [h.get(k) for h in rows] for k in keys}


def record_from_wandb(name: str, config: dict, summary: dict, history: list[dict] = ()) -> RunRecord:
    config = {k: v for k, v in (config or {}).items() if not k.startswith("_")}
    env = config.pop("env", None) or {}
    version = config.pop("xbench_version", None)
    config.pop("comparison", None)
    config_run_id = config.pop("run_id", None)  # sinks/wandb.py puts it there (the run's name says what ran)
    s = {k: v for k, v in (summary or {}).items() if not k.startswith("_")}
    status, reason, run_id = s.pop("status", None), s.pop("reason", None), s.pop("run_id", None) or config_run_id or name
    warnings = [w for w in (s.pop("warnings", None) or "").split("; ") if w]
    s.pop("n_warnings", None)
    metric = s.get("goal_metric")
    m, cis, gpus = {}, {}, {}
    for k, v in s.items():
        ci = CI.match(k)
        if ci:
            cis.setdefault(ci.group(1), {})[ci.group(2)] = v
        elif k.startswith(GPU):
            gpus[k[len(GPU):]] = v
        elif (k in HISTORY_ONLY or k.startswith("window_") or batch_trials.is_trial_key(k)
              or (k == metric and isinstance(v, (int, float)))):
            continue
        elif v is None or isinstance(v, (bool, int, float, str)) or k in SAMPLE_LISTS and isinstance(v, list):
            m[k] = v
    for stem, lohi in cis.items():
        if "low" in lohi and "high" in lohi:
            m[f"{stem}_ci95_samples_per_s"] = [lohi["low"], lohi["high"]]
    trials = batch_trials.from_history(history)
    if trials:
        m["batch_search_trials"] = trials
    if gpus:
        m["gpu_util_percent_mean"] = gpus  # labels already span every rank (metrics/utilisation.py)
    rec = RunRecord(run_id=str(run_id), experiment=config.get("experiment"), config=config, measurements=m,
                    series=_curve(list(history), metric), warnings=warnings,
                    env={"xbench_version": version, "hostname": env.get("hostname"),
                         "cpu": {"model": env.get("cpu_model")}, "wandb_env": env})
    if status in STATUSES and status != "running":
        rec.finish(status, reason)
    else:  # a W&B run that never got its summary: the run did not end where xbench could say how
        rec.finish("failed", reason or f"W&B run {name} has no xbench status (it did not finish publishing)")
    return rec


def offline_records(folder: str | Path) -> tuple[list[RunRecord], list[str]]:
    """Every offline W&B run under `folder` as a record; (records, one message per run that could not be read)."""
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"no folder {folder} (give one that holds wandb/offline-run-* folders)")
    files = sorted(folder.glob("**/offline-run-*/run-*.wandb"))

    def read(f: Path):
        try:
            run = read_offline_run(f)
            return record_from_wandb(run["name"] or f.stem, run["config"], run["summary"], run["history"]), None
        except Exception as e:  # one unreadable run never stops a report
            return None, f"skipping W&B run {f}: {type(e).__name__}: {e}"

    # Each file is read by its own `wandb leet inspect` process (~0.8 s, most of it the CLI's start-up): side by
    # side, in the files' order.
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
        got = list(pool.map(read, files))
    return [r for r, _ in got if r is not None], [why for _, why in got if why]


def api_records(path: str, api=None) -> tuple[list[RunRecord], list[str]]:
    """Every run of the W&B project `path` (ENTITY/PROJECT) as a record, through `wandb.Api` (or `api`: any
    object with the same `runs(path)`; each run: name, config, summary, scan_history(keys=...))."""
    if api is None:
        import wandb  # optional: only for a W&B source

        api = wandb.Api(timeout=60)
    out, skipped = [], []
    for r in api.runs(path, per_page=1000):
        try:
            summary = dict(getattr(r.summary, "_json_dict", None) or r.summary)
            metric = summary.get("goal_metric")
            history = list(r.scan_history(keys=["eval", "epoch", "train_time_s", "samples_seen", metric])) \
                if metric else []
            if "max_batch_size_per_device" in summary:  # a batch search: its trials are history rows
                # every row (a few): scan_history(keys=...) would drop the trials that lack one of them
                history += [h for h in r.scan_history() if "trial" in h]
            out.append(record_from_wandb(r.name, dict(r.config), summary, history))
        except Exception as e:
            skipped.append(f"skipping W&B run {path}/{getattr(r, 'id', '?')}: {type(e).__name__}: {e}")
    return out, skipped


def read_source(store: str) -> tuple[list[RunRecord], list[str]]:
    store = str(store)
    if store.startswith(OFFLINE):
        return offline_records(store[len(OFFLINE):])
    return api_records(store[len(API):])
