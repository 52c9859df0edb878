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

from xbench.analysis.findings import Finding, findings
from xbench.analysis.overhead import compile_columns, eager_twins, versus_eager
from xbench.analysis.published import published_beside_measured
from xbench.analysis.quality import quality_parity
from xbench.analysis.reprice import repriced
from xbench.analysis.rows import TP, NoData, Rows, currency, groups, missing
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.spread import ci_text, noisy, ratio, spread, verdict
from xbench.analysis.workload import CONFIGURATION, SCALING
from xbench.metrics import goals, targets
from xbench.report import llm
from xbench.report.rows import (
    Context,
    Table,
    baseline_rows,
    constant_caption,
    frame,
    join_unique,
    key_cols,
    prepare,
    reasons,
    status_text,
    varying_keys,
)

# Optional train-to-target figures (another part of xbench writes them; shown only when present).
# Names as xbench/bench/training.py and metrics/derived.py write them; `train_*` exclude evaluation and
# start-up (the studies' figure), `wall_*` / `cost_to_target_*` include them.
TO_TARGET = (("target_status", "target status"), ("train_time_to_target_s", "training time to target [s]"),
             ("wall_time_to_target_s", "wall time to target [s]"), ("time_to_target_s", "time to target [s]"),
             ("epochs_to_target", "epochs to target"), ("samples_to_target", "samples to target"),
             ("train_cost_to_target_{cur}", "training cost to target [{CUR}]"),
             ("cost_to_target_{cur}", "wall cost to target [{CUR}]"), ("epochs_done", "epochs trained"),
             ("train_time_s", "whole training time [s]"), ("train_cost_{cur}", "whole training cost [{CUR}]"),
             ("metric_final", "final metric"))

TABLES: dict[str, Callable] = {}


SEARCHES = "find_max_batch"  # a batch search measures no throughput of its own: only these tables show it
WITH_SEARCHES: set[str] = set()


def table(name: str, searches: bool = False):
    """Register a table; `searches`: it is given the batch-search runs too (every other table is not)."""
    def deco(fn):
        TABLES[name] = fn
        if searches:
            WITH_SEARCHES.add(name)
        return fn
    return deco


def _some(found, why: str):
    """What a table is made of (its rows, its columns), or NoData saying why there is none."""
    if not found:
        raise NoData(why)
    return found


def _flagged(rows: Rows, flag: str, figure: str, unit: str) -> str | None:
    """'2 of 3 runs (max 1.6 <unit>)' when runs raised `flag` (bench/meters/contention.py, the loop's
    stalls)."""
    hit = Rows(r for r in rows if r.get(flag))
    if not hit:
        return None
    worst = max(hit.nums(figure), default=None)
    return f"{len(hit)} of {len(rows)} runs" + (f" (max {worst:.2g} {unit})" if worst is not None else "")


def _contention(rows: Rows) -> str | None:
    """`_flagged`'s contention text, or 'not measured' when no run says (train-to-target records written
    before that mode metered other processes)."""
    if all(r.get("contended") is None for r in rows.ok(None)) and rows.ok(None):
        return "not measured"
    return _flagged(rows, "contended", "other_cpu_cores_during", "other processes' cores")


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
    rows, same_machine = repriced(rows, cur)  # one machine priced two ways: the same runs at each price
    priced = Rows(r for r in rows if r.get(per) is not None or r.get("status") != "ok")
    several = len({r.get("price_currency") for r in priced if r.get("price_currency")}) > 1
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
            "price checked": unconfirmed_price(sub),
            f"throughput per price [samples/s per {C}/hour]": ok.median(per),
            f"cost [{C} per 1M samples]": ok.median(f"{cur}_per_million_samples"),
            "priced in": join_unique(sub.col("price_currency")) if several else None,
            "priced from": join_unique(sub.col("repriced_from")),
            "noisy": noisy(sub),
            "reason": reasons(sub),
        })
    return Table(
        "cost",
        f"Throughput per {C} and cost per million samples",
        frame(out),
        note=constant_caption(priced) + f" Prices are the platform's {C}/hour for the whole "
        "machine (all price components) as recorded with each run"
        + (
            f"; prices in other currencies are converted to {C} (the exchange rates table)."
            if several
            else "."
        )
        + "".join(" " + x for x in same_machine)
        + unconfirmed_note(priced),
    )


