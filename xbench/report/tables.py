"""The comparison tables, each one function registered in TABLES and drawn from the tidy frame.

A table function takes (rows, ctx) and returns a Table, or raises NoData with a one-line reason
(the report then shows the reason instead of the table). `rows` is the tidy frame as a list of
dicts (Rows): grouping thousands of runs in plain Python is much faster than slicing a wide
DataFrame per group. Column headers carry their units in brackets, e.g.
`throughput median [samples/s]`. Runs that repeat one configuration are one row (median and spread
over them); failed, oom and interrupted runs stay as rows with their status and reason; warnings and
the noisy flag are shown, never dropped.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pandas as pd

from xbench.metrics.derived import normalise
from xbench.metrics.scaling import efficiency_by_devices
from xbench.report.frame import GROUP_KEYS, WORKLOAD_KEYS, check_keys, parse_query

TP = "throughput_samples_per_s"
# Optional train-to-target figures (another part of xbench writes them; shown only when present).
# Names as xbench/bench/target.py and metrics/derived.py write them; `train_*` exclude evaluation and
# start-up (the studies' figure), `wall_*` / `cost_to_target_*` include them.
TO_TARGET = (("target_status", "target status"), ("train_time_to_target_s", "training time to target [s]"),
             ("wall_time_to_target_s", "wall time to target [s]"), ("time_to_target_s", "time to target [s]"),
             ("epochs_to_target", "epochs to target"), ("samples_to_target", "samples to target"),
             ("train_cost_to_target_{cur}", "training cost to target [{CUR}]"),
             ("cost_to_target_{cur}", "wall cost to target [{CUR}]"), ("metric_final", "final metric"))
KEY_LABELS = {"batch_size_per_device": "batch/device", "global_batch_size": "global batch",
              "devices": "devices", "threads": "threads", "pricing_model": "pricing"}


class NoData(Exception):
    """This table or plot has nothing to show for these records (a note, not an error)."""


@dataclass
class Context:
    baseline: dict[str, list[str]] | None = None  # parsed --baseline query
    baseline_text: str | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def with_baseline(cls, text: str | None) -> Context:
        return cls(baseline=parse_query(text) if text else None, baseline_text=text)


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


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


class Rows(list):
    """The tidy table as a list of row dicts (missing values are None)."""

    _cols: set[str] | None = None

    @classmethod
    def of(cls, df: pd.DataFrame) -> Rows:
        if isinstance(df, Rows):
            return df
        # Missing values (None, NaN) are left out of the dicts: r.get(col) is None for them.
        cols = list(df.columns)
        values = zip(*(df[c].tolist() for c in cols))  # column-wise: much faster than to_dict("records")
        rows = cls({k: v for k, v in zip(cols, vals) if v is not None and v == v} for vals in values)
        rows._cols = {c for c in df.columns if df[c].notna().any()}
        return rows

    def col(self, c: str) -> list:
        return [r.get(c) for r in self]

    def nums(self, c: str) -> list[float]:
        return [v for r in self if (v := r.get(c)) is not None and isinstance(v, (int, float))
                and not isinstance(v, bool)]

    def has(self, c: str) -> bool:
        if self._cols is not None and c not in self._cols:
            return False
        return any(r.get(c) is not None for r in self)

    def ok(self, c: str | None = TP) -> Rows:
        return Rows(r for r in self if r.get("status") == "ok" and (c is None or r.get(c) is not None))

    def where(self, **match) -> Rows:
        return Rows(r for r in self if all(r.get(k) == v for k, v in match.items()))

    def median(self, c: str) -> float | None:
        xs = self.nums(c)
        return statistics.median(xs) if xs else None

    def columns(self) -> set[str]:
        if self._cols is None:
            self._cols = {k for r in self for k, v in r.items() if v is not None}
        return self._cols


def currency(rows: Rows) -> str | None:
    """The currency the records' cost figures are in (usd preferred), or None without prices."""
    found = {m.group(1) for c in Rows.of(rows).columns() if (m := re.fullmatch(r"samples_per_s_per_([a-z]+)_per_hour", c))}
    return "usd" if "usd" in found else (sorted(found)[0] if found else None)


