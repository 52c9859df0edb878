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


# A stall or contention in any part (a rank, a process) is the whole run's (the figures are the first part's;
# `ranks` holds each).
RUN_FLAGS = ("stalled", "contended")


def any_part_flags(parts: list[dict]) -> dict:
    """Each of RUN_FLAGS that some part reports: True when any part's is."""
    return {flag: any(bool(p.get(flag)) for p in parts) for flag in RUN_FLAGS
            if any(flag in p for p in parts)}


def _ci95(s: dict) -> list[float] | None:
    """A summary's 95% CI as a record holds it (None: none)."""
    return [s["ci95_low"], s["ci95_high"]] if s["ci95_low"] is not None else None


def _ci_note(s: dict, over: str) -> str:
    """How a summary's CI was made: its own note where it has one."""
    return s["ci_note"] or f"95% CI of the geometric mean over {over} (t, log scale)"


def _throughput(per_window: list[float]) -> dict:
    """The run's throughput from each common window's: the median, its spread and its CI over windows."""
    tp = summarize(per_window)
    return {
        "throughput_samples_per_s": statistics.median(per_window),
        "throughput_samples_per_s_windows": per_window,
        "throughput_cv": tp["cv"] if len(per_window) > 1 else None,
        "throughput_ci95_samples_per_s": _ci95(tp),
        "throughput_ci95_note": _ci_note(tp, "windows"),
    }


def _energy(ranks: list[dict], samples: int) -> dict:
    """The run's energy when every rank metered it, and per sample of `samples` (every rank's, every window).
    NVML: each rank meters its own GPUs, so the run's energy is their sum. RAPL: every rank reads the same
    host's packages (one host), so it is one reading, not world_size of them."""
    energy = [r.get("energy_j") for r in ranks]
    if not all(e is not None for e in energy):
        return {}
    total = sum(energy) if ranks[0].get("energy_source") == "nvml" else max(energy)
    return {"energy_j": total, "energy_j_per_sample": total / samples}


def _common_windows(ranks: list[dict]) -> list[float]:
    """Each window the ranks all timed, as long as its slowest rank's (data-parallel ranks finish a window
    together)."""
    repeats = min(len(r["window_s"]) for r in ranks)
    return [max(r["window_s"][i] for r in ranks) for i in range(repeats)]


def _fraction(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _noisy(m: dict, noisy_cv: float) -> bool:
    """Noisy: spread across repeated windows, or across steps when there is a single window."""
    spread = m["throughput_cv"] if m["throughput_cv"] is not None else m.get("step_time_cv")
    return bool(spread is not None and spread > noisy_cv)


def aggregate(ranks: list[dict], noisy_cv: float = 0.05) -> dict:
    if not ranks:
        raise ValueError("no rank reported any measurement")
    r0 = ranks[0]
    common = _common_windows(ranks)
    samples = sum(r["samples_per_window"] for r in ranks)
    per_window = [samples / w for w in common]
    m = {k: v for k, v in r0.items() if k not in _PER_RANK}
    window_total = sum(common)
    m.update({
        "world_size": len(ranks),
        "devices": sum(r.get("devices_per_rank", 1) for r in ranks),
        "global_batch_size": sum(r["samples_per_step"] for r in ranks),
        "samples_per_window": samples,  # all ranks: the run-level figure throughput is computed from
        "window_s": common,
        "window_s_total": window_total,
        **_throughput(per_window),
        "data_wait_fraction": _fraction(max(r["data_wait_s"] for r in ranks), window_total),
        **peaks_over_ranks(ranks),
        # the processes that measured (isolated: not the runner's)
        "rank_pids": [r.get("pid") for r in ranks],
    })
    m.update(_energy(ranks, samples * len(common)))
    m.update(any_part_flags(ranks))
    m["noisy"] = _noisy(m, noisy_cv)
    return m


# ---------- whole-process repeats (bench.process_repeats) ----------

def merge_processes(per_process: list[list[dict]]) -> list[dict]:
    """Per rank: every process's timed windows in one `window_s` list (process 1's first), with the
    figures that count over windows made to match it (`repeats` = windows merged, `data_wait_s` and `energy_j`
    summed, the memory peaks the largest); the rest from the first process. `samples_per_window` is the same
    in every process (same config)."""
    if not per_process or not per_process[0]:
        raise ValueError("no process reported any measurement")
    sizes = {len(ranks) for ranks in per_process}
    if len(sizes) > 1:
        raise ValueError(f"process repeats ran different numbers of ranks: {sorted(sizes)}")
    return [_merge_rank([ranks[i] for ranks in per_process]) for i in range(len(per_process[0]))]


def _merge_rank(parts: list[dict]) -> dict:
    """One rank's measurements from each process's (merge_processes)."""
    m = dict(parts[0])
    m["window_s"] = [w for p in parts for w in p["window_s"]]
    m["repeats"] = len(m["window_s"])  # steady step time = window_s_total / (steps x repeats)
    m["data_wait_s"] = sum(p["data_wait_s"] for p in parts)
    m.update(any_part_flags(parts))  # any process's
    if all(p.get("energy_j") is not None for p in parts):
        m["energy_j"] = sum(p["energy_j"] for p in parts)  # metered over its windows
    m.update(peaks_over_ranks(parts, per_rank=False))  # its fullest process's
    return m


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
        "throughput_process_ci95_samples_per_s": _ci95(s),
        "throughput_process_ci95_note": _ci_note(s, "processes"),
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
