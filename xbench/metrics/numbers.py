"""Numbers as text, for every place a reader sees a figure: the console's live lines and summary (`human`),
the report's cells, plot labels and findings (`compact`), labels that show a configuration value (`whole`).
Torch-free and at the lowest layer, so the sinks, the analysis and the report all read the same rules."""

from __future__ import annotations

import math


def finite_number(v) -> bool:
    """An int or float that is finite (a bool is not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def human(v, digits: int = 4) -> str:
    """A number as people read it: thousands separators and fixed decimals, never an exponent:
    24,150 samples/s, 241.5, 2.415 s, 0.02415 s (`digits` significant digits below 1,000)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    magnitude = math.floor(math.log10(abs(v)))
    if magnitude >= digits - 1:
        return f"{v:,.0f}"
    decimals = digits - 1 - magnitude
    if decimals > 9:  # below a nanounit: no fixed form is readable
        return f"{v:.{digits - 1}e}"
    return f"{v:,.{decimals}f}"


def compact(v, digits: int = 4, whole_from: float = 1000, missing: str = "") -> str:
    """A figure in `digits` significant digits without trailing zeros (%g: 3.2, 0.0137), a whole float without
    its ".0", and from `whole_from` up a whole number with thousands separators (23,640 reads better than
    2.364e+04; from 1e15 %g again: 1e308 is not 309 digits). None and NaN: `missing`."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    if whole_from <= abs(v) < 1e15:
        return f"{v:,.0f}"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def whole(v) -> str:
    """A configuration value as a label shows it: a whole float without its ".0" (2.0 devices: "2"), else as
    is."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _fixed(v: float, decimals: int) -> str:
    """`v` rounded at `decimals` (negative: to tens, hundreds, ...), with thousands separators, never an
    exponent."""
    return f"{round(v, decimals):,.0f}" if decimals <= 0 else f"{v:,.{decimals}f}"


def by_spread(v, half_width, max_digits: int = 4) -> str:
    """A figure to the digits its uncertainty supports: rounded at the leading digit of `half_width` (half its
    interval), at most `max_digits` significant digits, at least one: 223.7 +- 12 -> "220", 46.11 +- 0.3 ->
    "46.1", 24,150 +- 3 -> "24,150". Without a usable spread: `human(v, max_digits)`."""
    if not finite_number(v) or v == 0 or not finite_number(half_width) or half_width <= 0:
        return human(v, max_digits)
    magnitude = math.floor(math.log10(abs(v)))
    digits = min(max_digits, max(1, magnitude - math.floor(math.log10(half_width)) + 1))
    decimals = digits - 1 - magnitude
    return human(v, max_digits) if decimals > 9 else _fixed(v, decimals)


def granular(v, step) -> str:
    """A count made in steps of `step` (epochs at an evaluation every 0.45 epoch, or every whole epoch): a
    whole value as an integer (4.0 -> "4"), else to the decimal that tells one step from the next (2.232 at
    0.446 -> "2.2"; 2.232 at 1/56 -> "2.23"; at least one decimal). Without a step: `human(v)`."""
    if not finite_number(v):
        return str(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    if not finite_number(step) or step <= 0:
        return human(v)
    return _fixed(v, max(1, math.ceil(-math.log10(step) - 1e-9)))
