"""Figure layout that holds at 1, 200 and 10,000 runs: horizontal bars (labels stay readable), facets stacked
in one column, at most MAX_BARS bars a facet (beyond, the best and the worst with the count left out named),
at most LEGEND_MAX legend entries (the rest drawn grey and counted), at most MAX_FACETS facets (the rest
named), and figure sizes capped.

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
from matplotlib import transforms as mtransforms  # noqa: E402
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
         # a quarter less time to draw the text, no visible difference at 100 dpi
         "text.hinting": "no_hinting"}


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
    # the longest key down to the next longest, a character at least each time
    while sum(map(len, parts)) > room:
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
        self.legend_w = (max(map(len, legend_labels), default=0) * CHAR_IN + 0.6) if legend_labels else 0.0
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
            fig.text(0.2 / self.width, 0.1 / h, "\n".join(self.note), va="bottom", ha="left",
                     fontsize=FONT - 0.5, color="0.3")
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
        # no tick below the smallest float (it reads 0)
        lo, hi = max(lo, 1 / BIGGEST), min(max(hi, lo), BIGGEST)
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


def _bar_ys(f: Facet) -> list[int]:
    """Each bar's row: a gap row at `split` where bars were left out."""
    return [i + 1 if f.left_out and i >= f.split else i for i in range(len(f.bars))]


def _draw_bars(ax, rows: list[Bar], ys: list[int], hues: dict | None, handles: dict) -> None:
    """The bars, coloured by hue (the first bar of each hue is its legend handle), and their error bars."""
    hues = hues or {}
    drawn = ax.barh(ys, [b.value for b in rows], color=[hues.get(b.hue, "tab:blue") for b in rows],
                    height=0.72)
    for b, patch in zip(rows, drawn):
        if b.hue in hues:
            handles.setdefault(b.hue, patch)
    err = [(b.value, yy, b.low, b.high) for yy, b in zip(ys, rows)
           if b.low is not None and b.high is not None]
    if err:
        xs, ys_err, lows, highs = zip(*err)
        ax.errorbar(list(xs), list(ys_err), xerr=_reach(xs, lows, highs), fmt="none", ecolor="0.15",
                    elinewidth=0.8, capsize=2)


def _reach(values, lows, highs) -> list[list[float]]:
    """An error bar's reach below and above each value (never negative)."""
    return [[max(v - lo, 0) for v, lo in zip(values, lows)], [max(hi - v, 0) for v, hi in zip(values, highs)]]


def _bar_range(rows: list[Bar], ref: tuple[float, str] | None) -> tuple[float, float]:
    """(lowest, highest) value the axis must show: spreads and the reference line included."""
    hi = max([b.high or b.value for b in rows] + [ref[0] if ref else 0], default=1)
    hi = hi if hi > 0 else 1.0  # a facet whose bars are all 0 (a host share read as 0): an axis still
    lo = min([b.low or b.value for b in rows if (b.low or b.value) > 0] or [hi])
    return lo, hi


def _value_labels(ax, rows: list[Bar], ys: list[int], hi: float, log: bool, value_text) -> None:
    """Each bar's value at its end; one beyond the axis' room (a clamped 1e308) inside the axis, at its right
    end."""
    x0, x1 = ax.get_xlim()  # where the value labels' room at the right begins (in logs: no overflow)
    room = 10 ** (math.log10(x1) - 0.15 * (math.log10(x1) - math.log10(x0))) if log else x1 * 0.85
    for yy, b in zip(ys, rows):
        end = max(b.value, b.high or 0)
        at = _times(end, 1.08) if log else min(end + hi * 0.015, BIGGEST)
        fits = at <= room
        ax.text(at if fits else x1, yy, value_text(b.value), va="center", ha="left" if fits else "right",
                fontsize=FONT - 0.5)


BAR_LABEL = "bar-label"  # the gid of a bar's label (bar_labels finds them)


