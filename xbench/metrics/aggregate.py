"""Combine the ranks' measurements into the run's (pure Python).

Global throughput is the sum over ranks of samples in a window over the common window's wall time,
the slowest rank's, since data-parallel ranks finish a window together. It is never a mean of the
ranks' own throughputs.
"""

from __future__ import annotations

import statistics

from xbench.metrics.stats import summarize

# Figures that describe one rank only; the run-level view drops them (they stay under `ranks`).
_PER_RANK = ("rank", "device", "window_s", "data_wait_s", "peak_host_rss_gib")


def aggregate(ranks: list[dict], noisy_cv: float = 0.05) -> dict:
    if not ranks:
        raise ValueError("no rank reported any measurement")
    r0 = ranks[0]
    repeats = min(len(r["window_s"]) for r in ranks)
    common = [max(r["window_s"][i] for r in ranks) for i in range(repeats)]
    samples = sum(r["samples_per_window"] for r in ranks)
    per_window = [samples / w for w in common]
    tp = summarize(per_window)
    devices = sum(r.get("devices_per_rank", 1) for r in ranks)
    m = {k: v for k, v in r0.items() if k not in _PER_RANK}
    window_total = sum(common)
    m.update({
        "world_size": len(ranks),
        "devices": devices,
        "global_batch_size": sum(r["samples_per_step"] for r in ranks),
        "samples_per_window": samples,  # all ranks: the run-level figure throughput is computed from
        "window_s": common,
        "window_s_total": window_total,
        "throughput_samples_per_s": statistics.median(per_window),
        "throughput_samples_per_s_windows": per_window,
        "throughput_cv": tp["cv"] if len(per_window) > 1 else None,
        "throughput_ci95_samples_per_s": [tp["ci95_low"], tp["ci95_high"]] if len(per_window) > 1 else None,
        "data_wait_fraction": max(r["data_wait_s"] for r in ranks) / window_total if window_total else None,
        "peak_host_rss_gib": max(r["peak_host_rss_gib"] for r in ranks),
    })
    # Noisy: spread across repeated windows, or across steps when there is a single window.
    spread = m["throughput_cv"] if m["throughput_cv"] is not None else r0.get("step_time_cv")
    m["noisy"] = bool(spread is not None and spread > noisy_cv)
    return m
