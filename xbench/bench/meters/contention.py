"""Who else used the machine: CPU and GPU use by other processes before and during the timed windows.

A benchmark on a shared machine measures the sharing as much as the workload, so the record says
how shared it was. Everything here is read at the edges (a probe before the rank builds, then a
snapshot at the first window's start and after the last window's end): no thread runs beside the
steps, and the windows pay nothing for it.

- CPU: the machine's busy time from /proc/stat (psutil.cpu_times) minus this run's own processes'
  CPU time (the run's root process, the one that wrote the record, and all its descendants: DDP
  ranks and an isolated point's parent are not "others"; under the `torchrun` command or a srun
  step of several tasks, that launcher and every rank it started: `launcher_pid`), over wall time =
  other processes' busy cores. `steal` (a hypervisor giving the vCPU to another guest) is contention too. The
  busiest other processes are listed by name and pid (no command lines: they can hold secrets).
- CPU capacity: `free cores` = physical cores (within this process's affinity) minus the other
  processes' busy cores, rounded; the default thread count is this, decided once per sweep process
  (launch/preamble.py), and a run asking for more threads than free cores is warned.
- GPU (NVML, where present; handles by CUDA identity, bench/meters/nvml.py): other processes holding a
  compute context on this run's GPUs, and the GPU's utilisation before the run started using it.
  NVML reports PIDs of the host's PID namespace; inside a container they are not this process's
  PIDs, so its own CUDA context would read as another process. `pid_namespace` tells: this process
  holds a context on a GPU and NVML does not list its PID there, or none of NVML's PIDs is this run's
  nor exists here. Then the others on a GPU are counted, not named: the processes NVML lists there
  minus this run's known to use it (this process, where it holds a context).
- `contended` (the meter, `ContentionMeter`): during the windows, other processes' busy cores
  plus this run's threads exceeded the cores left after steal (someone had to wait), or this process's
  threads spent WAIT_FRACTION of their needed core-time runnable but waiting for a core (the kernel's
  run-queue delay, /proc/self/task/*/schedstat: the direct figure, where the first rule's margin is a few
  hundredths of a core, as 2 spinners beside a 1-thread run on 2 cores) while others were busy beyond the
  slack, or steal took more than STEAL_FRACTION of the time, or another process used one of the run's GPUs.
  The reason says which, with the figures.

The meter (`ContentionMeter`) takes a snapshot as the first window opens and one after the last closes, on
every path out of them; nothing in between (a snapshot walks every process: at the two edges only).
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from xbench.bench.meters import Meter, nvml
from xbench.env_vars import launched_rank

# "<root pid>:<wall time the point started>", set by the runner (launch/isolation.py)
ROOT_ENV = "XBENCH_POINT"
PROBE_S = 0.25  # default probe before the run
SLACK_CORES = 0.25  # others' use under this does not count (daemons, the kernel, the probe itself)
STEAL_FRACTION = 0.05
WAIT_FRACTION = 0.10  # of the needed core-time spent runnable on a run queue: others made the run wait
TOP = 3  # busiest other processes listed


def root_pid() -> int:
    """The process whose tree is this run (the runner's process; this one when none set it)."""
    value = os.environ.get(ROOT_ENV, "")
    with contextlib.suppress(ValueError):
        pid = int(value.split(":")[0])
        if psutil.pid_exists(pid):
            return pid
    return os.getpid()


def launcher_pid() -> int | None:
    """The external launcher whose children are this run's ranks: the `torchrun` command's agent (its
    ranks carry TORCHELASTIC_RUN_ID) or srun's step daemon (a step of several tasks). Its other children
    are this run's sibling ranks, never "other processes". None when no such launcher started this one."""
    if launched_rank():  # the one rule launch/torchrun.under_torchrun reads too
        parent = os.getppid()
        return parent if parent > 1 else None
    return None


def own_pids() -> set[int]:
    """This run's processes: the root and every descendant (this process included), and under an external
    launcher (torchrun, srun) that launcher and all it started: the run's other ranks."""
    pids = {os.getpid()}
    for pid in (root_pid(), launcher_pid()):
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            pids |= {root.pid} | {c.pid for c in root.children(recursive=True)}
    return pids


def cores_needed(threads_per_rank: int, ranks_on_host: int = 1, computes_on_host: bool = True) -> int:
    """Host cores a run needs on this host: every rank here counts (DDP's ranks are this run's own processes,
    never "others"), each with its threads when it computes on the host, else its one issuing thread."""
    return max(1, ranks_on_host) * (max(1, threads_per_rank) if computes_on_host else 1)


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
    held: set[int] = field(default_factory=set)  # CUDA ordinals this process holds a context on
    run_wait_ns: dict[int, int] = field(default_factory=dict)  # this process's thread id -> run-queue wait


def _run_waits() -> dict[int, int]:
    """Per thread of this process, nanoseconds spent runnable but waiting for a CPU (schedstat's second
    field); empty where the kernel does not publish it (not Linux, no CONFIG_SCHED_INFO)."""
    out = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with (
                contextlib.suppress(OSError, ValueError, IndexError),
                open(f"/proc/self/task/{tid}/schedstat") as f,
            ):
                out[int(tid)] = int(f.read().split()[1])
    return out


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
    """NVML: per GPU (CUDA ordinal), the processes with a compute context (pid -> bytes) and the current
    utilisation; {"error": why} where NVML runs but cannot read or name the GPUs."""
    if not indices:
        return {}
    try:
        session = nvml.session()
        pynvml = session.__enter__()
    except Exception:  # no driver or no library: nothing to say about the GPU
        return {}
    out = {}
    try:
        for i, h in nvml.handles(pynvml, indices).items():
            pids = {p.pid: int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            out[i] = {"pids": pids, "util_percent": float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)}
    except Exception as e:  # a GPU NVML cannot name or read (MIG, permissions): say so, in the figures
        out = {"error": f"{type(e).__name__}: {e}"}
    finally:
        session.__exit__(None, None, None)
    return out


def snapshot(gpus: list[int] | None = None) -> Snapshot:
    me = psutil.Process()
    return Snapshot(time.perf_counter(), psutil.cpu_times(), _procs(), own_pids(),
                    me.num_ctx_switches().involuntary, _gpu(gpus or []), nvml.held_contexts(gpus or []),
                    _run_waits())


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
        "steal_fraction": (b.cpu.steal - a.cpu.steal) / total
        if total > 0 and hasattr(b.cpu, "steal")
        else 0.0,
        "top": [
            {"pid": pid, "name": name, "cores": round(cpu / wall, 3)}
            for pid, (name, cpu) in top
            if cpu / wall >= 0.05
        ],
        "involuntary_switches_per_s": (b.switches - a.switches) / wall,
        # Threads born between the snapshots count from zero; those gone by the second are not counted.
        "own_wait_cores": (
            sum(ns - a.run_wait_ns.get(tid, 0) for tid, ns in b.run_wait_ns.items()) / 1e9 / wall
            if b.run_wait_ns
            else None
        ),
    }


