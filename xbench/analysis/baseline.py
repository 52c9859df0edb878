"""Time and cost of each configuration relative to a baseline's, for the same work.

The ratio is metrics.derived.normalise (the one normalisation: it refuses to divide one currency by
another) over each configuration's medians: training time and cost to target when both sides have
them, else projected training, else time and cost per sample. Runs are compared within the same
work (xbench/analysis/workload.py: model, data and their options): the baseline is usually another
machine, runtime or batch size on purpose.
"""

from __future__ import annotations

from xbench.analysis.frame import check_keys, flatten, matches
from xbench.analysis.rows import TP, NoData, Rows, currency, groups
from xbench.analysis.spread import ratio, verdict
from xbench.analysis.workload import BASELINE, CONFIGURATION, key
from xbench.metrics.derived import normalise
from xbench.records.record import RunRecord


def same_work(record: RunRecord, baseline: RunRecord) -> bool:
    """Whether two records did the same work, so normalising one by the other means something."""
    return key(flatten(record), BASELINE) == key(flatten(baseline), BASELINE)


def _as_record(rows: Rows, cur: str | None) -> dict:
    """A configuration's medians in the shape metrics.derived.normalise reads."""
    cols = (TP, "train_time_to_target_s", "projected_training_s")
    if cur:
        cols += (f"{cur}_per_million_samples", f"train_cost_to_target_{cur}",
                 f"projected_training_cost_{cur}")
    vals = {c: rows.median(c) for c in cols}
    price = [{"currency": cur.upper()}] if cur else []
    return {"measurements": vals, "derived": {}, "config": {"platform": {"price": price}}}


def _one_configuration(base: Rows, text: str | None) -> None:
    """Refuse a baseline that matches several configurations of one work at one global batch."""
    for gkey, g in groups(base, ["global_batch_size"]):
        configs = groups(g)
        if len(configs) > 1:
            varying = [k for k in CONFIGURATION if len({c[0].get(k) for c in configs}) > 1]
            listed = "; ".join(", ".join(f"{k}={c[0].get(k)}" for k in varying) for c in configs)
            raise ValueError(f"--baseline {text!r} is ambiguous: at global batch "
                             f"{gkey['global_batch_size']} it matches {len(configs)} configurations "
                             f"({listed}); add the key that tells them apart, e.g. --baseline "
                             f"'{text}&{varying[0]}=...'")


def _normalised_row(keys: dict, sub: Rows, ref: Rows, cur: str | None, is_base: bool) -> dict:
    """One configuration against its baseline `ref`: its time and cost relative to it, the time's CI (time
    per sample only) and the verdict it allows."""
    n = normalise(_as_record(sub, cur), _as_record(ref, cur))
    ci = None
    if n.get("normalised_basis") == "seconds_per_sample" and not is_base:
        _, ci = ratio(ref, sub)  # time per sample relative to the baseline = its throughput / ours
    return {**keys, TP: sub.median(TP), "normalised_time": n.get("normalised_time"),
            "normalised_time_ci95": ci,
            "verdict": None if is_base or n.get("normalised_time") is None
            else verdict(ci, "slower than the baseline", "faster than the baseline"),
            "normalised_cost": n.get("normalised_cost"), "normalised_basis": n.get("normalised_basis"),
            "is_baseline": is_base}


def _work_rows(wsub: Rows, query: dict, text: str | None, cur: str | None) -> list[dict]:
    """A work's configurations against its baseline (none when no run of the work matches `query`): the
    baseline at the same global batch, else its fastest run."""
    base = Rows(r for r in wsub if matches(r, query))
    if not base:
        return []
    _one_configuration(base, text)
    by_batch = {k["global_batch_size"]: g for k, g in groups(base, ["global_batch_size"])}
    fastest = Rows([max(base, key=lambda r: r[TP])])
    return [_normalised_row(keys, sub, by_batch.get(keys["global_batch_size"]) or fastest, cur,
                            all(matches(r, query) for r in sub)) for keys, sub in groups(wsub)]


def normalised_rows(rows, query: dict[str, list[str]] | None, text: str | None = None) -> Rows:
    """One row per configuration: its keys, throughput, normalised_time, normalised_cost,
    normalised_basis and is_baseline, against the runs matching `query` (a parsed --baseline).

    Within each work, the baseline is its configuration with the same global batch when there is
    one, else its fastest run. The query must pick ONE configuration per work and global batch: a
    query that matches several (two CPU-kernel settings of one platform, a DDP and a single run at
    one global batch) would average them into a baseline that is neither, so it is refused with the
    candidates listed (ValueError). Raises NoData (with the reason) when there is nothing to compare.
    """
    if not query:
        raise NoData("no --baseline given (e.g. --baseline platform=cpu)")
    rows = Rows.of(rows)
    check_keys(query, rows.columns() | set(CONFIGURATION) | {"status", "run_id", "experiment"})
    ok = rows.ok()
    if not any(matches(r, query) for r in ok):
        raise NoData(f"no ok run matches the baseline {text!r}")
    cur = currency(rows)
    out = Rows(row for _, wsub in groups(ok, BASELINE) for row in _work_rows(wsub, query, text, cur))
    if not out:
        raise NoData(f"no workload has both the baseline {text!r} and other runs")
    return out