def _text(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def varying_keys(rows: Rows, keys=GROUP_KEYS) -> list[str]:
    """Config keys with more than one value (constant ones go into the caption instead)."""
    return [k for k in keys if len({r.get(k) for r in rows}) > 1]


def constant_caption(rows: Rows, keys=GROUP_KEYS) -> str:
    parts = []
    for k in keys:
        vals = {r.get(k) for r in rows}
        if len(vals) == 1 and rows and rows[0].get(k) is not None:
            parts.append(f"{KEY_LABELS.get(k, k)}={_text(vals.pop())}")
    return ("All rows: " + ", ".join(parts) + ".") if parts else ""


def _fmt_key(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _sort_key(values: tuple):
    """Numbers in numeric order, then text, then missing values."""
    return tuple((2, 0, "") if missing(v) else (0, float(v), "") if isinstance(v, (int, float))
                 else (1, 0, str(v)) for v in values)


def groups(rows: Iterable[dict], keys: Iterable[str] = GROUP_KEYS) -> list[tuple[dict, Rows]]:
    """(key dict, rows) per configuration, in a stable, readable order."""
    keys = list(keys)
    found: dict[tuple, Rows] = {}
    for r in rows:  # 16 and 16.0 hash alike, so one group
        found.setdefault(tuple([r.get(k) for k in keys]), Rows()).append(r)
    return [({k: _fmt_key(v) for k, v in zip(keys, key)}, found[key]) for key in sorted(found, key=_sort_key)]


def status_text(statuses) -> str:
    counts = Counter(statuses)
    if set(counts) == {"ok"}:
        return "ok" if counts["ok"] == 1 else f"ok x{counts['ok']}"
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: x[0] != "ok"))


def _join_unique(values) -> str | None:
    """Distinct '; '-separated parts, in order; None when there are none (the column is then dropped)."""
    seen = []
    for v in values:
        for part in (v or "").split("; "):
            if part and part not in seen:
                seen.append(part)
    return "; ".join(seen) or None


def reasons(rows: Rows) -> str | None:
    return _join_unique(r.get("reason") for r in rows if r.get("status") != "ok")


def spread(rows: Rows) -> tuple[float | None, float | None, float | None, str]:
    """(low, high, CV, source) of throughput: across runs when repeated, else within the one run."""
    ok = rows.ok()
    tps = ok.nums(TP)
    if len(tps) >= 2:
        mean = statistics.fmean(tps)
        return min(tps), max(tps), statistics.stdev(tps) / mean if mean else None, f"{len(tps)} runs min-max"
    if len(tps) == 1:
        r = ok[0]
        lo, hi = r.get("throughput_process_ci95_low_samples_per_s"), r.get("throughput_process_ci95_high_samples_per_s")
        if lo is not None and hi is not None:  # whole-process repeats: the wider, run-to-run spread
            return lo, hi, r.get("throughput_process_cv"), f"{r.get('process_repeats')} processes ci95"
        lo, hi, cv = r.get("throughput_ci95_low_samples_per_s"), r.get("throughput_ci95_high_samples_per_s"), \
            r.get("throughput_cv")
        if lo is not None and hi is not None:
            return lo, hi, cv, "windows ci95"
        gb, p10, p90 = r.get("global_batch_size"), r.get("step_time_s_p10"), r.get("step_time_s_p90")
        if None not in (gb, p10, p90) and p10 > 0 and p90 > 0:
            return gb / p90, gb / p10, r.get("step_time_cv"), "steps p10-p90"
        return None, None, cv, ""
    return None, None, None, ""


def _key_cols(keys: dict, show: list[str]) -> dict:
    return {KEY_LABELS.get(k, k): keys[k] for k in show}


def _frame(rows: list[dict]) -> pd.DataFrame:
    """A table's frame, without the columns no row has a value in."""
    return pd.DataFrame(rows).dropna(axis=1, how="all")


NOISY_CV_DEFAULT = 0.05  # bench.noisy_cv's default, for records that do not carry it


def noisy(rows: Rows, cv_across_runs: float | None = None) -> str | None:
    """NOISY when a run flagged itself, or when repeated runs of one configuration spread more than
    the runs' own bound (bench.noisy_cv) from each other: every run steady, the machine not."""
    if any(r.get("noisy") for r in rows):
        return "NOISY"
    bound = min((r["noisy_cv"] for r in rows if r.get("noisy_cv") is not None), default=NOISY_CV_DEFAULT)
    if cv_across_runs is not None and not missing(cv_across_runs) and cv_across_runs > bound:
        return "NOISY (across runs)"
    return None