def _bar_ticks(ax, f: Facet, ys: list[int], names: dict[str, str]) -> None:
    """The bars' fitted labels, with the gap row's count of the bars left out: texts where matplotlib puts
    y tick labels (right-aligned, tick length + pad left of the axis), without the ticks. A Tick is five
    artists (two lines, a grid line, two texts) made one by one: ~1 ms each, a figure's 40 bars 0.04 s."""
    labels, ys_all = [names[b.label] for b in f.bars], list(ys)
    if f.left_out:
        labels.insert(f.split, f"… {f.left_out} more (in the tables) …")
        ys_all.insert(f.split, f.split)
    ax.set_yticks([])
    pad_pt = plt.rcParams["ytick.major.size"] + plt.rcParams["ytick.major.pad"]
    at = mtransforms.offset_copy(ax.get_yaxis_transform(), fig=ax.figure, x=-pad_pt, units="points")
    size, color = plt.rcParams["ytick.labelsize"], plt.rcParams["ytick.labelcolor"]
    for y, text in zip(ys_all, labels):
        ax.text(0, y, text, transform=at, ha="right", va="center_baseline", fontsize=size,
                color=plt.rcParams["ytick.color"] if color == "inherit" else color, gid=BAR_LABEL)
    ax.set_ylim(max(ys_all, default=0) + 0.6, -0.6)
    ax.grid(axis="y", visible=False)


def bar_labels(ax) -> list:
    """The bars' label texts of a bar chart's axes (hbar_figure), top to bottom as drawn."""
    return [t for t in ax.texts if t.get_gid() == BAR_LABEL]


def _bar_facet(ax, f: Facet, names: dict[str, str], hues: dict | None, ref: tuple[float, str] | None,
               log: bool | None, value_text, handles: dict) -> bool:
    """One facet drawn on `ax`; returns whether its axis is logarithmic (per facet unless `log` says:
    a narrow range reads better linear)."""
    ys = _bar_ys(f)
    _draw_bars(ax, f.bars, ys, hues, handles)
    lo, hi = _bar_range(f.bars, ref)
    flog = log if log is not None else hi / lo > 200
    _xaxis(ax, lo, hi, flog)
    _value_labels(ax, f.bars, ys, hi, flog, value_text)
    _bar_ticks(ax, f, ys, names)
    if ref:
        handles.setdefault(ref[1], ax.axvline(ref[0], color="black", ls="--", lw=1))
    return flog


def hbar_figure(facets: list[Facet], title: str, xlabel: str, note: str = "", hues: dict | None = None,
                ref: tuple[float, str] | None = None, value_text=nice, log: bool | None = None):
    """Horizontal bars, one facet per work stacked in one column; error bars where a bar has a spread;
    each bar's value at its end; `ref` draws a dashed reference line (the baseline's 1.0)."""
    facets = facets[:MAX_FACETS]
    labels = [b.label for f in facets for b in f.bars]
    names = dict(zip(labels, fit_labels(labels)))
    left = max(map(len, names.values()), default=8) * CHAR_IN + 0.35
    plot_w = 5.2
    cv = Canvas(left + plot_w + 0.3, title, note, list(hues or {}) + ([ref[1]] if ref else []))
    plot_w = min(plot_w, cv.width - cv.legend_w - left - 0.3)
    heights = [(len(f.bars) + (1 if f.left_out else 0)) * BAR_IN + 0.25 for f in facets]
    gap = 0.45 + LINE_IN  # the x label, then the next facet's title
    fig = cv.figure(sum(heights) + gap * len(facets) + 0.3)
    tops = itertools.accumulate((h + gap for h in heights), initial=0.3)
    handles: dict = {}
    logs = []  # each facet's axis (the HTML report's chart draws it the same)
    for f, h, y in zip(facets, heights, tops):
        ax = cv.axes(fig, left, y, plot_w, h)
        logs.append(_bar_facet(ax, f, names, hues, ref, log, value_text, handles))
        ax.set_title(short(f.title, int(plot_w / CHAR_IN)), loc="left")
        ax.set_xlabel(f.xlabel or xlabel)
    cv.legend(fig, list(handles.values()), list(handles))
    # the HTML's chart
    fig.xbench_chart = hbar_spec(facets, names, title, xlabel, note, hues, ref, logs, value_text)
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
# reference lines (a target, 100 %, the baseline's 1), each its own colour and dash, in turn
HLINE_COLORS = ("black", "0.45", "0.25", "0.6")
HLINE_DASHES = ((0, (5, 3)), (0, (1.5, 2)), (0, (6, 2, 1, 2)), (0, (3, 1)))


