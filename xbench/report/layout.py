"""Figure layout that holds at 1, 200 and 10,000 runs: horizontal bars (labels stay readable), facets stacked
in one column, at most MAX_BARS bars a facet (beyond, the best and the worst with the count left out named),
at most LEGEND_MAX legend entries (the rest drawn grey and counted), at most MAX_FACETS facets (the rest named),
and figure sizes capped.

Margins are computed from the text they must hold (characters x a width per character), not by
tight_layout or bbox_inches="tight": each of those draws the whole figure once more, and drawing text is
most of what a figure costs (10,000 runs: the report's plots must take a few seconds, not a minute).
`text_problems` checks the result from matplotlib's own layout boxes (the tests use it).
"""

from __future__ import annotations

import itertools
import math
import textwrap
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from xbench.metrics.numbers import compact  # noqa: E402
from xbench.report.escape import plot_text  # noqa: E402
from xbench.report.interactive import hbar_spec, line_spec  # noqa: E402

FONT = 8.0  # points, every text but the titles
CHAR_IN = 0.62 * FONT / 72  # a wide-ish character of DejaVu Sans at FONT, in inches
LINE_IN = 1.45 * FONT / 72  # one line of text
BAR_IN = 0.24  # height of one bar row
MAX_BARS = 18  # bars a facet shows: the best TOP_BARS and the worst (MAX_BARS - TOP_BARS)
TOP_BARS = 12
MAX_FIG_BARS = 40  # bars a whole figure shows (facets share it): text is most of a figure's drawing time
MAX_FACETS = 4
LEGEND_MAX = 10
LABEL_CHARS = 46  # a bar's label is cut to this (the tables have it whole)
LEGEND_CHARS = 60  # a line's legend entry (the legend column has more room than a bar's label)
FIG_MAX_W, FIG_MAX_H = 16.0, 24.0  # inches (at 100 dpi: 1600 x 2400 px)
DPI = 100
MARKERS = "osD^v<>PX*h"
DASHES = ("-", "--", "-.", ":")
GREY = "0.72"
STYLE = {"axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
         "font.size": FONT, "axes.titlesize": FONT + 1, "axes.labelsize": FONT, "legend.fontsize": FONT,
         "xtick.labelsize": FONT, "ytick.labelsize": FONT, "figure.dpi": DPI, "savefig.dpi": DPI,
         "svg.fonttype": "none",  # SVG text stays text: smaller files, faster to write
         "text.hinting": "no_hinting"}  # a quarter less time to draw the text, no visible difference at 100 dpi


def nice(v: float | None) -> str:
    """A value as a reader would write it: 8,000 / 3.2 / 0.0137 (the findings' form)."""
    return compact(v, 3, whole_from=100, missing="n/a")


def short(text: str, n: int = LABEL_CHARS) -> str:
    """A label cut to `n` characters, drawn as plain text (escape.plot_text)."""
    return plot_text(text if len(text) <= n else text[: n - 1] + "…")


SEP = " / "  # between the keys of a configuration's label (analysis/workload.configuration_label)