def unconfirmed_price(sub: Rows) -> str | None:
    """'unconfirmed (as of DATE)' when a run's platform price was never checked against its source
    (platform.price_confirmed: false); None (the column dropped) when every price was."""
    if not any(r.get("price_confirmed") is False for r in sub):
        return None
    dates = join_unique(r.get("price_as_of") for r in sub if r.get("price_confirmed") is False)
    return f"unconfirmed (as of {dates})" if dates else "unconfirmed"


def unconfirmed_note(rows: Rows) -> str:
    names = join_unique(r.get("platform") for r in rows if r.get("price_confirmed") is False)
    return (
        (
            f" Unconfirmed price ({names}): not checked against its source "
            "(platform.price_confirmed: false); its costs are only as good as that price: check it before "
            "quoting them."
        )
        if names
        else ""
    )


@table("to_target")
def to_target_table(rows: Rows, ctx: Context) -> Table:
    cur = currency(rows) or "usd"  # cost columns are named after the records' currency (derived.py)
    cols = _to_target_columns(rows, cur)
    if not any(c != "target_status" for c, _ in cols):
        raise NoData("no train-to-target figures (train_time_to_target_s, epochs_to_target, "
                     f"train_cost_to_target_{cur}) in these records")
    sub_rows = Rows(r for r in rows if _to_target_run(r, cols))
    show = varying_keys(sub_rows) or ["platform"]
    # Several targets in one run (goal.targets): one row per target, from its own figures.
    out = [_to_target_row(key_cols(keys, show), sub, cols, t) for keys, sub in groups(sub_rows)
           for t in targets.targets_in(sub.columns()) or [None]]
    return Table(
        "to_target",
        "Time, epochs and cost to the quality target (median over runs; a run with several "
        "targets gives a row for each)",
        frame(out),
        note=constant_caption(sub_rows)
        + " Contended: other processes used the machine while the run trained (its time measured that load "
        "too; no finding uses it); not measured: a record from before train-to-target metered it."
        + unconfirmed_note(sub_rows),
    )


def _to_target_columns(rows: Rows, cur: str) -> list[tuple[str, str]]:
    """(column, label) of each TO_TARGET figure in `cur` that some run has, itself or per target (runs with
    goal.targets carry figures per target)."""
    several = targets.targets_in(rows.columns())
    cols = [(c.format(cur=cur), label.format(CUR=cur.upper())) for c, label in TO_TARGET]
    return [(c, label) for c, label in cols
            if rows.has(c) or any(rows.has(targets.column(c, t)) for t in several)]


def _to_target_row(head: dict, sub: Rows, cols: list[tuple[str, str]], t: float | None) -> dict:
    """One configuration's row for target `t` (None: its runs' one target), from that target's figures."""
    row = {**head, "runs": len(sub), "status": status_text(sub.col("status")),
           "metric": join_unique(goals.label(m) for m in sub.col("goal_metric")),
           "target": sub.median("target") if t is None else t}
    row.update((label, _to_target_figure(sub, c, t)) for c, label in cols)
    if t is not None and "target status" in row:
        row["target status"] = _target_status(sub, t)
    row["contended"] = _contention(sub)
    if set_by_min := minimum_charged(sub, [c for c, _ in cols if "cost" in c], t):
        row["costs set by the minimum charge"] = set_by_min
    row["reason"] = reasons(sub)
    return row


