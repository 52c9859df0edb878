"""Records -> one tidy table (one row per run), plus the filter and baseline queries over it.

Columns: who the run is (run_id, experiment, status, reason), what it ran (model, data, platform,
runtime, precision, parallel, batch sizes, devices, threads, pricing model, and the option and shape
columns of xbench/analysis/workload.py), every scalar measurement and derived figure under its own
unit-suffixed name, and the record's warnings joined into one string. Per-step and per-epoch curves
stay in a list-valued `curve` column (not written to CSV). No torch here: the report runs on a
laptop that has only the results folder. pandas is imported only to build a frame: `xbench.cost`
reads and flattens records without it (pandas comes with the `report` extra).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xbench.analysis import wandb_source
from xbench.analysis.workload import CONFIGURATION, detail_columns, device_kind
from xbench.metrics import targets, utilisation
from xbench.metrics.goals import GOALS
from xbench.metrics.stats import ci95, log_moments
from xbench.records import batch_trials
from xbench.records.record import RunRecord
from xbench.records.store import iter_record_paths, iter_records, loading_bar, read_records
from xbench.tools import take

if TYPE_CHECKING:
    import pandas as pd

# Where a train-to-target curve lives in record.series: the goal's metric (measurement `goal_metric`,
# see xbench/bench/training.py), else the first goal metric of metrics/goals.py's table present, else an older
# record's name.
OLDER_CURVE_METRIC_KEYS = ("eval_accuracy",)
CURVE_TIME_KEYS = ("train_time_s", "elapsed_s", "time_s")
CURVE_EPOCH_KEYS = ("epoch", "epochs")
TARGET_KEYS = ("goal_target", "target_accuracy")
LIST_COLUMNS = ("curve", "gpu_util_by_device")  # not scalar: left out of the CSV


@dataclass
class Loaded:
    frame: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # one message per unreadable record file, naming it


def _name(section) -> str | None:
    return section.get("name") if isinstance(section, dict) else None


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _first_list(s: dict, keys) -> str | None:
    """The first of `keys` whose series is a list (None: none is)."""
    return next((k for k in keys if k and isinstance(s.get(k), list)), None)


def _curve(rec: RunRecord) -> list[dict] | None:
    """Evaluation points (time, epoch, metric) from the record's series, when it has any."""
    s = rec.series or {}
    mk = _first_list(s, ((rec.measurements or {}).get("goal_metric"), *GOALS, *OLDER_CURVE_METRIC_KEYS))
    if mk is None:
        return None
    tk, ek = _first_list(s, CURVE_TIME_KEYS), _first_list(s, CURVE_EPOCH_KEYS)
    out = [{"metric": v, "time_s": s[tk][i] if tk else None, "epoch": s[ek][i] if ek else None}
           for i, v in enumerate(s[mk]) if v is not None]
    return out or None


def _target(rec: RunRecord):
    goal = rec.config.get("goal") or {}
    for src in (rec.measurements, rec.derived):
        for k in TARGET_KEYS:
            if isinstance(src.get(k), (int, float)):
                return src[k]
    return goal.get("target") if isinstance(goal.get("target"), (int, float)) else None


def _batch_search(m: dict) -> dict:
    """Scalars from a find_max_batch record's trials (a list, kept out of the tidy row): throughput and
    memory at the largest batch that fitted, and every trial as `batch: samples/s` text."""
    trials = m.get("batch_search_trials")
    if not isinstance(trials, list) or not trials:
        return {}
    ok = [t for t in trials if isinstance(t, dict) and t.get("fits")]
    best = max(ok, key=lambda t: t.get("batch_size") or 0, default=None)
    mem = None
    if best is not None:
        mem = best.get("device_peak_allocated_gib")
        mem = best.get("host_rss_gib") if mem is None else mem
    return {
        "batch_search_trial_count": len(trials),
        # a throughput only from a timed window nothing else shared (records/batch_trials.py)
        "max_batch_throughput_samples_per_s": batch_trials.speed(best) if best else None,
        "max_batch_memory_gib": mem,
        "batch_search_throughputs": batch_trials.text(trials),  # each marked: one step, contended
    }