def fit_label(text: str, n: int = LABEL_CHARS) -> str:
    """A label of `n` characters at most that keeps every key it names: the longest key is cut in its
    middle (its start and its end stay) until the label fits, never the label's end (where the key that
    tells two bars apart often is)."""
    parts = text.split(SEP)
    room = n - len(SEP) * (len(parts) - 1)
    if len(text) <= n or room < 6 * len(parts):
        return short(text, n)
    full = list(parts)
    while sum(map(len, parts)) > room:  # the longest key down to the next longest, a character at least each time
        i = max(range(len(parts)), key=lambda j: len(parts[j]))
        p, q = parts[i], full[i]
        second = max((len(x) for j, x in enumerate(parts) if j != i), default=0)
        size = max(5, len(p) - (sum(map(len, parts)) - room), min(second, len(p) - 1))
        if size >= len(p):
            break
        keep = size - 1  # characters kept besides the "…", cut from the key as written
        parts[i] = q[: (keep + 1) // 2] + "…" + q[len(q) - keep // 2:]
    return plot_text(SEP.join(parts))


def fit_labels(labels: list[str], n: int = LABEL_CHARS) -> list[str]:
    """fit_label for each; if two different labels would read the same, the labels are kept whole."""
    fitted = [fit_label(x, n) for x in labels]
    if len(set(fitted)) < len(set(labels)):
        return [plot_text(x) for x in labels]
    return fitted


def palette():
    colors = plt.get_cmap("tab10").colors
    return itertools.cycle(zip(colors, MARKERS))


@dataclass
class Bar:
    label: str
    value: float
    low: float | None = None  # error bar: the figure's spread (None: none measured)
    high: float | None = None
    hue: str | None = None  # colour group (pricing model, strategy); None: one colour
    runs: int = 1


@dataclass
class Facet:
    title: str
    bars: list[Bar]
    left_out: int = 0  # bars not shown (summarised): a gap row after the first `split` bars says how many
    split: int = 0
    xlabel: str | None = None  # the figure's when None


def bar_cap(facets: int) -> int:
    """Bars each of `facets` facets may show."""
    return max(8, min(MAX_BARS, MAX_FIG_BARS // max(facets, 1)))


def summarise(bars: list[Bar], higher_is_better: bool, cap: int = MAX_BARS) -> Facet:
    """The bars sorted best first; beyond `cap`, the best two thirds of the cap and the worst third."""
    order = sorted(bars, key=lambda b: b.value, reverse=higher_is_better)
    if len(order) <= cap:
        return Facet("", order)
    top = round(cap * TOP_BARS / MAX_BARS)
    return Facet("", order[:top] + order[len(order) - (cap - top):], left_out=len(order) - cap, split=top)


def _title_lines(text: str, width_in: float) -> list[str]:
    return textwrap.wrap(plot_text(text), max(20, int(width_in / CHAR_IN))) or [""]


class Canvas:
    """A figure laid out in inches: a title block on top, a footer note, a legend column on the right."""

    def __init__(self, width: float, title: str, note: str, legend_labels: list[str] = ()):
        self.legend_w = (max((len(s) for s in legend_labels), default=0) * CHAR_IN + 0.6) if legend_labels else 0.0
        self.width = min(FIG_MAX_W, width + self.legend_w)
        # the title is drawn 2 points larger and bold: its characters are that much wider than CHAR_IN
        self.title = _title_lines(title, (self.width - 0.4) * FONT / (FONT + 2) / 1.1)
        self.note = _title_lines(note, self.width - 0.4) if note else []
        self.top_in = 0.2 + len(self.title) * LINE_IN * 1.25
        self.bottom_in = 0.15 + len(self.note) * LINE_IN

    def figure(self, body_h: float):
        h = min(FIG_MAX_H, self.top_in + body_h + self.bottom_in)
        self.height = h
        fig = plt.figure(figsize=(self.width, h))
        fig.text(0.2 / self.width, 1 - 0.15 / h, "\n".join(self.title), va="top", ha="left",
                 fontsize=FONT + 2, fontweight="bold")
        if self.note:
            fig.text(0.2 / self.width, 0.1 / h, "\n".join(self.note), va="bottom", ha="left", fontsize=FONT - 0.5,
                     color="0.3")
        return fig

    def axes(self, fig, left: float, top: float, w: float, h: float):
        """Axes at `left` inches from the left edge and `top` inches below the title block."""
        H = self.height
        return fig.add_axes((left / self.width, 1 - (self.top_in + top + h) / H, w / self.width, h / H))

    def legend(self, fig, handles, labels) -> None:
        if handles:
            x = (self.width - self.legend_w + 0.15) / self.width
            fig.legend(handles, [plot_text(s) for s in labels], loc="upper left",
                       bbox_to_anchor=(x, 1 - self.top_in / self.height), frameon=False, borderaxespad=0,
                       handlelength=1.5)


BIGGEST = 1e300  # axis limits and label positions stay finite (a record's 1e308 would overflow to inf)


def _times(v: float, f: float) -> float:
    return min(v * f, BIGGEST) if v < BIGGEST else BIGGEST


def _xaxis(ax, lo: float, hi: float, log: bool) -> None:
    if log:
        ax.set_xscale("log")
        lo, hi = max(lo, 1 / BIGGEST), min(max(hi, lo), BIGGEST)  # no tick below the smallest float (it reads 0)
        # a quarter of the axis left for the value labels, computed in logs (no overflow)
        top = math.log10(hi) + 0.3 * (math.log10(hi) - math.log10(lo) + math.log10(1.5))
        ax.set_xlim(lo / 1.5, 10 ** min(top, math.log10(BIGGEST)))
        ax.minorticks_off()  # a log axis's minor ticks cost more to draw than the bars
        # not mathtext (slow to lay out); a tick that underflowed to 0 has no place on a log axis
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: nice(v) if v > 0 else ""))
    else:
        ax.set_xlim(0, _times(hi, 1.28) if hi > 0 else 1)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: nice(v) if v else "0"))


