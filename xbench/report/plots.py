"""The comparison plots, each one function registered in PLOTS and drawn from the tidy rows.

A plot function takes (rows, ctx) and returns a matplotlib Figure, or raises NoData with a one-line
reason (the report shows the reason instead). The work (model / data) is a facet; bars and lines are
labelled by the configuration keys that vary there, so batch size, precision and strategy stay apart
unless the user pools them (--pool). Every figure says in its footer what a bar holds (pooled or one
configuration), where its error bars come from, and what it left out. Layout (horizontal bars, caps on
bars, lines, legends and facets) is xbench/report/layout.py's. Scaling, baseline and overhead figures
come from xbench.analysis. matplotlib runs headless (Agg).
"""

from __future__ import annotations

import gc
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from xbench.analysis.overhead import compile_columns
from xbench.analysis.published import published_beside_measured
from xbench.analysis.reprice import one_machine, repriced
from xbench.analysis.rows import TP, NoData, Rows, currency, groups
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.spread import spread
from xbench.analysis.workload import SCALING, WORK
from xbench.metrics import goals as goal_metrics
from xbench.metrics import targets
from xbench.records import safe_io
from xbench.report import agg_text, layout, llm
from xbench.report.interactive import json_block
from xbench.report.layout import Bar, Facet, Line, Panel, hbar_figure, line_figure, plt, summarise
from xbench.report.rows import (
    Context,
    bar_keys,
    bar_label,
    baseline_rows,
    configurations,
    constant_caption,
    pooled_text,
    prepare,
)
from xbench.tools import take

PLOTS: dict[str, Callable] = {}
SPREAD_NOTE = (
    "Error bars: min-max over repeated runs, else the run's 95% CI over its timed windows, else its "
    "p10-p90 step times."
)


def plot(name: str):
    def deco(fn):
        PLOTS[name] = fn
        return fn
    return deco


def _work_title(k: dict) -> str:
    details = ", ".join(v for v in (k.get("model_options"), k.get("data_shape")) if v)
    return f"{k['model']} on {k['data']}" + (f" ({details})" if details else "")


# While a plot is drawn (_draw): the works it had data for and the ones its figure drew (by WORK key), so the
# works one figure has no room for go on a next page (<name>_2.png, ...) and plots/<name>.json says what was
# drawn.
_WORKS: dict[tuple, str] = {}
_DRAWN: dict[tuple, str] = {}
MAX_PAGES = 4  # figures a plot kind may take (4 x layout.MAX_FACETS facets); beyond, the works are named


def _work_key(r: dict) -> tuple:
    return tuple(r.get(k) for k in WORK)