@table("throughput")
def throughput_table(rows: Rows, ctx: Context) -> Table:
    if not rows:
        raise NoData("no runs")
    show = varying_keys(rows) or ["model", "platform"]
    out = []
    for keys, sub in groups(rows):
        ok = sub.ok()
        lo, hi, cv, src = spread(sub)
        out.append({
            **_key_cols(keys, show),
            "runs": len(sub),
            "status": status_text(sub.col("status")),
            "throughput median [samples/s]": ok.median(TP),
            "spread low [samples/s]": lo,
            "spread high [samples/s]": hi,
            "spread": src,
            "CV [%]": cv * 100 if cv is not None and not missing(cv) else None,
            "per device [samples/s]": ok.median("throughput_per_device_samples_per_s"),
            "step time median [s]": ok.median("step_time_s_median"),
            "noisy": noisy(sub, cv if len(ok.nums(TP)) >= 2 else None),  # spread() gave the across-run CV
            "reason": reasons(sub),
            "warnings": _join_unique(sub.col("warnings")),
        })
    return Table("throughput", "Throughput per configuration (median over runs, with spread)", _frame(out),
                 note=constant_caption(rows) + " Spread: min-max over repeated runs, else the run's 95% CI "
                 "over timed windows, else samples/s at the p90 and p10 step times.")


@table("cost")
def cost_table(rows: Rows, ctx: Context) -> Table:
    cur = currency(rows)
    if cur is None:
        raise NoData("no record has a price (platforms without `price:` have no cost figures)")
    C, per = cur.upper(), f"samples_per_s_per_{cur}_per_hour"
    priced = Rows(r for r in rows if r.get(per) is not None or r.get("status") != "ok")
    show = varying_keys(priced) or ["platform"]
    if "pricing_model" not in show:
        show.append("pricing_model")
    out = []
    for keys, sub in groups(priced):
        ok = sub.ok(per)
        out.append({
            **_key_cols(keys, show),
            "runs": len(sub),
            "status": status_text(sub.col("status")),
            "throughput median [samples/s]": ok.median(TP),
            f"price [{C}/hour]": ok.median(f"{cur}_per_hour"),
            f"throughput per price [samples/s per {C}/hour]": ok.median(per),
            f"cost [{C} per 1M samples]": ok.median(f"{cur}_per_million_samples"),
            "noisy": noisy(sub),
            "reason": reasons(sub),
        })
    return Table("cost", f"Throughput per {C} and cost per million samples", _frame(out),
                 note=constant_caption(priced) + f" Prices are the platform's {C}/hour for the whole "
                 "machine (all price components) as recorded with each run.")


@table("to_target")
def to_target_table(rows: Rows, ctx: Context) -> Table:
    cur = currency(rows) or "usd"  # cost columns are named after the records' currency (derived.py)
    cols = [(c.format(cur=cur), label.format(CUR=cur.upper())) for c, label in TO_TARGET]
    cols = [(c, label) for c, label in cols if rows.has(c)]
    if not any(c != "target_status" for c, _ in cols):
        raise NoData("no train-to-target figures (train_time_to_target_s, epochs_to_target, "
                     f"train_cost_to_target_{cur}) in these records")
    sub_rows = Rows(r for r in rows if any(r.get(c) is not None for c, _ in cols)
                    or r.get("bench_mode") == "train_to_target")
    show = varying_keys(sub_rows) or ["platform"]
    out = []
    for keys, sub in groups(sub_rows):
        row = {**_key_cols(keys, show), "runs": len(sub), "status": status_text(sub.col("status")),
               "metric": _join_unique(sub.col("goal_metric")), "target": sub.median("target")}
        for c, label in cols:
            row[label] = _join_unique(sub.col(c)) if c == "target_status" else sub.median(c)
        row["reason"] = reasons(sub)
        out.append(row)
    return Table("to_target", "Time, epochs and cost to the quality target (median over runs)", _frame(out),
                 note=constant_caption(sub_rows))


SCALING_WORKLOAD = ("model", "data", "platform", "runtime", "precision", "batch_size_per_device")


