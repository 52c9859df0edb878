"""Combine the ranks' measurements into the run's (pure Python).

Global throughput is the sum over ranks of samples in a window over the common window's wall time,
the slowest rank's, since data-parallel ranks finish a window together. It is never a mean of the
ranks' own throughputs.
"""

from __future__ import annotations

import statistics

from xbench.metrics.stats import summarize

# Figures that describe one rank only; the run-level view drops them (they stay under `ranks`).
_PER_RANK = ("rank", "device", "window_s", "data_wait_s", "pid")
# Memory peaks: the run needs what its fullest rank needed (a DDP rank's bucket, rank 0's extra state).
PEAKS = ("peak_host_rss_gib", "peak_device_allocated_gib", "peak_device_reserved_gib", "peak_device_used_gib")


def peaks_over_ranks(ranks: list[dict], per_rank: bool = True) -> dict:
    """Each peak the ranks report, the largest over them, and with several ranks (and `per_rank`) each
    one's (`*_per_rank`, in rank order; None where a rank has no such figure)."""
    out = {}
    for key in PEAKS:
        values = [r.get(key) for r in ranks]
        if all(v is None for v in values):
            continue
        out[key] = max(v for v in values if v is not None)
        if per_rank and len(ranks) > 1:
            out[f"{key}_per_rank"] = values
    return out


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
        "throughput_ci95_samples_per_s": [tp["ci95_low"], tp["ci95_high"]] if tp["ci95_low"] is not None else None,
        "throughput_ci95_note": tp["ci_note"] or "95% CI of the geometric mean over windows (t, log scale)",
        "data_wait_fraction": max(r["data_wait_s"] for r in ranks) / window_total if window_total else None,
        **peaks_over_ranks(ranks),
        "rank_pids": [r.get("pid") for r in ranks],  # the processes that measured (isolated: not the runner's)
    })
    energy = [r.get("energy_j") for r in ranks]
    if all(e is not None for e in energy):
        # NVML: each rank meters its own GPUs, so the run's energy is their sum. RAPL: every rank reads
        # the same host's packages (one host), so it is one reading, not world_size of them.
        m["energy_j"] = sum(energy) if r0.get("energy_source") == "nvml" else max(energy)
        m["energy_j_per_sample"] = m["energy_j"] / (samples * repeats)  # every rank's samples, every window
    # A stall or contention on any rank is the run's (the figures are rank 0's; `ranks` holds each).
    for flag in ("stalled", "contended"):
        if any(flag in r for r in ranks):
            m[flag] = any(bool(r.get(flag)) for r in ranks)
    # Noisy: spread across repeated windows, or across steps when there is a single window.
    spread = m["throughput_cv"] if m["throughput_cv"] is not None else r0.get("step_time_cv")
    m["noisy"] = bool(spread is not None and spread > noisy_cv)
    return m


# ---------- whole-process repeats (bench.process_repeats) ----------

def merge_processes(per_process: list[list[dict]]) -> list[dict]:
    """Per rank: every process's timed windows in one `window_s` list (process 1's first), with the
    figures that count over windows made to match it (`repeats` = windows merged, `data_wait_s` and
    `energy_j` summed, the memory peaks the largest);
    the rest from the first process. `samples_per_window` is the same in every process (same config)."""
    if not per_process or not per_process[0]:
        raise ValueError("no process reported any measurement")
    sizes = {len(ranks) for ranks in per_process}
    if len(sizes) > 1:
        raise ValueError(f"process repeats ran different numbers of ranks: {sorted(sizes)}")
    merged = []
    for i, r0 in enumerate(per_process[0]):
        m = dict(r0)
        m["window_s"] = [w for ranks in per_process for w in ranks[i]["window_s"]]
        m["repeats"] = len(m["window_s"])  # steady step time = window_s_total / (steps x repeats)
        m["data_wait_s"] = sum(ranks[i]["data_wait_s"] for ranks in per_process)
        for flag in ("stalled", "contended"):  # any process's
            if any(flag in ranks[i] for ranks in per_process):
                m[flag] = any(bool(ranks[i].get(flag)) for ranks in per_process)
        if all(ranks[i].get("energy_j") is not None for ranks in per_process):
            m["energy_j"] = sum(ranks[i]["energy_j"] for ranks in per_process)  # metered over its windows
        m.update(peaks_over_ranks([ranks[i] for ranks in per_process], per_rank=False))  # its fullest process's
        merged.append(m)
    return merged


def across_processes(per_process: list[list[dict]], noisy_cv: float = 0.05) -> dict:
    """Run-level measurements of N whole-process repeats: aggregate() over all windows of all processes
    (median, CV, CI over windows), plus one global throughput per process and their spread. Noisy when
    the windows' spread or the processes' spread is above `noisy_cv`."""
    m = aggregate(merge_processes(per_process), noisy_cv)
    tps = [aggregate(ranks, noisy_cv)["throughput_samples_per_s"] for ranks in per_process]
    s = summarize(tps)
    several = len(tps) > 1
    m.update({
        "process_repeats": len(tps),
        "throughput_samples_per_s_processes": tps,
        "throughput_process_median_samples_per_s": s["median"],
        "throughput_process_mean_samples_per_s": s["mean"],
        "throughput_process_olympic_mean_samples_per_s": s["olympic_mean"],
        "throughput_process_ci95_samples_per_s": [s["ci95_low"], s["ci95_high"]] if s["ci95_low"] is not None else None,
        "throughput_process_ci95_note": s["ci_note"] or "95% CI of the geometric mean over processes (t, log scale)",
        "throughput_process_cv": s["cv"] if several else None,
        "process_pids": [ranks[0].get("pid") for ranks in per_process],
    })
    if m["throughput_process_cv"] is not None and m["throughput_process_cv"] > noisy_cv:
        m["noisy"] = True
    return m


def noisy_spread(m: dict, noisy_cv: float) -> str:
    """Which spread put a run above `noisy_cv` (for the warning), e.g. 'throughput_process_cv=0.081'."""
    above = [f"{k}={m[k]:.3g}" for k in ("throughput_process_cv", "throughput_cv")
             if m.get(k) is not None and m[k] > noisy_cv]
    if not above and m.get("throughput_cv") is None and m.get("step_time_cv") is not None:
        above = [f"step_time_cv={m['step_time_cv']:.3g}"]
    return ", ".join(above) or "see throughput_cv / step_time_cv"
