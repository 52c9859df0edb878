"""Write the report: one self-contained HTML file (sortable, filterable tables; interactive charts drawn by
the inlined Chart.js from each plot's data, xbench/report/interactive.py; it fetches nothing), a markdown
summary (the PNG plots) and one CSV per table (plus the whole tidy table), all into one output folder."""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xbench.analysis.frame import LIST_COLUMNS
from xbench.analysis.workload import CONFIGURATION
from xbench.metrics.numbers import compact, whole
from xbench.records import safe_io
from xbench.report.escape import csv_frame, md
from xbench.report.interactive import json_block, scripts
from xbench.report.rows import KEY_LABELS, Table

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1400px;
 padding:0 1em;color:#222;overflow-wrap:anywhere}
.findings li{margin:.3em 0;line-height:1.35} .findings b{font-weight:600}
h1{margin-bottom:.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.meta{color:#555;font-size:.9em} .note{color:#555;font-size:.85em;margin:.3em 0 .8em}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em;margin:.5em 0;font-size:.9em}
.scroll{overflow-x:auto;max-width:100%;max-height:34em;overflow-y:auto;border:1px solid #eee}
table{border-collapse:collapse;font-size:.82em;margin:.4em 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap;overflow-wrap:normal}
th{white-space:normal;min-width:5em;max-width:12em}
th{background:#f3f5f8;position:sticky;top:0} td.text{text-align:left}
td.long{white-space:normal;min-width:18em;max-width:40em;text-align:left}
tr.bad td{background:#fdecea} tr.noisy td{background:#fffbe6}
img{max-width:100%;border:1px solid #eee;margin:.3em 0} figure{margin:1em 0}
figcaption{font-size:.85em;color:#555} nav a{margin-right:1em}
td.label{text-align:left;white-space:normal;min-width:12em;max-width:26em;overflow-wrap:anywhere;cursor:help}
th{cursor:pointer;user-select:none} th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"} th.label{text-align:left}
.xb-tools{margin:.3em 0} .xb-filter{width:22em;max-width:90%;padding:2px 5px;font:inherit;font-size:.85em}
.xb-count{font-size:.85em;color:#555}
.xb-figure{margin:1.4em 0} .xb-title{font-weight:600;font-size:1em;color:#222;margin-bottom:.3em}
.xb-ftitle{font-size:.85em;font-weight:600;margin:.6em 0 .1em} .xb-more{font-size:.8em;color:#555}
.xb-canvas{position:relative;width:100%;max-width:1100px}
.xb-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,460px),1fr));gap:.6em 1.2em}
.xb-legend{display:flex;flex-wrap:wrap;gap:.3em;margin:.3em 0}
.xb-key{font:inherit;font-size:.8em;background:#fff;border:1px solid #ccc;border-radius:3px;padding:1px 6px;
 cursor:pointer} .xb-key.off{opacity:.4;text-decoration:line-through}
.xb-swatch{display:inline-block;width:.9em;height:.9em;margin-right:.35em;vertical-align:-.1em;
 border:1px solid}
.xb-swatch.ref{height:0;border-width:0 0 2px;border-style:dashed;vertical-align:.25em;background:none}
#xb-tip{position:absolute;z-index:10;pointer-events:none;background:#fff;border:1px solid #999;
 border-radius:3px;box-shadow:0 1px 4px rgba(0,0,0,.2);padding:4px 8px;font-size:.8em;max-width:30em;
 opacity:0;top:0;left:0}
"""
LONG_COLUMNS = ("reason", "warnings")


@dataclass
class Report:
    title: str
    meta: list[str]
    tables: list[Table]
    skipped_tables: dict[str, str]
    plots: dict[str, tuple[Path, Path]]
    skipped_plots: dict[str, str]
    skipped_records: list[str] = field(default_factory=list)
    findings: list = field(default_factory=list)  # xbench.analysis.findings.Finding, shown first
    findings_note: str = ""
    rates: list = field(default_factory=list)  # exchange rates used (xbench.analysis.currency.Rate)


def fmt(v) -> str:
    """A table cell: a float as metrics.numbers.compact (4 digits, whole from 1,000), a true flag "yes"."""
    if isinstance(v, bool):
        return "yes" if v else ""
    return compact(v) if v is None or isinstance(v, float) else str(v)


def _row_class(row) -> str:
    status = str(row.get("status", "ok"))
    if status and not status.startswith("ok"):
        return "bad"
    return "noisy" if row.get("noisy") in ("NOISY", True) else ""


# A configuration's identity columns (as the tables name them): one label column in the HTML, each row's
# keys on hover (its title), so the figures come first instead of after ten columns of keys.
IDENTITY = tuple(dict.fromkeys(["run", *(KEY_LABELS.get(k, k) for k in CONFIGURATION), "device"]))
TAIL = ("runs", "status", "reason", "warnings")  # after the figures
LABEL_FORMS = {
    "batch/device": "{} per device",
    "global batch": "batch {}",
    "devices": "{} dev",
    "threads": "{} threads",
}


def _present(v) -> bool:
    return v is not None and v == v and v != ""  # v == v: not NaN


def _label(row: dict, keys: list[str]) -> str:
    return " / ".join(LABEL_FORMS.get(k, "{}").format(whole(row[k])) for k in keys if _present(row.get(k)))


def _cell(c: str, v) -> str:
    text = html.escape(fmt(v))
    if c in LONG_COLUMNS:
        return f'<td class="long">{text}</td>'
    if isinstance(v, str):
        return f'<td class="text">{text}</td>'
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return f'<td data-v="{float(v)!r}">{text}</td>'  # the value sorts, not its text
    return f"<td>{text}</td>"


def table_columns(frame: pd.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """(identity columns, the ones of them that vary (the label), the other columns: figures first, then
    runs, status, reason, warnings). No label (identity empty) when a table names fewer than 3 keys."""
    ident = [c for c in frame.columns if c in IDENTITY]
    if len(ident) < 3:
        return [], [], list(frame.columns)
    varying = [c for c in ident if frame[c].nunique(dropna=False) > 1] or ident
    rest = [c for c in frame.columns if c not in ident]
    return ident, varying, [c for c in rest if c not in TAIL] + [c for c in TAIL if c in rest]


def html_table(t: Table) -> str:
    """A sortable (click a header), filterable (the box above) table: the configuration as one label column
    whose title holds its keys, then the figures (report.js does the sorting and filtering)."""
    ident, varying, cols = table_columns(t.frame)
    df = t.frame.head(t.max_rows_shown)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    if ident:
        hint = (
            f"Each row's configuration: {' / '.join(varying)} (the keys that differ between rows); hover a "
            "label for all its keys."
        )
        head = f'<th class="label" title="{html.escape(hint)}">configuration</th>' + head
    body = []
    for row in df.to_dict("records"):
        cells = "".join(_cell(c, row[c]) for c in cols)
        if ident:
            keys = "\n".join(f"{c}: {whole(row[c])}" for c in ident if _present(row.get(c)))
            cells = (
                f'<td class="label" title="{html.escape(keys)}">{html.escape(_label(row, varying))}</td>'
                + cells
            )
        rc = _row_class(row)
        body.append(f'<tr class="{rc}">{cells}</tr>' if rc else f"<tr>{cells}</tr>")
    more = (
        f'<p class="note">Showing {len(df)} of {len(t.frame)} rows (sorting and the filter work on these); '
        f"every row is in tables/{t.name}.csv.</p>"
        if len(t.frame) > len(df)
        else ""
    )
    tools = (
        '<div class="xb-tools"><input type="search" class="xb-filter" '
        f'aria-label="filter the rows of {t.name}" '
        'placeholder="filter rows: words each row must contain"> <span class="xb-count"></span></div>'
    )
    return (
        f'<div class="xb-table" id="tt-{t.name}">{tools}<div class="scroll"><table><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table></div>{more}</div>"
    )


CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "form-action 'none'; base-uri 'none'")  # the page fetches nothing: the browser refuses any request


def figure_html(name: str, png: Path, svg: Path | None) -> str:
    """The plot as an interactive chart from its plots/<name>.chart.json (the PNG and SVG linked), or as the
    embedded PNG where no chart data was written."""
    vector = f' · <a href="plots/{svg.name}">SVG</a>' if svg else ""
    spec_path = png.with_name(png.stem + ".chart.json")
    if not spec_path.is_file():
        data = base64.b64encode(png.read_bytes()).decode()
        return (
            f'<figure id="p-{name}"><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>{name}{' (vector: plots/' + svg.name + ')' if svg else ''}</figcaption></figure>"
        )
    spec = json.loads(spec_path.read_text())
    note = (
        f'<figcaption class="note">{html.escape(spec.get("note") or "")}</figcaption>'
        if spec.get("note")
        else ""
    )
    return (
        f'<figure id="p-{name}" class="xb-figure"><figcaption class="xb-title">{html.escape(spec["title"])}'
        f'</figcaption><script type="application/json" class="xb-spec">{json_block(spec)}</script>'
        f'<div class="xb-chart"></div>{note}<figcaption>{name}: <a href="plots/{png.name}">PNG</a>{vector}'
        "</figcaption></figure>"
    )


def write_html(rep: Report, path: Path) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f"<title>{html.escape(rep.title)}</title><style>{CSS}</style></head><body>"
             f"<h1>{html.escape(rep.title)}</h1>"]
    parts += [f'<div class="meta">{html.escape(m)}</div>' for m in rep.meta]
    for s in rep.skipped_records:
        parts.append(f'<div class="warn">{html.escape(s)}</div>')
    parts.append(findings_html(rep))
    nav = ("<b>Tables:</b> " + "".join(f'<a href="#t-{t.name}">{t.name}</a>' for t in rep.tables)
           + "<br><b>Plots:</b> " + "".join(f'<a href="#p-{n}">{n}</a>' for n in rep.plots))
    parts.append(f'<nav><p><a href="#findings">findings</a><br>{nav}</p></nav><h2>Tables</h2>')
    parts.append(
        '<p class="note">Click a column header to sort by it (again: the other way); the box above a table '
        "keeps the rows that contain every word typed. A row's configuration is one label: hover it for all "
        "its keys. Rows shaded red did not finish ok (status and reason shown); yellow rows are noisy (high "
        "spread). Units are in the column headers.</p>"
    )
    for t in rep.tables:
        parts.append(f'<h3 id="t-{t.name}">{html.escape(t.title)}</h3>')
        note = " ".join(x.strip() for x in (t.note, t.pooled) if x and x.strip())
        if note:
            parts.append(f'<p class="note">{html.escape(note)}</p>')
        parts.append(html_table(t))
    parts.append(
        '<h2>Plots</h2><p class="note">Hover a bar or a point for its value; click a legend entry to hide '
        "or show that series. Each plot's PNG (and SVG with --svg) is in plots/.</p>"
    )
    parts += [figure_html(name, png, svg) for name, (png, svg) in rep.plots.items()]
    skipped = {**{f"table {k}": v for k, v in rep.skipped_tables.items()},
               **{f"plot {k}": v for k, v in rep.skipped_plots.items()}}
    if skipped:
        parts.append("<h2>Not drawn (no data for them)</h2><ul>")
        parts += [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in skipped.items()]
        parts.append("</ul>")
    parts.append(scripts())
    parts.append("</body></html>")
    safe_io.atomic_write(path, "\n".join(parts))  # never through a planted link
    return path


def findings_html(rep: Report) -> str:
    if not rep.findings:
        return (
            '<h2>Findings</h2><p class="note">No comparison to report: the runs below did not finish ok.</p>'
        )
    items = []
    for f in rep.findings:
        head = f"<b>{html.escape(f.work)}</b>: " if f.work else ""
        items.append(f"<li>{head}{html.escape(f.text)}</li>")
    tail = f'<p class="note">{html.escape(rep.findings_note)}</p>' if rep.findings_note else ""
    return (
        '<h2 id="findings">Findings</h2><ul class="findings">'
        + "".join(items)
        + "</ul>"
        + tail
        + '<p class="note">Uncertainty: the interval after a figure is its spread (min-max over repeated '
        "runs, else the run's 95% CI over timed windows, else its p10-p90 steps); a difference whose "
        "intervals overlap is within noise.</p>"
    )


def md_table(t: Table) -> str:
    df = t.frame.head(min(t.max_rows_shown, 50))
    cols = [md(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(md(fmt(row[c])) for c in df.columns) + " |")
    if len(t.frame) > len(df):
        lines.append(f"\n{len(df)} of {len(t.frame)} rows shown; all in tables/{md(t.name)}.csv.")
    return "\n".join(lines)


def write_markdown(rep: Report, path: Path) -> Path:
    # Every text from records or the command line goes through escape.md (inert in any renderer).
    out = [f"# {md(rep.title)}", ""] + [f"- {md(m)}" for m in rep.meta] + [""]
    out += [f"> WARNING: {md(s)}\n" for s in rep.skipped_records]
    out += ["## Findings", ""] + [
        f"- {'**' + md(f.work) + '**: ' if f.work else ''}{md(f.text)}" for f in rep.findings
    ]
    out += ([f"\n_{md(rep.findings_note)}_"] if rep.findings_note else []) + [""]
    for t in rep.tables:
        out += [f"## {md(t.title)}", ""]
        note = " ".join(x.strip() for x in (t.note, t.pooled) if x and x.strip())
        if note:
            out += [f"_{md(note)}_", ""]
        out += [md_table(t), ""]
    if rep.plots:
        out += (
            ["## Plots", ""]
            + [f"![{md(n)}](plots/{md(png.name)})" for n, (png, _) in rep.plots.items()]
            + [""]
        )
    skipped = {**{f"table {k}": v for k, v in rep.skipped_tables.items()},
               **{f"plot {k}": v for k, v in rep.skipped_plots.items()}}
    if skipped:
        out += ["## Not drawn (no data for them)", ""] + [
            f"- **{md(k)}**: {md(v)}" for k, v in skipped.items()
        ]
    safe_io.atomic_write(path, "\n".join(out) + "\n")
    return path


def tidy_csv(tidy: pd.DataFrame) -> str:
    """tidy_runs.csv's text: every scalar column of every run, for your own analysis."""
    return csv_frame(tidy.drop(columns=[c for c in LIST_COLUMNS if c in tidy.columns])).to_csv(index=False)


def write_csvs(tables: list[Table], tidy_text: str, out: Path) -> list[Path]:
    """One CSV per table, and tidy_runs.csv (its text from tidy_csv)."""
    d = out / "tables"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in tables:
        p = d / f"{t.name}.csv"
        with safe_io.atomic_writer(p, binary=False) as f:
            csv_frame(t.frame).to_csv(f, index=False, quoting=csv.QUOTE_MINIMAL)
        paths.append(p)
    paths.append(safe_io.atomic_write(d / "tidy_runs.csv", tidy_text))
    return paths
