"""One currency per report: cost figures recorded in another are converted with a dated rate table, never
dropped (a report holding USD and EUR platforms showed the EUR ones blank).

metrics/derived.py names every cost figure after its record's currency (`usd_per_million_samples`,
`train_cost_to_target_eur`, `samples_per_s_per_eur_per_hour`). `in_currency` adds the report currency's
columns to each row priced in another, converted at the rate of the year the platform's price is from
(`platform.price_as_of`; the latest year when it does not say), and marks the row with what it did
(`price_currency`, `fx_rate`, `fx_date`), so the report can show the rates it used. An amount is
multiplied by the rate; a figure per money (samples/s per EUR/hour) is divided by it.

The rates are the European Central Bank's euro reference rates, annual averages of daily rates (USD per
EUR); `--fx EUR=1.09` on the report's command line replaces them for one report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ECB = "European Central Bank euro reference rates, annual average of daily rates"
# USD per one unit of the currency, per year.
USD_PER = {
    "EUR": {2017: 1.1297, 2018: 1.1810, 2019: 1.1195, 2020: 1.1422, 2021: 1.1827, 2022: 1.0530,
            2023: 1.0813, 2024: 1.0824},
}
YEAR = re.compile(r"(\d{4})")


@dataclass(frozen=True)
class Rate:
    currency: str  # from, upper case (EUR)
    to: str  # upper case (USD)
    rate: float  # units of `to` per unit of `currency`
    date: str  # the year (or date) the rate is for
    source: str


def known(cur: str, given: dict[str, float] | None = None) -> bool:
    """Whether a price in `cur` can be converted (USD, the rate table's, or one given with --fx)."""
    c = str(cur).upper()
    return c == "USD" or c in USD_PER or bool(given and c in given)


def currencies() -> list[str]:
    return sorted({"USD", *USD_PER})


def report_currency(found: set[str], asked: str | None = None) -> str | None:
    """The currency a report shows money in: the one asked for, else USD when any record is in USD (or when
    records use several), else the one currency the records use; None without prices."""
    if asked:
        return asked.lower()
    if not found:
        return None
    return "usd" if "usd" in found or len(found) > 1 else next(iter(found))


def rate(cur: str, to: str, as_of: str | None = None, given: dict[str, float] | None = None) -> Rate:
    """The rate from `cur` to `to` for a price dated `as_of` (YYYY[-MM[-DD]]); `given` ({'EUR': 1.09},
    USD per unit) wins. Raises ValueError for a pair the table cannot convert."""
    cur, to = cur.upper(), to.upper()
    if cur == to:
        return Rate(cur, to, 1.0, "", "same currency")

    def usd_per(c: str) -> tuple[float, str, str]:
        if c == "USD":
            return 1.0, "", ""
        if given and c in given:
            return given[c], "as given (--fx)", "the report's --fx option"
        years = USD_PER.get(c)
        if not years:
            raise ValueError(f"no exchange rate for {c}; give one with --fx {c}=<USD per {c}>")
        m = YEAR.match(str(as_of or ""))
        year = int(m.group(1)) if m and int(m.group(1)) in years else max(years)
        return years[year], str(year), ECB + ("" if m and int(m.group(1)) in years else
                                               f" (latest year: the price is dated {as_of or 'nowhere'})")

    a, date_a, src_a = usd_per(cur)
    b, date_b, src_b = usd_per(to)
    return Rate(cur, to, a / b, date_a or date_b, src_a or src_b)


def _money_columns(columns, cur: str) -> dict[str, tuple[str, bool]]:
    """{column in `cur`: (its name in the target currency placeholder '{to}', divide?)}."""
    out = {}
    for c in columns:
        parts = c.split("_")
        if cur not in parts:
            continue
        i = parts.index(cur)
        divide = i > 0 and parts[i - 1] == "per"  # samples/s per EUR/hour: the money is below the line
        out[c] = ("_".join("{to}" if p == cur else p for p in parts), divide)
    return out


def _converted(r: dict, cur: str, to: str, fx: Rate) -> dict:
    """A copy of row `r` (priced in `cur`) with its cost columns in `to` at `fx`: only the report's currency
    is left, so every cost column has one name."""
    new = dict(r)
    for c, (pattern, divide) in _money_columns(r, cur).items():
        v = new.pop(c)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            new[pattern.format(to=to)] = v / fx.rate if divide else v * fx.rate
    new.update(fx_rate=fx.rate, fx_date=fx.date)
    return new


def in_currency(rows, to: str | None, given: dict[str, float] | None = None) -> tuple[list[dict], list[Rate]]:
    """(rows with every cost figure in `to`, the rates used). Rows already in `to`, or unpriced, are returned
    as they are; a converted row is a copy with its cost columns renamed (the frame keeps the recorded
    ones)."""
    if to is None:
        return list(rows), []
    to = to.lower()
    out, used = [], {}
    for r in rows:
        cur = (r.get("price_currency") or "").lower()
        if not cur or cur == to:
            out.append(r)
            continue
        key = (cur, r.get("price_as_of"))
        if key not in used:
            used[key] = rate(cur, to, r.get("price_as_of"), given)
        out.append(_converted(r, cur, to, used[key]))
    return out, sorted(set(used.values()), key=lambda x: (x.currency, x.date))