def _to_target_run(r: dict, cols: list[tuple[str, str]]) -> bool:
    """A run of train_to_target, or one with any of the table's figures."""
    return r.get("bench_mode") == "train_to_target" or any(r.get(c) is not None for c, _ in cols)


def _to_target_figure(sub: Rows, c: str, t: float | None):
    """Column `c` over one configuration's runs: the statuses joined, a figure's median (of target `t`'s)."""
    if c == "target_status":
        return join_unique(sub.col(c))
    return sub.median(c if t is None else targets.column(c, t))


def _target_status(sub: Rows, t: float) -> str:
    """Target `t`'s own status in the runs: reached, or why not."""
    return join_unique("reached" if r.get(f"target_reached_{targets.label(t)}") else r.get("target_status")
                       for r in sub)


def minimum_charged(sub: Rows, cols: list[str], target: float | None = None) -> str | None:
    """'training cost to target, wall cost to target (60 s minimum)' for the cost figures (of `target`) that a
    platform's minimum charge set in any of the runs (frame.py's `minimum_charged`); None when none."""
    hit = []
    for c in cols:
        name = c if target is None else targets.column(c, target)
        if any(name in (r.get("minimum_charged") or "").split(", ") for r in sub):
            hit.append(dict(TO_TARGET).get(c.rsplit("_", 1)[0] + "_{cur}", c).replace(" [{CUR}]", ""))
    low = max(sub.nums("minimum_charge_s"), default=None)
    return f"{', '.join(hit)} ({low:g} s minimum)" if hit else None


@table("projection")
def projection_table(rows: Rows, ctx: Context) -> Table:
    """The whole training projected from the measured throughput: data.dataset_size x goal.projection_epochs
    samples at the run's samples/s, billed as one job (metrics/derived.py), with its basis in words."""
    cur = currency(rows) or "usd"
    C = cur.upper()
    ok = _some(
        rows.ok("projected_training_s"),
        "no record has a projected training (needs data.dataset_size and goal.projection_epochs)",
    )
    show = varying_keys(ok) or ["platform"]
    out = []
    for keys, sub in groups(ok):
        tp, size, epochs = sub.median(TP), sub.median("dataset_size"), sub.median("projection_epochs")
        per_hour, cost = sub.median(f"{cur}_per_hour"), sub.median(f"projected_training_cost_{cur}")
        secs = sub.median("projected_training_s")
        basis = (
            f"{size * epochs:,.0f} samples ({epochs:g} epochs of {size:,.0f}) at the measured "
            f"{tp:,.4g} samples/s"
            if None not in (tp, size, epochs)
            else ""
        )
        if per_hour is not None and cost is not None:
            basis += f", priced at {C} {per_hour:.4g}/h for the whole machine"
            basis += (
                " (the minimum charge set it)"
                if minimum_charged(sub, [f"projected_training_cost_{cur}"])
                else ""
            )
        out.append(
            {
                **key_cols(keys, show),
                "runs": len(sub),
                "throughput median [samples/s]": tp,
                "epoch [samples]": size,
                "training [epochs]": epochs,
                "projected training [h]": secs / 3600,
                f"projected training cost [{C}]": cost,
                "projection's basis": basis,
                "noisy": noisy(sub),
            }
        )
    return Table(
        "projection",
        "Whole training projected from the measured throughput (time and cost)",
        frame(out),
        note=constant_caption(ok) + " A projection, not a measurement: the samples of the whole training "
        "(data.dataset_size x goal.projection_epochs) at the median measured samples/s, billed as one job "
        "(rounding and minimum charge applied); evaluation, start-up and data loading beyond the timed "
        "windows are left out.",
    )


@table("scaling")
def scaling_table(rows: Rows, ctx: Context) -> Table:
    s = _some(scaling_rows(rows), "no workload was run at two or more device counts")
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
                 "flagged: it is noise or a cache effect, not a result.",
                 pooled="Each row: one workload, strategy and device count (median over its runs).")


