"""Scaling across device counts, from runs that share a workload (pure Python, no torch).

Efficiency at N devices = throughput(N) / (N x throughput(1)): 1.0 is linear scaling. When no
1-device run exists, the smallest device count n0 is the reference and the formula generalises to
(throughput(N) / N) / (throughput(n0) / n0), which is the same figure when n0 = 1.
"""

from __future__ import annotations


def scaling_efficiency(throughput_by_devices: dict[int, float], reference: int | None = None) -> dict[int, dict]:
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