def _numbers(v) -> list[float] | None:
    return [float(x) for x in v] if isinstance(v, list) and v and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) else None


# (the stored CI, the samples it is recomputed from, the row's low and high columns)
_CI_COLUMNS = (
    ("throughput_ci95_samples_per_s", "throughput_samples_per_s_windows",
     "throughput_ci95_low_samples_per_s", "throughput_ci95_high_samples_per_s"),
    ("throughput_process_ci95_samples_per_s", "throughput_samples_per_s_processes",
     "throughput_process_ci95_low_samples_per_s", "throughput_process_ci95_high_samples_per_s"),
)


def _ci_columns(m: dict) -> dict:
    """A run's CIs (windows; processes under bench.process_repeats), recomputed from the stored samples
    where the record has them, so a record written before the rules of metrics/stats.py (a linear CI
    from 2 windows, below zero) never reaches a table; a stored CI with a bound at or below zero is
    dropped. Plus the log moments a ratio's CI needs (over processes when there are several)."""
    out = {}
    for stored, samples, low, high in _CI_COLUMNS:
        xs = _numbers(m.get(samples))
        ci = ci95(xs) if xs is not None else m.get(stored)
        if ci is not None and len(ci) == 2 and None not in ci and ci[0] > 0:
            out[low], out[high] = ci
    return out | _log_moment_columns(m)


def _log_moment_columns(m: dict) -> dict:
    """The log moments a ratio's CI needs, over processes when there are several, else over windows."""
    xs = _numbers(m.get("throughput_samples_per_s_processes"))
    xs = xs if xs and len(xs) > 1 else _numbers(m.get("throughput_samples_per_s_windows"))
    moments = log_moments(xs) if xs else None
    return dict(zip(("throughput_log_mean", "throughput_log_sd", "throughput_log_n"), moments or ()))


def _config_columns(rec: RunRecord) -> dict:
    """The row's columns that say what ran (the record's keys, its config's names and knobs, its host)."""
    c, m, env = rec.config or {}, rec.measurements or {}, rec.env or {}
    data, platform, bench = c.get("data") or {}, c.get("platform") or {}, c.get("bench") or {}
    cpu_model = (env.get("cpu") or {}).get("model")
    return {
        "run_id": rec.run_id,
        "experiment": rec.experiment or c.get("experiment"),
        "status": rec.status,
        "reason": rec.reason,
        "created_at": rec.created_at,
        "model": _name(c.get("model")),
        "data": _name(data),
        "platform": _name(platform),
        "runtime": _name(c.get("runtime")),
        "precision": _name(c.get("precision")),
        "parallel": _name(c.get("parallel")),
        "pricing_model": platform.get("pricing_model") if platform.get("price") else None,  # unpriced: none
        "accelerator": platform.get("accelerator"),
        "bench_mode": bench.get("mode"),
        "noisy_cv": bench.get("noisy_cv"),  # the run's own bound; the report applies it across runs too
        "batch_size_per_device": data.get("batch_size"),
        "threads": m.get("threads_intra", bench.get("threads")),
        "cpu_capability": bench.get("cpu_capability"),  # ATen's kernels as asked (None: the best the CPU has)
        "cpu_model": cpu_model,
        "device_kind": device_kind(platform, cpu_model),
        "hostname": env.get("hostname"),
        "provider": platform.get("provider"),
        "platform_memory_gib": platform.get("memory_gib"),  # one device's: the LLM fit table
        "dataset_size": data.get("dataset_size"),  # the projection's basis (metrics/derived.py's cost)
        "projection_epochs": (c.get("goal") or {}).get("projection_epochs"),
        **detail_columns(c),
    }


def _planned_size(c: dict, row: dict) -> None:
    """Runs that stopped early still say how big they were meant to be: devices and global batch from the
    config where the run measured none."""
    world = (c.get("parallel") or {}).get("world_size") or 1
    if row.get("devices") is None:
        row["devices"] = world
    batch = (c.get("data") or {}).get("batch_size")
    if row.get("global_batch_size") is None and isinstance(batch, int):
        row["global_batch_size"] = batch * (row["devices"] or 1)