OVERHEAD = (
    ("first_step_s", "first step [s]"),
    ("warmup_s", "warm-up [s]"),
    ("warmup_steps", "warm-up steps"),
    ("compiles_warmup", "compilations in warm-up"),
    ("compiles_timed", "recompilations after warm-up"),
    ("step_time_s_median", "steady step time median [s]"),
    ("startup_to_first_step_s", "start-up to first step [s]"),
    ("host_s_per_step", "host per step [s]"),
    ("device_s_per_step", "device per step [s]"),
    ("host_overhead_fraction", "host share of a step"),
)
NEVER = "never (not faster than eager)"


def _break_even(paired: Rows):
    """Median break-even over a configuration's pairs with eager, a pair that never pays back (not faster)
    counted as infinite: 'never' when that is the median; None when the runtime compiles nothing."""
    known = [r for r in paired if "break_even_steps_vs_eager" in r]
    if not known:
        return None
    steps = [
        math.inf if r["break_even_steps_vs_eager"] is None else r["break_even_steps_vs_eager"] for r in known
    ]
    mid = statistics.median(steps)
    return NEVER if math.isinf(mid) else mid


@table("overhead")
def overhead_table(rows: Rows, ctx: Context) -> Table:
    cols = [(c, f"{c.removesuffix('_s').replace('_', ' ')} [s]") for c in compile_columns(rows)]
    cols = _some(
        [(c, label) for c, label in (*cols, *OVERHEAD) if rows.has(c)],
        "no compile/first-step/step-time figures in these records",
    )
    ok = rows.ok(None)
    show = varying_keys(ok) or ["runtime"]
    if "runtime" not in show:
        show.insert(0, "runtime")
    vs = versus_eager(ok)
    found = groups(ok)
    twins = eager_twins([sub for _, sub in found])
    out = []
    for i, (keys, sub) in enumerate(found):
        paired = Rows(vs[r["run_id"]] for r in sub if r["run_id"] in vs)
        row = {**key_cols(keys, show), "runs": len(sub), **{label: sub.median(c) for c, label in cols},
               "speed-up vs eager [x]": paired.median("speedup_vs_eager"),
               "break-even vs eager [steps]": _break_even(paired)}
        twin = found[twins[i]][1] if i in twins else None
        if twin is not None and paired:
            _, ci = ratio(sub, twin)
            row["speed-up 95% CI [x]"] = ci_text(ci)
            row["versus eager"] = verdict(ci, "faster than eager", "slower than eager")
        out.append({**row, "warnings": join_unique(sub.col("warnings"))})
    return Table(
        "overhead",
        "Framework overhead: compile time, first step, recompilations, steady step time, "
        "host vs device time per step",
        frame(out),
        note=constant_caption(ok) + " Host: dispatch, tracing and launches; device: the kernels "
        "(XLA: its trace/sync and execute clocks; CPU: computing ops vs the rest of the step)."
        + (
            " Speed-up and break-even against the eager run of the same workload and placement: break-even = "
            "compile time / (eager step - this step), the steps after which compiling has paid for itself."
            if vs
            else ""
        ),
    )


