"""Figures derived from measurements and config: throughput per device, FLOP/s, MFU, cost.

Pure Python over plain dicts (a record's `measurements` and `config`), so the report can recompute
them for stored records under another price without torch. Add a derived metric as one function
registered in DERIVED; it then reaches the record, W&B and the report.
"""

from __future__ import annotations

from collections.abc import Callable

from xbench.metrics.cost import currency, price_per_hour

DERIVED: list[Callable[[dict, dict], dict]] = []


def derived(fn):
    DERIVED.append(fn)
    return fn


def _throughput(m: dict) -> float | None:
    return m.get("throughput_samples_per_s")


@derived
def per_device(m: dict, cfg: dict) -> dict:
    tp, n = _throughput(m), m.get("devices")
    return {"throughput_per_device_samples_per_s": tp / n} if tp and n else {}


@derived
def flops(m: dict, cfg: dict) -> dict:
    tp, f = _throughput(m), m.get("flops_per_sample_train")
    if not tp or not f:
        return {}
    achieved = tp * f
    out = {"achieved_tflops": achieved / 1e12}
    peak = (cfg.get("platform") or {}).get("peak_tflops") or {}
    dtype = m.get("compute_dtype", "fp32")
    if peak.get(dtype) and m.get("devices"):
        out["mfu"] = achieved / (peak[dtype] * 1e12 * m["devices"])
    return out


@derived
def cost(m: dict, cfg: dict) -> dict:
    tp = _throughput(m)
    per_hour = price_per_hour(cfg.get("platform") or {})
    if not per_hour or not tp:
        return {}
    cur = currency(cfg.get("platform") or {}).lower()
    out = {
        f"{cur}_per_hour": per_hour,
        f"samples_per_s_per_{cur}_per_hour": tp / per_hour,
        f"{cur}_per_million_samples": per_hour / 3600 / tp * 1e6,
    }
    if m.get("window_s_total"):
        out[f"window_cost_{cur}"] = per_hour * m["window_s_total"] / 3600
    size = (cfg.get("data") or {}).get("dataset_size")
    if size:
        out["projected_epoch_s"] = size / tp
        out[f"projected_epoch_cost_{cur}"] = size / tp / 3600 * per_hour
    return out


@derived
def host_overhead(m: dict, cfg: dict) -> dict:
    """Share of a steady step the host spends tracing it (XLA: the step body before the sync), over
    the steady step's wall time. Eager has no such figure yet (see docs/runtimes.md)."""
    total, steps, reps = m.get("window_s_total"), m.get("timed_steps_per_window"), m.get("repeats")
    host = m.get("xla_trace_s_median")
    if host is None or not (total and steps and reps):
        return {}
    return {"host_overhead_fraction": host / (total / (steps * reps)), "host_overhead_source": "xla_tracing"}


def derive(measurements: dict, config: dict) -> dict:
    out: dict = {}
    for fn in DERIVED:
        out.update(fn(measurements, config))
    return out
