"""Who else used the machine: CPU and GPU use by other processes before and during the timed windows.

A benchmark on a shared machine measures the sharing as much as the workload, so the record says
how shared it was. Everything here is read at the edges (a probe before the rank builds, then a
snapshot at the first window's start and after the last window's end): no thread runs beside the
steps, and the windows pay nothing for it.

- CPU: the machine's busy time from /proc/stat (psutil.cpu_times) minus this run's own processes'
  CPU time (the run's root process, the one that wrote the record, and all its descendants: DDP
  ranks and an isolated point's parent are not "others"), over wall time = other processes' busy
  cores. `steal` (a hypervisor giving the vCPU to another guest) is contention too. The busiest
  other processes are listed by name and pid (no command lines: they can hold secrets).
- CPU capacity: `free cores` = physical cores (within this process's affinity) minus the other
  processes' busy cores, rounded; the default thread count is this, decided once per sweep process
  (launch/preamble.py), and a run asking for more threads than free cores is warned.
- GPU (NVML, where present): other processes holding a compute context on this run's GPUs, and the
  GPU's utilisation before the run started using it.
- `contended`: during the windows, other processes' busy cores plus this run's threads exceeded the
  cores (someone had to wait), or steal took more than STEAL_FRACTION of the time, or another process
  used one of the run's GPUs. The reason says which, with the figures.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import psutil

ROOT_ENV = "XBENCH_POINT"  # "<root pid>:<wall time the point started>", set by the runner (launch/isolation.py)
PROBE_S = 0.25  # default probe before the run
SLACK_CORES = 0.25  # others' use under this does not count (daemons, the kernel, the probe itself)
STEAL_FRACTION = 0.05
TOP = 3  # busiest other processes listed


def root_pid() -> int:
    """The process whose tree is this run (the runner's process; this one when none set it)."""
    value = os.environ.get(ROOT_ENV, "")
    with contextlib.suppress(ValueError):
        pid = int(value.split(":")[0])
        if psutil.pid_exists(pid):
            return pid
    return os.getpid()


def own_pids() -> set[int]:
    """This run's processes: the root and every descendant (this process included)."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(root_pid())
        pids |= {root.pid} | {c.pid for c in root.children(recursive=True)}
    return pids


def physical_cores() -> int:
    """Physical cores this process may use (affinity counts logical CPUs: scaled by the SMT ratio)."""
    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    return max(1, round(allowed * physical / logical))


@dataclass
class Snapshot:
    wall: float
    cpu: object  # psutil.cpu_times()
    procs: dict[int, tuple[str, float]]  # pid -> (name, user + system seconds)
    own: set[int]
    switches: int  # this process's involuntary context switches
    gpu: dict = field(default_factory=dict)  # index -> {"pids": {pid: used bytes}, "util_percent": float}


def _procs() -> dict[int, tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        t = p.info.get("cpu_times")
        if t is not None:
            out[p.pid] = (p.info.get("name") or "?", t.user + t.system)
    return out


def _busy(t) -> float:
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def _gpu(indices: list[int]) -> dict:
    """NVML: per GPU, the processes with a compute context (pid -> bytes) and the current utilisation."""
    if not indices:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver or no library: nothing to say about the GPU
        return {}
    out = {}
    try:
        for i in indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pids = {p.pid: int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            out[i] = {"pids": pids, "util_percent": float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)}
    except Exception as e:  # a GPU NVML cannot read (MIG, permissions): say so once, in the figures
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return out


def snapshot(gpus: list[int] | None = None) -> Snapshot:
    me = psutil.Process()
    return Snapshot(time.perf_counter(), psutil.cpu_times(), _procs(), own_pids(),
                    me.num_ctx_switches().involuntary, _gpu(gpus or []))


def between(a: Snapshot, b: Snapshot) -> dict:
    """Other processes' CPU use between two snapshots: busy cores, steal, the busiest, this run's own."""
    wall = max(b.wall - a.wall, 1e-9)
    total = sum(b.cpu) - sum(a.cpu)
    system = _busy(b.cpu) - _busy(a.cpu)
    own = sum(cpu - a.procs.get(pid, ("", 0.0))[1] for pid, (_, cpu) in b.procs.items() if pid in b.own)
    others = {pid: (name, cpu - a.procs[pid][1]) for pid, (name, cpu) in b.procs.items()
              if pid not in b.own and pid not in a.own and pid in a.procs}
    top = sorted(others.items(), key=lambda kv: -kv[1][1])[:TOP]
    return {
        "wall_s": wall,
        "other_cores": max(0.0, system - own) / wall,
        "own_cores": own / wall,
        "steal_fraction": (b.cpu.steal - a.cpu.steal) / total if total > 0 and hasattr(b.cpu, "steal") else 0.0,
        "top": [{"pid": pid, "name": name, "cores": round(cpu / wall, 3)} for pid, (name, cpu) in top
                if cpu / wall >= 0.05],
        "involuntary_switches_per_s": (b.switches - a.switches) / wall,
    }


def gpu_others(snap: Snapshot, own: set[int]) -> dict[str, list[int]]:
    """GPU index -> pids of other processes with a compute context on it."""
    return {str(i): sorted(p for p in g["pids"] if p not in own) for i, g in snap.gpu.items()
            if isinstance(g, dict) and any(p not in own for p in g["pids"])}


_PROBE_CACHE: dict = {}


def probe(seconds: float = PROBE_S, gpus: list[int] | None = None, reuse_s: float = 2.0) -> dict:
    """Other processes' use over `seconds` now, before this run computes anything (cached for `reuse_s`,
    so the launcher's thread decision and the rank's record share one probe in one process)."""
    key = tuple(gpus or [])
    hit = _PROBE_CACHE.get(key)
    if hit is not None and time.perf_counter() - hit[0] < reuse_s:
        return hit[1]
    a = snapshot(gpus)
    time.sleep(max(0.0, seconds))
    b = snapshot()
    fig = between(a, b)
    phys = physical_cores()
    out = {"probe_s": fig["wall_s"], "other_cores": fig["other_cores"], "steal_fraction": fig["steal_fraction"],
           "top": fig["top"], "physical_cores": phys, "free_cores": max(1, phys - round(fig["other_cores"])),
           "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "gpu_other_pids": gpu_others(a, a.own),
           "gpu_util_percent": {str(i): g["util_percent"] for i, g in a.gpu.items() if isinstance(g, dict)}}
    _PROBE_CACHE[key] = (time.perf_counter(), out)
    return out


FREE_ENV = "XBENCH_FREE_CORES"  # "<root pid>:<free cores>:<how>": one decision per sweep process


def free_cores() -> tuple[int, str]:
    """(free physical cores, how that was found) for the default thread count. Decided once per run's
    root process, so the points of a sweep compare at one thread count (a probe per point gave 2 threads
    to one round and 1 to the others when the machine's load came and went); the environment carries
    the decision to the processes the run starts."""
    root = str(root_pid())
    cached = os.environ.get(FREE_ENV, "").split(":", 2)
    if len(cached) == 3 and cached[0] == root and cached[1].isdigit():
        return int(cached[1]), cached[2] + " (decided at this process's first run)"
    p = probe()
    how = (f"free physical cores: {p['physical_cores']} physical - {p['other_cores']:.1f} busy with other "
           f"processes = {p['free_cores']}")
    os.environ[FREE_ENV] = f"{root}:{p['free_cores']}:{how}"
    return p["free_cores"], how


class ContentionMeter:
    """Snapshots at the first window's start and after the last one's end; the figures for the record."""

    def __init__(self, threads: int, device_type: str, gpus: list[int] | None = None,
                 before: dict | None = None):
        self.threads, self.device_type, self.gpus = threads, device_type, gpus or []
        self.before = before
        self._a: Snapshot | None = None

    def start(self) -> ContentionMeter:
        self._a = snapshot(self.gpus)
        return self

    def stop(self) -> dict:
        b = snapshot(self.gpus)
        d = between(self._a, b)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (psutil.cpu_count() or 1)
        # Host cores this run needs: its threads on a CPU device; about one (the issuing thread) otherwise.
        need = self.threads if self.device_type == "cpu" else 1
        gpus = {**gpu_others(self._a, self._a.own), **gpu_others(b, b.own)}
        reasons = []
        if d["other_cores"] > SLACK_CORES and d["other_cores"] + need > cores + SLACK_CORES:
            busiest = ", ".join(f"{t['name']}[{t['pid']}] {t['cores']:.2f}" for t in d["top"]) or "short-lived"
            reasons.append(f"other processes kept {d['other_cores']:.2f} of {cores} cores busy while this run "
                           f"needed {need} (busiest: {busiest})")
        if d["steal_fraction"] > STEAL_FRACTION:
            reasons.append(f"the hypervisor stole {d['steal_fraction']:.0%} of the CPU time")
        if gpus:
            reasons.append(f"other processes used the GPU(s): {gpus}")
        m = {
            "other_cpu_cores_during": d["other_cores"],
            "own_cpu_cores_during": d["own_cores"],
            "cpu_steal_fraction_during": d["steal_fraction"],
            "other_top_processes_during": d["top"],
            "involuntary_switches_per_s_during": d["involuntary_switches_per_s"],
            "cpu_cores_available": cores,
            "contended": bool(reasons),
            "contended_reason": "; ".join(reasons) or None,
        }
        if gpus:
            m["gpu_other_pids_during"] = gpus
        if self.before:
            b0 = self.before
            m.update({"other_cpu_cores_before": b0["other_cores"], "free_cores_before": b0["free_cores"],
                      "physical_cores": b0["physical_cores"], "load_avg_1m_before": b0["load_avg_1m"],
                      "other_top_processes_before": b0["top"], "contention_probe_s": b0["probe_s"]})
            if b0.get("gpu_other_pids"):
                m["gpu_other_pids_before"] = b0["gpu_other_pids"]
            if b0.get("gpu_util_percent"):
                m["gpu_util_percent_before"] = b0["gpu_util_percent"]
        return m
