"""The comparison plots, each one function registered in PLOTS and drawn from the tidy frame.

A plot function takes (frame, ctx) and returns a matplotlib Figure, or raises NoData with a one-line
reason (the report shows the reason instead). The work (model / data) is a facet; lines and bars
are labelled by the config keys that vary; legends sit outside the axes so many lines stay readable.
Scaling, baseline and overhead figures come from xbench.analysis. matplotlib runs headless (Agg).
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402  (build_plots takes the tidy frame)

from xbench.analysis.baseline import normalised_rows  # noqa: E402
from xbench.analysis.overhead import compile_columns  # noqa: E402
from xbench.analysis.published import published_beside_measured
from xbench.analysis.rows import TP, NoData, Rows, currency, groups  # noqa: E402
from xbench.analysis.scaling import scaling_rows  # noqa: E402
from xbench.analysis.workload import SCALING, WORK  # noqa: E402
from xbench.report.rows import Context, varying_keys  # noqa: E402

PLOTS: dict[str, Callable] = {}
LINE_KEYS = ("platform", "runtime", "precision", "cpu_capability", "parallel", "pricing_model", "threads")
MARKERS = "osD^v<>PX*h"
STYLE = {"axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
         "font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 110}


def plot(name: str):
    def deco(fn):
        PLOTS[name] = fn
        return fn
    return deco


def label_keys(rows: Rows, keys=LINE_KEYS) -> list[str]:
    """The line-identity keys that vary in these rows (platform and runtime name a line otherwise)."""
    return varying_keys(rows, keys) or ["platform", "runtime"]


def label(keys: dict, names: list[str]) -> str:
    parts = []
    for k in names:
        v = keys.get(k)
        if k == "cpu_capability":  # None is a setting too: the best kernels the CPU has
            parts.append(f"{v or 'best'} CPU kernels")
            continue
        if v is None:
            continue
        if k == "threads":
            parts.append(f"{v} thread" + ("s" if v != 1 else ""))
        else:
            parts.append(f"batch {v}" if k == "global_batch_size" else str(v))
    return " / ".join(parts) or "run"


def _work_title(k: dict, width: int = 60) -> str:
    """A facet's title: the work, then its options and data shape wrapped to the facet's width."""
    details = ", ".join(v for v in (k.get("model_options"), k.get("data_shape")) if v)
    head = f"{k['model']} on {k['data']}"
    return head + ("\n" + textwrap.fill(f"({details})", width) if details else "")


def workloads(rows: Rows) -> list[tuple[str, Rows]]:
    """(title, rows) per work (model and data, with their options): one facet each."""
    return [(_work_title(k), sub) for k, sub in groups(rows, WORK)]


def facets(n: int, ncols_max: int = 3, w: float = 4.6, h: float = 3.4, rows_per: int = 1):
    """A grid of n facets (each `rows_per` axes tall); returns the figure and a list of axes lists."""
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows * rows_per, ncols, figsize=(w * ncols, h * nrows * rows_per), squeeze=False)
    out = []
    for i in range(n):
        r, c = divmod(i, ncols)
        out.append([axes[r * rows_per + j][c] for j in range(rows_per)])
    for i in range(n, nrows * ncols):  # hide the unused cells
        r, c = divmod(i, ncols)
        for j in range(rows_per):
            axes[r * rows_per + j][c].set_visible(False)
    return fig, out


def style_cycle():
    colors = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors
    return itertools.cycle(zip(itertools.cycle(colors), itertools.cycle(MARKERS)))


def legend_outside(fig, axes_list) -> None:
    """One legend for the figure, right of the axes, de-duplicated, in columns when long."""
    handles, labels, seen = [], [], set()
    for ax in axes_list:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False,
                   ncol=1 + len(labels) // 20)


def _styles_for(names) -> dict:
    cyc = style_cycle()
    return {n: next(cyc) for n in names}


def _label_styles(rows: Rows, names: list[str]) -> dict:
    """A (colour, marker) per configuration label, the same in every panel of one figure."""
    return _styles_for(sorted({label(k, names) for k, _ in groups(rows, names)}))


def _integer_ticks(ax, xs) -> None:
    """Ticks at the values that were run (batch sizes, threads); log2 spacing when they span 8x."""
    xs = sorted({float(x) for x in xs if x and x > 0})
    if not xs:
        return
    if max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
    if len(xs) <= 12:
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs])
        ax.minorticks_off()
    else:
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


@plot("throughput_vs_batch")
def throughput_vs_batch(rows: Rows, ctx: Context):
    ok = rows.ok()
    if not ok or not ok.has("global_batch_size"):
        raise NoData("no ok run with a throughput and a global batch size")
    if all(len(set(sub.col("global_batch_size"))) < 2 for _, sub in workloads(ok)):
        raise NoData("no workload was run at two or more global batch sizes (the throughput table has them)")
    names = label_keys(ok)
    styles = _label_styles(ok, names)
    wl = workloads(ok)
    fig, cells = facets(len(wl))
    for (title, sub), [ax] in zip(wl, cells):
        for keys, line in groups(sub, names):
            pts = [(k["global_batch_size"], p.median(TP), min(p.nums(TP)), max(p.nums(TP)))
                   for k, p in groups(line, ["global_batch_size"]) if k["global_batch_size"] is not None]
            lab = label(keys, names)
            color, marker = styles[lab]
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(xs, ys, marker=marker, color=color, label=lab)
            if any(p[3] > p[2] for p in pts):  # repeated runs: show their min-max
                ax.vlines(xs, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.5)
        _integer_ticks(ax, sub.nums("global_batch_size"))
        ax.set(title=title, xlabel="global batch size [samples]", ylabel="throughput [samples/s]")
        ax.set_ylim(bottom=0)
    fig.suptitle("Throughput vs global batch size")
    legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


def nice(v: float | None) -> str:
    """A bar's value as a reader would write it: 8,000 / 3.2 / 0.0137."""
    if v is None or math.isnan(v):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _bars(ax, cats: list[str], hues: list[str], value: dict, styles: dict) -> None:
    """Grouped bars: one group per category, one bar per hue present there; values on the bars."""
    for i, cat in enumerate(cats):
        here = [h for h in hues if value.get((cat, h)) is not None]
        width = 0.8 / max(len(here), 1)
        for j, hue in enumerate(here):
            x = i + (j - (len(here) - 1) / 2) * width
            y = value[(cat, hue)]
            bar = ax.bar([x], [y], width=width * 0.92, color=styles[hue][0], label=hue)
            ax.bar_label(bar, labels=[nice(y)], fontsize=7, padding=1)
    ax.set_xticks(range(len(cats)))
    tilt = len(cats) > 3 or max((len(c) for c in cats), default=0) > 14
    ax.set_xticklabels(cats, rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.margins(y=0.15)


def _hbars(ax, cats: list[str], vals: list, color: str = "tab:blue") -> None:
    """Horizontal bars, one per category (long labels stay readable), values at the bar ends."""
    ys = list(range(len(cats)))
    bars = ax.barh(ys, [v or 0 for v in vals], color=color, height=0.7)
    ax.bar_label(bars, labels=[nice(v) for v in vals], fontsize=7, padding=2)
    ax.set_yticks(ys)
    ax.set_yticklabels(cats)
    ax.set_ylim(len(cats) - 0.5, -0.5)  # first category on top
    ax.margins(x=0.2)


def _bar_plot(rows: Rows, col: str, hue_key: str | None, title: str, ylabel: str, best: bool = False):
    """Bars of `col` per configuration (median over runs; with best=True the best batch size's)."""
    ok = rows.ok(col)
    names = [k for k in label_keys(ok) if k != hue_key]
    if not best and len(set(ok.col("global_batch_size"))) > 1:
        names.append("global_batch_size")
    wl = workloads(ok)
    hues = sorted({str(v) for v in ok.col(hue_key) if v is not None}) if hue_key else ["value"]
    styles = _styles_for(hues)
    fig, cells = facets(len(wl), w=max(4.6, 0.6 * len(groups(ok, names)) + 2))
    for (wtitle, sub), [ax] in zip(wl, cells):
        value, cats = {}, []
        for keys, g in groups(sub, names + ([hue_key] if hue_key else [])):
            cat = label(keys, names)
            if cat not in cats:
                cats.append(cat)
            v = max(b.median(col) for _, b in groups(g, ["global_batch_size"])) if best else g.median(col)
            value[(cat, str(keys[hue_key]) if hue_key else "value")] = v
        _bars(ax, cats, hues, value, styles)
        ax.set(title=wtitle, ylabel=ylabel)
    fig.suptitle(title)
    if hue_key:
        legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


@plot("samples_per_dollar")
def samples_per_dollar(rows: Rows, ctx: Context):
    cur = currency(rows)
    if cur is None:
        raise NoData("no record has a price")
    return _bar_plot(rows, f"samples_per_s_per_{cur}_per_hour", "pricing_model",
                     "Throughput per price: on-demand vs spot vs reserved (best batch size of each)",
                     f"samples/s per {cur.upper()}/hour", best=True)


@plot("cost_to_target")
def cost_to_target(rows: Rows, ctx: Context):
    """The cost to the target; for runs of a fixed number of epochs (no target), the whole training's."""
    cur = currency(rows) or "usd"
    names = (f"train_cost_to_target_{cur}", f"cost_to_target_{cur}", f"train_cost_{cur}")
    col = next((c for c in names if rows.ok(c)), None)
    if col is None:
        raise NoData(f"no ok record has {' / '.join(names)}")
    hue = "pricing_model" if len(set(rows.col("pricing_model"))) > 1 else None
    if col == names[2]:
        return _bar_plot(rows, col, hue, "Cost of the whole training (training time only)",
                         f"training cost [{cur.upper()}]")
    what = "training time only" if col.startswith("train_") else "wall time, incl. evaluation"
    return _bar_plot(rows, col, hue, f"Cost to reach the quality target ({what})", f"cost to target [{cur.upper()}]")


def _accuracy(rows: Rows, x: str, xlabel: str, title: str):
    rows = Rows(r for r in rows if r.get("curve") and any(p.get(x) is not None for p in r["curve"]))
    if not rows:
        series = "train_time_s" if x == "time_s" else x
        raise NoData(f"no record has an evaluation curve (series of the goal metric with {series})")
    names = label_keys(rows)
    styles = _label_styles(rows, names)
    wl = workloads(rows)
    fig, cells = facets(len(wl))
    for (wtitle, sub), [ax] in zip(wl, cells):
        for keys, g in groups(sub, names):
            lab = label(keys, names)
            color, marker = styles[lab]
            for i, r in enumerate(g):  # one line per run (repeats share a colour)
                pts = [(p[x], p["metric"]) for p in r["curve"] if p.get(x) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ms=3, color=color,
                        alpha=0.9, label=lab if i == 0 else None)
        for t in sorted(set(sub.nums("target"))):
            ax.axhline(t, color="black", ls="--", lw=1, label=f"target {t:g}")
        metric = " / ".join(sorted({str(m) for m in sub.col("goal_metric") if m})) or "accuracy"
        ax.set(title=wtitle, xlabel=xlabel, ylabel=f"evaluation {metric}")
    fig.suptitle(title)
    legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


@plot("accuracy_vs_time")
def accuracy_vs_time(rows: Rows, ctx: Context):
    return _accuracy(rows, "time_s", "training time [s]", "Accuracy vs training time")


@plot("accuracy_vs_epochs")
def accuracy_vs_epochs(rows: Rows, ctx: Context):
    return _accuracy(rows, "epoch", "epoch", "Accuracy vs epochs")


@plot("scaling")
def scaling(rows: Rows, ctx: Context):
    s = scaling_rows(rows)
    if not s:
        raise NoData("no workload was run at two or more device counts")
    wl = [(f"{_work_title(k)}\n{k['device_kind']}, {k['runtime']}, {k['precision']}, "
           f"batch {k['batch_size_per_device']}/device", sub) for k, sub in groups(s, SCALING)]
    styles = _styles_for(sorted({str(v) for v in s.col("parallel")}))
    fig, cells = facets(len(wl), rows_per=2, h=3.0)
    for (title, sub), (ax_t, ax_e) in zip(wl, cells):
        for pk, g in groups(sub, ["parallel"]):
            g = sorted(g, key=lambda r: r["devices"])
            color, marker = styles[str(pk["parallel"])]
            ax_t.plot([r["devices"] for r in g], [r[TP] for r in g], marker=marker, color=color,
                      label=str(pk["parallel"]))
            ax_e.plot([r["devices"] for r in g], [r["scaling_efficiency"] * 100 for r in g], marker=marker, color=color,
                      label=str(pk["parallel"]))
        ideal = sorted({r["devices"]: r["ideal_samples_per_s"] for r in sub}.items())
        ax_t.plot([d for d, _ in ideal], [v for _, v in ideal], ls="--", color="grey", label="ideal (linear)")
        ax_e.axhline(100, ls="--", color="grey", label="ideal (linear)")
        for ax in (ax_t, ax_e):
            ax.set_xticks([d for d, _ in ideal])
        ax_t.set(title=title, ylabel="throughput [samples/s]")
        ax_e.set(xlabel="devices", ylabel="scaling efficiency [%]")
        ax_e.set_ylim(0, max(110, max(r["scaling_efficiency"] for r in sub) * 110))
    fig.suptitle("Scaling over devices (DataParallel vs DDP vs ...)")
    legend_outside(fig, [a for c in cells for a in c])
    fig.tight_layout()
    return fig


@plot("normalised")
def normalised(rows: Rows, ctx: Context):
    n = normalised_rows(rows, ctx.baseline, ctx.baseline_text)
    names = [k for k in label_keys(n) if k != "threads"] or ["platform", "runtime"]
    by_threads = len(set(n.nums("threads"))) > 1
    wl = workloads(n)
    panels = [("normalised_time", "time relative to baseline [x]")] + (
        [("normalised_cost", "cost relative to baseline [x]")] if n.has("normalised_cost") else [])
    styles = _label_styles(n, names)
    ncats = max(len(groups(sub, names)) for _, sub in wl)
    h = 3.0 if by_threads else max(2.0, 0.35 * ncats + 1.0)
    fig, cells = facets(len(wl), rows_per=len(panels), h=h, w=4.6 if by_threads else 5.5)
    for (wtitle, sub), axes in zip(wl, cells):
        for ax, (col, ylabel) in zip(axes, panels):
            if by_threads:
                for keys, g in groups(sub, names):
                    g = sorted((r for r in g if r.get(col) is not None and r.get("threads") is not None),
                               key=lambda r: r["threads"])
                    if not g:  # runs that do not say their thread count have no place on this axis
                        continue
                    lab = label(keys, names)
                    color, marker = styles[lab]
                    ax.plot([r["threads"] for r in g], [r[col] for r in g], marker=marker, color=color, label=lab)
                _integer_ticks(ax, sub.nums("threads"))
                ax.set_xlabel("threads")
                ax.axhline(1.0, color="black", ls="--", lw=1, label=f"baseline ({ctx.baseline_text})")
                ax.set(ylabel=ylabel)
                ax.set_ylim(bottom=0)
            else:  # one bar per configuration, the baseline's line at 1
                found = groups(sub, names)
                _hbars(ax, [label(k, names) for k, _ in found], [g.median(col) for _, g in found])
                ax.axvline(1.0, color="black", ls="--", lw=1, label=f"baseline ({ctx.baseline_text})")
                ax.set(xlabel=ylabel)
                ax.set_xlim(left=0)
        axes[0].set_title(wtitle)
    fig.suptitle(f"Time and cost for the same work, normalised to the baseline ({ctx.baseline_text})")
    legend_outside(fig, [a for c in cells for a in c])
    fig.tight_layout()
    return fig


@plot("overhead")
def overhead(rows: Rows, ctx: Context):
    ok = rows.ok(None)
    cc = compile_columns(ok)
    panels = [(cc[0], "compile time [s]") if cc else ("warmup_s", "warm-up (incl. compile) [s]"),
              ("first_step_s", "first step [s]"), ("step_time_s_median", "steady step time [s]")]
    panels = [(c, lab) for c, lab in panels if ok.has(c)]
    if not panels or not ok.has("runtime"):
        raise NoData("no compile / first-step / step-time figures")
    names = label_keys(ok, ("runtime", "model", "platform", "precision", "parallel", "global_batch_size"))
    if "runtime" not in names:
        names.insert(0, "runtime")
    found = groups(ok, names)
    cats = [label(k, names) for k, _ in found]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.5, max(2.4, 0.32 * len(cats) + 1.4)),
                             squeeze=False, sharey=True)
    for ax, (col, xlabel) in zip(axes[0], panels):
        vals = [g.median(col) for _, g in found]
        _hbars(ax, cats, vals)
        got = [v for v in vals if v]
        if got and max(got) / min(got) > 100:
            ax.set_xscale("log")
        ax.set(xlabel=xlabel, title=xlabel.split(" [")[0])
    fig.suptitle("Framework overhead per runtime (median over runs; n/a: not measured, e.g. eager never compiles)")
    fig.tight_layout()
    return fig


