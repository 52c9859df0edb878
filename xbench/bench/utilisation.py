"""Device utilisation during the timed windows (never inside a step).

GPU: NVML (nvidia-ml-py) utilisation and memory used per visible device, sampled in a background
thread at `bench.util_interval_s` (NVML's utilisation is a recent-period figure, so it must be
sampled), so an imbalance (GPU 0 busy, the others idle under nn.DataParallel) shows. Where NVML is
absent the record says `unavailable` and why.

CPU: no thread. The machine's per-core busy time and this process's CPU time are cumulative counters
(/proc/stat, /proc/self/stat), so their difference between the windows' edges is the exact mean over
the windows (`util_source: edges`). A sampling thread gave the same means and cost what the windows
measured: on a loaded 2-core machine each wake-up could take the measured thread's core (0.92 of a
plain loop's throughput under load, against 0.97 quiet). `bench.util_interval_s=0` turns both off.
"""

from __future__ import annotations

import statistics
import threading
from time import perf_counter

import psutil

from xbench.bench import nvml


def _mean(xs):
    return statistics.fmean(xs) if xs else None


class UtilisationSampler:
    def __init__(self, device_type: str, interval_s: float = 0.1, cuda_indices: list[int] | None = None):
        self.device_type = device_type
        self.interval_s = interval_s
        self.cuda_indices = cuda_indices or []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu: list[list[float]] = []
        self._proc: list[float] = []
        self._gpu_util: dict[int, list[float]] = {i: [] for i in self.cuda_indices}
        self._gpu_mem: dict[int, list[float]] = {i: [] for i in self.cuda_indices}
        self._nvml, self._handles, self.unavailable = None, [], None
        self._process = psutil.Process()
        self._edges = None  # (time, per-core CPU times, this process's CPU times) at start, CPU runs

    def _open_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = list(nvml.handles(pynvml, self.cuda_indices).items())  # by CUDA identity
        except Exception as e:  # no driver, no library, GPUs NVML cannot name: no GPU figures
            self.unavailable = f"NVML not usable: {type(e).__name__}: {e}"

    def _sample(self) -> None:
        self._cpu.append(psutil.cpu_percent(percpu=True))  # since the previous call
        self._proc.append(self._process.cpu_percent())
        for i, h in self._handles:
            u = self._nvml.nvmlDeviceGetUtilizationRates(h)
            self._gpu_util[i].append(float(u.gpu))
            self._gpu_mem[i].append(self._nvml.nvmlDeviceGetMemoryInfo(h).used / 2**30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> UtilisationSampler:
        if self.interval_s <= 0:
            return self
        if self.device_type != "cuda":  # counters read at the edges: no thread beside the steps
            self._edges = (perf_counter(), psutil.cpu_times(percpu=True), self._process.cpu_times())
            return self
        self._open_nvml()
        psutil.cpu_percent(percpu=True)  # prime the counters: the first real sample covers one interval
        self._process.cpu_percent()
        self._thread = threading.Thread(target=self._loop, name="xbench-util", daemon=True)
        self._thread.start()
        return self

    def _edges_stop(self) -> dict:
        t0, cores0, own0 = self._edges
        wall = max(perf_counter() - t0, 1e-9)
        per_core = []
        for a, b in zip(cores0, psutil.cpu_times(percpu=True)):
            total = sum(b) - sum(a)
            idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
            per_core.append(100.0 * (total - idle) / total if total > 0 else 0.0)
        own = self._process.cpu_times()
        return {
            "util_source": "edges",
            "util_span_s": wall,
            "util_samples": 1,
            "cpu_util_percent_mean": statistics.fmean(per_core) if per_core else None,
            "cpu_util_percent_per_core_mean": per_core,
            "process_cpu_percent_mean": 100.0 * ((own.user + own.system) - (own0.user + own0.system)) / wall,
            "gpu_util": "unavailable",
            "gpu_util_unavailable_reason": f"no GPU on this run (device type {self.device_type})",
        }

    def stop(self) -> dict:
        if self._edges is not None:
            return self._edges_stop()
        if self._thread is None:
            return {"util_source": "off (bench.util_interval_s=0)"}
        self._stop.set()
        self._thread.join()
        self._sample()  # the tail since the last sample (and a sample at all for windows under one period)
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
        per_core = [_mean(list(c)) for c in zip(*self._cpu)] if self._cpu else []
        out = {
            "util_source": "sampled",
            "util_interval_s": self.interval_s,
            "util_samples": len(self._cpu),
            "cpu_util_percent_mean": _mean([statistics.fmean(s) for s in self._cpu if s]),
            "cpu_util_percent_per_core_mean": per_core,
            "process_cpu_percent_mean": _mean(self._proc),  # 100 = one core busy
        }
        if self.device_type == "cuda":
            if self.unavailable:
                out["gpu_util"] = "unavailable"
                out["gpu_util_unavailable_reason"] = self.unavailable
            else:
                out["gpu_util_source"] = "nvml"
                out["gpu_util_percent_mean"] = {str(i): _mean(v) for i, v in self._gpu_util.items()}
                out["gpu_mem_used_gib_max"] = {str(i): max(v, default=None) for i, v in self._gpu_mem.items()}
        else:
            out["gpu_util"] = "unavailable"
            out["gpu_util_unavailable_reason"] = f"no GPU on this run (device type {self.device_type})"
        return out
