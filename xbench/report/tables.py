"""The comparison tables, each one function registered in TABLES and drawn from the tidy frame.

A table function takes (rows, ctx) and returns a Table, or raises NoData with a one-line reason
(the report then shows the reason instead of the table). `rows` is the tidy frame as a list of
dicts (xbench.analysis.rows.Rows). Column headers carry their units in brackets, e.g.
`throughput median [samples/s]`. Runs that repeat one configuration are one row (median and spread
over them); failed, oom and interrupted runs stay as rows with their status and reason; warnings and
the noisy flag are shown, never dropped. Figures across runs (spread, scaling, baseline, versus
eager) come from xbench.analysis; this module only lays them out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import pandas as pd

from xbench.analysis.baseline import normalised_rows
from xbench.analysis.overhead import compile_columns, versus_eager
from xbench.analysis.published import published_beside_measured
from xbench.analysis.rows import TP, NoData, Rows, currency, groups, missing
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.spread import ci_text, noisy, ratio, spread, verdict
from xbench.analysis.workload import SCALING, VERSUS_EAGER, key
from xbench.report.rows import (
    Context,
    Table,
    constant_caption,
    frame,
    join_unique,
    key_cols,
    reasons,
    status_text,
    varying_keys,
)

# Optional train-to-target figures (another part of xbench writes them; shown only when present).
# Names as xbench/bench/target.py and metrics/derived.py write them; `train_*` exclude evaluation and
# start-up (the studies' figure), `wall_*` / `cost_to_target_*` include them.
TO_TARGET = (("target_status", "target status"), ("train_time_to_target_s", "training time to target [s]"),
             ("wall_time_to_target_s", "wall time to target [s]"), ("time_to_target_s", "time to target [s]"),
             ("epochs_to_target", "epochs to target"), ("samples_to_target", "samples to target"),
             ("train_cost_to_target_{cur}", "training cost to target [{CUR}]"),
             ("cost_to_target_{cur}", "wall cost to target [{CUR}]"), ("metric_final", "final metric"))

TABLES: dict[str, Callable] = {}


def table(name: str):
    def deco(fn):
        TABLES[name] = fn
        return fn
    return deco


def _flagged(rows: Rows, flag: str, figure: str, unit: str) -> str | None:
    """'2 of 3 runs (max 1.6 <unit>)' when runs raised `flag` (bench/contention.py, the loop's stalls)."""
    hit = Rows(r for r in rows if r.get(flag))
    if not hit:
        return None
    worst = max(hit.nums(figure), default=None)
    return f"{len(hit)} of {len(rows)} runs" + (f" (max {worst:.2g} {unit})" if worst is not None else "")


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
            **key_cols(keys, show),
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
            "contended": _flagged(sub, "contended", "other_cpu_cores_during", "other processes' cores"),
            "stalled": _flagged(sub, "stalled", "stall_excess_s_total", "s lost"),
            "reason": reasons(sub),
            "warnings": join_unique(sub.col("warnings")),
        })
    return Table("throughput", "Throughput per configuration (median over runs, with spread)", frame(out),
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
            **key_cols(keys, show),
            "runs": len(sub),
            "status": status_text(sub.col("status")),
            "throughput median [samples/s]": ok.median(TP),
            f"price [{C}/hour]": ok.median(f"{cur}_per_hour"),
            f"throughput per price [samples/s per {C}/hour]": ok.median(per),
            f"cost [{C} per 1M samples]": ok.median(f"{cur}_per_million_samples"),
            "noisy": noisy(sub),
            "reason": reasons(sub),
        })
    return Table("cost", f"Throughput per {C} and cost per million samples", frame(out),
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
        row = {**key_cols(keys, show), "runs": len(sub), "status": status_text(sub.col("status")),
               "metric": join_unique(sub.col("goal_metric")), "target": sub.median("target")}
        for c, label in cols:
            row[label] = join_unique(sub.col(c)) if c == "target_status" else sub.median(c)
        row["reason"] = reasons(sub)
        out.append(row)
    return Table("to_target", "Time, epochs and cost to the quality target (median over runs)", frame(out),
                 note=constant_caption(sub_rows))


@table("scaling")
def scaling_table(rows: Rows, ctx: Context) -> Table:
    s = scaling_rows(rows)
    if not s:
        raise NoData("no workload was run at two or more device counts")
    show = varying_keys(s, SCALING)
    out = pd.DataFrame([{
        **key_cols(r, show), "parallel": r["parallel"], "devices": r["devices"],
        "throughput [samples/s]": r[TP],
        "ideal [samples/s]": r["ideal_samples_per_s"],
        "speed-up [x]": r["speedup"],
        "scaling efficiency [%]": r["scaling_efficiency"] * 100,
        "efficiency 95% CI [%]": ci_text(None if r["scaling_efficiency_ci95"] is None
                                         else tuple(x * 100 for x in r["scaling_efficiency_ci95"])),
        "flag": r["flag"],
    } for r in s])
    return Table("scaling", "Scaling over devices: efficiency = throughput(N) / (N x throughput(1))", out,
                 note=constant_caption(s, SCALING) + " The 1-device reference is the single-device run, else "
                 "the strategy's own 1-device run, else its smallest device count. Efficiency above 105% is "
                 "flagged: it is noise or a cache effect, not a result.")


OVERHEAD = (("first_step_s", "first step [s]"), ("warmup_s", "warm-up [s]"), ("warmup_steps", "warm-up steps"),
            ("compiles_warmup", "compilations in warm-up"), ("compiles_timed", "recompilations after warm-up"),
            ("step_time_s_median", "steady step time median [s]"),
            ("startup_to_first_step_s", "start-up to first step [s]"),
            ("host_s_per_step", "host per step [s]"), ("device_s_per_step", "device per step [s]"),
            ("host_overhead_fraction", "host share of a step"))
NEVER = "never (not faster than eager)"


def _break_even(paired: Rows):
    """Median break-even over a configuration's pairs with eager, a pair that never pays back (not faster)
    counted as infinite: 'never' when that is the median; None when the runtime compiles nothing."""
    known = [r for r in paired if "break_even_steps_vs_eager" in r]
    if not known:
        return None
    steps = [math.inf if r["break_even_steps_vs_eager"] is None else r["break_even_steps_vs_eager"] for r in known]
    mid = statistics.median(steps)
    return NEVER if math.isinf(mid) else mid


@table("overhead")
def overhead_table(rows: Rows, ctx: Context) -> Table:
    cols = [(c, f"{c.removesuffix('_s').replace('_', ' ')} [s]") for c in compile_columns(rows)]
    cols = [(c, label) for c, label in (*cols, *OVERHEAD) if rows.has(c)]
    if not cols:
        raise NoData("no compile/first-step/step-time figures in these records")
    ok = rows.ok(None)
    show = varying_keys(ok) or ["runtime"]
    if "runtime" not in show:
        show.insert(0, "runtime")
    vs = versus_eager(ok)
    eager = {key(r, VERSUS_EAGER): g for _, g in groups(ok) for r in g[:1] if r.get("runtime") == "eager"}
    out = []
    for keys, sub in groups(ok):
        paired = Rows(vs[r["run_id"]] for r in sub if r["run_id"] in vs)
        row = {**key_cols(keys, show), "runs": len(sub), **{label: sub.median(c) for c, label in cols},
               "speed-up vs eager [x]": paired.median("speedup_vs_eager"),
               "break-even vs eager [steps]": _break_even(paired)}
        twin = eager.get(key(sub[0], VERSUS_EAGER)) if keys.get("runtime") != "eager" else None
        if twin is not None and paired:
            _, ci = ratio(sub, twin)
            row["speed-up 95% CI [x]"] = ci_text(ci)
            row["versus eager"] = verdict(ci, "faster than eager", "slower than eager")
        out.append({**row, "warnings": join_unique(sub.col("warnings"))})
    return Table("overhead", "Framework overhead: compile time, first step, recompilations, steady step time, "
                 "host vs device time per step", frame(out),
                 note=constant_caption(ok) + " Host: dispatch, tracing and launches; device: the kernels "
                 "(XLA: its trace/sync and execute clocks; CPU: computing ops vs the rest of the step)."
                 + (" Speed-up and break-even against the eager run of the same workload and placement: break-even = "
                    "compile time / (eager step - this step), the steps after which compiling has paid for itself."
                    if vs else ""))


@table("efficiency")
def efficiency_table(rows: Rows, ctx: Context) -> Table:
    ok = rows.ok("achieved_tflops")
    if not ok:
        raise NoData("no FLOP counts in these records")
    show = varying_keys(ok) or ["platform"]
    out = []
    for keys, sub in groups(ok):
        flop, mfu = sub.median("flops_per_sample_train"), sub.median("mfu")
        out.append({**key_cols(keys, show), "runs": len(sub),
                    "throughput median [samples/s]": sub.median(TP),
                    "train FLOP per sample [GFLOP]": flop / 1e9 if flop is not None else None,
                    "achieved [TFLOP/s]": sub.median("achieved_tflops"),
                    "MFU [%]": mfu * 100 if mfu is not None else None})
    return Table("efficiency", "Achieved FLOP/s and model FLOP utilisation (MFU)", frame(out),
                 note=constant_caption(ok) + " MFU needs the platform's peak_tflops for the compute dtype.")


BASIS = {"train_time_to_target_s": "training to target", "projected_training_s": "projected training",
         "seconds_per_sample": "time per sample"}


@table("baseline")
def baseline_table(rows: Rows, ctx: Context) -> Table:
    n = normalised_rows(rows, ctx.baseline, ctx.baseline_text)
    show = varying_keys(n) or ["platform"]
    out = [{**key_cols(r, show), "baseline": "<- baseline" if r["is_baseline"] else "",
            "throughput median [samples/s]": r[TP],
            "time relative to baseline [x]": r["normalised_time"],
            "time 95% CI [x]": ci_text(r["normalised_time_ci95"]),
            "verdict": r["verdict"],
            "cost relative to baseline [x]": r["normalised_cost"],
            "compared on": BASIS.get(r["normalised_basis"])} for r in n]
    return Table("baseline", f"Time and cost normalised to the baseline ({ctx.baseline_text})", frame(out),
                 note=constant_caption(n) + " Below 1 is faster / cheaper than the baseline for the same work.")


RUN_COLUMNS = (("run_id", "run"), ("status", "status"), ("reason", "reason"), ("experiment", "experiment"),
               ("model", "model"), ("data", "data"), ("platform", "platform"), ("runtime", "runtime"),
               ("precision", "precision"), ("parallel", "parallel"), ("global_batch_size", "global batch"),
               ("devices", "devices"), ("threads", "threads"), (TP, "throughput [samples/s]"),
               ("step_time_s_median", "step time median [s]"), ("throughput_cv", "throughput CV"),
               ("throughput_process_cv", "process CV"), ("step_time_cv", "step time CV"), ("noisy", "noisy"),
               ("contended", "contended"), ("other_cpu_cores_during", "other processes [cores]"),
               ("stalled", "stalled"), ("stall_excess_s_total", "lost to stalls [s]"), ("warnings", "warnings"))


@table("published")
def published_table(rows: Rows, ctx: Context) -> Table:
    pub = published_beside_measured(rows)
    if not pub:
        raise NoData("no run of a study preset (the studies' published figures are shown beside their runs)")
    out = pd.DataFrame([{
        "study": r["study"], "figure": r["what"], "published [unit]": r["value"], "unit": r["unit"],
        "measured here [unit]": r["measured"],
        "measured as": (f"{r['measured_column']} ({r['measured_where']}; {r['measured_runs']} runs)"
                        if r["measured_column"] else "not comparable here"),
        "conditions": r["conditions"], "source": r["source"], "date": r["date"],
    } for r in pub])
    return Table("published", "Published figures of the studies, beside what these runs measured", out,
                 note="Published figures come from xbench/studies/studies.yaml (with their source and date); they are "
                      "never runs: no median, spread or baseline includes them. 'measured here' is the median of "
                      "the matching ok runs, blank when no run matches the published conditions.")


@table("runs")
def runs_table(rows: Rows, ctx: Context) -> Table:
    if not rows:
        raise NoData("no runs")
    out = [{label: r.get(c) for c, label in RUN_COLUMNS} for r in sorted(rows, key=lambda r: str(r["run_id"]))]
    return Table("runs", "Every run (one row per record), with status, reason and warnings", frame(out))


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
