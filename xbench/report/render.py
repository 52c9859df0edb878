"""Write the report: one self-contained HTML file (plots embedded as base64 PNG), a markdown
summary and one CSV per table (plus the whole tidy table), all into one output folder."""

from __future__ import annotations

import base64
import csv
import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xbench.analysis.frame import LIST_COLUMNS
from xbench.metrics.numbers import compact
from xbench.records import safe_io
from xbench.report.escape import csv_frame, md
from xbench.report.rows import Table

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


def _row_class(row: pd.Series) -> str:
    status = str(row.get("status", "ok"))
    if status and not status.startswith("ok"):
        return "bad"
    return "noisy" if row.get("noisy") in ("NOISY", True) else ""


def html_table(t: Table) -> str:
    df = t.frame.head(t.max_rows_shown)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for c in df.columns:
            v = row[c]
            cls = "long" if c in LONG_COLUMNS else ("text" if isinstance(v, str) else "")
            cells.append(f'<td class="{cls}">{html.escape(fmt(v))}</td>' if cls else f"<td>{html.escape(fmt(v))}</td>")
        rc = _row_class(row)
        body.append(f'<tr class="{rc}">' + "".join(cells) + "</tr>" if rc else "<tr>" + "".join(cells) + "</tr>")
    more = (f'<p class="note">Showing {len(df)} of {len(t.frame)} rows; every row is in tables/{t.name}.csv.</p>'
            if len(t.frame) > len(df) else "")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{more}'


def write_html(rep: Report, path: Path) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(rep.title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{html.escape(rep.title)}</h1>"]
    parts += [f'<div class="meta">{html.escape(m)}</div>' for m in rep.meta]
    for s in rep.skipped_records:
        parts.append(f'<div class="warn">{html.escape(s)}</div>')
    parts.append(findings_html(rep))
    nav = ("<b>Tables:</b> " + "".join(f'<a href="#t-{t.name}">{t.name}</a>' for t in rep.tables)
           + "<br><b>Plots:</b> " + "".join(f'<a href="#p-{n}">{n}</a>' for n in rep.plots))
    parts.append(f'<nav><p><a href="#findings">findings</a><br>{nav}</p></nav><h2>Tables</h2>')
    parts.append('<p class="note">Rows shaded red did not finish ok (status and reason shown); yellow rows are '
                 "noisy (high spread). Units are in the column headers.</p>")
    for t in rep.tables:
        parts.append(f'<h3 id="t-{t.name}">{html.escape(t.title)}</h3>')
        note = " ".join(x.strip() for x in (t.note, t.pooled) if x and x.strip())
        if note:
            parts.append(f'<p class="note">{html.escape(note)}</p>')
        parts.append(html_table(t))
    parts.append("<h2>Plots</h2>")
    for name, (png, svg) in rep.plots.items():
        data = base64.b64encode(png.read_bytes()).decode()
        vector = f" (vector: plots/{svg.name})" if svg else ""
        parts.append(f'<figure id="p-{name}"><img alt="{name}" src="data:image/png;base64,{data}">'
                     f'<figcaption>{name}{vector}</figcaption></figure>')
    skipped = {**{f"table {k}": v for k, v in rep.skipped_tables.items()},
               **{f"plot {k}": v for k, v in rep.skipped_plots.items()}}
    if skipped:
        parts.append("<h2>Not drawn (no data for them)</h2><ul>")
        parts += [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in skipped.items()]
        parts.append("</ul>")
    parts.append("</body></html>")
    safe_io.atomic_write(path, "\n".join(parts))  # never through a planted link
    return path


def findings_html(rep: Report) -> str:
    if not rep.findings:
        return "<h2>Findings</h2><p class=\"note\">No comparison to report: the runs below did not finish ok.</p>"
    items = []
    for f in rep.findings:
        head = f"<b>{html.escape(f.work)}</b>: " if f.work else ""
        items.append(f"<li>{head}{html.escape(f.text)}</li>")
    tail = f'<p class="note">{html.escape(rep.findings_note)}</p>' if rep.findings_note else ""
    return ('<h2 id="findings">Findings</h2><ul class="findings">' + "".join(items) + "</ul>" + tail
            + '<p class="note">Uncertainty: the interval after a figure is its spread (min-max over repeated runs, '
              "else the run's 95% CI over timed windows, else its p10-p90 steps); a difference whose intervals "
              "overlap is within noise.</p>")


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
    out += ["## Findings", ""] + [f"- {'**' + md(f.work) + '**: ' if f.work else ''}{md(f.text)}" for f in rep.findings]
    out += ([f"\n_{md(rep.findings_note)}_"] if rep.findings_note else []) + [""]
    for t in rep.tables:
        out += [f"## {md(t.title)}", ""]
        note = " ".join(x.strip() for x in (t.note, t.pooled) if x and x.strip())
        if note:
            out += [f"_{md(note)}_", ""]
        out += [md_table(t), ""]
    if rep.plots:
        out += ["## Plots", ""] + [f"![{md(n)}](plots/{md(png.name)})" for n, (png, _) in rep.plots.items()] + [""]
    skipped = {**{f"table {k}": v for k, v in rep.skipped_tables.items()},
               **{f"plot {k}": v for k, v in rep.skipped_plots.items()}}
    if skipped:
        out += ["## Not drawn (no data for them)", ""] + [f"- **{md(k)}**: {md(v)}" for k, v in skipped.items()]
    safe_io.atomic_write(path, "\n".join(out) + "\n")
    return path


def write_csvs(tables: list[Table], tidy: pd.DataFrame, out: Path) -> list[Path]:
    d = out / "tables"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in tables:
        p = d / f"{t.name}.csv"
        with safe_io.atomic_writer(p, binary=False) as f:
            csv_frame(t.frame).to_csv(f, index=False, quoting=csv.QUOTE_MINIMAL)
        paths.append(p)
    p = d / "tidy_runs.csv"  # every scalar column of every run, for your own analysis
    with safe_io.atomic_writer(p, binary=False) as f:
        csv_frame(tidy.drop(columns=[c for c in LIST_COLUMNS if c in tidy.columns])).to_csv(f, index=False)
    paths.append(p)
    return paths