def scaling_rows(rows: Rows) -> pd.DataFrame:
    """Throughput, speed-up and efficiency per device count, per workload and parallel strategy.

    Runs share a workload when model, data, platform, runtime, precision and batch per device match.
    The reference is the strategy's own 1-device run, else the `single` run of the same workload.
    """
    out = []
    for wkeys, wsub in groups(Rows.of(rows).ok(), SCALING_WORKLOAD):
        single = Rows(r for r in wsub if r.get("parallel") == "single" and r.get("devices") == 1)
        for pkeys, psub in groups(wsub, ["parallel"]):
            tp = {int(k["devices"]): s.median(TP) for k, s in groups(psub, ["devices"]) if k["devices"]}
            if 1 not in tp and single:
                tp[1] = single.median(TP)
            if len(tp) < 2:
                continue
            for n, e in efficiency_by_devices(tp).items():
                out.append({**wkeys, "parallel": pkeys["parallel"], "devices": n, "throughput": tp[n], **e})
    return pd.DataFrame(out)


@table("scaling")
def scaling_table(rows: Rows, ctx: Context) -> Table:
    s = scaling_rows(rows)
    if s.empty:
        raise NoData("no workload was run at two or more device counts")
    srows = Rows.of(s)
    show = varying_keys(srows, SCALING_WORKLOAD)
    out = pd.DataFrame({
        **{KEY_LABELS.get(k, k): s[k] for k in show},
        "parallel": s["parallel"], "devices": s["devices"],
        "throughput [samples/s]": s["throughput"],
        "ideal [samples/s]": s["ideal_samples_per_s"],
        "speed-up [x]": s["speedup"],
        "scaling efficiency [%]": s["efficiency"] * 100,
    })
    return Table("scaling", "Scaling over devices: efficiency = throughput(N) / (N x throughput(1))", out,
                 note=constant_caption(srows, SCALING_WORKLOAD)
                 + " The 1-device reference is the strategy's own 1-device run, else the single-device run.")


def compile_columns(rows: Rows) -> list[str]:
    return sorted(c for c in rows.columns() if re.fullmatch(r"compile\w*_s", c))


@table("overhead")
def overhead_table(rows: Rows, ctx: Context) -> Table:
    cols = [(c, f"{c.removesuffix('_s').replace('_', ' ')} [s]") for c in compile_columns(rows)]
    cols += [("first_step_s", "first step [s]"), ("warmup_s", "warm-up [s]"), ("warmup_steps", "warm-up steps"),
             ("compiles_warmup", "compilations in warm-up"), ("compiles_timed", "recompilations after warm-up"),
             ("step_time_s_median", "steady step time median [s]"),
             ("startup_to_first_step_s", "start-up to first step [s]")]
    cols = [(c, label) for c, label in cols if rows.has(c)]
    if not cols:
        raise NoData("no compile/first-step/step-time figures in these records")
    ok = rows.ok(None)
    show = varying_keys(ok) or ["runtime"]
    if "runtime" not in show:
        show.insert(0, "runtime")
    out = [{**_key_cols(keys, show), "runs": len(sub), **{label: sub.median(c) for c, label in cols},
            "warnings": _join_unique(sub.col("warnings"))} for keys, sub in groups(ok)]
    return Table("overhead", "Framework overhead: compile time, first step, recompilations, steady step time",
                 _frame(out), note=constant_caption(ok))


@table("efficiency")
def efficiency_table(rows: Rows, ctx: Context) -> Table:
    ok = rows.ok("achieved_tflops")
    if not ok:
        raise NoData("no FLOP counts in these records")
    show = varying_keys(ok) or ["platform"]
    out = []
    for keys, sub in groups(ok):
        flop, mfu = sub.median("flops_per_sample_train"), sub.median("mfu")
        out.append({**_key_cols(keys, show), "runs": len(sub),
                    "throughput median [samples/s]": sub.median(TP),
                    "train FLOP per sample [GFLOP]": flop / 1e9 if flop is not None else None,
                    "achieved [TFLOP/s]": sub.median("achieved_tflops"),
                    "MFU [%]": mfu * 100 if mfu is not None else None})
    return Table("efficiency", "Achieved FLOP/s and model FLOP utilisation (MFU)", _frame(out),
                 note=constant_caption(ok) + " MFU needs the platform's peak_tflops for the compute dtype.")


def _matches(r: dict, query: dict[str, list[str]]) -> bool:
    return all(_text(r.get(k)) in vals or (r.get(k) is None and "none" in vals) for k, vals in query.items())


def _as_record(rows: Rows, cur: str | None) -> dict:
    """A configuration's medians in the shape metrics.derived.normalise reads."""
    cols = ("throughput_samples_per_s", "train_time_to_target_s", "projected_training_s")
    if cur:
        cols += (f"{cur}_per_million_samples", f"train_cost_to_target_{cur}", f"projected_training_cost_{cur}")
    vals = {c: rows.median(c) for c in cols}
    price = [{"currency": cur.upper()}] if cur else []
    return {"measurements": vals, "derived": {}, "config": {"platform": {"price": price}}}