def _gpu_pids(snap: Snapshot) -> dict:
    return {i: g["pids"] for i, g in snap.gpu.items() if isinstance(g, dict)}


def pid_namespace(snap: Snapshot, own: set[int]) -> str:
    """Whose PIDs NVML reported: "shared" (this PID namespace's: matched exactly) or "foreign" (the
    host's, seen from a container). Foreign when this process holds a context on a GPU whose list lacks
    its PID, or, holding none, when none of the listed PIDs is this run's nor exists here."""
    lists = _gpu_pids(snap)
    seen = {p for pids in lists.values() for p in pids}
    if not seen:
        return "shared"
    held = [i for i in snap.held if i in lists]
    if held:  # NVML lists every process with a context: ours is there, under our PID or another
        return "shared" if any(os.getpid() in lists[i] for i in held) else "foreign"
    if seen & own or any(psutil.pid_exists(p) for p in seen):
        return "shared"
    return "foreign"


def gpu_others(snap: Snapshot, own: set[int]) -> dict[str, list[int]]:
    """GPU index -> pids of other processes with a compute context on it (NVML's PIDs in this namespace;
    empty when they are the host's, which cannot be matched: gpu_other_counts counts those)."""
    if pid_namespace(snap, own) != "shared":
        return {}
    return {str(i): sorted(p for p in pids if p not in own) for i, pids in _gpu_pids(snap).items()
            if any(p not in own for p in pids)}


def gpu_other_counts(snap: Snapshot, own: set[int]) -> tuple[dict[str, int], str]:
    """(GPU index -> other processes with a compute context on it, the PID namespace). Shared: the pids
    not this run's; foreign: the processes listed minus this run's known to use the GPU (this process,
    where it holds a context)."""
    ns = pid_namespace(snap, own)
    if ns == "shared":
        return {i: len(p) for i, p in gpu_others(snap, own).items()}, ns
    counts = {str(i): len(pids) - (i in snap.held) for i, pids in _gpu_pids(snap).items()}
    return {i: n for i, n in counts.items() if n > 0}, ns


