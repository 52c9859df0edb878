"""The tidy frame as a list of row dicts, grouped per configuration in plain Python.

Grouping thousands of runs this way is much faster than slicing a wide DataFrame per group (the
report builds every table from 10,000 records in a second or two). Missing values are left out of
the dicts, so `r.get(col) is None` for them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

from xbench.analysis.workload import CONFIGURATION

if TYPE_CHECKING:
    import pandas as pd

TP = "throughput_samples_per_s"


class NoData(Exception):
    """These rows have nothing to compare for this figure (a note for the reader, not an error)."""


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


class Rows(list):
    """The tidy table as a list of row dicts (missing values are None)."""

    _cols: set[str] | None = None

    @classmethod
    def of(cls, df: pd.DataFrame | Iterable[dict]) -> Rows:
        if isinstance(df, Rows):
            return df
        if not hasattr(df, "columns"):  # row dicts already (pandas not needed)
            return cls(df)
        cols = list(df.columns)
        values = zip(*(df[c].tolist() for c in cols))  # column-wise: much faster than to_dict("records")
        rows = cls({k: v for k, v in zip(cols, vals) if v is not None and v == v} for vals in values)
        rows._cols = {c for c in df.columns if df[c].notna().any()}
        return rows

    def col(self, c: str) -> list:
        return [r.get(c) for r in self]

    def nums(self, c: str) -> list[float]:
        return [v for r in self if (v := r.get(c)) is not None and isinstance(v, (int, float))
                and not isinstance(v, bool)]

    def has(self, c: str) -> bool:
        if self._cols is not None and c not in self._cols:
            return False
        return any(r.get(c) is not None for r in self)

    def ok(self, c: str | None = TP) -> Rows:
        """The runs that finished ok (and have `c`)."""
        if c is None:  # a list comprehension: asked ~50,000 times over 10,000 runs
            return Rows([r for r in self if r.get("status") == "ok"])
        return Rows([r for r in self if r.get("status") == "ok" and r.get(c) is not None])

    def median(self, c: str) -> float | None:
        xs = self.nums(c)
        return statistics.median(xs) if xs else None

    def columns(self) -> set[str]:
        if self._cols is None:
            self._cols = {k for r in self for k, v in r.items() if v is not None}
        return self._cols


def varies(rows: list[dict], k: str) -> bool:
    """Whether `k` takes more than one value over the rows (a missing value counts as one)."""
    if not rows:
        return False
    first = rows[0].get(k)
    # a loop that stops at the first difference: any() over a generator is ~2x slower, a set reads every row
    for r in rows:  # noqa: SIM110
        if r.get(k) != first:
            return True
    return False


def _fmt_key(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _sort_item(v) -> tuple:
    """Numbers in numeric order, then text, then missing values."""
    return (2, 0, "") if missing(v) else (0, float(v), "") if isinstance(v, (int, float)) else (1, 0, str(v))


def groups(rows: Iterable[dict], keys: Iterable[str] = CONFIGURATION) -> list[tuple[dict, Rows]]:
    """(key dict, rows) per distinct value of `keys` (default: per configuration), in a stable order."""
    keys = list(keys)
    found: dict[tuple, Rows] = {}
    for r in rows:  # 16 and 16.0 hash alike, so one group
        key = tuple(map(r.get, keys))
        group = found.get(key)
        if group is None:
            found[key] = group = Rows()
        group.append(r)
    items: dict = {}  # sort tuples per value: a config key has few distinct values

    def order(key: tuple) -> tuple:
        out = []
        for v in key:
            item = items.get(v)
            if item is None:
                item = items[v] = _sort_item(v)
            out.append(item)
        return tuple(out)

    return [({k: _fmt_key(v) for k, v in zip(keys, key)}, found[key]) for key in sorted(found, key=order)]


def currency(rows: Iterable[dict]) -> str | None:
    """The currency the rows' cost figures are in (usd preferred), or None without prices.

    metrics.derived names every cost figure after its record's currency (`*_eur`, `*_usd`).
    """
    found = {
        m.group(1)
        for c in Rows.of(rows).columns()
        if (m := re.fullmatch(r"samples_per_s_per_([a-z]+)_per_hour", c))
    }
    return "usd" if "usd" in found else (sorted(found)[0] if found else None)