def normalised_rows(rows: Rows, ctx: Context) -> pd.DataFrame:
    """Time and cost of each configuration relative to the baseline's, per workload (model, data).

    The ratio is metrics.derived.normalise over the medians: training time and cost to target when
    both have them, else projected training, else time and cost per sample (the same work). The
    baseline of a workload is its configuration with the same global batch when there is one, else
    its fastest.
    """
    if not ctx.baseline:
        raise NoData("no --baseline given (e.g. --baseline platform=cpu)")
    rows = Rows.of(rows)
    check_keys(ctx.baseline, rows.columns() | set(GROUP_KEYS) | {"status", "run_id", "experiment"})
    ok = rows.ok()
    if not any(_matches(r, ctx.baseline) for r in ok):
        raise NoData(f"no ok run matches the baseline {ctx.baseline_text!r}")
    cur = currency(rows)
    out = []
    for _, wsub in groups(ok, WORKLOAD_KEYS):
        base = Rows(r for r in wsub if _matches(r, ctx.baseline))
        if not base:
            continue
        by_batch = {k["global_batch_size"]: _as_record(g, cur) for k, g in groups(base, ["global_batch_size"])}
        fastest = _as_record(Rows([max(base, key=lambda r: r[TP])]), cur)
        for keys, sub in groups(wsub):
            n = normalise(_as_record(sub, cur), by_batch.get(keys["global_batch_size"]) or fastest)
            out.append({**keys, "throughput": sub.median(TP), "time_rel": n.get("normalised_time"),
                        "cost_rel": n.get("normalised_cost"), "basis": n.get("normalised_basis"),
                        "is_baseline": all(_matches(r, ctx.baseline) for r in sub)})
    if not out:
        raise NoData(f"no workload has both the baseline {ctx.baseline_text!r} and other runs")
    return pd.DataFrame(out)


@table("baseline")
def baseline_table(rows: Rows, ctx: Context) -> Table:
    n = normalised_rows(rows, ctx)
    nrows = Rows.of(n)
    show = varying_keys(nrows) or ["platform"]
    out = pd.DataFrame({
        **{KEY_LABELS.get(k, k): n[k] for k in show},
        "baseline": n["is_baseline"].map({True: "<- baseline", False: ""}),
        "throughput median [samples/s]": n["throughput"],
        "time relative to baseline [x]": n["time_rel"],
        "cost relative to baseline [x]": n["cost_rel"],
        "compared on": n["basis"].map({"train_time_to_target_s": "training to target",
                                       "projected_training_s": "projected training",
                                       "seconds_per_sample": "time per sample"}),
    }).dropna(axis=1, how="all")
    return Table("baseline", f"Time and cost normalised to the baseline ({ctx.baseline_text})", out,
                 note=constant_caption(nrows) + " Below 1 is faster / cheaper than the baseline for the same work.")


RUN_COLUMNS = (("run_id", "run"), ("status", "status"), ("reason", "reason"), ("experiment", "experiment"),
               ("model", "model"), ("data", "data"), ("platform", "platform"), ("runtime", "runtime"),
               ("precision", "precision"), ("parallel", "parallel"), ("global_batch_size", "global batch"),
               ("devices", "devices"), ("threads", "threads"), (TP, "throughput [samples/s]"),
               ("step_time_s_median", "step time median [s]"), ("throughput_cv", "throughput CV"),
               ("throughput_process_cv", "process CV"), ("step_time_cv", "step time CV"), ("noisy", "noisy"), ("warnings", "warnings"))


@table("runs")
def runs_table(rows: Rows, ctx: Context) -> Table:
    if not rows:
        raise NoData("no runs")
    out = [{label: r.get(c) for c, label in RUN_COLUMNS} for r in sorted(rows, key=lambda r: str(r["run_id"]))]
    return Table("runs", "Every run (one row per record), with status, reason and warnings", _frame(out))


def build_tables(df: pd.DataFrame, ctx: Context) -> tuple[list[Table], dict[str, str]]:
    """(tables drawn, {table name: why it was skipped})."""
    rows = Rows.of(df)
    made, skipped = [], {}
    for name, fn in TABLES.items():
        try:
            made.append(fn(rows, ctx))
        except NoData as e:
            skipped[name] = str(e)
    return made, skipped
