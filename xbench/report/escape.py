"""Output made inert: record text (a model name, a reason, a warning, a platform) reaches the report's
markdown, CSV and plot text only through these functions, so it reads as the text it is and never acts.

- Markdown (`md`): a CommonMark renderer passes HTML through, so `<`, `>` and `&` become entities; `|`
  (a table column), backticks (code spans), `](` (a link or an image) and `\\` are backslash-escaped;
  line breaks become spaces (a new line could start a heading, a list or a raw HTML block). Square
  brackets alone stay: they are the units in the column headers (`[samples/s]`).
- CSV (`csv_cell`): a cell a spreadsheet would read as a formula (starting with `=`, `+`, `-`, `@`, a tab
  or a carriage return) gets a leading `'`, unless it is a plain number (`-1.5` stays a number).
- Plot text (`plot_text`): matplotlib reads `$...$` as mathtext (a record's `$` could fail the figure).
HTML is escaped with `html.escape` in render.py.
"""

from __future__ import annotations

import re

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MD = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "|": "\\|", "`": "\\`",
                     "\n": " ", "\r": " ", "\t": " ", "\x00": ""})


def md(text) -> str:
    """Text for any place in the markdown (a table cell, a finding, a caption, a heading): inert."""
    return str(text).translate(_MD).replace("](", "]\\(")


def csv_cell(v):
    """A CSV cell that no spreadsheet evaluates: text that could start a formula gets a leading `'`
    (numbers, and text that is a plain number, stay as they are)."""
    if isinstance(v, str) and v.startswith(FORMULA_START) and not _NUMBER.fullmatch(v.strip()):
        return "'" + v
    return v


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell and header made inert for a spreadsheet (csv_cell)."""
    out = df.rename(columns={c: csv_cell(str(c)) for c in df.columns})
    for c in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[c]) or pd.api.types.is_bool_dtype(out[c])):  # text or mixed
            values = out[c].tolist()
            # each distinct text once (a column repeats its values: 10,000 runs, a few platforms)
            inert = {v: w for v in {x for x in values if isinstance(x, str)} if (w := csv_cell(v)) is not v}
            if inert:
                out[c] = out[c].map(lambda x, inert=inert: inert.get(x, x) if isinstance(x, str) else x)
    return out


_DOLLAR = re.compile(r"(?<!\\)\$")


def plot_text(text) -> str:
    """Text for a matplotlib label or title: `$` drawn as itself, not as mathtext (idempotent: a `$`
    already escaped stays as it is)."""
    return _DOLLAR.sub(r"\\$", str(text))
