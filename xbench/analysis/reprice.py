"""One machine priced several ways: its runs re-priced as one set, never two sets of runs compared.

A platform with `provider: local` is THIS machine priced as a cloud instance (conf/platform/local_as_*.yaml):
study 1 prices the same machine on demand and under a 1-year commitment. Its runs under the two prices were
measured at different times, under different load; comparing the two sets' cost figures would show that
load difference as a price effect. So the rate figures of such a group (samples/s per price, cost per million
samples) are recomputed from ALL its runs at each price: every price gets the same runs (median and spread),
and the bars differ by the price alone.

A group is the runs of one configuration, less its platform, pricing model and experiment, on one machine
(`hostname`, accelerator and CPU model), whose platforms are `provider: local` and more than one.
Time-billed costs (to a target, a whole training) keep their own runs: their billing rules need the
platform file.
"""

from __future__ import annotations

from xbench.analysis.rows import TP, Rows, groups
from xbench.analysis.workload import CONFIGURATION

# One machine: its host name and what it computes on (device_kind falls back to the platform's name).
MACHINE = ("hostname", "accelerator", "cpu_model")
SAME = tuple(k for k in CONFIGURATION if k not in ("platform", "pricing_model", "experiment")) + MACHINE


def _rate_columns(cur: str) -> tuple[str, str, str]:
    return f"{cur}_per_hour", f"samples_per_s_per_{cur}_per_hour", f"{cur}_per_million_samples"


def _positive(v) -> bool:
    """A price or throughput a rate can be computed from: a finite number above 0 (a 1e308 or text one stays
    as its record has it, never re-priced into inf)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e300


def _local(rows: Rows, per_hour: str) -> Rows:
    """The ok runs of a named machine priced as a cloud instance, with a price and a throughput to
    re-price."""
    return Rows(r for r in rows if r.get("status") == "ok" and r.get("provider") == "local"
                and r.get("hostname") and _positive(r.get(per_hour)) and _positive(r.get(TP)))


def _at_price(g: Rows, plat: str, p: Rows, cur: str, source: str) -> list[dict]:
    """Every run of the group `g` re-priced at platform `plat`'s price (the median of its own runs' `p`)."""
    per_hour, per_price, per_million = _rate_columns(cur)
    price, pm = p.median(per_hour), p[0].get("pricing_model")
    return [{**r, "run_id": f"{r['run_id']}@{plat}", "platform": plat, "pricing_model": pm, per_hour: price,
             per_price: r[TP] / price, per_million: price / 3600 / r[TP] * 1e6, "repriced_from": source}
            for r in g]


def repriced(rows: Rows, cur: str | None) -> tuple[Rows, list[str]]:
    """(rows with each same-machine group's rate figures recomputed from all its runs at each of its prices,
    one sentence per group naming it). Rows outside such groups come back as they are; a re-priced row says
    `repriced_from` and has run id `<run>@<platform>`."""
    rows = Rows.of(rows)
    if cur is None:
        return rows, []
    out, notes, done = [], {}, set()
    for _, g in groups(_local(rows, _rate_columns(cur)[0]), SAME):
        prices = {k["platform"]: p for k, p in groups(g, ["platform"])}
        if len(prices) < 2:
            continue
        names = ", ".join(map(str, prices))
        source = f"the same {len(g)} runs of one machine ({g[0]['hostname']}) priced as {names}"
        out += [row for plat, p in prices.items() for row in _at_price(g, plat, p, cur, source)]
        done.update(id(r) for r in g)
        notes[names] = notes.get(names, 0) + len(g)
    if not out:
        return rows, []
    kept = Rows(r for r in rows if id(r) not in done)
    return Rows([*kept, *out]), [
        f"{names}: one machine priced {names.count(',') + 1} ways; its cost per sample is its {n} runs "
        "re-priced at each price, so the prices alone differ (its runs under the different names differ only "
        "by when they ran)." for names, n in notes.items()]


def _machine(r: dict) -> tuple:
    return tuple(r.get(k) for k in MACHINE)


def _one_name(rows: Rows) -> dict[tuple, str]:
    """Each named machine priced under several local platforms -> the one name its runs take: `a = b (one
    machine)`."""
    names: dict[tuple, set] = {}
    for r in (r for r in rows if r.get("provider") == "local" and r.get("hostname")):
        names.setdefault(_machine(r), set()).add(r.get("platform"))
    return {k: " = ".join(sorted(map(str, v))) + " (one machine)" for k, v in names.items() if len(v) > 1}


def _as_one(r: dict, joined: dict[tuple, str]) -> dict:
    k = _machine(r) if r.get("provider") == "local" else None
    return {**r, "platform": joined[k], "pricing_model": None} if k in joined else r


def one_machine(rows: Rows) -> tuple[Rows, list[str]]:
    """(rows in which the runs of one machine under several local prices count as one configuration, a
    sentence per machine): for throughput, where the price plays no part, the names are one platform
    (`a = b (one machine)`), so two sets of runs taken at different times are repeats, not two results."""
    rows = Rows.of(rows)
    joined = _one_name(rows)
    if not joined:
        return rows, []
    return Rows(_as_one(r, joined) for r in rows), [
        f"{j.removesuffix(' (one machine)')}: one machine under several prices; its throughput is drawn as "
        "one configuration (the runs under each name are repeats of it)." for j in joined.values()]
