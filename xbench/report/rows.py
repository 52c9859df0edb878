"""What the report's tables and plots share: the context they are drawn in, the Table they return,
and how a group of rows is labelled (key columns, captions, status counts, reasons).

The figures themselves (spread, scaling, baseline, overhead) come from xbench.analysis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from xbench.analysis.frame import parse_query
from xbench.analysis.rows import Rows
from xbench.analysis.workload import CONFIGURATION, DETAILS

KEY_LABELS = {"batch_size_per_device": "batch/device", "global_batch_size": "global batch",
              "devices": "devices", "threads": "threads", "pricing_model": "pricing",
              "model_options": "model options", "data_shape": "data shape", "runtime_options": "runtime options",
              "cpu_capability": "CPU kernels", "device_kind": "device"}


@dataclass
class Context:
    baseline: dict[str, list[str]] | None = None  # parsed --baseline query
    baseline_text: str | None = None

    @classmethod
    def with_baseline(cls, text: str | None) -> Context:
        return cls(baseline=parse_query(text) if text else None, baseline_text=text)


@dataclass
class Table:
    name: str
    title: str
    frame: pd.DataFrame
    note: str = ""
    max_rows_shown: int = 200  # HTML/markdown show this many; the CSV has every row


def _text(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _varies(rows: Rows, k: str) -> bool:
    first = rows[0].get(k)
    return any(r.get(k) != first for r in rows)  # stops at the first difference


def varying_keys(rows: Rows, keys=CONFIGURATION) -> list[str]:
    """Config keys with more than one value (constant ones go into the caption instead)."""
    return [k for k in keys if rows and _varies(rows, k)]


def constant_caption(rows: Rows, keys=CONFIGURATION) -> str:
    """"All rows: model=..., ..." for the keys every row shares (option and shape details left out)."""
    parts = [f"{KEY_LABELS.get(k, k)}={_text(rows[0][k])}" for k in keys
             if k not in DETAILS and rows and rows[0].get(k) is not None and not _varies(rows, k)]
    return ("All rows: " + ", ".join(parts) + ".") if parts else ""


def key_cols(keys: dict, show: list[str]) -> dict:
    """The shown keys of a group under their column labels."""
    return {KEY_LABELS.get(k, k): keys[k] for k in show}


def status_text(statuses) -> str:
    counts = Counter(statuses)
    if set(counts) == {"ok"}:
        return "ok" if counts["ok"] == 1 else f"ok x{counts['ok']}"
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: x[0] != "ok"))


def join_unique(values: Iterable[str | None]) -> str | None:
    """Distinct '; '-separated parts, in order; None when there are none (the column is then dropped)."""
    seen = []
    for v in values:
        for part in (v or "").split("; "):
            if part and part not in seen:
                seen.append(part)
    return "; ".join(seen) or None


def reasons(rows: Rows) -> str | None:
    return join_unique(r.get("reason") for r in rows if r.get("status") != "ok")


def frame(rows: list[dict]) -> pd.DataFrame:
    """A table's frame, without the columns no row has a value in."""
    return pd.DataFrame(rows).dropna(axis=1, how="all")