def _new_scalars(src: dict, row: dict) -> dict:
    """The scalar items of `src` whose keys `row` has not."""
    return {k: v for k, v in src.items() if _scalar(v) and k not in row}


def flatten(rec: RunRecord) -> dict:
    """One tidy row for one record."""
    c, m = rec.config or {}, rec.measurements or {}
    row = _config_columns(rec)
    # the measured figures, then the derived ones; never over a config column
    for src in (m, rec.derived or {}):
        row.update(_new_scalars(src, row))
    _planned_size(c, row)
    row.update(_ci_columns(m))
    row.update(_batch_search(m))
    warnings = rec.warnings or []
    row["warnings"] = "; ".join(warnings) or None
    row["n_warnings"] = len(warnings)
    row["noisy"] = bool(m.get("noisy"))
    row["curve"] = _curve(rec)
    row["target"] = _target(rec)
    row.update(_price_and_gpus(rec))
    row.update(_minimum_charged(c.get("platform") or {}, row))
    return row


# Each billed cost figure and the duration it bills (metrics/derived.py): a duration below the platform's
# minimum charge makes the cost the minimum, whatever the run did.
BILLED = (("train_cost_to_target_{cur}", "train_time_to_target_s"),
          ("cost_to_target_{cur}", "wall_time_to_target_s"),
          ("train_cost_{cur}", "train_time_s"), ("run_cost_{cur}", "wall_s_total"),
          ("window_cost_{cur}", "window_s_total"), ("projected_training_cost_{cur}", "projected_training_s"))


def minimum_charge_s(platform: dict) -> float:
    """The longest minimum charge among the platform's usage components billed by time (0: none)."""
    out = 0.0
    for c in platform.get("price") or []:
        if not isinstance(c, dict) or c.get("kind", "usage") != "usage" or c.get("unit") == "month" \
                or (c.get("billing") or platform.get("billing")) == "month_amortised":
            continue
        v = c.get("minimum_charge_s")
        v = platform.get("minimum_charge_s") if v is None else v
        out = max(out, float(v or 0.0))
    return out


def _minimum_charged(platform: dict, row: dict) -> dict:
    """`minimum_charge_s` and `minimum_charged`: the cost figures of this row that the minimum charge set
    (their duration was shorter), comma-separated; None when none."""
    low = minimum_charge_s(platform) if platform.get("price") else 0.0
    if not low:
        return {}
    cur = str(row.get("price_currency") or "usd").lower()
    pairs = [(c.format(cur=cur), d) for c, d in BILLED]
    for t in targets.targets_in(row):
        pairs += [(targets.column(c, t), targets.column(d, t)) for c, d in pairs[:2]]
    hit = [c for c, d in pairs
           if row.get(c) is not None and isinstance(row.get(d), (int, float)) and row[d] < low]
    return {"minimum_charge_s": low, "minimum_charged": ", ".join(hit) or None}


def _price_and_gpus(rec: RunRecord) -> dict:
    """The price's currency and date (analysis/currency.py converts by them) and the per-GPU utilisation
    over every rank (a dict, not in CSV; its summary figures are)."""
    platform = (rec.config or {}).get("platform") or {}
    price = platform.get("price") or []
    by_gpu = utilisation.gpu_util_by_device(rec.measurements or {}, rec.ranks)
    return {"price_currency": price[0].get("currency", "USD") if price else None,
            "price_as_of": str(platform["price_as_of"]) if platform.get("price_as_of") else None,
            # False: nobody checked the price against its source (the cost tables mark it); older records:
            # True
            "price_confirmed": platform.get("price_confirmed", True) if price else None,
            "gpu_util_by_device": by_gpu or None, **utilisation.summary(by_gpu)}


# Figures that are numbers by their name (a unit or a count): text or a boolean there is not a measurement.
NUMERIC = re.compile(r"(_s|_gib|_mib|_bytes|_per_s|_per_hour|_per_million_samples|_tflops|_flops|_cv"
                     r"|_fraction|_j|_j_per_sample|_w|_percent|_steps|_epochs)"
                     r"(_median|_mean|_min|_max|_total|_p\d+)?$"
                     r"|_(usd|eur|gbp|jpy|cny|chf)$"
                     r"|^(mfu|hfu|devices|world_size|global_batch_size|batch_size_per_device|epochs_to_target"
                     r"|samples_to_target|threads_intra|process_repeats|goal_target|target|metric_final)$")
