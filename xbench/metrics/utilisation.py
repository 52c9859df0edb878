"""Per-GPU utilisation of one record, over every rank (pure Python).

bench/meters/utilisation.py samples NVML on each rank for the GPUs that rank drives: nn.DataParallel's one
rank drives them all (its GPU 0 busy, the others waiting shows there), DDP's ranks one each. The run-level
measurements hold rank 0's dict only, so the record's `ranks` are read too.
"""

from __future__ import annotations

import statistics

KEY = "gpu_util_percent_mean"  # {cuda index: mean % over the timed windows}, per rank


def gpu_util_by_device(measurements: dict, ranks: list[dict] | None = None) -> dict[str, float]:
    """{device label: mean utilisation %}; a label is the CUDA index, `rank:index` where two ranks name the
    same index (several nodes). Empty when the run sampled no GPU."""
    per_rank = [r.get(KEY) for r in (ranks or [measurements])]
    per_rank = [(i, d) for i, d in enumerate(per_rank) if isinstance(d, dict)]
    seen = [k for _, d in per_rank for k in d]
    clash = len(seen) != len(set(seen))
    out = {}
    for rank, d in per_rank:
        for idx, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{rank}:{idx}" if clash else str(idx)] = float(v)
    return dict(sorted(out.items(), key=lambda kv: [int(p) if p.isdigit() else p for p in kv[0].split(":")]))


def summary(by_device: dict[str, float]) -> dict:
    """Scalar figures of the per-GPU dict (tidy columns, W&B summary): mean over GPUs, the least and most
    busy GPU, and how many were sampled."""
    if not by_device:
        return {}
    vals = list(by_device.values())
    return {"gpu_util_percent_avg_devices": statistics.fmean(vals), "gpu_util_percent_min_device": min(vals),
            "gpu_util_percent_max_device": max(vals), "gpus_sampled": len(vals)}
