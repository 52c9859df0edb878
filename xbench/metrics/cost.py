"""Billing arithmetic over a platform's price components (pure Python; works on config dicts).

A platform's price is a list of components (accelerator, host VM, disk, fees). Each usage component
costs `amount * count * (1 - discount)` per time `unit`, and is billed in steps of its granularity
(`billing`: millisecond, second, minute, hour rounded up) with a minimum charge per start. A month is
730 hours (365 x 24 / 12). Monthly rent (`unit: month`, `billing: month_amortised`) and fixed fees are spread
over the hours the machine is really used: a monthly amount costs `amount / (730 h x platform.utilisation)`
per used hour, and a setup fee is further spread over `platform.commitment_months`. `standalone=True` answers
the other question, "what if I rented it just for this job": whole months rounded up, the whole setup fee.

docs/cost_and_targets.md walks through the model with worked examples.
"""

from __future__ import annotations

import math
import re

from xbench.metrics.bounds import BIG, Knob
from xbench.metrics.numbers import finite_number

HOURS_PER_MONTH = 730.0
UNIT_S = {"millisecond": 1e-3, "second": 1.0, "minute": 60.0, "hour": 3600.0, "month": HOURS_PER_MONTH * 3600}
GRANULARITY_S = {"millisecond": 1e-3, "second": 1.0, "minute": 60.0, "hour": 3600.0, "month_amortised": None}
KINDS = ("usage", "setup_fee", "monthly_fee")
PER = ("machine", "chip", "vcpu", "gib")
PRICING_MODELS = ("on_demand", "spot", "preemptible", "reserved_1y", "reserved_3y", "monthly")
# The numbers billing can take, written once: `problems` holds any platform dict (a record's, a YAML's) to
# them, and the platform schema's fields declare them as their knobs (xbench/config/platform.py).
PLATFORM_BOUNDS = {"utilisation": Knob(gt=0, le=1), "commitment_months": Knob(gt=0, le=1200),
                   "minimum_charge_s": Knob(ge=0, le=1e9)}
PRICE_BOUNDS = {"amount": Knob(ge=0, le=1e12), "count": Knob(ge=1, le=BIG), "discount": Knob(ge=0, lt=1),
                "minimum_charge_s": Knob(ge=0, le=1e9)}


def _billing(c: dict, platform: dict) -> str:
    return c.get("billing") or platform.get("billing") or "second"


def _minimum_s(c: dict, platform: dict) -> float:
    v = c.get("minimum_charge_s")
    return float(platform.get("minimum_charge_s") or 0.0) if v is None else float(v)


def _utilisation(platform: dict) -> float:
    return float(platform.get("utilisation") or 1.0)


# Measurements a price is applied to (a throughput, a time, an epoch count): names that say a quantity.
# A boolean or a non-finite number there is never a measurement; text is one (a note) except in the figures
# the prices are computed from.
_PRICED = re.compile(r"(throughput|_s$|_s_|_per_s|^epochs|samples)")
_PRICED_FIGURES = (
    "throughput_samples_per_s",
    "window_s_total",
    "train_time_to_target_s",
    "wall_time_to_target_s",
    "wall_s_total",
    "epochs_to_target",
    "samples_per_window",
)


def not_numbers(measurements: dict) -> list[str]:
    """Measurements a price would be applied to that are not finite numbers (`true`, inf; "fast" in a priced
    figure), named; empty: fine. A list (per window, per rank) is checked element by element."""
    out = []
    for k, v in measurements.items():
        if v is None or not _PRICED.search(k):
            continue
        for x in v if isinstance(v, list) else [v]:
            text_ok = k not in _PRICED_FIGURES and isinstance(x, (str, dict, list))
            if x is not None and not text_ok and not finite_number(x):
                out.append(f"{k}={v!r} is not a finite number")
                break
    return out


def number_problems(platform: dict) -> list[str]:
    """A platform's numbers outside PLATFORM_BOUNDS / PRICE_BOUNDS (not finite, not a number, out of
    range)."""
    name = platform.get("name", "?")
    out = [why for key, knob in PLATFORM_BOUNDS.items()
           if (why := knob.problem(f"platform {name!r}: {key}", platform.get(key)))]
    for c in platform.get("price") or []:
        label = f"platform {name!r} price component {c.get('name', '?')!r}"
        out += [
            why for key, knob in PRICE_BOUNDS.items() if (why := knob.problem(f"{label}: {key}", c.get(key)))
        ]
    return out


