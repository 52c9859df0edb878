"""Scaling efficiency and baseline-relative time and cost, over stored records (pure Python, no torch).

Scaling efficiency at N devices = throughput(N) / (N x throughput(1)), for records that share a
workload: model (and options), data (and batch size per device), precision and runtime, on the same
device type. The 1-device throughput comes from a `single` run when there is one, else from any
1-device run of the workload (e.g. DDP with world size 1). Several records at one point: the median.

`relative_to_baseline` normalises time and cost of every record to one baseline record chosen by a
selector (config paths -> values, as in `baseline_query:` of an experiment), as in "CPU time and cost
relative to the GPU instance". `efficiency_by_devices` is the same figure over a plain
{devices: throughput} mapping (the report's tables use it after grouping rows themselves).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

DATA_KEYS = ("name", "batch_size", "image_size", "channels", "seq_len", "vocab_size", "num_features",
             "num_classes")


def _as_dict(rec) -> dict:
    return rec if isinstance(rec, dict) else rec.to_dict()


def dig(d: dict, path: str):
    """d['a']['b'] for path 'a.b' (None where a key is missing)."""
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def workload_key(rec) -> str:
    """What must be equal for two records' throughputs to be compared as one workload."""
    r = _as_dict(rec)
    c, m = r.get("config", {}), r.get("measurements", {})
    key = {
        "model": dig(c, "model.name"), "model_options": dig(c, "model.options") or {},
        "data": {k: dig(c, f"data.{k}") for k in DATA_KEYS},
        "precision": dig(c, "precision.name"),
        "runtime": {k: dig(c, f"runtime.{k}") for k in ("name", "backend", "mode")},
        "device_type": str(m.get("device", "")).split(":")[0],
    }
    return json.dumps(key, sort_keys=True, default=str)


def _ok(records) -> list[dict]:
    return [r for r in map(_as_dict, records)
            if r.get("status") == "ok" and r.get("measurements", {}).get("throughput_samples_per_s")]


def scaling_efficiency(records, baseline_strategy: str = "single") -> list[dict]:
    """One row per (workload, strategy, devices) with speed-up and efficiency against 1 device."""
    groups: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in _ok(records):
        m = r["measurements"]
        point = (dig(r["config"], "parallel.name"), int(m.get("devices", 1)))
        groups[workload_key(r)][point].append(m["throughput_samples_per_s"])
    rows = []
    for key, points in groups.items():
        ones = points.get((baseline_strategy, 1)) or [t for (_, n), ts in points.items() if n == 1 for t in ts]
        base = statistics.median(ones) if ones else None
        for (strategy, n), tps in sorted(points.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            tp = statistics.median(tps)
            rows.append({
                "workload": json.loads(key), "strategy": strategy, "devices": n, "records": len(tps),
                "throughput_samples_per_s": tp, "baseline_1_device_samples_per_s": base,
                "speedup": tp / base if base else None,
                "scaling_efficiency": tp / (n * base) if base else None,
            })
    return rows


def flatten(d: dict, prefix: str = "") -> dict:
    """{'platform': {'name': 'x'}} -> {'platform.name': 'x'} (selectors may be nested or dotted)."""
    out = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        out.update(flatten(v, path + ".") if isinstance(v, dict) else {path: v})
    return out


def select(records, selector: dict) -> list[dict]:
    """Records whose config (or top-level field, e.g. run_id) matches every path -> value of selector."""
    out, selector = [], flatten(selector)
    for r in map(_as_dict, records):
        if all((dig(r, p) if p in ("run_id", "experiment") else dig(r.get("config", {}), p)) == v
               for p, v in selector.items()):
            out.append(r)
    return out


def _cost_per_sample(r: dict) -> float | None:
    d = r.get("derived", {})
    per_million = next((v for k, v in d.items() if k.endswith("_per_million_samples")), None)
    return per_million / 1e6 if per_million else None


def relative_to_baseline(records, selector: dict) -> list[dict]:
    """Time per sample and cost per sample of each ok record over the baseline record's.

    The baseline is the newest ok record matching `selector`; raises ValueError when none does.
    time_ratio > 1: slower than the baseline; cost_ratio > 1: dearer (None where a price is missing).
    """
    ok = _ok(records)
    base = sorted(select(ok, selector), key=lambda r: r.get("created_at") or "")
    if not base:
        raise ValueError(f"no ok record matches baseline {selector}")
    b = base[-1]
    b_tp, b_cost = b["measurements"]["throughput_samples_per_s"], _cost_per_sample(b)
    rows = []
    for r in ok:
        tp, cost = r["measurements"]["throughput_samples_per_s"], _cost_per_sample(r)
        rows.append({
            "run_id": r["run_id"], "baseline_run_id": b["run_id"],
            "platform": dig(r["config"], "platform.name"), "parallel": dig(r["config"], "parallel.name"),
            "threads_intra": r["measurements"].get("threads_intra"),
            "throughput_samples_per_s": tp,
            "time_ratio": b_tp / tp,
            "cost_ratio": cost / b_cost if cost and b_cost else None,
        })
    return rows


def efficiency_by_devices(throughput_by_devices: dict[int, float], reference: int | None = None) -> dict[int, dict]:
    """devices -> {speedup, efficiency, ideal_samples_per_s}, relative to the `reference` device count
    (default: 1 if present, else the smallest count). Points with no positive throughput are left out.
    """
    points = {int(n): float(t) for n, t in throughput_by_devices.items() if n and t and t > 0}
    if not points:
        return {}
    n0 = reference if reference is not None else (1 if 1 in points else min(points))
    if n0 not in points:
        raise ValueError(f"no throughput at the reference device count {n0}; have {sorted(points)}")
    per_device0 = points[n0] / n0
    return {
        n: {
            "speedup": t / points[n0],
            "efficiency": (t / n) / per_device0,
            "ideal_samples_per_s": per_device0 * n,
            "reference_devices": n0,
        }
        for n, t in sorted(points.items())
    }
