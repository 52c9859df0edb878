"""A value's allowed range or closed set (`Knob`) and the one message style that reports a value outside it.

Pure Python, below the config: the config's fields carry one each (xbench/config/knobs.py `knob`), and the
billing model's guard over any platform dict (metrics/cost.py `BOUNDS`, which the platform schema's fields
read) shares it, so a bound is written once and said in one style.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BIG = 2**31 - 1  # "as many as you like" for counts and sizes


@dataclass(frozen=True)
class Knob:
    """The values one field may take: a closed or open interval (ge/gt, le/lt) and/or a closed set."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | None = None

    @property
    def numeric(self) -> bool:
        return self.choices is None

    def interval(self) -> str:
        """The range as the messages show it: "[1, 65536]", "(0, 1)"."""
        low, opening = (self.ge, "[") if self.gt is None else (self.gt, "(")
        high, closing = (self.le, "]") if self.lt is None else (self.lt, ")")
        return f"{opening}{_num(low)}, {_num(high)}{closing}"

    def allows(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def problem(self, key: str, value) -> str | None:
        """Why `value` cannot be `key` (None: it can)."""
        if value is None or value == "???":  # null, or MISSING in a section not composed (Hydra says so)
            return None
        if self.choices is not None:
            return None if value in self.choices else \
                f"{key}={value!r} is unknown; allowed: {', '.join(_choice(c) for c in self.choices)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key}={value!r} is not a number; allowed: {self.interval()}"
        if self.allows(value):
            return None
        finite = "" if math.isfinite(value) else " (a finite number)"
        return f"{key}={value!r} is out of range; allowed: {self.interval()}{finite}"


def _num(x) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) >= 1e4:
        return f"{x:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"{x:g}" if isinstance(x, float) else str(x)


def _choice(c) -> str:
    return "null" if c is None else str(c)