def _coloured(panels: list[Panel]) -> tuple[list[str], int]:
    """(the LEGEND_MAX most important labels in label order, how many labels there are): a label's rank is its
    highest in any panel."""
    rank: dict[str, float] = {}
    for ln in (ln for p in panels for ln in p.lines):
        rank[ln.label] = max(rank.get(ln.label, -math.inf), ln.rank)
    return sorted(sorted(rank, key=lambda n: -rank[n])[:LEGEND_MAX]), len(rank)


@dataclass
class _LineStyles:
    """How each coloured label is drawn in every panel, and the legend's entry of the grey rest."""
    styles: dict  # label: (colour, marker)
    dashes: dict  # label: (dash, marker size, z order)
    short_of: dict  # label: its legend entry
    grey_label: str

    @classmethod
    def of(cls, coloured: list[str], grey: int) -> _LineStyles:
        # Curves that coincide stay visible: each label its own dash, and hollow markers that shrink label by
        # label (the first drawn largest, so identical points show as rings inside rings).
        dashes = {n: (DASHES[i % len(DASHES)], 7.5 - 1.2 * (i % 4), 2 + i) for i, n in enumerate(coloured)}
        short_of = dict(zip(coloured, fit_labels(coloured, LEGEND_CHARS)))
        return cls(dict(zip(coloured, palette())), dashes, short_of, f"{grey} more (grey)")


def _draw_line(ax, ln: Line, st: _LineStyles, handles: dict) -> None:
    """A coloured line in its label's style, with error bars where a point has a spread."""
    color, marker = st.styles[ln.label]
    ls, ms, z = st.dashes[ln.label]
    handles.setdefault(st.short_of[ln.label], ax.plot(ln.xs, ln.ys, marker=marker, ms=ms, mfc="none", mew=1.2,
                                                      color=color, lw=1.4, ls=ls, zorder=3 + z)[0])
    pts = [(x, y, lo, hi) for x, y, lo, hi in zip(ln.xs, ln.ys, ln.lows or [], ln.highs or [])
           if lo is not None and hi is not None]
    if pts:
        xs, ys, lows, highs = zip(*pts)
        ax.errorbar(list(xs), list(ys), yerr=_reach(ys, lows, highs), fmt="none", ecolor=color,
                    elinewidth=0.8, capsize=2, zorder=2)


def _draw_panel_lines(ax, p: Panel, st: _LineStyles, handles: dict) -> None:
    """The grey lines underneath (MAX_GREY_LINES at most), the coloured ones, then the reference lines."""
    for ln in [ln for ln in p.lines if ln.label not in st.styles][:MAX_GREY_LINES]:
        handles.setdefault(st.grey_label, ax.plot(ln.xs, ln.ys, color=GREY, lw=0.7, zorder=1)[0])
    for ln in (ln for ln in p.lines if ln.label in st.styles):
        _draw_line(ax, ln, st, handles)
    _draw_refs(ax, p, handles)


def _ref_names(panels: list[Panel]) -> list[str]:
    """The reference lines' legend entries, each once, in the order the panels name them."""
    return list(dict.fromkeys(k for p in panels for k in (*(p.hlines or {}), *(p.ref_points or {}))))


def _draw_refs(ax, p: Panel, handles: dict) -> None:
    """A panel's dashed reference lines: horizontal ones (`hlines`) and reference curves (`ref_points`)."""
    for j, (name, yv) in enumerate((p.hlines or {}).items()):  # one line per target, each its own dash
        handles.setdefault(name, ax.axhline(yv, color=HLINE_COLORS[j % 4], ls=HLINE_DASHES[j % 4], lw=1))
    for name, pts in (p.ref_points or {}).items():
        handles.setdefault(name, ax.plot([q[0] for q in pts], [q[1] for q in pts], color="black", ls="--",
                                         lw=1)[0])