def gpu_error(snap: Snapshot) -> str | None:
    """Why NVML could not say who used the run's GPUs (None: it could, or there is no NVML)."""
    return snap.gpu.get("error") if isinstance(snap.gpu.get("error"), str) else None


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
    out = {
        "probe_s": fig["wall_s"],
        "other_cores": fig["other_cores"],
        "steal_fraction": fig["steal_fraction"],
        "top": fig["top"],
        "physical_cores": phys,
        "free_cores": max(1, phys - round(fig["other_cores"])),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "gpu_other_pids": gpu_others(a, a.own),
        "gpu_util_percent": {str(i): g["util_percent"] for i, g in a.gpu.items() if isinstance(g, dict)},
    }
    if a.gpu:
        out["gpu_other_processes"], out["gpu_pid_namespace"] = gpu_other_counts(a, a.own)
    if gpu_error(a):
        out["gpu_processes_unavailable_reason"] = gpu_error(a)
    _PROBE_CACHE[key] = (time.perf_counter(), out)
    return out


def probe_beside(seconds: float, gpus: list[int] | None = None) -> Future:
    """probe() in a thread while the caller builds the rank: this run's own processes (every thread of them)
    are subtracted, so the build is not another's load, and start-up loses a phase (the probe's 0.25 s of
    every run). The future's result: the probe's figures (its error raised there), None when `seconds` <= 0
    (not probed)."""
    if seconds <= 0:
        future: Future = Future()
        future.set_result(None)
        return future
    pool = ThreadPoolExecutor(1, thread_name_prefix="xbench-contention-probe")
    future = pool.submit(probe, seconds, gpus)
    pool.shutdown(wait=False)  # the thread ends with the probe
    return future


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


class ContentionMeter(Meter):
    """Snapshots at the first window's start and after the last one's end; the figures for the record."""

    def __init__(self, threads: int, device_type: str, gpus: list[int] | None = None,
                 before: dict | None = None, ranks_on_host: int = 1):
        super().__init__()
        self.threads, self.device_type, self.gpus = threads, device_type, gpus or []
        self.ranks_on_host = ranks_on_host  # this run's ranks on this host, each with `threads`
        self.before = before
        self._a: Snapshot | None = None

    def open(self) -> None:
        self._a = snapshot(self.gpus)

    def close(self) -> dict:
        return self.stop() if self._a is not None else {}

    def start(self) -> ContentionMeter:
        self.open()
        return self

    def stop(self) -> dict:
        a, b = self._a, snapshot(self.gpus)
        d = between(a, b)
        cores = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (psutil.cpu_count() or 1)
        )
        # Host cores this run needs: every local rank's threads on a CPU device; one issuing thread
        # each otherwise.
        need = cores_needed(self.threads, self.ranks_on_host, self.device_type == "cpu")
        pids = {**gpu_others(a, a.own), **gpu_others(b, b.own)}
        (count_a, ns_a), (count_b, ns_b) = gpu_other_counts(a, a.own), gpu_other_counts(b, b.own)
        counts = {i: max(count_a.get(i, 0), count_b.get(i, 0)) for i in {**count_a, **count_b}}
        foreign = "foreign" in (ns_a, ns_b)
        reasons = []
        own_need = cores_needed(self.threads, 1, self.device_type == "cpu")  # this process's share
        if cpu := cpu_reason(d, need, cores, own_need):
            reasons.append(cpu)
        if d["steal_fraction"] > STEAL_FRACTION:
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
        if gpu_error(a) or gpu_error(b):
            m["gpu_processes_unavailable_reason"] = gpu_error(b) or gpu_error(a)
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
    slack = SLACK_CORES
    if d["other_cores"] <= slack:
        return None
    capacity = cores * (1.0 - min(max(d["steal_fraction"], 0.0), 1.0))
    busiest = ", ".join(f"{t['name']}[{t['pid']}] {t['cores']:.2f}" for t in d["top"]) or "short-lived"
    stolen = f" ({capacity:.2f} left by the hypervisor)" if capacity < cores else ""
    kept = f"other processes kept {d['other_cores']:.2f} of {cores} cores{stolen} busy"
    if d["other_cores"] + need > capacity + slack:
        return f"{kept} while this run needed {need} (busiest: {busiest})"
    wait = d.get("own_wait_cores")
    if own_need and wait is not None and wait / own_need >= WAIT_FRACTION:
        return (f"{kept} and this run's threads waited for a core {wait / own_need:.0%} of the time "
                f"(run-queue delay; busiest: {busiest})")
    return None