@plot("published")
def published(rows: Rows, ctx: Context):
    """Each published figure that these runs can be compared with: the published value (hatched, grey)
    beside the measured median, one panel per unit."""
    pub = [r for r in published_beside_measured(rows) if r["measured"] is not None]
    if not pub:
        raise NoData("no run matches the conditions of a study's published figure (the published table lists them)")
    units = sorted({r["unit"] for r in pub})
    tallest = max(sum(r["unit"] == u for r in pub) for u in units)
    fig, cells = facets(len(units), ncols_max=1, w=9.0, h=1.4 + 0.8 * tallest)
    for unit, [ax] in zip(units, cells):
        mine = [r for r in pub if r["unit"] == unit]
        ys = list(range(len(mine)))
        pub_bars = ax.barh([y - 0.2 for y in ys], [float(r["value"]) for r in mine], height=0.38, color="0.75",
                           hatch="//", edgecolor="0.4", label="published")
        run_bars = ax.barh([y + 0.2 for y in ys], [r["measured"] for r in mine], height=0.38, color="tab:blue",
                           label="measured here")
        ax.bar_label(pub_bars, labels=[nice(float(r["value"])) for r in mine], fontsize=7, padding=2)
        ax.bar_label(run_bars, labels=[f"{nice(r['measured'])} ({r['measured_runs']} runs)" for r in mine],
                     fontsize=7, padding=2)
        ax.set_yticks(ys)
        ax.set_yticklabels([textwrap.fill(f"{r['study']}: {r['what']}", 44) for r in mine], fontsize=8)
        ax.set_ylim(len(mine) - 0.5, -0.5)
        ax.margins(x=0.25)
        ax.set(xlabel=unit)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / max(1, len(mine)) - 0.12), ncols=2, fontsize=7,
                  frameon=False)
    fig.suptitle("Published figures (hatched) beside these runs")
    fig.tight_layout()
    return fig


def save(fig, out_dir: Path, name: str) -> tuple[Path, Path]:
    """PNG (embedded in the HTML) and SVG (for papers) of one figure; closes it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    fig.savefig(png, bbox_inches="tight")
    fig.savefig(svg, bbox_inches="tight")
    plt.close(fig)
    return png, svg


def build_plots(df: pd.DataFrame, ctx: Context, out_dir: Path) -> tuple[dict[str, tuple[Path, Path]], dict[str, str]]:
    """({plot name: (png, svg)}, {plot name: why it was skipped})."""
    made, skipped = {}, {}
    rows = Rows.of(df)
    with plt.rc_context(STYLE):
        for name, fn in PLOTS.items():
            try:
                made[name] = save(fn(rows, ctx), out_dir, name)
            except NoData as e:
                skipped[name] = str(e)
    return made, skipped
