"""The comparison tables, each one function registered in TABLES and drawn from the tidy frame.

A table function takes (frame, ctx) and returns a Table, or raises NoData with a one-line reason
(the report then shows the reason instead of the table). Column headers carry their units in
brackets, e.g. `throughput median [samples/s]`. Runs that repeat one configuration are one row
(median and spread over them); failed, oom and interrupted runs stay as rows with their status and
reason; warnings and the noisy flag are shown, never dropped.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from xbench.metrics.scaling import scaling_efficiency
from xbench.report.frame import GROUP_KEYS, WORKLOAD_KEYS, select

TP = "throughput_samples_per_s"
# Optional train-to-target figures (another part of xbench writes them; shown only when present).
TO_TARGET = (("time_to_target_s", "time to target [s]"), ("epochs_to_target", "epochs to target"),
             ("samples_to_target", "samples to target"), ("cost_to_target_usd", "cost to target [USD]"),
             ("wall_time_to_target_s", "wall time to target [s]"))
KEY_LABELS = {"batch_size_per_device": "batch/device", "global_batch_size": "global batch",
              "devices": "devices", "threads": "threads", "pricing_model": "pricing"}


class NoData(Exception):
    """This table or plot has nothing to show for these records (a note, not an error)."""


@dataclass
class Context:
    baseline: dict[str, list[str]] | None = None  # parsed --baseline query
    baseline_text: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Table:
    name: str
    title: str
    frame: pd.DataFrame
    note: str = ""
    max_rows_shown: int = 200  # HTML/markdown show this many; the CSV has every row


TABLES: dict[str, Callable] = {}


def table(name: str):
    def deco(fn):
        TABLES[name] = fn
        return fn
    return deco


def present(df: pd.DataFrame, col: str) -> bool:
    return col in df.columns and df[col].notna().any()


def currency(df: pd.DataFrame) -> str | None:
    """The currency the records' cost figures are in (usd preferred), or None without prices."""
    found = [m.group(1) for c in df.columns if (m := re.fullmatch(r"samples_per_s_per_([a-z]+)_per_hour", c))
             and df[c].notna().any()]
    return "usd" if "usd" in found else (found[0] if found else None)


def varying_keys(df: pd.DataFrame, keys=GROUP_KEYS) -> list[str]:
    """Config keys with more than one value (constant ones go into the caption instead)."""
    return [k for k in keys if k in df.columns and df[k].astype(str).nunique(dropna=False) > 1]


def constant_caption(df: pd.DataFrame, keys=GROUP_KEYS) -> str:
    parts = []
    for k in keys:
        if k in df.columns and df[k].astype(str).nunique(dropna=False) == 1 and df[k].notna().all():
            parts.append(f"{KEY_LABELS.get(k, k)}={_fmt_key(df[k].iloc[0])}")
    return ("All rows: " + ", ".join(parts) + ".") if parts else ""


def _fmt_key(v):
    if isinstance(v, float) and not math.isnan(v) and v.is_integer():
        return int(v)
    return v


def _num(values) -> list[float]:
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _median(values):
    xs = _num(values)
    return statistics.median(xs) if xs else None


def status_text(statuses) -> str:
    counts = pd.Series(list(statuses)).value_counts()
    if list(counts.index) == ["ok"]:
        return "ok" if counts["ok"] == 1 else f"ok x{counts['ok']}"
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _join_unique(values) -> str:
    seen = []
    for v in values:
        for part in (v or "").split("; "):
            if part and part not in seen:
                seen.append(part)
    return "; ".join(seen)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _sort_key(values: tuple):
    """Numbers in numeric order, then text, then missing values."""
    return tuple((2, 0, "") if _missing(v) else (0, float(v), "") if isinstance(v, (int, float))
                 else (1, 0, str(v)) for v in values)


def groups(df: pd.DataFrame, keys=GROUP_KEYS):
    """(key dict, sub-frame) per configuration, in a stable, readable order."""
    keys = [k for k in keys if k in df.columns]
    if df.empty:
        return
    found = df.groupby(keys, dropna=False, sort=False).groups
    for key in sorted(found, key=lambda k: _sort_key(k if isinstance(k, tuple) else (k,))):
        values = key if isinstance(key, tuple) else (key,)
        yield {k: None if _missing(v) else _fmt_key(v) for k, v in zip(keys, values)}, df.loc[found[key]]


