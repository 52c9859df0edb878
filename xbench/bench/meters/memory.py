"""The memory meter: the peaks of the timed windows, host and device.

Entered at the first timed window's edge it resets the peaks (bench/memory.py `reset_peaks`: the host's
peak RSS through /proc/self/clear_refs where Linux allows it, each GPU's caching-allocator peak), so
warm-up's one-off allocations (cuDNN's autotuning workspaces, compile-time buffers) are not counted;
on exit, on every path, it reads them back: `peak_host_rss_gib`, `peak_memory_since` (where the host
peak counts from) and `device_peaks` over every GPU the rank drives (DataParallel: all of them). A
remeasured window changes nothing: a peak cannot be taken back, and the stalled window's allocations
are the step's anyway. Nothing is read at a window's edges: the allocator keeps the peak itself.
"""

from __future__ import annotations

from xbench.bench.memory import device_peaks, peak_host_rss_gib, reset_peaks
from xbench.bench.meters import Meter


class MemoryMeter(Meter):
    """`since`: the name the record gives the span when the host peak could be reset (the throughput
    mode's "timed windows"; train-to-target's "training")."""

    def __init__(self, gpus: list[int] | None = None, since: str = "timed windows"):
        super().__init__()
        self.gpus, self.since = list(gpus or []), since
        self._from: str | None = None

    def open(self) -> None:
        reset = reset_peaks(self.gpus)
        self._from = self.since if reset == "timed windows" else reset  # else: "process start"

    def close(self) -> dict:
        if self._from is None:
            return {}
        return {"peak_host_rss_gib": peak_host_rss_gib(), "peak_memory_since": self._from,
                **device_peaks(self.gpus)}