NUMERIC_CONFIG = (("data", "batch_size"), ("data", "dataset_size"), ("parallel", "world_size"),
                  ("goal", "projection_epochs"))


def not_numbers(rec: RunRecord) -> list[str]:
    """The figures of a record that must be numbers and are not (text, a boolean): `where.key=value`."""
    out = []
    for where, figures in (("measurements", rec.measurements or {}), ("derived", rec.derived or {})):
        for k, v in figures.items():
            if isinstance(v, (str, bool)) and NUMERIC.search(str(k)):
                out.append(f"{where}.{k}={v!r}")
    for group, k in NUMERIC_CONFIG:
        v = ((rec.config or {}).get(group) or {}).get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            out.append(f"config.{group}.{k}={v!r}")
    return out


def refusal(rec: RunRecord) -> str | None:
    """Why the report cannot count this record (None: it can): numbers that are not numbers, or an ok
    throughput run that measured no throughput (0 samples/s is no measurement)."""
    bad = not_numbers(rec)
    if bad:
        return "figures that must be numbers are not: " + ", ".join(bad[:6]) + (f" (+{len(bad) - 6} more)"
                                                                              if len(bad) > 6 else "")
    tp = (rec.measurements or {}).get("throughput_samples_per_s")
    if rec.status == "ok" and isinstance(tp, (int, float)) and tp <= 0:
        return f"an ok run with throughput_samples_per_s={tp!r}: no samples were measured"
    return None


def flatten_all(records: list[RunRecord], skipped: list[str] | None = None) -> list[dict]:
    """One row per record; a record whose contents cannot be laid out, or whose numbers are not numbers
    (`refusal`), is named in `skipped` and left out (one odd record never stops a report)."""
    rows = []
    for r in records:
        why = refusal(r)
        if why is not None:
            if skipped is None:
                raise ValueError(f"record {getattr(r, 'source', None) or r.run_id}: {why}")
            skipped.append(f"refusing record {getattr(r, 'source', None) or r.run_id}: {why}")
            continue
        try:
            rows.append(flatten(r))
        except Exception as e:
            if skipped is None:
                raise
            name = getattr(r, "source", None) or r.run_id
            skipped.append(f"skipping record {name}: {type(e).__name__}: {e}")
    return rows


def to_frame(records: list[RunRecord], skipped: list[str] | None = None) -> pd.DataFrame:
    return _frame(flatten_all(records, skipped))


def _frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run_id", *CONFIGURATION, "status"])
    for col in CONFIGURATION:
        if col not in df:
            df[col] = None
    return df


def _stores(stores: list[str | os.PathLike]) -> tuple[list, list]:
    """(run-record folders, W&B sources) of the stores; a missing folder is an error."""
    sources = [s for s in stores if wandb_source.is_source(s)]
    folders = [s for s in stores if not wandb_source.is_source(s)]
    missing = [str(s) for s in folders if not os.path.exists(s)]
    if missing:
        raise FileNotFoundError(f"no store at {', '.join(missing)} (give folders that hold run folders, "
                                "e.g. results/, or wandb:ENTITY/PROJECT, or wandb-offline:DIR)")
    return folders, sources


def read(stores: list[str | os.PathLike], progress: bool = False) -> tuple[list[RunRecord], list[str]]:
    """(readable records under the stores, one message per unreadable file); a missing store is an error.
    A store may be a W&B source: `wandb:ENTITY/PROJECT` or `wandb-offline:DIR` (analysis/wandb_source.py)."""
    skipped: list[str] = []
    return once_per_run(list(_records(stores, skipped, progress)), skipped), skipped


def _records(stores: list[str | os.PathLike], skipped: list[str], progress: bool) -> Iterator[RunRecord]:
    """The stores' records one at a time (folders first, then W&B sources); unreadable ones named in
    `skipped`."""
    folders, sources = _stores(stores)
    if folders:
        yield from iter_records(*folders, skipped=skipped, progress=progress)
    for src in sources:
        got, bad = wandb_source.read_source(src, progress)
        skipped += bad
        yield from got