def hbar_figure(facets: list[Facet], title: str, xlabel: str, note: str = "", hues: dict | None = None,
                ref: tuple[float, str] | None = None, value_text=nice, log: bool | None = None):
    """Horizontal bars, one facet per work stacked in one column; error bars where a bar has a spread;
    each bar's value at its end; `ref` draws a dashed reference line (the baseline's 1.0)."""
    facets = facets[:MAX_FACETS]
    fitted = fit_labels([b.label for f in facets for b in f.bars])
    names = dict(zip((b.label for f in facets for b in f.bars), fitted))
    labels = list(fitted)
    left = max((len(s) for s in labels), default=8) * CHAR_IN + 0.35
    plot_w = 5.2
    hue_names = list(hues or {})
    legend = hue_names + ([ref[1]] if ref else [])
    cv = Canvas(left + plot_w + 0.3, title, note, legend)
    plot_w = min(plot_w, cv.width - cv.legend_w - left - 0.3)
    heights = [(len(f.bars) + (1 if f.left_out else 0)) * BAR_IN + 0.25 for f in facets]
    gap = 0.45 + LINE_IN  # the x label, then the next facet's title
    body = sum(heights) + gap * len(facets) + 0.3
    fig = cv.figure(body)
    y = 0.3
    handles = {}
    logs = []  # each facet's axis (the HTML report's chart draws it the same)
    for f, h in zip(facets, heights):
        ax = cv.axes(fig, left, y, plot_w, h)
        y += h + gap
        rows = f.bars
        ys = [i + 1 if f.left_out and i >= f.split else i for i in range(len(rows))]  # the gap row at `split`
        colors = [hues[b.hue] if hues and b.hue in hues else "tab:blue" for b in rows]
        bars = ax.barh(ys, [b.value for b in rows], color=colors, height=0.72)
        for b, patch in zip(rows, bars):
            if hues and b.hue in hues:
                handles.setdefault(b.hue, patch)
        err = [(yy, b) for yy, b in zip(ys, rows) if b.low is not None and b.high is not None]
        if err:
            ax.errorbar([b.value for _, b in err], [yy for yy, _ in err],
                        xerr=[[max(b.value - b.low, 0) for _, b in err], [max(b.high - b.value, 0) for _, b in err]],
                        fmt="none", ecolor="0.15", elinewidth=0.8, capsize=2)
        hi = max([b.high or b.value for b in rows] + [ref[0] if ref else 0], default=1)
        hi = hi if hi > 0 else 1.0  # a facet whose bars are all 0 (a host share read as 0): an axis still
        lo = min([b.low or b.value for b in rows if (b.low or b.value) > 0] or [hi])
        flog = log if log is not None else hi / lo > 200  # per facet: a narrow range reads better linear
        logs.append(flog)
        _xaxis(ax, lo, hi, flog)
        x1 = ax.get_xlim()[1]
        x0 = ax.get_xlim()[0]  # where the value labels' room at the right begins (in logs: no overflow)
        room = 10 ** (math.log10(x1) - 0.15 * (math.log10(x1) - math.log10(x0))) if flog else x1 * 0.85
        for yy, b in zip(ys, rows):
            end = max(b.value, b.high or 0)
            at = _times(end, 1.08) if flog else min(end + hi * 0.015, BIGGEST)
            # a value beyond the axis' room (a clamped 1e308) is written inside the axis, at its right end
            ax.text(*((at, yy) if at <= room else (x1, yy)), value_text(b.value), va="center",
                    ha="left" if at <= room else "right", fontsize=FONT - 0.5)
        ticks, ys_all = [names[b.label] for b in rows], list(ys)
        if f.left_out:
            ticks.insert(f.split, f"… {f.left_out} more (in the tables) …")
            ys_all.insert(f.split, f.split)
        ax.set_yticks(ys_all)
        ax.set_yticklabels(ticks)
        ax.set_ylim(max(ys_all, default=0) + 0.6, -0.6)
        ax.grid(axis="y", visible=False)
        if ref:
            line = ax.axvline(ref[0], color="black", ls="--", lw=1)
            handles.setdefault(ref[1], line)
        ax.set_title(short(f.title, int(plot_w / CHAR_IN)), loc="left")
        ax.set_xlabel(f.xlabel or xlabel)
    cv.legend(fig, list(handles.values()), list(handles))
    fig.xbench_chart = hbar_spec(facets, names, title, xlabel, note, hues, ref, logs, value_text)  # the HTML's chart
    return fig