def _panel_axes(ax, p: Panel, title_lines: list[str], xlabel: str, log_x: bool, ylim0: bool) -> None:
    """A panel's scales, ticks and labels: the x values themselves as ticks when there are few."""
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
    ax.set_title("\n".join(title_lines), loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(p.ylabel)


def line_figure(panels: list[Panel], title: str, xlabel: str, note: str = "", log_x: bool = False,
                ylim0: bool = True, panel_h: float = 2.9, ncols: int = 2):
    """Line facets (a grid of at most MAX_FACETS): each label keeps one colour and marker in every facet;
    beyond LEGEND_MAX labels the least important are drawn thin and grey and counted in one legend entry."""
    panels = panels[:MAX_FACETS]
    coloured, labels = _coloured(panels)
    st = _LineStyles.of(coloured, labels - len(coloured))
    shown = list(st.short_of.values())
    refs = _ref_names(panels)
    legend_labels = shown + ([st.grey_label] if labels > len(coloured) else []) + refs
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
        _draw_panel_lines(ax, p, st, handles)
        _panel_axes(ax, p, tl, xlabel, log_x, ylim0)
    order = [k for k in (*shown, st.grey_label, *refs) if k in handles]
    cv.legend(fig, [handles[k] for k in order], order)
    fig.xbench_chart = line_spec(panels, st.styles, st.short_of, GREY, MAX_GREY_LINES, title, xlabel, note,
                                 log_x, ylim0)  # the HTML's chart
    return fig


def _tick_labels(fig) -> tuple[set[int], list]:
    """(the ids of every tick label, the tick labels drawn): only those of ticks inside the view (the others
    are never drawn)."""
    ticks, drawn = set(), []
    for axis in (a for ax in fig.axes if ax.get_visible() for a in (ax.xaxis, ax.yaxis)):
        lo, hi = sorted(axis.get_view_interval())
        slack = 1e-9 * abs(hi - lo)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            ticks.update((id(tick.label1), id(tick.label2)))
            if lo - slack <= tick.get_loc() <= hi + slack:
                drawn += [tick.label1, tick.label2]
    return ticks, drawn


def _shows(t) -> bool:
    """Whether a text is drawn: visible, not blank, and on visible axes (or on the figure)."""
    return t.get_visible() and bool(t.get_text().strip()) and (t.axes is None or t.axes.get_visible())


def _text_boxes(fig) -> list[tuple[str, object]]:
    """(the first 40 characters, the drawn box) of every text the figure shows, after a draw."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ticks, drawn = _tick_labels(fig)
    texts = [t for t in fig.findobj(matplotlib.text.Text) if id(t) not in ticks] + drawn
    boxes = [(t.get_text().replace("\n", " ")[:40], t.get_window_extent(r)) for t in texts if _shows(t)]
    return [(s, bb) for s, bb in boxes if bb.width != 0 and bb.height != 0]


def _outside(boxes, W: float, H: float, tol: float) -> list[str]:
    return [f"{s!r} outside the figure ({bb.x0:.0f},{bb.y0:.0f})-({bb.x1:.0f},{bb.y1:.0f}) of {W:.0f}x{H:.0f}"
            for s, bb in boxes if bb.x0 < -tol or bb.y0 < -tol or bb.x1 > W + tol or bb.y1 > H + tol]


def _overlapping(boxes, tol: float) -> list[str]:
    out = []
    boxes = sorted(boxes, key=lambda x: x[1].x0)
    for i, (s, a) in enumerate(boxes):  # sweep along x: only boxes that start before this one ends
        for t, b in boxes[i + 1:]:
            if b.x0 >= a.x1 - tol:
                break
            if min(a.x1, b.x1) - max(a.x0, b.x0) > tol and min(a.y1, b.y1) - max(a.y0, b.y0) > tol:
                out.append(f"{s!r} overlaps {t!r}")
    return out


def text_problems(fig, tolerance_px: float = 1.0) -> list[str]:
    """Texts that overlap one another or stick out of the figure, from matplotlib's own layout boxes
    (after a draw). Empty: the figure reads."""
    boxes = _text_boxes(fig)
    return (_outside(boxes, fig.bbox.width, fig.bbox.height, tolerance_px)
            + _overlapping(boxes, tolerance_px))
