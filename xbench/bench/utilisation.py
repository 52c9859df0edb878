"""Device utilisation sampled in a background thread during the timed windows (never inside a step).

GPU: NVML (nvidia-ml-py) utilisation and memory used per visible device, so an imbalance (GPU 0 busy,
the others idle under nn.DataParallel) shows. CPU: psutil per-core utilisation of the whole machine
and this process's CPU time. Where NVML is absent the record says `unavailable` and why.

Cost: one sample is a few NVML / /proc reads (tens of microseconds) at `bench.util_interval_s`
(default 0.1 s, i.e. 10 Hz); the thread sleeps in between and holds the GIL only while sampling. On a
CPU run it does take those slices from the measured cores, hence the low rate; 0 turns it off.
"""

from __future__ import annotations

import statistics
import threading

import psutil


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

    def _open_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in self.cuda_indices]
        except Exception as e:  # no driver, no library: the run goes on without GPU figures
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
        if self.device_type == "cuda":
            self._open_nvml()
        psutil.cpu_percent(percpu=True)  # prime the counters: the first real sample covers one interval
        self._process.cpu_percent()
        self._thread = threading.Thread(target=self._loop, name="xbench-util", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        if self._thread is None:
            return {"util_source": "off (bench.util_interval_s=0)"}
        self._stop.set()
        self._thread.join()
        self._sample()  # the tail since the last sample (and a sample at all for windows under one period)
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
        per_core = [_mean(list(c)) for c in zip(*self._cpu)] if self._cpu else []
        out = {
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
