"""Energy over the timed windows: NVML's total-energy counter on NVIDIA GPUs, RAPL on x86 CPUs.

Each source is read at the window edges only (never inside a step). Where neither can be read the
record says why (`energy_unavailable`), rather than leaving the field out.
"""

from __future__ import annotations

from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")


def _rapl_packages() -> list[Path]:
    # Package domains only (intel-rapl:0, intel-rapl:1); sub-domains (intel-rapl:0:0) are inside them.
    return sorted(p for p in RAPL_ROOT.glob("intel-rapl:*") if p.name.count(":") == 1)


class EnergyMeter:
    """start() ... stop() -> {"energy_j": J, "energy_source": ...} or {"energy_unavailable": reason}."""

    def __init__(self, device_type: str, cuda_indices: list[int] | None = None):
        # Every GPU the rank drives (DataParallel: several), so J/sample divides like for like.
        self.device_type, self.cuda_indices = device_type, cuda_indices or [0]
        self.reason = None
        self._read = self._choose()
        self._start = None

    def _choose(self):
        if self.device_type == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.cuda_indices]
                for h in handles:
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # raises where unsupported
                self.source = "nvml"
                return lambda: sum(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles) / 1e3  # mJ -> J
            except Exception as e:
                self.reason = f"NVML total energy not readable: {type(e).__name__}: {e}"
                return None
        if self.device_type == "cpu":
            pkgs = _rapl_packages()
            if not pkgs:
                self.reason = f"no RAPL domains under {RAPL_ROOT} (not an x86 host, or not exposed in this VM)"
                return None
            try:
                ranges = [int((p / "max_energy_range_uj").read_text()) for p in pkgs]
                [int((p / "energy_uj").read_text()) for p in pkgs]
            except (OSError, ValueError) as e:
                self.reason = f"RAPL not readable: {e}"
                return None
            self.source = "rapl"
            self._ranges = ranges
            return lambda: [int((p / "energy_uj").read_text()) for p in pkgs]
        self.reason = f"no energy counter for device type {self.device_type}"
        return None

    def start(self) -> None:
        if self._read:
            self._start = self._read()

    def stop(self) -> dict:
        if not self._read or self._start is None:
            return {"energy_unavailable": self.reason or "meter not started"}
        end = self._read()
        if self.source == "nvml":
            return {"energy_j": end - self._start, "energy_source": "nvml"}
        # RAPL counters wrap at max_energy_range_uj.
        total_uj = sum((e - s) % r for s, e, r in zip(self._start, end, self._ranges))
        return {"energy_j": total_uj / 1e6, "energy_source": "rapl (CPU packages)"}