def workloads(rows: Rows, facets_per_work: int = 1) -> tuple[list[tuple[str, Rows]], str]:
    """(title, rows) per work (model and data, with their options), the most-run first when there are more
    than a figure draws (layout.MAX_FACETS facets, `facets_per_work` each), and a sentence naming the ones
    left out (empty when none; the report draws them on the plot's next page)."""
    found = [(_work_title(k), sub) for k, sub in groups(rows, WORK)]
    fit = max(1, layout.MAX_FACETS // facets_per_work)
    for t, sub in found:
        _WORKS[_work_key(sub[0])] = t
    if len(found) > fit:
        found.sort(key=lambda x: -len(x[1]))
    for t, sub in found[:fit]:
        _DRAWN[_work_key(sub[0])] = t
    if len(found) <= fit:
        return found, ""
    rest = found[fit:]
    names = ", ".join(t for t, _ in rest[:4]) + (", ..." if len(rest) > 4 else "")
    return found[:fit], (f"{len(rest)} more works not drawn here ({names}): the next page of this plot draws "
                         "them (or narrow the report with --filter model=...).")


# while a PlotJob draws: a group's spread, by its run ids (several plots ask)
_SPREAD: dict[tuple, tuple] = {}


def tp_interval(sub: Rows, power: float = 1.0) -> tuple[float | None, float | None]:
    """Throughput's spread (analysis/spread.py) carried to a figure proportional to throughput**power
    (MFU: 1; cost per sample: -1), as (low, high) ratios to the median; (None, None) without one."""
    key = tuple(r.get("run_id") for r in sub) if _JOB else (None,)  # by content: never a stale entry
    got = _SPREAD.get(key) if None not in key else None
    if got is None:
        got = spread(sub)[:2] + (sub.ok().median(TP),)
        if None not in key:
            _SPREAD[key] = got
    lo, hi, med = got
    if lo is None or hi is None or not med or lo <= 0:
        return None, None
    a, b = (lo / med) ** power, (hi / med) ** power
    return min(a, b), max(a, b)


def run_range(sub: Rows, col: str) -> tuple[float | None, float | None]:
    """min-max over repeated runs (None, None for one run)."""
    xs = sub.nums(col)
    return (min(xs), max(xs)) if len(xs) > 1 else (None, None)


def _note(*parts: str) -> str:
    return " ".join(p.strip() for p in parts if p and p.strip())


def figure_bars(rows: Rows, ctx: Context, col: str, higher_is_better: bool, *, power: float | None = 1.0,
                scale: float = 1.0, hue: str | None = None, best_of: str | None = None, drop=(),
                facets_per_work: int = 1):
    """Facets of bars of `col` (median per configuration x `scale`) and the sentences that say what a bar
    is. `power`: how the figure follows throughput, for its error bars (None: min-max over runs).
    `best_of`: a key over which only the best value of each bar is kept (the best batch size)."""
    ok = rows.ok(col)
    if not ok:
        raise NoData(f"no ok record has {col}")
    wl, left_out = workloads(ok, facets_per_work)
    facets, found_all, summarised, minimum_set = [], [], 0, 0
    cap = layout.bar_cap(len(wl) * facets_per_work)
    for title, sub in wl:
        names = bar_keys(sub, ctx, drop=(hue, best_of, *drop))
        found = []  # (bar, its keys, its runs, at a minimum charge): labelled once summarise has kept it
        for keys, g in groups(sub, names + ([hue] if hue else [])):
            if best_of:
                g = max(
                    (b for _, b in groups(g, [best_of])),
                    key=lambda b: b.median(col) * (1 if higher_is_better else -1),
                )
            found_all.append((keys, g))
            floor = any(col in (r.get("minimum_charged") or "").split(", ") for r in g)
            minimum_set += floor
            found.append((Bar("", g.median(col) * scale, hue=str(keys[hue]) if hue else None, runs=len(g)),
                          keys, g, floor))
        f = summarise([bar for bar, *_ in found], higher_is_better, cap)
        # The label and the spread of the bars drawn only: a work of 10,000 runs has ~2,000 configurations,
        # and a facet draws layout.MAX_BARS of them at most.
        drawn = {id(bar) for bar in f.bars}
        for bar, keys, g, floor in found:
            if id(bar) in drawn:
                bar.label = bar_label(keys, names) + (" (minimum charge)" if floor else "")
                bar.low, bar.high = _bar_spread(g, col, bar.value, scale, power)
        f.title = title
        summarised += f.left_out
        facets.append(f)
    notes = [constant_caption(ok), pooled_text(found_all, (*ctx.pool, *drop)),
             SPREAD_NOTE if power is not None else "Error bars: min-max over repeated runs.",
             f"Best {best_of.replace('_', ' ')} of each bar." if best_of else "",
             f"{summarised} bars left out (the best and the worst of each work are drawn; the tables "
             "list all)." if summarised else "",
             f"'(minimum charge)': the run was shorter than the platform's minimum charge "
             f"({max(ok.nums('minimum_charge_s'), default=0):g} s), so the cost is that minimum, whatever "
             "the run did." if minimum_set else "", left_out]
    return facets, _note(*notes), ok


def _bar_spread(g: Rows, col: str, v: float, scale: float, power: float | None) -> tuple:
    """A bar's error bar (low, high): min-max over its runs (`power` None), else throughput's spread
    carried to the figure (tp_interval); (None, None) without one."""
    if power is None:
        lo, hi = run_range(g, col)
        return (lo * scale, hi * scale) if lo is not None else (None, None)
    a, b = tp_interval(g, power)
    return (v * a, v * b) if a is not None else (None, None)


def hue_colors(names) -> dict:
    return {n: c for n, (c, _) in zip(sorted(names), layout.palette())}


@plot("throughput")
def throughput(rows: Rows, ctx: Context):
    rows, same_machine = one_machine(rows)  # one machine priced two ways: one configuration, its runs repeats
    facets, note, _ = figure_bars(rows, ctx, TP, True)
    return hbar_figure(
        facets,
        "Throughput per configuration (median, higher is better)",
        "throughput [samples/s]",
        _note(note, *same_machine),
    )


def _lines_by_batch(sub: Rows, names: list[str], col: str = TP) -> list[Line]:
    out = []
    for keys, line in groups(sub, names):
        pts = []
        for k, p in groups(line, ["global_batch_size"]):
            if k["global_batch_size"] is None:
                continue
            v = p.median(col)
            a, b = tp_interval(p)
            pts.append((k["global_batch_size"], v, v * a if a else None, v * b if b else None))
        if pts:
            # Coloured first (when lines are capped): the lines over two or more batch sizes, by their best
            # point; a single point says nothing about batch size, so it ranks below every line (rank < 0).
            top = max(p[1] for p in pts)
            rank = top if len(pts) > 1 else -1.0 / (1.0 + max(top, 0.0))
            out.append(Line(bar_label(keys, names), [p[0] for p in pts], [p[1] for p in pts],
                            [p[2] for p in pts], [p[3] for p in pts], rank=rank))
    return out


@plot("throughput_vs_batch")
def throughput_vs_batch(rows: Rows, ctx: Context):
    rows, same_machine = one_machine(rows)  # not two lines of one machine read as a price effect
    ok = rows.ok()
    wl, left_out = workloads(ok)
    if all(len(set(sub.col("global_batch_size"))) < 2 for _, sub in wl):
        raise NoData("no workload was run at two or more global batch sizes (the throughput table has them)")
    panels = [
        Panel(
            t,
            _lines_by_batch(sub, bar_keys(sub, ctx, drop=("global_batch_size", "batch_size_per_device"))),
            "throughput [samples/s]",
        )
        for t, sub in wl
    ]
    span = [x for p in panels for ln in p.lines for x in ln.xs]
    return line_figure(
        panels,
        "Throughput vs global batch size (median per point)",
        "global batch size [samples]",
        _note(
            constant_caption(ok),
            "Each point: one configuration (median over its runs).",
            SPREAD_NOTE,
            *same_machine,
            left_out,
        ),
        log_x=bool(span) and max(span) / min(span) >= 8,
    )


@plot("samples_per_dollar")
def samples_per_dollar(rows: Rows, ctx: Context):
    cur = currency(rows)
    if cur is None:
        raise NoData("no record has a price")
    col = f"samples_per_s_per_{cur}_per_hour"
    rows, same_machine = repriced(rows, cur)  # one machine priced two ways: the same runs at each price
    hue = "pricing_model" if len(set(rows.ok(col).col("pricing_model"))) > 1 else None
    facets, note, ok = figure_bars(rows, ctx, col, True, hue=hue, best_of="global_batch_size",
                                   drop=("batch_size_per_device",))
    C = cur.upper()
    return hbar_figure(
        facets,
        f"Throughput per price: samples/s per {C}/hour (best batch size of each; on-demand "
        "vs spot vs reserved)",
        f"samples/s per {C}/hour",
        _note(note, *same_machine, _fx_note(ctx)),
        hues=hue_colors({b.hue for f in facets for b in f.bars}) if hue else None,
    )


@plot("cost_per_million")
def cost_per_million(rows: Rows, ctx: Context):
    cur = currency(rows)
    if cur is None:
        raise NoData("no record has a price")
    rows, same_machine = repriced(rows, cur)
    facets, note, _ = figure_bars(rows, ctx, f"{cur}_per_million_samples", False, power=-1.0)
    return hbar_figure(facets, f"Cost per million samples trained [{cur.upper()}] (lower is better)",
                       f"{cur.upper()} per 1M samples", _note(note, *same_machine, _fx_note(ctx)))


def _fx_note(ctx: Context) -> str:
    if not ctx.rates:
        return ""
    return (
        "Converted: "
        + "; ".join(f"{r.currency} at {r.rate:.4g} {r.to}/{r.currency} ({r.date})" for r in ctx.rates)
        + " (the report's rate table)."
    )


@plot("cost_to_target")
def cost_to_target(rows: Rows, ctx: Context):
    """The cost to each target, one facet per work and target, labelled (a run with goal.targets has figures
    per target: the study's chart is the cost to its first); for runs of a fixed number of epochs (no target),
    the whole training's."""
    cur = currency(rows) or "usd"
    names = (f"train_cost_to_target_{cur}", f"cost_to_target_{cur}", f"train_cost_{cur}")
    col = next((c for c in names if rows.ok(c)), None)
    if col is None:
        raise NoData(f"no ok record has {' / '.join(names)}")
    C = cur.upper()
    if col == names[2]:  # runs of a fixed number of epochs: the whole training's cost
        facets, note, _ = figure_bars(rows, ctx, col, False, power=None)
        title = f"Cost of the whole training [{C}] (training time billed; lower is better)"
        return hbar_figure(facets, title, f"training cost [{C}]", _note(note, _fx_note(ctx)))
    what = "training time billed, the studies' figure" if col.startswith("train_") else "wall time billed"
    metric = " / ".join(sorted({str(m) for m in rows.col("goal_metric") if m})) or "metric"
    several = [t for t in targets.targets_in(rows.columns()) if rows.ok(targets.column(col, t))]
    facets, notes = [], []
    for i, t in enumerate(several or [None]):
        c = col if t is None else targets.column(col, t)
        fs, note, _ = figure_bars(rows, ctx, c, False, power=None, facets_per_work=len(several) or 1)
        goal = (f"to {metric} {t:g} (target {i + 1} of {len(several)})" if t is not None else
                "to " + metric + " " + " / ".join(f"{x:g}" for x in sorted(set(rows.ok(col).nums("target")))))
        for f in fs:
            f.title = f"{goal}: {f.title}"  # the target first: a long work title is cut at its end
        facets += fs
        notes.append(note)
    missed = (
        "A run that did not reach a target has no bar for it (the to_target table says why)."
        if several
        else ""
    )
    return hbar_figure(facets, f"Cost to reach each quality target [{C}] ({what}; lower is better)",
                       f"cost to target [{C}]", _note(notes[0], missed, _fx_note(ctx)))


def _curve_line(r: dict, x: str, label: str) -> Line:
    """One run's evaluation curve against `x`; in colour first, the best runs (the lowest perplexity, the
    highest accuracy)."""
    pts = [(p[x], p["metric"]) for p in r["curve"] if p.get(x) is not None]
    sign = 1 if goal_metrics.higher_is_better(r.get("goal_metric")) else -1
    return Line(label, [p[0] for p in pts], [p[1] for p in pts], rank=max(sign * p[1] for p in pts))


def _has_curve(r: dict, x: str) -> bool:
    return bool(r.get("curve")) and any(p.get(x) is not None for p in r["curve"])


def _curve_panel(wtitle: str, sub: Rows, ctx: Context, x: str) -> Panel:
    """One work's curves: one line per run (repeats share a label and a colour), a level at every target of
    the runs (goal.targets: each has its figures), not only the last one they stop at."""
    lines = [_curve_line(r, x, label) for label, g in configurations(sub, ctx) for r in g]
    goals = sorted(set(sub.nums("target")) | set(targets.targets_in(sub.columns())))
    metric = " / ".join(sorted({goal_metrics.label(m) for m in sub.col("goal_metric") if m})) or "accuracy"
    return Panel(wtitle, lines, f"evaluation {metric}", hlines={f"target {t:g}": t for t in goals})


def _accuracy(rows: Rows, ctx: Context, x: str, xlabel: str, title: str):
    rows = Rows(r for r in rows if _has_curve(r, x))
    if not rows:
        series = "train_time_s" if x == "time_s" else x
        raise NoData(f"no record has an evaluation curve (series of the goal metric with {series})")
    wl, left_out = workloads(rows)
    panels = [_curve_panel(wtitle, sub, ctx, x) for wtitle, sub in wl]
    drawn = sum(min(len(p.lines), layout.LEGEND_MAX + layout.MAX_GREY_LINES) for p in panels)
    total = sum(len(p.lines) for p in panels)
    return line_figure(
        panels,
        title,
        xlabel,
        _note(
            constant_caption(rows),
            "Each line: one run.",
            f"{total - drawn} runs not drawn." if total > drawn else "",
            left_out,
        ),
        ylim0=False,
    )


@plot("accuracy_vs_time")
def accuracy_vs_time(rows: Rows, ctx: Context):
    return _accuracy(rows, ctx, "time_s", "training time [s]", "Accuracy vs training time")


@plot("accuracy_vs_epochs")
def accuracy_vs_epochs(rows: Rows, ctx: Context):
    return _accuracy(rows, ctx, "epoch", "epoch", "Accuracy vs epochs")


@plot("scaling")
def scaling(rows: Rows, ctx: Context):
    s = scaling_rows(rows)
    if not s:
        raise NoData("no workload was run at two or more device counts")
    found = groups(s, SCALING)
    found.sort(key=lambda x: -len(x[1]))
    panels = []
    for k, sub in found[:layout.MAX_FACETS // 2]:
        title = (f"{_work_title(k)}: {k['device_kind']}, {k['runtime']}, {k['precision']}, "
                 f"batch {k['batch_size_per_device']}/device")
        tp, eff = [], []
        for pk, g in groups(sub, ["parallel"]):
            g = sorted(g, key=lambda r: r["devices"])
            n = [r["devices"] for r in g]
            tp.append(Line(str(pk["parallel"]), n, [r[TP] for r in g], rank=max(r[TP] for r in g)))
            eff.append(Line(str(pk["parallel"]), n, [r["scaling_efficiency"] * 100 for r in g],
                            rank=max(r[TP] for r in g)))
        ideal = sorted({r["devices"]: r["ideal_samples_per_s"] for r in sub}.items())
        panels.append(Panel(title, tp, "throughput [samples/s]", ref_points={"ideal (linear)": ideal}))
        panels.append(Panel(title, eff, "scaling efficiency [%]", hlines={"ideal (linear)": 100.0}))
    left = len(found) - len(panels) // 2
    return line_figure(
        panels,
        "Scaling over devices: throughput and efficiency per strategy (DataParallel vs DDP vs ...)",
        "devices",
        _note(
            "Efficiency = throughput(N) / (N x throughput(1)); the 1-device reference is the single-"
            "device run of the workload. Each point: one workload, strategy and device count (median "
            "over its runs).",
            f"{left} more workloads in the scaling table." if left > 0 else "",
        ),
    )


def _device_bars(g: Rows, cfg: str) -> list[Bar]:
    """One bar per GPU of one configuration's runs (the median over them, min-max when there are two or
    more). The GPU first in the label: a long label is cut at its end, and the colour names the
    configuration."""
    devices = sorted({d for r in g for d in r["gpu_util_by_device"]},
                     key=lambda d: [int(p) if p.isdigit() else p for p in d.split(":")])
    bars = []
    for d in devices:
        xs = [r["gpu_util_by_device"][d] for r in g if d in r["gpu_util_by_device"]]
        lo, hi = (min(xs), max(xs)) if len(xs) > 1 else (None, None)
        bars.append(Bar(f"GPU {d} · {cfg}", sorted(xs)[len(xs) // 2], lo, hi, cfg, len(xs)))
    return bars


@plot("gpu_utilisation")
def gpu_utilisation(rows: Rows, ctx: Context):
    """Per-GPU utilisation over the timed windows: nn.DataParallel's GPU 0 busy and the others waiting
    shows here, DDP's even load too."""
    ok = Rows(r for r in rows.ok(None) if r.get("gpu_util_by_device"))
    if not ok:
        raise NoData("no record has per-GPU utilisation (GPU runs sample it with NVML)")
    wl, left_out = workloads(ok)
    facets = []
    for title, sub in wl:
        bars = [b for cfg, g in configurations(sub, ctx) for b in _device_bars(g, cfg)]
        cap = layout.bar_cap(len(wl))
        facets.append(Facet(title, bars[:cap], left_out=max(0, len(bars) - cap), split=cap))
    hues = hue_colors({b.hue for f in facets for b in f.bars})
    return hbar_figure(
        facets,
        "GPU utilisation per device over the timed windows (NVML; DataParallel vs DDP)",
        "utilisation [%]",
        _note(
            constant_caption(ok),
            "Each bar: one GPU of one configuration (median over its runs; error bars min-max over runs).",
            left_out,
        ),
        hues=hues if len(hues) <= layout.LEGEND_MAX else None,
        value_text=lambda v: f"{v:.0f}%",
    )


@plot("normalised")
def normalised(rows: Rows, ctx: Context):
    n = baseline_rows(rows, ctx)
    base = f"baseline ({ctx.baseline_text})"
    panels_cols = [("normalised_time", "time relative to baseline [x]")] + (
        [("normalised_cost", "cost relative to baseline [x]")] if n.has("normalised_cost") else [])
    wl, left_out = workloads(n, len(panels_cols))
    threads = len(set(n.nums("threads"))) > 1
    note = _note(
        constant_caption(n),
        "Same work (model and data) as the baseline; each configuration against "
        "the baseline at its global batch (else the baseline's fastest). Below 1: faster / cheaper.",
        _fx_note(ctx),
        left_out,
    )
    if threads:  # the CPU study: time and cost against the thread count
        panels = []
        for title, sub in wl:
            # the others have no place on this axis
            sub = Rows(r for r in sub if r.get("threads") is not None)
            names = bar_keys(sub, ctx, drop=("threads",))
            for col, ylabel in panels_cols:
                lines = []
                for keys, g in groups(sub, names):
                    g = sorted((r for r in g if r.get(col) is not None), key=lambda r: r["threads"])
                    if g:
                        lines.append(
                            Line(
                                bar_label(keys, names),
                                [r["threads"] for r in g],
                                [r[col] for r in g],
                                rank=-min(r[col] for r in g),
                            )
                        )
                panels.append(Panel(title, lines, ylabel, hlines={base: 1.0}))
        return line_figure(
            panels,
            f"Time and cost for the same work, normalised to the baseline ({ctx.baseline_text})",
            "threads",
            _note(note, pooled_text(groups(n), ctx.pool)),
        )
    facets, found_all = [], []
    for title, sub in wl:
        names = bar_keys(sub, ctx)
        for col, xlabel in panels_cols:
            bars = []
            for keys, g in groups(sub, names):
                found_all.append((keys, g))
                if g.median(col) is not None:
                    bars.append(
                        Bar(
                            bar_label(keys, names)
                            + (" (baseline)" if all(r["is_baseline"] for r in g) else ""),
                            g.median(col),
                        )
                    )
            f = summarise(bars, False, layout.bar_cap(len(wl) * len(panels_cols)))
            f.title, f.xlabel = title + (": cost" if col == "normalised_cost" else ": time"), xlabel
            facets.append(f)
    return hbar_figure(
        facets,
        f"Time and cost for the same work, normalised to the baseline ({ctx.baseline_text})",
        "relative to baseline [x]",
        _note(note, pooled_text(found_all, ctx.pool)),
        ref=(1.0, base),
    )


@plot("overhead")
def overhead(rows: Rows, ctx: Context):
    """Framework time breakdown: one-off (compile, warm-up, first step) and per step (steady step, the host's
    share), per configuration, the runtime named first."""
    ok = rows.ok(None)
    cc = compile_columns(ok)
    panels = [(cc[0], "compile time [s]", 1.0) if cc else ("warmup_s", "warm-up (incl. compile) [s]", 1.0),
              ("first_step_s", "first step [s]", 1.0), ("step_time_s_median", "steady step time [s]", 1.0),
              ("host_overhead_fraction", "host share of a steady step [%]", 100.0)]
    panels = [p for p in panels if ok.has(p[0])]
    if not panels or not ok.has("runtime"):
        raise NoData("no compile / first-step / step-time figures")
    names = [k for k in bar_keys(ok, ctx) if k not in ("experiment",)]
    names = (
        (["runtime"] if "runtime" not in names else [])
        + names
        + [k for k in WORK[::2] if len(set(ok.col(k))) > 1]
    )
    found = groups(ok, names)
    facets = []
    for col, xlabel, scale in panels:
        bars = []
        for keys, g in found:
            if g.median(col) is None:
                continue
            lo, hi = run_range(g, col)
            bars.append(
                Bar(bar_label(keys, names), g.median(col) * scale, lo and lo * scale, hi and hi * scale)
            )
        f = summarise(bars, False, layout.bar_cap(len(panels)))
        f.title, f.xlabel = xlabel.split(" [")[0], xlabel
        facets.append(f)
    return hbar_figure(
        facets,
        "Framework time breakdown per configuration (runtime first): one-off costs and the steady step",
        "",
        _note(
            constant_caption(ok),
            pooled_text(found, (*ctx.pool, "experiment")),
            "Error bars: min-max over repeated runs. Eager never compiles: no compile bar.",
        ),
    )


@plot("mfu")
def mfu(rows: Rows, ctx: Context):
    if not rows.ok("mfu"):
        raise NoData("no record has MFU (needs FLOPs per sample and the platform's peak_tflops)")
    facets, note, _ = figure_bars(rows, ctx, "mfu", True, scale=100.0)
    return hbar_figure(
        facets,
        "Model FLOP utilisation: achieved over peak FLOP/s (higher is better)",
        "MFU [%]",
        _note(note, "Peak: the platform's peak_tflops for the compute dtype, times devices."),
    )


@plot("energy")
def energy(rows: Rows, ctx: Context):
    if not rows.ok("energy_j_per_sample"):
        raise NoData("no record has energy_j_per_sample (NVML on GPUs, RAPL on CPUs)")
    facets, note, _ = figure_bars(rows, ctx, "energy_j_per_sample", False, power=None)
    return hbar_figure(facets, "Energy per sample trained (lower is better)", "energy [J/sample]", note)


@plot("memory")
def memory(rows: Rows, ctx: Context):
    cols = [(c, label) for c, label in (("peak_device_allocated_gib", "peak device memory allocated [GiB]"),
                                        ("peak_host_rss_gib", "peak host memory (RSS) [GiB]")) if rows.ok(c)]
    if not cols:
        raise NoData("no record has peak memory figures")
    facets, notes = [], ""
    for col, label in cols:
        fs, notes, _ = figure_bars(rows, ctx, col, False, power=None, facets_per_work=len(cols))
        for f in fs:
            f.title, f.xlabel = f"{f.title}: {label.split(' [')[0]}", label
        facets += fs
    return hbar_figure(facets, "Peak memory per configuration", "", notes)


@plot("llm_memory")
def llm_memory(rows: Rows, ctx: Context):
    """LLM pretraining: memory per device by holder and tokens/s per device, DDP beside FSDP
    (report/llm.py)."""
    return llm.memory_plot(rows, ctx, workloads)


@plot("published")
def published(rows: Rows, ctx: Context):
    """Each published figure these runs can be compared with: the published value (grey) beside the measured
    median (blue), one facet per unit."""
    pub = [r for r in published_beside_measured(rows) if r["measured"] is not None]
    if not pub:
        raise NoData(
            "no run matches the conditions of a study's published figure (the published table lists them)"
        )
    facets = []
    for study, unit in sorted({(r["study"], r["unit"]) for r in pub}):  # a facet per study and unit
        bars = []
        for r in (r for r in pub if (r["study"], r["unit"]) == (study, unit)):
            # the label names the figure and its date; the published table describes it
            n = r["measured_runs"]
            bars += [
                Bar(f"{r['figure']}: {r['date']}", float(r["value"]), hue="published"),
                Bar(
                    f"{r['figure']}: here, {n} run{'s' if n != 1 else ''}", r["measured"], hue="measured here"
                ),
            ]
        facets.append(Facet(f"{study} [{unit}]", bars[:layout.MAX_BARS], xlabel=unit))
    return hbar_figure(facets, "Published figures of the studies beside these runs", "",
                       "Published figures come from xbench/studies/studies.yaml with their source and "
                       "date; they are never runs. Grey: the published figure (its date); blue: the median "
                       "of the ok runs here under the published conditions.",
                       hues={"published": "0.6", "measured here": "tab:blue"})


def save(fig, out_dir: Path, name: str, svg: bool = False) -> tuple[Path, Path | None]:
    """PNG (embedded in the HTML) and SVG (for papers) of one figure; closes it. The figure's size is set by
    its layout (no bbox_inches="tight": that draws it once more)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, vec = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    with safe_io.atomic_writer(png, fsync=False) as f:  # never through a planted link
        # embedded once in the HTML: speed over size
        fig.savefig(f, format="png", pil_kwargs={"compress_level": 1})
    if svg:
        with safe_io.atomic_writer(vec, fsync=False) as f:
            fig.savefig(f, format="svg")
    spec = getattr(fig, "xbench_chart", None)  # the figure's data for the HTML's interactive chart
    if spec is not None:
        safe_io.atomic_write(out_dir / f"{name}.chart.json", json_block(spec), fsync=False)
    plt.close(fig)
    return png, vec if svg else None


_JOB: tuple = ()  # (rows, ctx, out_dir, svg, count of plots taken) being drawn: forked processes inherit it


def _page(rows: Rows, ctx: Context, keys: set[tuple]) -> tuple[Rows, Context]:
    """The rows (and the baseline-normalised rows) of the works `keys` only: a plot's next page."""
    sub = Rows(r for r in rows if _work_key(r) in keys)
    n = ctx.normalised
    return sub, replace(ctx, normalised=None if n is None else Rows(r for r in n if _work_key(r) in keys))


def draw_pages(
    name: str, rows: Rows, ctx: Context, out_dir: Path, svg: bool = False
) -> list[tuple[str, tuple]]:
    """Plot `name` as one figure, and as next pages (<name>_2, ...) for the works a figure had no room for;
    writes plots/<name>.json: the works it had data for and the ones drawn (python -m xbench.studies
    --check-report fails on a plot that drew fewer)."""
    _WORKS.clear()
    _DRAWN.clear()
    out = [(name, save(PLOTS[name](rows, ctx), out_dir, name, svg))]
    have = dict(_WORKS)
    while len(out) < MAX_PAGES and set(have) - set(_DRAWN):
        page = f"{name}_{len(out) + 1}"
        try:  # the works left, on a page of their own (workloads() adds the ones it draws to _DRAWN)
            fig = PLOTS[name](*_page(rows, ctx, set(have) - set(_DRAWN)))
        except (NoData, ValueError):
            break
        out.append((page, save(fig, out_dir, page, svg)))
    if have:
        summary = {"plot": name, "pages": [n for n, _ in out], "works_with_data": sorted(have.values()),
                   "works_drawn": sorted(v for k, v in have.items() if k in _DRAWN)}
        safe_io.atomic_write(out_dir / f"{name}.json", json.dumps(summary, indent=1) + "\n")
    return out


def _draw(name: str) -> tuple[str, list | str]:
    rows, ctx, out_dir, svg, _ = _JOB
    with plt.rc_context(layout.STYLE), warnings.catch_warnings(), agg_text.fast():
        warnings.filterwarnings("ignore", "overflow", RuntimeWarning)  # a 1e308 figure: its axis is clamped
        try:
            return name, draw_pages(name, rows, ctx, out_dir, svg)
        # ValueError: a query the rows cannot answer (the tables say so too)
        except (NoData, ValueError) as e:
            return name, str(e)


# Taken first: the figures that cost most over many runs (10,000 FAKE records, one process: normalised
# ~1.0 s with its second page, overhead 0.7, throughput 0.7 with its second page; the rest 0.3-0.6 s). The
# last figures taken then are short ones, and the processes finish together.
COSTLY_FIRST = ("normalised", "overhead", "throughput")


def _take_order() -> list[int]:
    """PLOTS' indices in the order they are taken: COSTLY_FIRST, then the rest as registered."""
    names = list(PLOTS)
    first = [names.index(n) for n in COSTLY_FIRST if n in PLOTS]
    return first + [i for i in range(len(names)) if i not in first]


def _draw_taken() -> list[tuple[int, tuple[str, list | str]]]:
    """(index in PLOTS, _draw's answer) of each plot this process took, taking the next one in _take_order
    until none is left (the plot processes, and the caller once its tables are done: nobody idles while one
    draws)."""
    taken, names, order = _JOB[4], list(PLOTS), _take_order()
    done = []
    while (k := take(taken, len(order))) is not None:
        done.append((order[k], _draw(names[order[k]])))
    return done


class PlotJob:
    """Plots being drawn: in forked processes while the caller builds the tables (`jobs` > 1), the ones left
    also by the caller at `result()`; all of them there with one job. Figures are independent and drawing
    text is CPU-bound, so they spread over cores."""

    def __init__(self, rows: Rows, ctx: Context, out_dir: Path, jobs: int = 1, svg: bool = False):
        global _JOB
        import multiprocessing as mp

        fork = mp.get_context("fork") if hasattr(os, "fork") else None
        # the plots taken so far, shared with the forked processes (a lock and a count)
        _JOB = (rows, ctx, out_dir, svg, (fork or mp).Value("i", 0))
        self.pool = self.pending = None
        # one process a plot at most (--jobs 10000: len(PLOTS))
        self.jobs = jobs = max(1, min(jobs, len(PLOTS)))
        if jobs > 1 and fork is not None:
            for _, g in groups(rows.ok()):  # once here, not in each process: most plots ask for these
                tp_interval(g)
        # The rows (a dict per run: ~1M objects at 10,000 runs) and everything else alive now never become
        # garbage while the plots are drawn: moved out of the cyclic GC's reach (gc.freeze) until result().
        # Each full collection walked them all (~0.3 s each, 5 while the 17 figures were drawn in one process:
        # 1.4 s of 7.7), and in a forked process it also copied every page it touched.
        self.froze = gc.get_freeze_count() == 0  # another's freeze is left as it is
        if self.froze:
            gc.freeze()
        if jobs > 1 and fork is not None:
            self.pool = fork.Pool(jobs)  # the children inherit _JOB
            self.pending = [self.pool.apply_async(_draw_taken) for _ in range(jobs)]

    def _thaw(self) -> None:
        if self.froze:
            gc.unfreeze()
            self.froze = False

    def cancel(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
        self._thaw()

    def result(self) -> tuple[dict[str, tuple[Path, Path | None]], dict[str, str]]:
        global _JOB
        try:
            done = _draw_taken()  # the plots no process has taken yet, here
            if self.pool is not None:
                for pending in self.pending:
                    done += pending.get()
                self.pool.close()
                self.pool.join()
        finally:
            if self.pool is not None:
                self.pool.terminate()
            _JOB = ()
            _SPREAD.clear()
            agg_text.clear()
            self._thaw()
        done = [answer for _, answer in sorted(done, key=lambda d: d[0])]  # in PLOTS' order
        made = {page: paths for _, r in done if isinstance(r, list) for page, paths in r}
        return made, {n: r for n, r in done if isinstance(r, str)}


def build_plots(df, ctx: Context, out_dir: Path, jobs: int = 1, svg: bool = False,
                rows: Rows | None = None) -> tuple[dict[str, tuple[Path, Path | None]], dict[str, str]]:
    """({plot name: (png, svg or None)}, {plot name: why it was skipped})."""
    return PlotJob(rows if rows is not None else prepare(df, ctx), ctx, out_dir, jobs, svg).result()