@dataclass
class Line:
    label: str
    xs: list[float]
    ys: list[float]
    lows: list[float | None] | None = None  # error bars (None: none measured)
    highs: list[float | None] | None = None
    rank: float = 0.0  # larger: more important (kept in colour when lines are capped)


@dataclass
class Panel:
    title: str
    lines: list[Line]
    ylabel: str = ""
    hlines: dict = None  # {legend label: y} dashed reference lines (a target, 100 %, the baseline's 1)
    ref_points: dict = None  # {legend label: [(x, y), ...]} a dashed reference curve (the ideal)


MAX_GREY_LINES = 40  # beyond this many uncoloured lines a panel draws only these (the count is in the note)


def line_figure(panels: list[Panel], title: str, xlabel: str, note: str = "", log_x: bool = False,
                ylim0: bool = True, panel_h: float = 2.9, ncols: int = 2):
    """Line facets (a grid of at most MAX_FACETS): each label keeps one colour and marker in every facet; beyond
    LEGEND_MAX labels the least important are drawn thin and grey and counted in one legend entry."""
    panels = panels[:MAX_FACETS]
    rank: dict[str, float] = {}
    for p in panels:
        for ln in p.lines:
            rank[ln.label] = max(rank.get(ln.label, -math.inf), ln.rank)
    coloured = sorted(sorted(rank, key=lambda n: -rank[n])[:LEGEND_MAX])
    styles = dict(zip(coloured, palette()))
    # Curves that coincide stay visible: each label its own dash, and hollow markers that shrink label by label
    # (the first drawn largest, so identical points show as rings inside rings).
    dashes = {n: (DASHES[i % len(DASHES)], 7.5 - 1.2 * (i % 4), 2 + i) for i, n in enumerate(coloured)}
    shown = fit_labels(coloured, LEGEND_CHARS)
    short_of = dict(zip(coloured, shown))
    grey = len(rank) - len(coloured)
    grey_label = f"{grey} more (grey)"
    refs = list(dict.fromkeys(k for p in panels for k in (*(p.hlines or {}), *(p.ref_points or {}))))
    legend_labels = shown + ([grey_label] if grey else []) + refs
    ncols = min(ncols, len(panels)) or 1
    nrows = math.ceil(len(panels) / ncols)
    pw, left, gap_w = 4.4, 0.9, 0.85
    titles = [_title_lines(p.title, pw) for p in panels]
    title_h = max((len(t) for t in titles), default=1) * LINE_IN * 1.2 + 0.1
    cv = Canvas(left + ncols * pw + (ncols - 1) * gap_w + 0.25, title, note, legend_labels)
    fig = cv.figure(nrows * (panel_h + title_h + 0.5) + 0.1)
    handles: dict[str, object] = {}
    for i, (p, tl) in enumerate(zip(panels, titles)):
        r, c = divmod(i, ncols)
        ax = cv.axes(fig, left + c * (pw + gap_w), title_h + r * (panel_h + title_h + 0.5), pw, panel_h)
        greys = [ln for ln in p.lines if ln.label not in styles][:MAX_GREY_LINES]
        for ln in greys:  # underneath the coloured ones
            handles.setdefault(grey_label, ax.plot(ln.xs, ln.ys, color=GREY, lw=0.7, zorder=1)[0])
        for ln in (ln for ln in p.lines if ln.label in styles):
            color, marker = styles[ln.label]
            ls, ms, z = dashes[ln.label]
            handles.setdefault(short_of[ln.label], ax.plot(ln.xs, ln.ys, marker=marker, ms=ms, mfc="none", mew=1.2,
                                                           color=color, lw=1.4, ls=ls, zorder=3 + z)[0])
            pts = [(x, y, lo, hi) for x, y, lo, hi in zip(ln.xs, ln.ys, ln.lows or [], ln.highs or [])
                   if lo is not None and hi is not None]
            if pts:
                ax.errorbar([q[0] for q in pts], [q[1] for q in pts],
                            yerr=[[max(q[1] - q[2], 0) for q in pts], [max(q[3] - q[1], 0) for q in pts]],
                            fmt="none", ecolor=color, elinewidth=0.8, capsize=2, zorder=2)
        for j, (name, yv) in enumerate((p.hlines or {}).items()):  # one line per target, each its own dash
            handles.setdefault(name, ax.axhline(yv, color=("black", "0.45", "0.25", "0.6")[j % 4],
                                                ls=((0, (5, 3)), (0, (1.5, 2)), (0, (6, 2, 1, 2)), (0, (3, 1)))[j % 4],
                                                lw=1))
        for name, pts in (p.ref_points or {}).items():
            handles.setdefault(name, ax.plot([q[0] for q in pts], [q[1] for q in pts], color="black", ls="--",
                                             lw=1)[0])
        if log_x:
            ax.set_xscale("log", base=2)
        xs = sorted({x for ln in p.lines for x in ln.xs if x is not None})
        if xs and len(xs) <= 8:
            ax.set_xticks(xs)
            ax.set_xticklabels([nice(x) for x in xs])  # 3 significant digits, not a time's six
            ax.minorticks_off()
        else:
            ax.xaxis.set_major_locator(MaxNLocator(6))
        ax.yaxis.set_major_locator(MaxNLocator(6))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: nice(v) if v else "0"))
        if ylim0:
            ax.set_ylim(bottom=0)
        ax.set_title("\n".join(tl), loc="left")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(p.ylabel)
    order = shown + [grey_label] + refs
    cv.legend(fig, [handles[k] for k in order if k in handles], [k for k in order if k in handles])
    fig.xbench_chart = line_spec(panels, styles, short_of, GREY, MAX_GREY_LINES, title, xlabel, note, log_x,
                                 ylim0)  # the HTML's chart
    return fig