def spread(sub: pd.DataFrame) -> tuple[float | None, float | None, float | None, str]:
    """(low, high, CV, source) of throughput: across runs when repeated, else within the one run."""
    ok = sub[sub["status"] == "ok"]
    tps = _num(ok[TP]) if TP in ok else []
    if len(tps) >= 2:
        mean = statistics.fmean(tps)
        return min(tps), max(tps), statistics.stdev(tps) / mean if mean else None, f"{len(tps)} runs min-max"
    if len(tps) == 1:
        r = ok.iloc[0]
        lo, hi = r.get("throughput_ci95_low_samples_per_s"), r.get("throughput_ci95_high_samples_per_s")
        cv = r.get("throughput_cv")
        if _num([lo, hi]) and len(_num([lo, hi])) == 2:
            return lo, hi, cv, "windows ci95"
        gb, p10, p90 = r.get("global_batch_size"), r.get("step_time_s_p10"), r.get("step_time_s_p90")
        if len(_num([gb, p10, p90])) == 3 and p10 > 0 and p90 > 0:
            return gb / p90, gb / p10, r.get("step_time_cv"), "steps p10-p90"
        return None, None, cv, ""
    return None, None, None, ""


def _key_cols(keys: dict, show: list[str]) -> dict:
    return {KEY_LABELS.get(k, k): keys[k] for k in show}


@table("throughput")
def throughput_table(df: pd.DataFrame, ctx: Context) -> Table:
    if df.empty:
        raise NoData("no runs")
    show = varying_keys(df) or ["model", "platform"]
    rows = []
    for keys, sub in groups(df):
        ok = sub[sub["status"] == "ok"]
        lo, hi, cv, src = spread(sub)
        rows.append({
            **_key_cols(keys, show),
            "runs": len(sub),
            "status": status_text(sub["status"]),
            "throughput median [samples/s]": _median(ok[TP]) if TP in ok else None,
            "spread low [samples/s]": lo,
            "spread high [samples/s]": hi,
            "spread": src,
            "CV [%]": cv * 100 if cv is not None and not math.isnan(cv) else None,
            "per device [samples/s]": _median(ok.get("throughput_per_device_samples_per_s", [])),
            "step time median [s]": _median(ok.get("step_time_s_median", [])),
            "noisy": "NOISY" if sub["noisy"].any() else "",
            "reason": _join_unique(sub.loc[sub["status"] != "ok", "reason"].fillna("")),
            "warnings": _join_unique(sub["warnings"]),
        })
    out = pd.DataFrame(rows)
    out = out.dropna(axis=1, how="all")
    return Table("throughput", "Throughput per configuration (median over runs, with spread)", out,
                 note=constant_caption(df) + " Spread: min-max over repeated runs, else the run's 95% CI "
                 "over timed windows, else samples/s at the p90 and p10 step times.")


@table("cost")
def cost_table(df: pd.DataFrame, ctx: Context) -> Table:
    cur = currency(df)
    if cur is None:
        raise NoData("no record has a price (platforms without `price:` have no cost figures)")
    C = cur.upper()
    priced = df[df[f"samples_per_s_per_{cur}_per_hour"].notna() | (df["status"] != "ok")]
    show = varying_keys(priced) or ["platform"]
    if "pricing_model" not in show:
        show.append("pricing_model")
    rows = []
    for keys, sub in groups(priced):
        ok = sub[sub["status"] == "ok"]
        if ok[f"samples_per_s_per_{cur}_per_hour"].isna().all() and (sub["status"] == "ok").any():
            continue
        rows.append({
            **_key_cols(keys, show),
            "runs": len(sub),
            "status": status_text(sub["status"]),
            "throughput median [samples/s]": _median(ok[TP]),
            f"price [{C}/hour]": _median(ok.get(f"{cur}_per_hour", [])),
            f"throughput per price [samples/s per {C}/hour]": _median(ok[f"samples_per_s_per_{cur}_per_hour"]),
            f"cost [{C} per 1M samples]": _median(ok.get(f"{cur}_per_million_samples", [])),
            "noisy": "NOISY" if sub["noisy"].any() else "",
            "reason": _join_unique(sub.loc[sub["status"] != "ok", "reason"].fillna("")),
        })
    out = pd.DataFrame(rows).dropna(axis=1, how="all")
    return Table("cost", f"Throughput per {C} and cost per million samples", out,
                 note=constant_caption(priced) + f" Prices are the platform's {C}/hour for the whole "
                 "machine (all price components) as recorded with each run.")


@table("to_target")
def to_target_table(df: pd.DataFrame, ctx: Context) -> Table:
    cols = [(c, label) for c, label in TO_TARGET if present(df, c)]
    if not cols:
        raise NoData("no train-to-target figures (time_to_target_s, epochs_to_target, cost_to_target_usd) "
                     "in these records")
    sub_df = df[df[[c for c, _ in cols]].notna().any(axis=1) | (df["bench_mode"] == "train_to_target")]
    show = varying_keys(sub_df) or ["platform"]
    rows = []
    for keys, sub in groups(sub_df):
        row = {**_key_cols(keys, show), "runs": len(sub), "status": status_text(sub["status"])}
        if present(sub, "target"):
            row["target"] = _median(sub["target"])
        for c, label in cols:
            row[label] = _median(sub[c])
        row["reason"] = _join_unique(sub.loc[sub["status"] != "ok", "reason"].fillna(""))
        rows.append(row)
    return Table("to_target", "Time, epochs and cost to the quality target (median over runs)",
                 pd.DataFrame(rows).dropna(axis=1, how="all"), note=constant_caption(sub_df))


