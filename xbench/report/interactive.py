"""The HTML report's interactive charts: the data of each figure as layout.py drew it (already aggregated and
capped: a bar per configuration, at most layout.MAX_BARS a facet, 10 coloured lines and 40 grey ones a panel),
as a small JSON spec that Chart.js draws in the page (values on hover, series toggled from the legend).

The spec rides on the matplotlib figure (`fig.xbench_chart`, set by layout.hbar_figure / line_figure) and is
written beside the PNG as plots/<name>.chart.json (plots.save). Chart.js (MIT, static/chart.umd.min.js, its
licence beside it) and the page's own script (static/report.js: sorting, filtering, charts) are inlined once
into report.html: the page is one file that fetches nothing. Record text reaches the page only as JSON inside
a <script type="application/json"> block (`json_block`: `<`, `>` and `&` as \\u escapes) and is drawn on a
canvas or set as textContent, never parsed as HTML.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

STATIC = Path(__file__).with_name("static")
# Chart.js 4.6.1 (npm chart.js, dist/chart.umd.min.js), MIT: LICENSE.chart.js.md
CHART_JS = "chart.umd.min.js"
MAX_POINTS = 400  # points a line keeps in the page (every k-th beyond; the PNG and the tables have them all)


def _num(v) -> float | None:
    """A finite float for JSON (NaN and inf are not JSON), else None."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _color(c) -> str:
    # imported here: render imports this module for --format csv too, where matplotlib may be absent
    from matplotlib.colors import to_hex

    try:
        return to_hex(c)
    except ValueError:
        return "#1f77b4"


def hbar_spec(
    facets,
    names: dict,
    title: str,
    xlabel: str,
    note: str,
    hues: dict | None,
    ref,
    logs: list[bool],
    value_text,
) -> dict:
    """The bars of layout.hbar_figure: per facet its bars (label whole, the axis's fitted label, value,
    spread, colour group, runs, the value as the PNG writes it)."""
    return {
        "kind": "hbar", "title": title, "xlabel": xlabel, "note": note,
        "hues": {str(k): _color(v) for k, v in (hues or {}).items()},
        "ref": [_num(ref[0]), str(ref[1])] if ref else None,
        "facets": [{"title": f.title, "xlabel": f.xlabel or xlabel, "log": bool(lg), "left_out": f.left_out,
                    "bars": [{"label": b.label, "short": names.get(b.label, b.label), "value": _num(b.value),
                              "low": _num(b.low), "high": _num(b.high), "hue": b.hue, "runs": b.runs,
                              "text": value_text(b.value)} for b in f.bars]}
                   for f, lg in zip(facets, logs)],
    }


def _thin(xs: list) -> list:
    step = math.ceil(len(xs) / MAX_POINTS) if len(xs) > MAX_POINTS else 1
    return xs[::step] if step > 1 else xs


def line_spec(
    panels,
    styles: dict,
    short_of: dict,
    grey: str,
    max_grey: int,
    title: str,
    xlabel: str,
    note: str,
    log_x: bool,
    ylim0: bool,
) -> dict:
    """The lines of layout.line_figure: per panel its coloured lines (their colours) and at most `max_grey`
    grey ones, the reference lines and curves."""
    out = []
    for p in panels:
        lines = [ln for ln in p.lines if ln.label in styles] + [
            ln for ln in p.lines if ln.label not in styles
        ][:max_grey]
        out.append(
            {
                "title": p.title,
                "ylabel": p.ylabel,
                "hlines": {str(k): _num(v) for k, v in (p.hlines or {}).items()},
                "ref_points": {
                    str(k): [[_num(x), _num(y)] for x, y in pts] for k, pts in (p.ref_points or {}).items()
                },
                "lines": [
                    {
                        "label": ln.label,
                        "short": short_of.get(ln.label, ln.label),
                        "color": _color(styles[ln.label][0]) if ln.label in styles else _color(grey),
                        "grey": ln.label not in styles,
                        "points": _thin(
                            [
                                [_num(x), _num(y), _num(lo), _num(hi)]
                                for x, y, lo, hi in zip(
                                    ln.xs,
                                    ln.ys,
                                    ln.lows or [None] * len(ln.xs),
                                    ln.highs or [None] * len(ln.xs),
                                )
                            ]
                        ),
                    }
                    for ln in lines
                ],
            }
        )
    return {
        "kind": "line",
        "title": title,
        "xlabel": xlabel,
        "note": note,
        "log_x": bool(log_x),
        "ylim0": bool(ylim0),
        "panels": out,
    }


def json_block(data) -> str:
    """JSON to sit inside a <script type="application/json"> element: no `</script>`, no `<!--` can close
    it."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@cache
def scripts() -> str:
    """Chart.js and the page's own script, inlined (read once per process)."""
    lib = (STATIC / CHART_JS).read_text(encoding="utf-8")
    own = (STATIC / "report.js").read_text(encoding="utf-8")
    return f"<script>{lib}</script>\n<script>{own}</script>"
