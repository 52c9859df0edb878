"""Device utilisation during the timed windows (never inside a step), summed over the windows only.

GPU: NVML (nvidia-ml-py) utilisation and memory used per GPU the rank drives (handles by CUDA identity,
bench/meters/nvml.py), sampled in a thread at `bench.util_interval_s` (NVML's utilisation is a recent-period
figure, so it must be sampled), so an imbalance (GPU 0 busy, the others idle under nn.DataParallel)
shows. The thread runs during a window only: started at its edge, stopped and joined at its end (a
last sample then covers the tail), so none outlives its window, whatever ended it. Where NVML is absent
or cannot name the rank's GPUs the record says `unavailable` and why.

CPU: no thread. The machine's per-core busy time and this process's CPU time are cumulative counters
(/proc/stat, /proc/self/stat), so their difference over each window's edges, summed over the windows,
is the exact mean over the windows (`util_source: edges`). A sampling thread gave the same means and
cost what the windows measured: on a loaded 2-core machine each wake-up could take the measured
thread's core (0.92 of a plain loop's throughput under load, against 0.97 quiet).
`bench.util_interval_s=0` turns both off.
"""

from __future__ import annotations

import statistics
import threading
from time import perf_counter

import psutil

from xbench.bench.meters import Meter, nvml


def _mean(xs):
    return statistics.fmean(xs) if xs else None


class UtilisationMeter(Meter):
    def __init__(self, device_type: str, interval_s: float = 0.1, cuda_indices: list[int] | None = None):
        super().__init__()
        self.device_type = device_type
        self.interval_s = interval_s
        self.cuda_indices = cuda_indices or []
        self._process = psutil.Process()
        self._nvml_session = None
        self._nvml, self._handles, self.unavailable = None, {}, None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._windows: list[dict] = []  # per window: CPU edge deltas, or the samples taken in it
        self._at = None  # CPU runs: (time, per-core CPU times, own CPU times) at the open window's start
        self._current: dict | None = None

    @property
    def sampled(self) -> bool:
        return self.interval_s > 0 and self.device_type == "cuda"

    # ---------- protocol ----------

    def open(self) -> None:
        if not self.sampled:
            return
        try:
            self._nvml_session = nvml.session()
            self._nvml = self._nvml_session.__enter__()
            self._handles = nvml.handles(self._nvml, self.cuda_indices)
        except Exception as e:  # no driver, no library, GPUs NVML cannot name: the run goes on without them
            self.unavailable = f"NVML not usable: {type(e).__name__}: {e}"
            self._handles = {}

    def window_start(self) -> None:
        if self.interval_s <= 0:
            return
        if not self.sampled:  # counters read at the edges: no thread beside the steps
            self._at = (perf_counter(), psutil.cpu_times(percpu=True), self._process.cpu_times())
            return
        self._current = {"cpu": [], "proc": [], "util": {i: [] for i in self._handles},
                         "mem": {i: [] for i in self._handles}}
        psutil.cpu_percent(percpu=True)  # prime the counters: the first real sample covers one interval
        self._process.cpu_percent()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(self._current,), name="xbench-util", daemon=True
        )
        self._thread.start()

    def window_end(self) -> None:
        if self._at is not None:
            self._windows.append(self._edges(*self._at))
            self._at = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample(self._current)  # the tail since the last sample (a sample at all under one period)
            self._windows.append(self._current)
            self._current = None

    def discard(self) -> None:
        if self._windows:
            self._windows.pop()

    def close(self) -> dict:
        self.window_end()  # a window still open (an exception inside it that skipped its end)
        if self._nvml_session is not None:
            self._nvml_session.__exit__(None, None, None)
            self._nvml_session = self._nvml = None
        if self.interval_s <= 0:
            return {"util_source": "off (bench.util_interval_s=0)"}
        return self._sampled_figures() if self.sampled else self._edge_figures()

    # ---------- GPU: a thread per window ----------

    def _sample(self, into: dict) -> None:
        into["cpu"].append(psutil.cpu_percent(percpu=True))  # since the previous call
        into["proc"].append(self._process.cpu_percent())
        for i, h in self._handles.items():
            into["util"][i].append(float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu))
            into["mem"][i].append(self._nvml.nvmlDeviceGetMemoryInfo(h).used / 2**30)

    def _loop(self, into: dict) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample(into)

    def _sampled_figures(self) -> dict:
        cpu = [s for w in self._windows for s in w["cpu"]]
        per_core = [_mean(list(c)) for c in zip(*cpu)] if cpu else []
        out = {
            "util_source": "sampled",
            "util_interval_s": self.interval_s,
            "util_samples": len(cpu),
            "cpu_util_percent_mean": _mean([statistics.fmean(s) for s in cpu if s]),
            "cpu_util_percent_per_core_mean": per_core,
            # 100 = one core
            "process_cpu_percent_mean": _mean([p for w in self._windows for p in w["proc"]]),
        }
        if self.unavailable or not self._handles:
            out["gpu_util"] = "unavailable"
            out["gpu_util_unavailable_reason"] = self.unavailable or "no GPU named for this rank"
            return out
        util = {i: [v for w in self._windows for v in w["util"][i]] for i in self._handles}
        mem = {i: [v for w in self._windows for v in w["mem"][i]] for i in self._handles}
        out["gpu_util_source"] = "nvml"
        out["gpu_util_percent_mean"] = {str(i): _mean(v) for i, v in util.items()}  # keyed by CUDA ordinal
        out["gpu_mem_used_gib_max"] = {str(i): max(v, default=None) for i, v in mem.items()}
        return out

    # ---------- CPU: counters at the edges ----------

    def _edges(self, t0, cores0, own0) -> dict:
        cores = psutil.cpu_times(percpu=True)
        own = self._process.cpu_times()
        per_core = []
        for a, b in zip(cores0, cores):
            idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
            per_core.append((sum(b) - sum(a), sum(b) - sum(a) - idle))  # (total, busy) seconds
        return {"wall_s": perf_counter() - t0, "cores": per_core,
                "own_s": (own.user + own.system) - (own0.user + own0.system)}

    def _edge_figures(self) -> dict:
        wall = max(sum(w["wall_s"] for w in self._windows), 1e-9)
        cores = [list(c) for c in zip(*(w["cores"] for w in self._windows))]
        per_core = [
            100.0 * sum(b for _, b in c) / t if (t := sum(x for x, _ in c)) > 0 else 0.0 for c in cores
        ]
        return {
            "util_source": "edges",
            "util_span_s": wall,
            "util_samples": len(self._windows),
            "cpu_util_percent_mean": statistics.fmean(per_core) if per_core else None,
            "cpu_util_percent_per_core_mean": per_core,
            "process_cpu_percent_mean": 100.0 * sum(w["own_s"] for w in self._windows) / wall,
            "gpu_util": "unavailable",
            "gpu_util_unavailable_reason": f"no GPU on this run (device type {self.device_type})",
        }
