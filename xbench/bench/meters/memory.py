"""Memory: the memory meter (the peaks of the timed windows, host and device), what an out-of-memory
record and batch-size search trials say, and the host guard.

Peaks start at the first timed window (`reset_peaks`), not before warm-up: warm-up's one-off
allocations (cuDNN's autotuning workspaces under `cudnn.benchmark`, compile-time buffers, a first
step's lazily built state) are not what the steady step needs. `peak_host_rss_gib` is then the host's
peak resident set since that reset where Linux lets it be reset (/proc/self/clear_refs "5" resets
VmHWM, and with it `ru_maxrss`), else since the process started (`peak_memory_since` says which);
`device_peaks` reads the caching allocator's peaks on every GPU the rank drives (DataParallel: all of
them; the figure is the largest, the per-GPU lists beside it).

`memory_figures()` says what the process held when it failed: host RSS (now and peak), what the host
still had available, the address-space cap if one is set, and on CUDA the allocator's figures and
the device's free/total memory. torch is only consulted when it is already imported.

The meter (`MemoryMeter`), entered at the first timed window's edge, resets the peaks (`reset_peaks`), so
warm-up's one-off allocations are not counted; on exit, on every path, it reads them back:
`peak_host_rss_gib`, `peak_memory_since` (where the host peak counts from) and `device_peaks` over every GPU
the rank drives. A remeasured window changes nothing: a peak cannot be taken back, and the stalled window's
allocations are the step's anyway. Nothing is read at a window's edges: the allocator keeps the peak itself.
"""

from __future__ import annotations

import contextlib
import resource
import sys

import psutil

from xbench.bench.meters import Meter

GIB = 2**30


def _limit_gib(which: int) -> float | None:
    soft, _ = resource.getrlimit(which)
    return None if soft == resource.RLIM_INFINITY else soft / GIB


def peak_host_rss_gib() -> float:
    """The process's peak resident set so far (ru_maxrss: KiB on Linux), not the current one."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def reset_peaks(gpus=()) -> str:
    """Start the peak figures here: the host's peak RSS and each of `gpus`' allocator peaks (CUDA
    ordinals). -> where the host peak now counts from: "timed windows", or "process start" where the
    kernel does not let this process reset it (then the figure includes warm-up)."""
    since = "process start"
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")
        since = "timed windows"
    torch = sys.modules.get("torch")
    if gpus and torch is not None:
        for i in gpus:
            torch.cuda.reset_peak_memory_stats(i)
    return since


def device_peaks(gpus) -> dict:
    """Peak allocated and reserved memory over `gpus` (CUDA ordinals) since `reset_peaks`: the largest
    of them, and with several GPUs each one's (`*_per_gpu`, in the order given). {} without GPUs."""
    torch = sys.modules.get("torch")
    gpus = list(gpus)
    if not gpus or torch is None or not torch.cuda.is_available():
        return {}
    allocated = [torch.cuda.max_memory_allocated(i) / GIB for i in gpus]
    reserved = [torch.cuda.max_memory_reserved(i) / GIB for i in gpus]
    out = {"peak_device_allocated_gib": max(allocated), "peak_device_reserved_gib": max(reserved)}
    if len(gpus) > 1:
        out.update(peak_device_allocated_gib_per_gpu=allocated, peak_device_reserved_gib_per_gpu=reserved)
    return out


def memory_figures(device: str | None = None) -> dict:
    proc = psutil.Process()
    vm = psutil.virtual_memory()
    mem = proc.memory_info()
    out = {
        "host_rss_gib": mem.rss / GIB,
        "host_vm_gib": mem.vms / GIB,  # address space mapped: what an RLIMIT_AS cap counts
        "host_peak_rss_gib": peak_host_rss_gib(),
        "host_available_gib": vm.available / GIB,
        "host_total_gib": vm.total / GIB,
        "host_address_space_limit_gib": _limit_gib(resource.RLIMIT_AS),
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and (device is None or str(device).startswith("cuda")):
        with contextlib.suppress(Exception):  # figures only: never turn an OOM into another error
            dev = torch.device(device or "cuda")
            free, total = torch.cuda.mem_get_info(dev)
            out.update(device_allocated_gib=torch.cuda.memory_allocated(dev) / GIB,
                       device_reserved_gib=torch.cuda.memory_reserved(dev) / GIB,
                       device_peak_allocated_gib=torch.cuda.max_memory_allocated(dev) / GIB,
                       device_peak_reserved_gib=torch.cuda.max_memory_reserved(dev) / GIB,
                       device_free_gib=free / GIB, device_total_gib=total / GIB)
    return out


@contextlib.contextmanager
def host_memory_guard(fraction: float = 0.9):
    """Cap this process's address space at what it maps now plus `fraction` of the host's available
    memory, so that a too-large CPU trial fails with an allocation error (an OOM result) instead of
    swapping the machine or waking the kernel's OOM killer. A tighter cap already in force is kept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + int(fraction * psutil.virtual_memory().available)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield soft
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield cap
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


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