@table("efficiency")
def efficiency_table(rows: Rows, ctx: Context) -> Table:
    ok = _some(rows.ok("achieved_tflops"), "no FLOP counts in these records")
    show = varying_keys(ok) or ["platform"]
    out = []
    for keys, sub in groups(ok):
        flop, mfu, hfu = sub.median("flops_per_sample_train"), sub.median("mfu"), sub.median("hfu")
        out.append({**key_cols(keys, show), "runs": len(sub),
                    "throughput median [samples/s]": sub.median(TP),
                    "train FLOP per sample [GFLOP]": flop / 1e9 if flop is not None else None,
                    "achieved [TFLOP/s]": sub.median("achieved_tflops"),
                    "MFU [%]": mfu * 100 if mfu is not None else None,
                    "HFU [%]": hfu * 100 if hfu is not None else None,  # only where blocks were recomputed
                    "energy [J/sample]": sub.median("energy_j_per_sample"),
                    "peak device memory [GiB]": sub.median("peak_device_allocated_gib"),
                    "peak host memory [GiB]": sub.median("peak_host_rss_gib")})
    return Table(
        "efficiency",
        "Achieved FLOP/s, model FLOP utilisation (MFU), energy and memory",
        frame(out),
        note=constant_caption(ok) + " MFU needs the platform's peak_tflops for the compute dtype and counts "
        "the model's FLOPs (recomputation not counted); HFU, where activation checkpointing recomputes "
        "blocks, counts the recomputed forward too; energy comes from NVML (GPU) or RAPL (CPU) where the "
        "run could read it.",
    )


BASIS = {"train_time_to_target_s": "training to target", "projected_training_s": "projected training",
         "seconds_per_sample": "time per sample"}


@table("baseline")
def baseline_table(rows: Rows, ctx: Context) -> Table:
    n = baseline_rows(rows, ctx)
    show = varying_keys(n) or ["platform"]
    out = [{**key_cols(r, show), "baseline": "<- baseline" if r["is_baseline"] else "",
            "throughput median [samples/s]": r[TP],
            "time relative to baseline [x]": r["normalised_time"],
            "time 95% CI [x]": ci_text(r["normalised_time_ci95"]),
            "verdict": r["verdict"],
            "cost relative to baseline [x]": r["normalised_cost"],
            "compared on": BASIS.get(r["normalised_basis"])} for r in n]
    return Table(
        "baseline",
        f"Time and cost normalised to the baseline ({ctx.baseline_text})",
        frame(out),
        note=constant_caption(n) + " Below 1 is faster / cheaper than the baseline for the same work.",
    )


TRIED = "each batch tried [batch: samples/s over a timed window]"


# A search's caption names the searched axis, never the batch its records started from.
SEARCH_CAPTION = tuple(k for k in CONFIGURATION if k not in ("batch_size_per_device", "global_batch_size"))


@table("max_batch", searches=True)
def max_batch_table(rows: Rows, ctx: Context) -> Table:
    sub_rows = _some(
        Rows(r for r in rows if r.get("bench_mode") == SEARCHES),
        "no batch search (bench.mode=find_max_batch) among these records",
    )
    show = varying_keys(sub_rows) or ["platform", "runtime"]
    out = []
    for keys, sub in groups(sub_rows):
        limit_hit = [r.get("batch_search_limit_reached") for r in sub]
        largest = sub.median("max_batch_size_per_device")
        out.append(
            {
                **key_cols(keys, show),
                "runs": len(sub),
                "status": status_text(sub.col("status")),
                "largest batch that fits [per device]": largest,
                "smallest that does not [per device]": (
                    f"none up to the limit ({sub.median('batch_search_limit'):g})"
                    if all(limit_hit)
                    else sub.median("min_failing_batch_size_per_device")
                ),
                "throughput at the largest [samples/s]": sub.median("max_batch_throughput_samples_per_s"),
                "memory at the largest [GiB]": sub.median("max_batch_memory_gib"),
                TRIED: join_unique(sub.col("batch_search_throughputs")),
                "contended": _flagged(sub, "contended", "other_cpu_cores_during", "other processes' cores"),
                "trials [runs]": sub.median("batch_search_trial_count"),
                "search time [s]": sub.median("batch_search_s"),
                "reason": reasons(sub),
            }
        )
    return Table(
        "max_batch",
        "The largest per-device batch each configuration fits (bench.mode=find_max_batch)",
        frame(out),
        note=constant_caption(sub_rows, SEARCH_CAPTION) + " Compared: the per-device batch "
        "(searched; a record's own batch is only where the search started). Each trial is a short real "
        "run (a warm-up, then one timed window of several steps) through the run's own launcher; its "
        "samples/s are the window's, marked (contended) where other processes used the machine in it and "
        "(one step) in records from "
        "before trials had windows, and neither counts as the throughput at the largest. Memory is the "
        "device's peak allocation, or the host's RSS on a CPU. A search that reached "
        "bench.max_batch_limit found no failure below it.",
    )