def scaling_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Throughput, speed-up and efficiency per device count, per workload and parallel strategy.

    Runs share a workload when model, data, platform, runtime, precision and batch per device match.
    The reference is the strategy's own 1-device run, else the `single` run of the same workload.
    """
    ok = df[(df["status"] == "ok") & df[TP].notna()] if TP in df else df.iloc[0:0]
    work_keys = ["model", "data", "platform", "runtime", "precision", "batch_size_per_device"]
    rows = []
    for wkeys, wsub in groups(ok, work_keys):
        single = wsub[(wsub["parallel"] == "single") & (wsub["devices"] == 1)]
        for pkeys, psub in groups(wsub, ["parallel"]):
            tp = {int(n): _median(s[TP]) for n, s in psub.groupby("devices")}
            if 1 not in tp and not single.empty:
                tp[1] = _median(single[TP])
            if len(tp) < 2:
                continue
            for n, e in scaling_efficiency(tp).items():
                rows.append({**wkeys, "parallel": pkeys["parallel"], "devices": n, "throughput": tp[n], **e})
    return pd.DataFrame(rows)


@table("scaling")
def scaling_table(df: pd.DataFrame, ctx: Context) -> Table:
    s = scaling_rows(df)
    if s.empty:
        raise NoData("no workload was run at two or more device counts")
    show = [k for k in ("model", "data", "platform", "runtime", "precision", "batch_size_per_device")
            if s[k].astype(str).nunique() > 1]
    out = pd.DataFrame({
        **{KEY_LABELS.get(k, k): s[k] for k in show},
        "parallel": s["parallel"], "devices": s["devices"],
        "throughput [samples/s]": s["throughput"],
        "ideal [samples/s]": s["ideal_samples_per_s"],
        "speed-up [x]": s["speedup"],
        "scaling efficiency [%]": s["efficiency"] * 100,
    })
    return Table("scaling", "Scaling over devices: efficiency = throughput(N) / (N x throughput(1))", out,
                 note=constant_caption(s, ("model", "data", "platform", "runtime", "precision",
                                           "batch_size_per_device"))
                 + " The 1-device reference is the strategy's own 1-device run, else the single-device run.")


@table("overhead")
def overhead_table(df: pd.DataFrame, ctx: Context) -> Table:
    compile_cols = [c for c in df.columns if re.fullmatch(r"compile\w*_s", c) and df[c].notna().any()]
    cols = [(c, f"{c.removesuffix('_s').replace('_', ' ')} [s]") for c in compile_cols]
    cols += [("first_step_s", "first step [s]"), ("warmup_s", "warm-up [s]"), ("warmup_steps", "warm-up steps"),
             ("compiles_warmup", "compilations in warm-up"), ("compiles_timed", "recompilations after warm-up"),
             ("step_time_s_median", "steady step time median [s]"),
             ("startup_to_first_step_s", "start-up to first step [s]")]
    cols = [(c, label) for c, label in cols if present(df, c)]
    if not cols:
        raise NoData("no compile/first-step/step-time figures in these records")
    ok = df[df["status"] == "ok"]
    show = varying_keys(ok) or ["runtime"]
    if "runtime" not in show:
        show.insert(0, "runtime")
    rows = []
    for keys, sub in groups(ok):
        rows.append({**_key_cols(keys, show), "runs": len(sub),
                     **{label: _median(sub[c]) for c, label in cols},
                     "warnings": _join_unique(sub["warnings"])})
    return Table("overhead", "Framework overhead: compile time, first step, recompilations, steady step time",
                 pd.DataFrame(rows).dropna(axis=1, how="all"), note=constant_caption(ok))


@table("efficiency")
def efficiency_table(df: pd.DataFrame, ctx: Context) -> Table:
    if not present(df, "achieved_tflops"):
        raise NoData("no FLOP counts in these records")
    ok = df[(df["status"] == "ok") & df["achieved_tflops"].notna()]
    show = varying_keys(ok) or ["platform"]
    rows = []
    for keys, sub in groups(ok):
        rows.append({**_key_cols(keys, show), "runs": len(sub),
                     "throughput median [samples/s]": _median(sub[TP]),
                     "train FLOP per sample [GFLOP]": (_median(sub["flops_per_sample_train"]) or 0) / 1e9
                     if present(sub, "flops_per_sample_train") else None,
                     "achieved [TFLOP/s]": _median(sub["achieved_tflops"]),
                     "MFU [%]": _median(sub["mfu"]) * 100 if present(sub, "mfu") else None})
    return Table("efficiency", "Achieved FLOP/s and model FLOP utilisation (MFU)",
                 pd.DataFrame(rows).dropna(axis=1, how="all"),
                 note=constant_caption(ok) + " MFU needs the platform's peak_tflops for the compute dtype.")


def normalised_rows(df: pd.DataFrame, ctx: Context) -> pd.DataFrame:
    """Time and cost of each configuration relative to the baseline's, per workload (model, data).

    Time is for the same work: the baseline's throughput over this one's (or time to target when
    both have it); cost likewise from cost per million samples (or cost to target). The baseline row
    of a workload is the one with the same global batch when there is one, else its fastest.
    """
    if not ctx.baseline:
        raise NoData("no --baseline given (e.g. --baseline platform=cpu)")
    ok = df[(df["status"] == "ok") & df[TP].notna()] if TP in df else df.iloc[0:0]
    base_mask = select(ok, ctx.baseline)
    if not base_mask.any():
        raise NoData(f"no ok run matches the baseline {ctx.baseline_text!r}")
    cur = currency(df)
    cost_col = f"{cur}_per_million_samples" if cur else None
    rows = []
    for _, wsub in groups(ok, WORKLOAD_KEYS):
        base = wsub[base_mask.loc[wsub.index]]
        if base.empty:
            continue
        for keys, sub in groups(wsub):
            b = base[base["global_batch_size"] == keys["global_batch_size"]]
            b = b if not b.empty else base.loc[[base[TP].idxmax()]]
            tp, btp = _median(sub[TP]), _median(b[TP])
            row = {**keys, "throughput": tp, "time_rel": btp / tp if tp else None, "cost_rel": None,
                   "is_baseline": bool(base_mask.loc[sub.index].all())}
            if present(sub, "time_to_target_s") and present(b, "time_to_target_s"):
                row["time_rel"] = _median(sub["time_to_target_s"]) / _median(b["time_to_target_s"])
            if cost_col and present(sub, cost_col) and present(b, cost_col):
                row["cost_rel"] = _median(sub[cost_col]) / _median(b[cost_col])
            if present(sub, "cost_to_target_usd") and present(b, "cost_to_target_usd"):
                row["cost_rel"] = _median(sub["cost_to_target_usd"]) / _median(b["cost_to_target_usd"])
            rows.append(row)
    if not rows:
        raise NoData(f"no workload has both the baseline {ctx.baseline_text!r} and other runs")
    return pd.DataFrame(rows)


@table("baseline")
def baseline_table(df: pd.DataFrame, ctx: Context) -> Table:
    n = normalised_rows(df, ctx)
    show = varying_keys(n) or ["platform"]
    out = pd.DataFrame({
        **{KEY_LABELS.get(k, k): n[k] for k in show},
        "baseline": n["is_baseline"].map({True: "<- baseline", False: ""}),
        "throughput median [samples/s]": n["throughput"],
        "time relative to baseline [x]": n["time_rel"],
        "cost relative to baseline [x]": n["cost_rel"],
    }).dropna(axis=1, how="all")
    return Table("baseline", f"Time and cost normalised to the baseline ({ctx.baseline_text})", out,
                 note=constant_caption(n) + " Below 1 is faster / cheaper than the baseline for the same work.")


@table("runs")
def runs_table(df: pd.DataFrame, ctx: Context) -> Table:
    if df.empty:
        raise NoData("no runs")
    cols = [("run_id", "run"), ("status", "status"), ("reason", "reason"), ("experiment", "experiment"),
            ("model", "model"), ("data", "data"), ("platform", "platform"), ("runtime", "runtime"),
            ("precision", "precision"), ("parallel", "parallel"), ("global_batch_size", "global batch"),
            ("devices", "devices"), ("threads", "threads"),
            (TP, "throughput [samples/s]"), ("step_time_s_median", "step time median [s]"),
            ("throughput_cv", "throughput CV"), ("step_time_cv", "step time CV"), ("noisy", "noisy"),
            ("warnings", "warnings")]
    out = pd.DataFrame({label: df[c] for c, label in cols if c in df.columns})
    out = out.dropna(axis=1, how="all").sort_values("run")
    return Table("runs", "Every run (one row per record), with status, reason and warnings", out)


def build_tables(df: pd.DataFrame, ctx: Context) -> tuple[list[Table], dict[str, str]]:
    """(tables drawn, {table name: why it was skipped})."""
    made, skipped = [], {}
    for name, fn in TABLES.items():
        try:
            made.append(fn(df, ctx))
        except NoData as e:
            skipped[name] = str(e)
    return made, skipped
