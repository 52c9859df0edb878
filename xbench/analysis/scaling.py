"""Scaling efficiency over devices: throughput(N) / (N x throughput(1)), per workload and strategy.

Runs are compared within one workload (xbench/analysis/workload.py: same model, data and shape, batch
per device, precision, runtime and platform); only the parallel strategy and the device count vary.
throughput(1) is the workload's `single` run when there is one (median over repeats): the run without
any distribution, so a strategy's own 1-device run shows what distributing costs. Without one, the
strategy's own 1-device run; without that, the strategy's smallest device count is the reference
(`reference_devices`). A strategy with one point and no 1-device reference has nothing to compare and is left
out.

Efficiency above 1 + SUPERLINEAR_TOL is not a result but a question: `flag` says "superlinear: noise
or cache effects?" (a noisy or oversubscribed 1-device reference, or a per-device batch that fits a cache only
when split). Each point carries the 95% CI of its efficiency where both sides have 3 samples
(analysis/spread.py `ratio`).
"""

from __future__ import annotations

from xbench.analysis.rows import TP, Rows, groups
from xbench.analysis.spread import ratio
from xbench.analysis.workload import SCALING

SUPERLINEAR_TOL = 0.05  # efficiency above 1 + this is flagged
SUPERLINEAR = "superlinear: noise or cache effects?"


def efficiency_by_devices(throughput_by_devices: dict[int, float], reference: int | None = None,
                          reference_samples_per_s: float | None = None) -> dict[int, dict]:
    """devices -> {speedup, efficiency, ideal_samples_per_s, reference_devices} against a reference.

    The reference is `reference_samples_per_s` at `reference` devices (default 1) when given (a run
    measured apart, e.g. `single`), else the point at `reference` (default: 1 if present, else the
    smallest count). Points with no positive throughput are left out.
    """
    points = {int(n): float(t) for n, t in throughput_by_devices.items() if n and t and t > 0}
    if not points:
        return {}
    if reference_samples_per_s:
        n0, t0 = reference or 1, float(reference_samples_per_s)
    else:
        n0 = reference if reference is not None else (1 if 1 in points else min(points))
        if n0 not in points:
            raise ValueError(f"no throughput at the reference device count {n0}; have {sorted(points)}")
        t0 = points[n0]
    per_device0 = t0 / n0
    return {
        n: {
            "speedup": t / t0,
            "efficiency": (t / n) / per_device0,
            "ideal_samples_per_s": per_device0 * n,
            "reference_devices": n0,
        }
        for n, t in sorted(points.items())
    }


def _by_devices(psub: Rows, single: Rows) -> tuple[dict[int, Rows], Rows | None]:
    """(a strategy's runs by device count, its reference: the workload's `single` run, else its own 1-device
    run); the reference stands at 1 device when the strategy has no run there."""
    by_n = {int(k["devices"]): s for k, s in groups(psub, ["devices"]) if k["devices"]}
    ref = single or by_n.get(1)
    if ref is not None and 1 not in by_n:
        by_n[1] = ref
    return by_n, ref


def _point(n: int, e: dict, runs: Rows, tp: float, ref_rows: Rows) -> dict:
    """One device count's row: its runs, throughput, ideal, speed-up and efficiency (with a CI where both
    sides have the samples; none against itself), flagged when superlinear."""
    _, ci = ratio(runs, ref_rows) if runs is not ref_rows else (None, None)
    scale = e["reference_devices"] / n  # efficiency = speed-up x n0 / n
    return {"devices": n, "runs": len(runs), "throughput_samples_per_s": tp,
            "ideal_samples_per_s": e["ideal_samples_per_s"], "speedup": e["speedup"],
            "scaling_efficiency": e["efficiency"],
            "scaling_efficiency_ci95": None if ci is None else (ci[0] * scale, ci[1] * scale),
            "flag": SUPERLINEAR if e["efficiency"] > 1 + SUPERLINEAR_TOL else None,
            "reference_devices": e["reference_devices"]}


def scaling_rows(rows) -> Rows:
    """One row per (workload, parallel strategy, devices) of the ok runs: runs, throughput (median),
    ideal, speed-up and scaling efficiency. A strategy without its own 1-device run gets a row at 1
    device holding the reference it is measured against."""
    out = Rows()
    for wkeys, wsub in groups(Rows.of(rows).ok(), SCALING):
        single = Rows(r for r in wsub if r.get("parallel") == "single" and r.get("devices") == 1)
        for pkeys, psub in groups(wsub, ["parallel"]):
            by_n, ref = _by_devices(psub, single)
            if len(by_n) < 2:
                continue
            tp = {n: s.median(TP) for n, s in by_n.items()}
            ref_tp = ref.median(TP) if ref is not None else None
            for n, e in efficiency_by_devices(tp, reference_samples_per_s=ref_tp).items():
                ref_rows = ref if ref is not None else by_n[e["reference_devices"]]
                out.append({**wkeys, "parallel": pkeys["parallel"], **_point(n, e, by_n[n], tp[n], ref_rows)})
    return out