def problems(platform: dict, numbers: bool = True) -> list[str]:
    """What is wrong with a platform's price (empty: fine): its numbers (number_problems), the billing words,
    one currency. compat asks with numbers=False: the platform schema's knobs hold the same bounds."""
    out = number_problems(platform) if numbers else []
    comps = platform.get("price") or []
    name = platform.get("name", "?")
    if platform.get("billing", "second") not in GRANULARITY_S:
        out.append(f"platform {name!r}: billing={platform.get('billing')!r} is unknown; "
                   f"allowed: {', '.join(GRANULARITY_S)}")
    for c in comps:
        label = f"platform {name!r} price component {c.get('name', '?')!r}"
        if c.get("unit", "hour") not in UNIT_S:
            out.append(f"{label}: unit={c.get('unit')!r} is unknown; allowed: {', '.join(UNIT_S)}")
        if "unit" not in c and c.get("kind", "usage") != "setup_fee" and _amortised(c, platform):
            # an amortised price per what? (an hourly rate read as monthly rent is 730x off)
            out.append(
                f"{label}: billing month_amortised needs the amount's unit: unit: hour (a rate, e.g. a "
                "reservation's hourly price) or unit: month (rent); allowed: " + ", ".join(UNIT_S)
            )
        if c.get("kind", "usage") not in KINDS:
            out.append(f"{label}: kind={c.get('kind')!r} is unknown; allowed: {', '.join(KINDS)}")
        if c.get("per", "machine") not in PER:
            out.append(f"{label}: per={c.get('per')!r} is unknown; allowed: {', '.join(PER)}")
        if _billing(c, platform) not in GRANULARITY_S:
            out.append(
                f"{label}: billing={_billing(c, platform)!r} is unknown; allowed: {', '.join(GRANULARITY_S)}"
            )
        pm = c.get("pricing_model")
        if pm is not None and pm not in PRICING_MODELS:
            out.append(f"{label}: pricing_model={pm!r} is unknown; allowed: {', '.join(PRICING_MODELS)}")
    if len({c.get("currency", "USD") for c in comps}) > 1:
        out.append(f"platform {name!r}: price components mix currencies "
                   f"{sorted({c.get('currency', 'USD') for c in comps})}; give one")
    return out


def _check(platform: dict) -> None:
    bad = problems(platform)
    if bad:
        raise ValueError("; ".join(bad))


def list_rate_per_s(c: dict) -> float:
    """The component's price per second of use, after its discount, before any rounding."""
    unit = c.get("unit", "hour")
    if unit not in UNIT_S:
        raise ValueError(f"unknown price unit {unit!r}; allowed: {', '.join(UNIT_S)}")
    return float(c["amount"]) * int(c.get("count", 1)) * (1.0 - float(c.get("discount", 0.0))) / UNIT_S[unit]


def _amortised_hours(c: dict, platform: dict) -> float:
    """Used hours over which one `amount` of a monthly or one-off charge is spread."""
    per_month = HOURS_PER_MONTH * _utilisation(platform)
    if c.get("kind", "usage") == "setup_fee":
        return per_month * float(platform.get("commitment_months") or 1.0)
    return per_month * UNIT_S[c.get("unit", "month")] / UNIT_S["month"]  # a monthly amount by default


def _amortised(c: dict, platform: dict) -> bool:
    """Monthly rent and fees are spread over used hours, never rounded to the second."""
    return (c.get("kind", "usage") != "usage" or _billing(c, platform) == "month_amortised"
            or c.get("unit", "hour") == "month")


def billed_s(duration_s: float, granularity: str, minimum_s: float = 0.0) -> float:
    """Seconds billed for `duration_s` of use: rounded up to the granularity, at least the minimum."""
    step = GRANULARITY_S[granularity]
    if step is None:
        return duration_s
    units = math.ceil(duration_s / step - 1e-9)  # 3600.0000000001 s is still one hour
    return max(units * step, minimum_s)


def component_cost(c: dict, platform: dict, duration_s: float, standalone: bool = False) -> float:
    kind = c.get("kind", "usage")
    amount = float(c["amount"]) * int(c.get("count", 1)) * (1.0 - float(c.get("discount", 0.0)))
    if kind == "setup_fee":
        return amount if standalone else amount * duration_s / 3600 / _amortised_hours(c, platform)
    if _amortised(c, platform):
        if standalone:  # rented only for this job: whole periods, rounded up
            period_s = UNIT_S[c.get("unit", "month")]
            return amount * max(1, math.ceil(duration_s / period_s - 1e-9))
        return amount * duration_s / 3600 / _amortised_hours(c, platform)
    return list_rate_per_s(c) * billed_s(duration_s, _billing(c, platform), _minimum_s(c, platform))


def run_cost(platform: dict, duration_s: float, standalone: bool = False) -> dict | None:
    """{'total', 'components': {name: cost}, 'currency'} for one job of `duration_s` seconds; None without a
    price.

    Every component runs for the whole duration (a TPU and its host VM are started and stopped together).
    """
    comps = platform.get("price") or []
    if not comps:
        return None
    _check(platform)
    parts: dict[str, float] = {}
    for i, c in enumerate(comps):
        key = c.get("name") or f"component{i}"
        parts[key] = parts.get(key, 0.0) + component_cost(c, platform, duration_s, standalone)
    return {"total": sum(parts.values()), "components": parts, "currency": currency(platform)}


def component_per_hour(c: dict, platform: dict | None = None) -> float:
    """Steady-state price per hour of use (monthly amounts and fees amortised, no rounding)."""
    platform = platform or {}
    if _amortised(c, platform):
        amount = float(c["amount"]) * int(c.get("count", 1)) * (1.0 - float(c.get("discount", 0.0)))
        return amount / _amortised_hours(c, platform)
    return list_rate_per_s(c) * 3600


def price_per_hour(platform: dict) -> float | None:
    """The whole machine's steady-state price per hour of use, or None when the platform has no price."""
    comps = platform.get("price") or []
    if not comps:
        return None
    _check(platform)
    return sum(component_per_hour(c, platform) for c in comps)


def currency(platform: dict) -> str:
    comps = platform.get("price") or []
    return comps[0].get("currency", "USD") if comps else "USD"