RUN_COLUMNS = (
    ("run_id", "run"),
    ("status", "status"),
    ("reason", "reason"),
    ("experiment", "experiment"),
    ("model", "model"),
    ("data", "data"),
    ("platform", "platform"),
    ("runtime", "runtime"),
    ("precision", "precision"),
    ("parallel", "parallel"),
    ("global_batch_size", "global batch"),
    ("devices", "devices"),
    ("threads", "threads"),
    (TP, "throughput [samples/s]"),
    ("step_time_s_median", "step time median [s]"),
    ("throughput_cv", "throughput CV"),
    ("throughput_process_cv", "process CV"),
    ("step_time_cv", "step time CV"),
    ("noisy", "noisy"),
    ("contended", "contended"),
    ("other_cpu_cores_during", "other processes [cores]"),
    ("stalled", "stalled"),
    ("stall_excess_s_total", "lost to stalls [s]"),
    ("warnings", "warnings"),
)


@table("quality")
def quality_table(rows: Rows, ctx: Context) -> Table:
    q = _some(
        quality_parity(rows),
        "no work was trained to its end on two or more configurations (train_to_target runs)",
    )
    out = pd.DataFrame(
        [
            {
                "model": r["model"],
                "data": r["data"],
                "metric": goals.label(r["goal_metric"]),
                "epochs trained": r["epochs_done"],
                "configurations": r["configurations"],
                "lowest final": r["final_min"],
                "highest final": r["final_max"],
                "spread [metric]": r["spread"],
                "tolerance [metric]": r["tolerance"],
                "verdict": "same quality" if r["same_quality"] else "DIFFERS beyond the tolerance",
                "final metric per configuration": r["finals"],
            }
            for r in q
        ]
    )
    return Table(
        "quality",
        "Did the hardware change the quality of training? Final metric across configurations",
        out,
        note="Runs of the same work trained for the same number of epochs; the spread of their final "
        "metrics against an absolute tolerance (one point of accuracy) gives the verdict.",
    )


@table("published")
def published_table(rows: Rows, ctx: Context) -> Table:
    pub = _some(
        published_beside_measured(rows),
        "no run of a study preset (the studies' published figures are shown beside their runs)",
    )
    out = pd.DataFrame([{
        "study": r["study"], "figure": r["what"], "kind": r.get("kind"), "published [unit]": r["value"],
        "unit": r["unit"], "measured here [unit]": r["measured"],
        "measured as": (f"{r['measured_column']} ({r['measured_where']}; {r['measured_runs']} runs)"
                        if r["measured_column"] else "not comparable here"),
        "why not beside a measurement": r.get("why_not"),
        "conditions": r["conditions"], "source": r["source"], "date": r["date"],
    } for r in pub])
    return Table(
        "published",
        "Published figures of the studies, beside what these runs measured",
        out,
        note="Published figures come from xbench/studies/studies.yaml (with their source and date); they are "
        "never runs: no median, spread or baseline includes them. 'measured here' is the median of "
        "the matching ok runs of the same kind (synthetic or real-data throughput, training time, "
        "cost, ratio), blank with the reason when there is none.",
        pooled="Each row: one published figure, beside the median of the runs under its conditions.",
    )


@table("runs", searches=True)
def runs_table(rows: Rows, ctx: Context) -> Table:
    if not rows:
        raise NoData("no runs")
    out = [
        {label: r.get(c) for c, label in RUN_COLUMNS} for r in sorted(rows, key=lambda r: str(r["run_id"]))
    ]
    return Table("runs", "Every run (one row per record), with status, reason and warnings", frame(out),
                 pooled="Nothing: one row per run.")


