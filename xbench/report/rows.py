"""What the report's tables and plots share: the context they are drawn in, the Table they return,
and how a group of rows is labelled (key columns, captions, status counts, reasons).

The figures themselves (spread, scaling, baseline, overhead) come from xbench.analysis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from xbench.analysis import currency as fx
from xbench.analysis.baseline import normalised_rows
from xbench.analysis.frame import parse_query
from xbench.analysis.rows import NoData, Rows, groups, varies
from xbench.analysis.workload import (
    CONFIGURATION,
    DETAILS,
    WORK,
    configuration_label,
    label_names,
)
from xbench.metrics.numbers import whole

if TYPE_CHECKING:  # pandas is imported by frame() only: the CLI checks --pool before it loads anything
    import pandas as pd

KEY_LABELS = {
    "batch_size_per_device": "batch/device",
    "global_batch_size": "global batch",
    "devices": "devices",
    "threads": "threads",
    "pricing_model": "pricing",
    "model_options": "model options",
    "data_shape": "data shape",
    "runtime_options": "runtime options",
    "cpu_capability": "CPU kernels",
    "device_kind": "device",
}


# What a bar or a line may pool when the user asks (--pool): the keys that split one work's figures.
POOLABLE = ("global_batch_size", "batch_size_per_device", "precision", "parallel", "devices", "threads",
            "pricing_model", "experiment", "runtime_options")


@dataclass
class Context:
    baseline: dict[str, list[str]] | None = None  # parsed --baseline query
    baseline_text: str | None = None
    currency: str | None = None  # the report's (--currency); None: USD when any record is, else theirs
    fx: dict[str, float] | None = None  # --fx CUR=RATE (USD per unit), replacing the rate table
    pool: tuple[str, ...] = ()  # --pool: keys a normalised bar may pool over (median of configurations)
    rates: list = field(default_factory=list)  # the exchange rates used (filled by prepare)
    # The rows normalised to the baseline, when the caller computed them once for the report's rows
    # (with_normalised): the baseline table, the normalised plot and the findings read them.
    normalised: Rows | None = None

    @classmethod
    def with_baseline(cls, text: str | None, **kw) -> Context:
        return cls(baseline=parse_query(text) if text else None, baseline_text=text, **kw)


def prepare(df, ctx: Context) -> Rows:
    """The tidy frame as rows with every cost figure in one currency (ctx.rates says which rates)."""
    rows = Rows.of(df)
    found = {str(c).lower() for c in rows.col("price_currency") if c}
    to = fx.report_currency(found, ctx.currency)
    if to is None or found <= {to}:
        return rows
    out, ctx.rates = fx.in_currency(rows, to, ctx.fx)
    return Rows(out)


def baseline_rows(rows: Rows, ctx: Context) -> Rows:
    """analysis.baseline.normalised_rows against the --baseline (the baseline table, the normalised plot and
    the findings): ctx.normalised when the caller gave it, else computed; raises its NoData / ValueError (an
    ambiguous baseline, with the candidates)."""
    if ctx.normalised is not None:
        return ctx.normalised
    return normalised_rows(rows, ctx.baseline, ctx.baseline_text)


def with_normalised(rows: Rows, ctx: Context) -> Context:
    """ctx with `normalised` computed once from `rows` (the rows every table and plot of the report is drawn
    from); left None when there is nothing to normalise (each figure then says why). An ambiguous baseline
    raises ValueError here, before anything is drawn."""
    try:
        n = normalised_rows(rows, ctx.baseline, ctx.baseline_text) if ctx.baseline else None
    except NoData:
        n = None
    return replace(ctx, normalised=n)


def bar_keys(rows: Rows, ctx: Context | None = None, drop: Iterable[str] = ()) -> list[str]:
    """The configuration keys that tell one work's bars apart (the ones that vary), minus what the user
    pooled (--pool) and `drop`."""
    skip = set(WORK) | set(drop) | set(ctx.pool if ctx else ())
    return label_names([k for k in varying_keys(rows) if k not in skip])


def bar_label(keys: dict, names: list[str]) -> str:
    return configuration_label(keys, names, "all runs", devices="dev")


def configurations(
    rows: Rows, ctx: Context | None = None, drop: Iterable[str] = ()
) -> list[tuple[str, Rows]]:
    """(label, runs) of each configuration of one work's rows: grouped by `bar_keys`, labelled by
    `bar_label`."""
    names = bar_keys(rows, ctx, drop)
    return [(bar_label(keys, names), g) for keys, g in groups(rows, names)]


def pooled_text(
    found: list[tuple[dict, Rows]], candidates: Iterable[str] = CONFIGURATION, what: str = "bar"
) -> str:
    """What one bar (row, point) holds: one configuration, or several pooled over the keys named (only the
    `candidates` can differ within one: the keys it was not grouped by)."""
    pooled = [
        k for k in CONFIGURATION if k in candidates and any(varies(g, k) for _, g in found if len(g) > 1)
    ]
    if pooled:
        return (f"Pooled within a {what}: {', '.join(KEY_LABELS.get(k, k) for k in pooled)} "
                f"(median over the configurations; asked with --pool).")
    return f"Each {what}: one configuration (median over its repeated runs)."


@dataclass
class Table:
    name: str
    title: str
    frame: pd.DataFrame
    note: str = ""
    max_rows_shown: int = 200  # HTML/markdown show this many; the CSV has every row
    pooled: str = "Each row: one configuration (median over its repeated runs)."


def varying_keys(rows: Rows, keys=CONFIGURATION) -> list[str]:
    """Config keys with more than one value (constant ones go into the caption instead)."""
    return [k for k in keys if rows and varies(rows, k)]


def constant_caption(rows: Rows, keys=CONFIGURATION) -> str:
    """"All rows: model=..., ..." for the keys every row shares (option and shape details left out)."""
    parts = [f"{KEY_LABELS.get(k, k)}={whole(rows[0][k])}" for k in keys
             if k not in DETAILS and rows and rows[0].get(k) is not None and not varies(rows, k)]
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
    import pandas as pd

    return pd.DataFrame(rows).dropna(axis=1, how="all")
