"""Price arithmetic over a platform's price components (pure Python; works on config dicts).

A platform's price is a list of components (accelerator, host VM, ...), each `amount` in `currency`
per time `unit`, per `per` (machine, chip or vCPU) times `count`. Monthly prices are amortised over
730 hours (365 x 24 / 12).
"""

from __future__ import annotations

HOURS_PER_UNIT = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "month": 730.0}


def component_per_hour(c: dict) -> float:
    unit = c.get("unit", "hour")
    if unit not in HOURS_PER_UNIT:
        raise ValueError(f"unknown price unit {unit!r}; allowed: {', '.join(HOURS_PER_UNIT)}")
    return float(c["amount"]) * int(c.get("count", 1)) / HOURS_PER_UNIT[unit]


def price_per_hour(platform: dict) -> float | None:
    """The whole machine's price per hour, or None when the platform has no price."""
    comps = platform.get("price") or []
    if not comps:
        return None
    currencies = {c.get("currency", "USD") for c in comps}
    if len(currencies) > 1:
        raise ValueError(f"price components mix currencies {sorted(currencies)}; give one")
    return sum(component_per_hour(c) for c in comps)


def currency(platform: dict) -> str:
    comps = platform.get("price") or []
    return comps[0].get("currency", "USD") if comps else "USD"