@table("utilisation")
def utilisation_table(rows: Rows, ctx: Context) -> Table:
    """Per-GPU utilisation (DataParallel's GPU 0 busy while the others wait; DDP even) and the CPU's."""
    ok = Rows(
        r for r in rows.ok(None) if r.get("gpu_util_by_device") or r.get("cpu_util_percent_mean") is not None
    )
    if not ok.has("gpu_util_by_device"):
        raise NoData("no record has per-GPU utilisation (GPU runs sample it with NVML)")
    show = varying_keys(ok) or ["platform"]
    out = []
    for keys, sub in groups(ok):
        per_gpu: dict[str, list[float]] = {}
        for r in sub:
            for d, v in (r.get("gpu_util_by_device") or {}).items():
                per_gpu.setdefault(d, []).append(v)
        med = {d: statistics.median(v) for d, v in per_gpu.items()}
        out.append(
            {
                **key_cols(keys, show),
                "runs": len(sub),
                "GPU utilisation per device [%]": " ".join(f"{d}:{v:.0f}" for d, v in med.items()) or None,
                "mean over GPUs [%]": statistics.fmean(med.values()) if med else None,
                "least busy GPU [%]": min(med.values(), default=None),
                "busiest GPU [%]": max(med.values(), default=None),
                "CPU utilisation [%]": sub.median("cpu_util_percent_mean"),
                "process CPU [% of a core]": sub.median("process_cpu_percent_mean"),
            }
        )
    return Table(
        "utilisation",
        "GPU utilisation per device over the timed windows, and the CPU's",
        frame(out),
        note=constant_caption(ok) + " NVML, sampled beside the timed windows on every rank: a GPU far below "
        "the others (nn.DataParallel's replicas waiting on GPU 0) is the imbalance to look for.",
    )


@table("exchange_rates")
def exchange_rates_table(rows: Rows, ctx: Context) -> Table:
    if not ctx.rates:
        raise NoData("every priced record is in the report's currency: nothing converted")
    out = pd.DataFrame([{"from": r.currency, "to": r.to, "rate [to per from]": r.rate, "rate date": r.date,
                         "source": r.source,
                         "platforms": join_unique(x.get("platform") for x in rows
                                                  if str(x.get("price_currency", "")).upper() == r.currency)}
                        for r in ctx.rates])
    return Table(
        "exchange_rates",
        "Exchange rates used to show every cost in one currency",
        out,
        note="Each price is converted at the rate of the year it is dated (platform.price_as_of), never "
        "dropped; --currency and --fx CUR=RATE change the currency and the rates.",
        pooled="Each row: one currency pair and date.",
    )


# LLM pretraining's tables, in their own module: DDP vs the sharded strategies, which Llama sizes fit.
table("llm_strategies")(llm.strategies_table)
table("llm_fit")(llm.fit_table)


def findings_of(rows: Rows, ctx: Context) -> tuple[list[Finding], str]:
    """The report's findings (xbench/analysis/findings.py), against the baseline when one is given."""
    try:
        n = baseline_rows(rows, ctx) if ctx.baseline else None
    except NoData:
        n = None
    return findings(rows, currency(rows), n, ctx.baseline_text)


def build_tables(
    df: pd.DataFrame, ctx: Context, rows: Rows | None = None
) -> tuple[list[Table], dict[str, str]]:
    """(tables drawn, {table name: why it was skipped}); `rows`: the frame already prepared (rows.prepare)."""
    rows = rows if rows is not None else prepare(df, ctx)
    measured = Rows(r for r in rows if r.get("bench_mode") != SEARCHES)
    made, skipped = [], {}
    for name, fn in TABLES.items():
        try:
            made.append(fn(rows if name in WITH_SEARCHES else measured, ctx))
        except NoData as e:
            skipped[name] = str(e)
    return made, skipped