def _folder_matches(rec: RunRecord) -> bool | None:
    """Whether the record's run folder is named after its run id (None: not read from a run folder)."""
    src = getattr(rec, "source", None)
    return None if not src else os.path.basename(os.path.dirname(os.fspath(src))) == rec.run_id


def once_per_run(records: list[RunRecord], skipped: list[str]) -> list[RunRecord]:
    """Each run id counted once: a copied run folder (two files, one run id) would be a fake repeat with
    zero spread. The copy kept is the one in the folder named after its id (else the first in path
    order); every other copy, and any folder whose name is not its run id, is named in `skipped`."""
    by_id: dict[str, list[RunRecord]] = {}
    for r in records:
        by_id.setdefault(r.run_id, []).append(r)
    def where(r: RunRecord) -> str:
        return str(getattr(r, "source", None) or "a W&B source")

    out = []
    for rid, copies in by_id.items():
        keep = next((r for r in copies if _folder_matches(r)), copies[0])
        out.append(keep)
        if len(copies) > 1:
            others = ", ".join(where(r) for r in copies if r is not keep)
            skipped.append(f"run id {rid} is in {len(copies)} records: counted once, from {where(keep)}; "
                           f"left out: {others} (a copied run folder, or a store and its W&B runs read "
                           "together?)")
        if _folder_matches(keep) is False:
            skipped.append(f"record {keep.source} holds run id {rid}, not its folder's name (a renamed or "
                           "copied run folder?): counted once, under its run id")
    return out


@dataclass
class _Flat:
    """What the report keeps of one record: its tidy row, or why it has none, and where it came from (a run is
    counted once: once_per_run). 100,000 records are never held at once, only their rows."""
    run_id: str
    source: str | None
    row: dict | None
    # flatten_all's message without the record's name: "refusing record {}: ..." (or skipping)
    why: str | None

    @classmethod
    def of(cls, rec: RunRecord) -> _Flat:
        row, why = None, refusal(rec)
        if why is not None:
            why = f"refusing record {{}}: {why}"
        else:
            try:
                row = flatten(rec)
            except Exception as e:
                why = f"skipping record {{}}: {type(e).__name__}: {e}"
        return cls(rec.run_id, getattr(rec, "source", None), row, why)


PARALLEL_MIN_RECORDS = 2000  # from this many record files a second process reads too (a fork costs ~0.1 s)
CHUNK_RECORDS = 250  # record files a reader takes at a time (~60 ms of reading)


def _flats(paths: list, skipped: list[str], progress: bool = False) -> list[_Flat]:
    return [_Flat.of(rec) for rec in read_records(paths, skipped, progress)]


# The chunks of record files being read and the shared count of those taken (a multiprocessing.Value): the
# forked reader inherits both (never pickled: 100,000 paths)
_CHUNKS: list[list] = []
_TAKEN = None


def _read_chunks(bar=None) -> list[tuple[int, list[_Flat], list[str]]]:
    """(index, flats, skipped) of each chunk this reader took, taking them until none is left."""
    done = []
    while (i := take(_TAKEN, len(_CHUNKS))) is not None:
        skipped: list[str] = []
        done.append((i, _flats(_CHUNKS[i], skipped), skipped))
        if bar is not None:  # the chunks taken by either reader (the bar is this process's)
            bar.n = min(_TAKEN.value * CHUNK_RECORDS, bar.total)
            bar.refresh()
    return done


