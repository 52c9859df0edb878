"""Runs that live only in W&B, as run records, so `python -m xbench.report` draws the same tables from them:
`wandb:ENTITY/PROJECT` reads a W&B project through `wandb.Api` (needs credentials), `wandb-offline:DIR` the
offline run folders under DIR (`.../wandb/offline-run-*/run-*.wandb`, as `wandb sync` would upload them).

sinks/wandb.py logs a record as: the config tree (plus `env`, `comparison`, `xbench_version`), every scalar
figure in the summary under its tidy name (plus status, reason, run_id, the warnings joined, CIs as low/high,
`gpu_util_percent/<gpu>`), each timed window and evaluation point in the history. This turns that back into a
record; the summary also holds the last value of each history series (W&B's doing), which are left out.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import time
import zlib
from pathlib import Path

from xbench.records import batch_trials
from xbench.records.record import SAMPLE_LISTS, STATUSES, RunRecord

API, OFFLINE = "wandb:", "wandb-offline:"
# History series (sinks/wandb.py): the summary's copy of their last value is not a figure of the run.
HISTORY_ONLY = {"step", "window", "loss", "step_time_s", "phase_timed", "step_throughput_samples_per_s",
                "eval", "attempt", "epoch", "wall_s", "train_loss", "lr"}
CI = re.compile(r"(.+)_ci95_(low|high)_samples_per_s$")
GPU = "gpu_util_percent/"


def is_source(store) -> bool:
    return str(store).startswith((API, OFFLINE))


def _curve(history: list[dict], metric: str | None) -> dict:
    """The evaluation curve (train to target) from the history's evaluation rows, as record.series holds
    it."""
    rows = [h for h in history if "eval" in h and metric in h]
    if not rows:
        return {}
    keys = ("eval", "epoch", "train_time_s", "samples_seen", metric)
    return {k: [h.get(k) for h in rows] for k in keys}


def _figure(k: str, v, metric: str | None) -> bool:
    """Whether a summary item is a figure of the run: not a history series' last value (W&B's copy), and a
    value a record holds (a scalar, or a list of samples)."""
    if (k in HISTORY_ONLY or k.startswith("window_") or batch_trials.is_trial_key(k)
            or (k == metric and isinstance(v, (int, float)))):
        return False
    return v is None or isinstance(v, (bool, int, float, str)) or (k in SAMPLE_LISTS and isinstance(v, list))


def _measurements(s: dict, history: list[dict]) -> dict:
    """The record's measurements from the summary: its figures, each CI from its low and high, the batch
    search's trials from the history, and the GPUs' utilisation from one key per GPU."""
    metric = s.get("goal_metric")
    m, cis, gpus = {}, {}, {}
    for k, v in s.items():
        ci = CI.match(k)
        if ci:
            cis.setdefault(ci.group(1), {})[ci.group(2)] = v
        elif k.startswith(GPU):
            gpus[k[len(GPU):]] = v
        elif _figure(k, v, metric):
            m[k] = v
    m.update({f"{stem}_ci95_samples_per_s": [lohi["low"], lohi["high"]] for stem, lohi in cis.items()
              if "low" in lohi and "high" in lohi})
    trials = batch_trials.from_history(history)
    if trials:
        m["batch_search_trials"] = trials
    if gpus:
        m["gpu_util_percent_mean"] = gpus  # labels already span every rank (metrics/utilisation.py)
    return m


def _public(d: dict | None) -> dict:
    """A W&B config or summary without W&B's own keys (`_wandb`, `_step`, ...)."""
    return {k: v for k, v in (d or {}).items() if not k.startswith("_")}


def _run_env(env: dict, version: str | None) -> dict:
    """The record's env from the few facts sinks/wandb.py logs (`env` in the config, the whole of it kept)."""
    return {"xbench_version": version, "hostname": env.get("hostname"),
            "cpu": {"model": env.get("cpu_model")}, "wandb_env": env}


def record_from_wandb(name: str, config: dict, summary: dict, history: list[dict] = ()) -> RunRecord:
    config, s = _public(config), _public(summary)
    env = config.pop("env", None) or {}
    version = config.pop("xbench_version", None)
    config.pop("comparison", None)
    config_run_id = config.pop("run_id", None)  # sinks/wandb.py puts it there (the run's name says what ran)
    status, reason = s.pop("status", None), s.pop("reason", None)
    run_id = s.pop("run_id", None) or config_run_id or name
    warnings = [w for w in (s.pop("warnings", None) or "").split("; ") if w]
    s.pop("n_warnings", None)
    rec = RunRecord(run_id=str(run_id), experiment=config.get("experiment"), config=config,
                    measurements=_measurements(s, history),
                    series=_curve(list(history), s.get("goal_metric")), warnings=warnings,
                    env=_run_env(env, version))
    if status in STATUSES and status != "running":
        rec.finish(status, reason)
    else:  # a W&B run that never got its summary: the run did not end where xbench could say how
        rec.finish("failed", reason or f"W&B run {name} has no xbench status (it did not finish publishing)")
    return rec


