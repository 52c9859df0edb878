"""The contention meter: other processes' CPU and GPU use over the timed windows, and `contended`.

A snapshot (bench/contention.py) as the first window opens and one after the last closes, on every
path out of them; nothing in between (a snapshot walks every process: at the two edges only). The
figures and the rule are bench/contention.py's module doc.
"""

from __future__ import annotations

import os

import psutil

from xbench.bench import contention as machine
from xbench.bench.meters import Meter


class ContentionMeter(Meter):
    """Snapshots at the first window's start and after the last one's end; the figures for the record."""

    def __init__(self, threads: int, device_type: str, gpus: list[int] | None = None,
                 before: dict | None = None, ranks_on_host: int = 1):
        super().__init__()
        self.threads, self.device_type, self.gpus = threads, device_type, gpus or []
        self.ranks_on_host = ranks_on_host  # this run's ranks on this host, each with `threads`
        self.before = before
        self._a: machine.Snapshot | None = None

    def open(self) -> None:
        self._a = machine.snapshot(self.gpus)

    def close(self) -> dict:
        return self.stop() if self._a is not None else {}

    def start(self) -> ContentionMeter:
        self.open()
        return self

    def stop(self) -> dict:
        a, b = self._a, machine.snapshot(self.gpus)
        d = machine.between(a, b)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (psutil.cpu_count() or 1)
        # Host cores this run needs: every local rank's threads on a CPU device; one issuing thread each otherwise.
        need = machine.cores_needed(self.threads, self.ranks_on_host, self.device_type == "cpu")
        pids = {**machine.gpu_others(a, a.own), **machine.gpu_others(b, b.own)}
        (count_a, ns_a), (count_b, ns_b) = machine.gpu_other_counts(a, a.own), machine.gpu_other_counts(b, b.own)
        counts = {i: max(count_a.get(i, 0), count_b.get(i, 0)) for i in {**count_a, **count_b}}
        foreign = "foreign" in (ns_a, ns_b)
        reasons = []
        own_need = machine.cores_needed(self.threads, 1, self.device_type == "cpu")  # this process's share
        if cpu := cpu_reason(d, need, cores, own_need):
            reasons.append(cpu)
        if d["steal_fraction"] > machine.STEAL_FRACTION:
            reasons.append(f"the hypervisor stole {d['steal_fraction']:.0%} of the CPU time")
        if counts and foreign:
            reasons.append(f"other processes used the GPU(s): {counts} process(es) (NVML reports another PID "
                           "namespace's PIDs, a container's host: counted as the processes on each GPU minus "
                           "this run's own there)")
        elif counts:
            reasons.append(f"other processes used the GPU(s): {pids}")
        m = {
            "other_cpu_cores_during": d["other_cores"],
            "own_cpu_cores_during": d["own_cores"],
            "own_run_queue_wait_cores_during": d.get("own_wait_cores"),
            "cpu_steal_fraction_during": d["steal_fraction"],
            "other_top_processes_during": d["top"],
            "involuntary_switches_per_s_during": d["involuntary_switches_per_s"],
            "cpu_cores_available": cores,
            "cpu_cores_needed": need,
            "contended": bool(reasons),
            "contended_reason": "; ".join(reasons) or None,
        }
        if pids:
            m["gpu_other_pids_during"] = pids
        if counts:
            m["gpu_other_processes_during"] = counts
        if a.gpu or b.gpu:
            m["gpu_pid_namespace"] = "foreign" if foreign else "shared"
        if machine.gpu_error(a) or machine.gpu_error(b):
            m["gpu_processes_unavailable_reason"] = machine.gpu_error(b) or machine.gpu_error(a)
        if self.before:
            b0 = self.before
            m.update({"other_cpu_cores_before": b0["other_cores"], "free_cores_before": b0["free_cores"],
                      "physical_cores": b0["physical_cores"], "load_avg_1m_before": b0["load_avg_1m"],
                      "other_top_processes_before": b0["top"], "contention_probe_s": b0["probe_s"]})
            for key in ("gpu_other_pids", "gpu_util_percent", "gpu_other_processes", "gpu_pid_namespace",
                        "gpu_processes_unavailable_reason"):
                if b0.get(key):
                    m[f"{key}_before"] = b0[key]
        return m



def cpu_reason(d: dict, need: int, cores: int, own_need: int | None = None) -> str | None:
    """Why other processes made this run wait for a core, or None. Either their busy cores plus this run's
    need exceeded the cores the hypervisor left (steal takes its share from every process, so 2 spinners
    beside a 1-thread run on 2 vCPUs that lose 15% to the hypervisor hold 1.13 cores, not 1.33, and still
    left it waiting), or, the direct figure, this process's threads waited on a run queue for WAIT_FRACTION
    of the `own_need` cores' time while others were busy beyond the slack (the first rule's margin there is
    0.08 cores: a scheduler's uneven share hides it)."""
    slack = machine.SLACK_CORES
    if d["other_cores"] <= slack:
        return None
    capacity = cores * (1.0 - min(max(d["steal_fraction"], 0.0), 1.0))
    busiest = ", ".join(f"{t['name']}[{t['pid']}] {t['cores']:.2f}" for t in d["top"]) or "short-lived"
    stolen = f" ({capacity:.2f} left by the hypervisor)" if capacity < cores else ""
    kept = f"other processes kept {d['other_cores']:.2f} of {cores} cores{stolen} busy"
    if d["other_cores"] + need > capacity + slack:
        return f"{kept} while this run needed {need} (busiest: {busiest})"
    wait = d.get("own_wait_cores")
    if own_need and wait is not None and wait / own_need >= machine.WAIT_FRACTION:
        return (f"{kept} and this run's threads waited for a core {wait / own_need:.0%} of the time "
                f"(run-queue delay; busiest: {busiest})")
    return None