def _read_flats(paths: list, skipped: list[str], progress: bool, meanwhile=None) -> list[_Flat]:
    """_Flat per record file, in path order. From PARALLEL_MIN_RECORDS files on, a forked process reads too
    (reading is most of the report's first seconds; on a 2-core machine the other core was idle then): both
    take chunks of CHUNK_RECORDS files in turn until none is left, this one after `meanwhile()` (the caller's
    imports), so what that costs is shared rather than waited for."""
    parallel = len(paths) >= PARALLEL_MIN_RECORDS and hasattr(os, "fork") and (os.cpu_count() or 1) >= 2
    if not parallel:
        if meanwhile is not None:
            meanwhile()
        return _flats(paths, skipped, progress)
    import multiprocessing as mp

    global _CHUNKS, _TAKEN
    _CHUNKS = [paths[i:i + CHUNK_RECORDS] for i in range(0, len(paths), CHUNK_RECORDS)]
    ctx = mp.get_context("fork")
    _TAKEN = ctx.Value("i", 0)
    bar = loading_bar(len(paths), progress)
    try:
        with ctx.Pool(1) as pool:
            job = pool.apply_async(_read_chunks)
            if meanwhile is not None:
                meanwhile()
            done = _read_chunks(bar) + job.get()
    finally:
        _CHUNKS, _TAKEN = [], None
        if bar is not None:
            bar.close()
    out = []
    for _, flats, bad in sorted(done, key=lambda d: d[0]):
        out += flats
        skipped += bad
    return out


def load(stores: list[str | os.PathLike], progress: bool = True, meanwhile=None) -> Loaded:
    """Every readable record under the stores as a tidy frame; unreadable files are named in `skipped`. Each
    record is laid out as it is read and let go (same frame and messages as to_frame over read()).
    `meanwhile()`: the caller's own work (its imports), done while a second process reads."""
    skipped: list[str] = []
    folders, sources = _stores(stores)
    flats = _read_flats([p for root in folders for p in iter_record_paths(root)], skipped, progress,
                        meanwhile)
    for src in sources:
        got, bad = wandb_source.read_source(src, progress)
        skipped += bad
        flats += [_Flat.of(rec) for rec in got]
    kept = once_per_run(flats, skipped)
    rows = []
    for f in kept:
        if f.why is None:
            rows.append(f.row)
        else:
            skipped.append(f.why.replace("{}", str(f.source or f.run_id), 1))
    return Loaded(frame=_frame(rows), skipped=skipped)


def parse_query(text: str) -> dict[str, list[str]]:
    """`key=value[,value]` (alternatives) -> {key: [values]}; several keys joined by `&`."""
    out: dict[str, list[str]] = {}
    for part in text.split("&"):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"query {text!r}: expected key=value (e.g. platform=cpu), got {part!r}")
        key, value = part.split("=", 1)
        out.setdefault(key.strip(), []).extend(v.strip() for v in value.split(","))
    return out


def _as_text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "none"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def check_keys(query: dict[str, list[str]], columns) -> None:
    """A clear error for a query key that names no column (a typo), listing the usual ones."""
    for key in query:
        if key not in columns:
            allowed = ", ".join(c for c in (*CONFIGURATION, "status", "run_id", "bench_mode") if c in columns)
            raise ValueError(f"unknown column {key!r} in a filter or baseline query; use one of: {allowed} "
                             "(or any measurement name)")


def matches(row: dict, query: dict[str, list[str]]) -> bool:
    """Whether one row matches every key of the query (any of its values), compared as text."""
    return all(_as_text(row.get(k)) in values for k, values in query.items())


def select(df: pd.DataFrame, query: dict[str, list[str]]) -> pd.Series:
    """Boolean mask of the rows matching every key (any of its values), compared as text."""
    import pandas as pd

    check_keys(query, df.columns)
    mask = pd.Series(True, index=df.index)
    for key, values in query.items():
        mask &= df[key].map(_as_text).isin(values)
    return mask


def apply_filters(df: pd.DataFrame, filters: list[str], empty_ok: bool = True) -> pd.DataFrame:
    """The rows matching every filter. empty_ok=False: ValueError naming the filter that matched nothing
    and the values its keys have in the rows it was given."""
    for f in filters:
        query = parse_query(f)
        kept = df[select(df, query)]
        if not empty_ok and len(df) and not len(kept):
            have = "; ".join(f"{k}: " + ", ".join(sorted({_as_text(v) for v in df[k]})[:12]) for k in query)
            raise ValueError(f"--filter {f} matches none of the {len(df)} runs"
                             + (" left by the filters before it" if f != filters[0] else "")
                             + f" (values here: {have})")
        df = kept
    return df