# The .wandb file: W&B's LevelDB-style log (wandb-core's store; wandb 0.31 has no Python reader since
# sdk.internal.datastore went): a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32-KiB blocks of
# chunks, each a 7-byte header (CRC-32 of its type byte and data, length, type: full, first, middle, last) and
# its data; a block's tail too short for a header is zero padding. A whole chunk sequence is one protobuf
# Record.
_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: str | Path):
    """The protobuf Records of one .wandb file, in order (a torn last record ends the file, as W&B's reader
    does)."""
    from wandb.proto import wandb_internal_pb2 as pb  # protobuf only: the report stays torch-free

    data = Path(path).read_bytes()
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0) if len(data) >= 7 else (b"", 0, 0)
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:7]!r})")
    pos, parts = _FILE_HEADER.size, []
    while pos + _CHUNK.size <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK.size:  # the block's zero-padded tail
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        chunk = data[pos + _CHUNK.size:pos + _CHUNK.size + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            break  # torn or corrupt from here on
        pos += _CHUNK.size + length
        if kind in (_FULL, _FIRST):
            parts = [chunk]
        elif kind in (_MIDDLE, _LAST) and parts:
            parts.append(chunk)
        else:
            break
        if kind in (_FULL, _LAST):
            rec = pb.Record()
            rec.ParseFromString(b"".join(parts))
            parts = []
            yield rec


def _value(item):
    """A config, summary or history item's value, as W&B's JSON has it."""
    kind = item.WhichOneof("value") if "value" in item.DESCRIPTOR.oneofs_by_name else None
    if kind in (None, "value_json", "json"):
        text = item.value_json if kind in (None, "value_json") else item.json
        return json.loads(text) if text else None
    return None if kind == "none" else getattr(item, kind)


def _items(items, nest: bool = False) -> dict:
    """Items to a dict, a nested key as `wandb leet inspect` prints it: nested dicts in a config, else joined
    with dots (a summary's `_wandb.runtime`)."""
    out: dict = {}
    for it in items:
        if it.key or not nest:
            out[it.key or ".".join(it.nested_key)] = _value(it)
            continue
        node = out
        for k in it.nested_key[:-1]:
            node = node.setdefault(k, {})
        if it.nested_key:
            node[it.nested_key[-1]] = _value(it)
    return out


def read_wandb_file(path: str | Path) -> dict:
    """One offline run from its .wandb file, in this process: what the report takes (config, summary,
    history, name; records/wandb_files.read_offline_run's keys), a few ms per run (was a `wandb leet inspect`
    process)."""
    run: dict = {"config": {}, "history": [], "summary": {}, "group": None, "tags": [], "name": None,
                 "job_type": None, "exit_code": None, "preempting": False}
    for rec in wandb_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run["config"].update(_items(r.config.update, nest=True))
            run.update(group=r.run_group or None, tags=list(r.tags), name=r.display_name or None,
                       job_type=r.job_type or None)
        elif kind == "config":
            run["config"].update(_items(rec.config.update, nest=True))
        elif kind == "history":
            run["history"].append(_items(rec.history.item))
        elif kind == "summary":
            run["summary"].update(_items(rec.summary.update))
        elif kind == "preempting":
            run["preempting"] = True
        elif kind == "exit":
            run["exit_code"] = rec.exit.exit_code
    run["config"].pop("_wandb", None)
    return run


def offline_records(folder: str | Path, progress: bool = True) -> tuple[list[RunRecord], list[str]]:
    """Every offline W&B run under `folder` as a record; (records, one message per run that could not be
    read). `progress`: a line on stderr, redrawn at most once a second, with the runs read and the time so
    far."""
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"no folder {folder} (give one that holds wandb/offline-run-* folders)")
    files = sorted(folder.glob("**/offline-run-*/run-*.wandb"))
    recs, skipped, t0, said = [], [], time.monotonic(), 0.0
    for i, f in enumerate(files, 1):
        try:
            run = read_wandb_file(f)
            recs.append(record_from_wandb(run["name"] or f.stem, run["config"], run["summary"],
                                          run["history"]))
        except Exception as e:  # one unreadable run never stops a report
            skipped.append(f"skipping W&B run {f}: {type(e).__name__}: {e}")
        if progress and (time.monotonic() - said > 1 or i == len(files)):
            said = time.monotonic()
            print(f"\rxbench.report: read {i}/{len(files)} offline W&B runs ({said - t0:.1f} s)", end="",
                  file=sys.stderr, flush=True)
    if progress and files:
        print(file=sys.stderr)
    return recs, skipped


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


def read_source(store: str, progress: bool = True) -> tuple[list[RunRecord], list[str]]:
    store = str(store)
    if store.startswith(OFFLINE):
        return offline_records(store[len(OFFLINE):], progress)
    return api_records(store[len(API):])