def text_problems(fig, tolerance_px: float = 1.0) -> list[str]:
    """Texts that overlap one another or stick out of the figure, from matplotlib's own layout boxes
    (after a draw). Empty: the figure reads."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    ticks, drawn = set(), []
    for ax in fig.axes:  # tick labels: only those of ticks inside the view (the others are never drawn)
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
                if lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                    drawn += [tick.label1, tick.label2]
    texts = [t for t in fig.findobj(matplotlib.text.Text) if id(t) not in ticks] + drawn
    boxes = []
    for t in texts:
        if not t.get_visible() or not t.get_text().strip():
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        bb = t.get_window_extent(r)
        if bb.width == 0 or bb.height == 0:
            continue
        boxes.append((t.get_text().replace("\n", " ")[:40], bb))
    out = []
    for s, bb in boxes:
        if bb.x0 < -tolerance_px or bb.y0 < -tolerance_px or bb.x1 > W + tolerance_px or bb.y1 > H + tolerance_px:
            out.append(f"{s!r} outside the figure ({bb.x0:.0f},{bb.y0:.0f})-({bb.x1:.0f},{bb.y1:.0f}) of {W:.0f}x{H:.0f}")
    boxes.sort(key=lambda x: x[1].x0)
    for i, (s, a) in enumerate(boxes):  # sweep along x: only boxes that start before this one ends
        for t, b in boxes[i + 1:]:
            if b.x0 >= a.x1 - tolerance_px:
                break
            if min(a.x1, b.x1) - max(a.x0, b.x0) > tolerance_px and min(a.y1, b.y1) - max(a.y0, b.y0) > tolerance_px:
                out.append(f"{s!r} overlaps {t!r}")
    return out
