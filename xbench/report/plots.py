"""The comparison plots, each one function registered in PLOTS and drawn from the tidy frame.

A plot function takes (frame, ctx) and returns a matplotlib Figure, or raises NoData with a one-line
reason (the report shows the reason instead). Workloads (model / data) are facets; lines and bars
are labelled by the config keys that vary; legends sit outside the axes so many lines stay readable.
matplotlib runs headless (Agg).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from xbench.report.tables import (  # noqa: E402
    TP,
    Context,
    NoData,
    _median,
    currency,
    groups,
    normalised_rows,
    present,
    scaling_rows,
)

PLOTS: dict[str, Callable] = {}
LINE_KEYS = ("platform", "runtime", "precision", "parallel", "pricing_model", "threads")
MARKERS = "osD^v<>PX*h"
STYLE = {"axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
         "font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 110}


def plot(name: str):
    def deco(fn):
        PLOTS[name] = fn
        return fn
    return deco


def _ok(df: pd.DataFrame, col: str = TP) -> pd.DataFrame:
    if col not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & df[col].notna()]


def label_keys(df: pd.DataFrame, keys=LINE_KEYS) -> list[str]:
    """The line-identity keys that vary in these rows (platform and runtime always name a line)."""
    vary = [k for k in keys if k in df.columns and df[k].astype(str).nunique(dropna=False) > 1]
    return vary or ["platform", "runtime"]


def label(keys: dict, names: list[str]) -> str:
    parts = []
    for k in names:
        v = keys.get(k)
        if v is None:
            continue
        parts.append(f"{v} threads" if k == "threads" else str(v))
    return " / ".join(parts) or "run"


def workloads(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [(f"{k['model']} on {k['data']}", sub) for k, sub in groups(df, ("model", "data"))]


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


def _styles_for(names: list[str]) -> dict:
    cyc = style_cycle()
    return {n: next(cyc) for n in names}


def _log2_if_wide(ax, xs) -> None:
    xs = [x for x in xs if x and x > 0]
    if xs and max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


@plot("throughput_vs_batch")
def throughput_vs_batch(df: pd.DataFrame, ctx: Context):
    ok = _ok(df)
    if ok.empty or not present(ok, "global_batch_size"):
        raise NoData("no ok run with a throughput and a global batch size")
    names = label_keys(ok)
    styles = _styles_for(sorted({label(k, names) for k, _ in groups(ok, names)}))
    wl = workloads(ok)
    fig, cells = facets(len(wl))
    for (title, sub), [ax] in zip(wl, cells):
        for keys, line in groups(sub, names):
            pts = [(b, _median(p[TP]), p[TP].min(), p[TP].max()) for b, p in line.groupby("global_batch_size")]
            pts.sort()
            lab = label(keys, names)
            color, marker = styles[lab]
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.plot(xs, ys, marker=marker, color=color, label=lab)
            if any(p[3] > p[2] for p in pts):  # repeated runs: show their min-max
                ax.vlines(xs, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.5)
        _log2_if_wide(ax, sub["global_batch_size"].dropna().tolist())
        ax.set(title=title, xlabel="global batch size [samples]", ylabel="throughput [samples/s]")
        ax.set_ylim(bottom=0)
    fig.suptitle("Throughput vs global batch size")
    legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


def _bars(ax, cats: list[str], hues: list[str], value: dict, styles: dict, fmt="{:.3g}") -> None:
    """Grouped bars: one group per category, one bar per hue; values written on the bars."""
    width = 0.8 / max(len(hues), 1)
    for j, hue in enumerate(hues):
        xs = [i + (j - (len(hues) - 1) / 2) * width for i in range(len(cats))]
        ys = [value.get((c, hue)) for c in cats]
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if not pts:
            continue
        bars = ax.bar([p[0] for p in pts], [p[1] for p in pts], width=width * 0.95,
                      color=styles[hue][0], label=hue)
        ax.bar_label(bars, labels=[fmt.format(p[1]) for p in pts], fontsize=7, padding=1)
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels(cats, rotation=30 if len(cats) > 3 else 0, ha="right" if len(cats) > 3 else "center")
    ax.margins(y=0.15)


def _bar_plot(df: pd.DataFrame, col: str, hue_key: str | None, title: str, ylabel: str):
    ok = _ok(df, col)
    names = [k for k in label_keys(ok) if k != hue_key]
    wl = workloads(ok)
    hues = sorted({str(v) for v in ok[hue_key].dropna()}) if hue_key else ["value"]
    styles = _styles_for(hues)
    fig, cells = facets(len(wl), w=max(4.6, 0.6 * ok[names].drop_duplicates().shape[0] + 2))
    for (wtitle, sub), [ax] in zip(wl, cells):
        value, cats = {}, []
        for keys, g in groups(sub, names + ([hue_key] if hue_key else [])):
            cat = label(keys, names)
            if cat not in cats:
                cats.append(cat)
            value[(cat, str(keys[hue_key]) if hue_key else "value")] = _median(g[col])
        _bars(ax, cats, hues, value, styles)
        ax.set(title=wtitle, ylabel=ylabel)
    fig.suptitle(title)
    if hue_key:
        legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


@plot("samples_per_dollar")
def samples_per_dollar(df: pd.DataFrame, ctx: Context):
    cur = currency(df)
    if cur is None:
        raise NoData("no record has a price")
    C = cur.upper()
    return _bar_plot(df, f"samples_per_s_per_{cur}_per_hour", "pricing_model",
                     "Throughput per price (on-demand vs spot vs reserved)", f"samples/s per {C}/hour")


@plot("cost_to_target")
def cost_to_target(df: pd.DataFrame, ctx: Context):
    if not present(df, "cost_to_target_usd"):
        raise NoData("no record has cost_to_target_usd")
    return _bar_plot(df, "cost_to_target_usd", "pricing_model" if df["pricing_model"].nunique() > 1 else None,
                     "Cost to reach the quality target", "cost to target [USD]")


def _accuracy(df: pd.DataFrame, x: str, xlabel: str, title: str):
    rows = df[df["curve"].notna()] if "curve" in df else df.iloc[0:0]
    rows = rows[rows["curve"].map(lambda c: any(p.get(x) is not None for p in c))] if not rows.empty else rows
    if rows.empty:
        raise NoData(f"no record has an evaluation curve with {x!r} (series eval_accuracy + {x})")
    names = label_keys(rows)
    styles = _styles_for(sorted({label(k, names) for k, _ in groups(rows, names)}))
    wl = workloads(rows)
    fig, cells = facets(len(wl))
    for (wtitle, sub), [ax] in zip(wl, cells):
        for keys, g in groups(sub, names):
            lab = label(keys, names)
            color, marker = styles[lab]
            for i, (_, r) in enumerate(g.iterrows()):  # one line per run (repeats share a colour)
                pts = [(p[x], p["metric"]) for p in r["curve"] if p.get(x) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ms=3, color=color,
                        alpha=0.9, label=lab if i == 0 else None)
        targets = sorted({float(t) for t in sub["target"].dropna()}) if "target" in sub else []
        for t in targets:
            ax.axhline(t, color="black", ls="--", lw=1, label=f"target {t:g}")
        ax.set(title=wtitle, xlabel=xlabel, ylabel="evaluation accuracy")
    fig.suptitle(title)
    legend_outside(fig, [c[0] for c in cells])
    fig.tight_layout()
    return fig


@plot("accuracy_vs_time")
def accuracy_vs_time(df: pd.DataFrame, ctx: Context):
    return _accuracy(df, "time_s", "training time [s]", "Accuracy vs training time")


@plot("accuracy_vs_epochs")
def accuracy_vs_epochs(df: pd.DataFrame, ctx: Context):
    return _accuracy(df, "epoch", "epoch", "Accuracy vs epochs")


@plot("scaling")
def scaling(df: pd.DataFrame, ctx: Context):
    s = scaling_rows(df)
    if s.empty:
        raise NoData("no workload was run at two or more device counts")
    keys = ["model", "data", "platform", "runtime", "precision", "batch_size_per_device"]
    wl = [(f"{k['model']} on {k['data']}, {k['platform']} {k['runtime']}, batch {k['batch_size_per_device']}"
           "/device", sub) for k, sub in groups(s, keys)]
    styles = _styles_for(sorted(s["parallel"].astype(str).unique()))
    fig, cells = facets(len(wl), rows_per=2, h=3.0)
    for (title, sub), (ax_t, ax_e) in zip(wl, cells):
        for par, g in sub.groupby("parallel"):
            g = g.sort_values("devices")
            color, marker = styles[str(par)]
            ax_t.plot(g["devices"], g["throughput"], marker=marker, color=color, label=str(par))
            ax_e.plot(g["devices"], g["efficiency"] * 100, marker=marker, color=color, label=str(par))
        ideal = sub.drop_duplicates("devices").sort_values("devices")
        ax_t.plot(ideal["devices"], ideal["ideal_samples_per_s"], ls="--", color="grey", label="ideal (linear)")
        ax_e.axhline(100, ls="--", color="grey", label="ideal (linear)")
        for ax in (ax_t, ax_e):
            ax.set_xticks(sorted(sub["devices"].unique()))
        ax_t.set(title=title, ylabel="throughput [samples/s]")
        ax_e.set(xlabel="devices", ylabel="scaling efficiency [%]")
        ax_e.set_ylim(0, max(110, (sub["efficiency"] * 100).max() * 1.1))
    fig.suptitle("Scaling over devices (DataParallel vs DDP vs ...)")
    legend_outside(fig, [a for c in cells for a in c])
    fig.tight_layout()
    return fig


@plot("normalised")
def normalised(df: pd.DataFrame, ctx: Context):
    n = normalised_rows(df, ctx)
    has_cost = n["cost_rel"].notna().any()
    names = [k for k in label_keys(n) if k != "threads"]
    by_threads = n["threads"].notna().any() and n["threads"].astype(str).nunique() > 1
    wl = workloads(n)
    panels = [("time_rel", "time relative to baseline [x]")] + (
        [("cost_rel", "cost relative to baseline [x]")] if has_cost else [])
    styles = _styles_for(sorted({label(k, names) for k, _ in groups(n, names)}))
    fig, cells = facets(len(wl), rows_per=len(panels), h=3.0)
    for (wtitle, sub), axes in zip(wl, cells):
        for ax, (col, ylabel) in zip(axes, panels):
            if by_threads:
                for keys, g in groups(sub, names):
                    g = g.dropna(subset=[col]).sort_values("threads")
                    lab = label(keys, names)
                    color, marker = styles[lab]
                    ax.plot(g["threads"], g[col], marker=marker, color=color, label=lab)
                ax.set_xlabel("threads")
            else:
                cats = [label(k, names) for k, _ in groups(sub, names)]
                vals = {(label(k, names), "v"): _median(g[col]) for k, g in groups(sub, names)}
                _bars(ax, cats, ["v"], vals, {"v": ("tab:blue", "o")})
            ax.axhline(1.0, color="black", ls="--", lw=1, label=f"baseline ({ctx.baseline_text})")
            ax.set(ylabel=ylabel)
            ax.set_ylim(bottom=0)
        axes[0].set_title(wtitle)
    fig.suptitle(f"Time and cost for the same work, normalised to the baseline ({ctx.baseline_text})")
    legend_outside(fig, [a for c in cells for a in c])
    fig.tight_layout()
    return fig


@plot("overhead")
def overhead(df: pd.DataFrame, ctx: Context):
    ok = df[df["status"] == "ok"]
    compile_cols = [c for c in ok.columns if c.startswith("compile") and c.endswith("_s") and ok[c].notna().any()]
    panels = [(compile_cols[0], "compile time [s]") if compile_cols else ("warmup_s", "warm-up (incl. compile) [s]"),
              ("first_step_s", "first step [s]"), ("step_time_s_median", "steady step time [s]")]
    panels = [(c, lab) for c, lab in panels if present(ok, c)]
    if not panels or not present(ok, "runtime"):
        raise NoData("no compile / first-step / step-time figures")
    names = label_keys(ok, ("runtime", "model", "platform", "precision", "parallel"))
    if "runtime" not in names:
        names.insert(0, "runtime")
    cats = [label(k, names) for k, _ in groups(ok, names)]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.0, 0.7 * len(cats) + 1.5) * len(panels), 3.6),
                             squeeze=False)
    for ax, (col, ylabel) in zip(axes[0], panels):
        vals = {(label(k, names), "v"): _median(g[col]) for k, g in groups(ok, names)}
        _bars(ax, cats, ["v"], vals, {"v": ("tab:blue", "o")})
        got = [v for v in vals.values() if v]
        if got and max(got) / min(got) > 100:
            ax.set_yscale("log")
        ax.set(ylabel=ylabel, title=ylabel.split(" [")[0])
    fig.suptitle("Framework overhead per runtime (median over runs)")
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
    with plt.rc_context(STYLE):
        for name, fn in PLOTS.items():
            try:
                made[name] = save(fn(df, ctx), out_dir, name)
            except NoData as e:
                skipped[name] = str(e)
    return made, skipped
