"""Energy over the timed windows: NVML's total-energy counter on NVIDIA GPUs, RAPL on x86 CPUs.

Each counter is read at each window's two edges (never inside a step) and only the windows are summed:
the time between windows (the stall check, the ranks' agreement, W&B's window line) is not the
workload's. A GPU's handle is found by its CUDA identity (bench/meters/nvml.py), so the joules are the
rank's own GPUs'. Where no counter can be read the record says why (`energy_unavailable`), rather
than leaving the field out.
"""

from __future__ import annotations

from pathlib import Path
from time import perf_counter

from xbench.bench.meters import Meter, nvml

RAPL_ROOT = Path("/sys/class/powercap")


def _rapl_packages() -> list[Path]:
    # Package domains only (intel-rapl:0, intel-rapl:1); sub-domains (intel-rapl:0:0) are inside them.
    return sorted(p for p in RAPL_ROOT.glob("intel-rapl:*") if p.name.count(":") == 1)


class EnergyMeter(Meter):
    """Per window: the counter at its start and end. figures -> {"energy_j": J over the windows,
    "energy_source": ..., "energy_j_per_window": [...], "energy_metered_s": s} or {"energy_unavailable": why}.
    start() ... stop() meters one span (the same reading, for a caller without windows)."""

    def __init__(self, device_type: str, cuda_indices: list[int] | None = None):
        super().__init__()
        # Every GPU the rank drives (DataParallel: several), so J/sample divides like for like.
        self.device_type, self.cuda_indices = device_type, cuda_indices or [0]
        self.reason = None
        self.source = None
        self._session = None
        self._read = None if device_type == "cuda" else self._choose()  # NVML: opened with the meter
        self._at = None  # (time, reading) at the open window's start
        self._windows: list[tuple[float, float]] = []  # (joules, seconds) per window

    def _choose(self):
        if self.device_type == "cuda":
            try:
                self._session = nvml.session()
                pynvml = self._session.__enter__()
                handles = list(nvml.handles(pynvml, self.cuda_indices).values())
                for h in handles:
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # raises where unsupported
                self.source = "nvml"
                # mJ -> J
                return lambda: sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles) / 1e3
            except Exception as e:
                self._shutdown()
                self.reason = f"NVML total energy not readable: {type(e).__name__}: {e}"
                return None
        if self.device_type == "cpu":
            pkgs = _rapl_packages()
            if not pkgs:
                self.reason = (
                    f"no RAPL domains under {RAPL_ROOT} (not an x86 host, or not exposed in this VM)"
                )
                return None
            try:
                ranges = [int((p / "max_energy_range_uj").read_text()) for p in pkgs]
                [int((p / "energy_uj").read_text()) for p in pkgs]
            except (OSError, ValueError) as e:
                self.reason = f"RAPL not readable: {e}"
                return None
            self.source = "rapl (CPU packages)"
            self._ranges = ranges
            return lambda: [int((p / "energy_uj").read_text()) for p in pkgs]
        self.reason = f"no energy counter for device type {self.device_type}"
        return None

    def _shutdown(self) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None

    def _joules(self, start, end) -> float:
        if self.source == "nvml":
            return end - start
        # RAPL counters wrap at max_energy_range_uj.
        return sum((e - s) % r for s, e, r in zip(start, end, self._ranges)) / 1e6

    # ---------- protocol ----------

    def open(self) -> None:
        if self.device_type == "cuda" and self._read is None and self.reason is None:
            self._read = self._choose()

    def window_start(self) -> None:
        if self._read:
            try:
                self._at = (perf_counter(), self._read())
            except Exception as e:  # a counter that stopped answering: say so, never fail the run
                self.reason, self._read = f"energy counter unreadable: {type(e).__name__}: {e}", None

    def window_end(self) -> None:
        if self._read and self._at is not None:
            t0, start = self._at
            try:
                self._windows.append((self._joules(start, self._read()), perf_counter() - t0))
            except Exception as e:
                self.reason, self._read = f"energy counter unreadable: {type(e).__name__}: {e}", None
        self._at = None

    def discard(self) -> None:
        if self._windows:
            self._windows.pop()

    def close(self) -> dict:
        self._shutdown()
        if not self._read or not self._windows:
            return {"energy_unavailable": self.reason or "meter not started"}
        return {"energy_j": sum(j for j, _ in self._windows), "energy_source": self.source,
                "energy_j_per_window": [j for j, _ in self._windows],
                "energy_metered_s": sum(s for _, s in self._windows)}

    # One span, for callers without windows (and the tests of the counters).
    def start(self) -> None:
        self.open()
        self.window_start()

    def stop(self) -> dict:
        self.window_end()
        return self.close()
