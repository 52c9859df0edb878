"""What hardware and software torch sees here, and which device a platform config resolves to.

`host_facts()` is cheap and side-effect free (no CUDA context, no torch_xla import): compat checks
run on it before any device work.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, field

import torch


@dataclass
class HostFacts:
    cuda_devices: list[str] = field(default_factory=list)  # device names, index = CUDA ordinal
    torch_xla: bool = False  # importable (not imported)
    accelerate: bool = False
    logical_cores: int = 1
    torch_version: str = ""
    tpu_chips: int = 0  # TPU device files seen (no torch_xla import needed)
    torch_xla_cuda_plugin: bool = False  # PJRT's CUDA client for torch-xla (a separate package)

    @property
    def cuda_count(self) -> int:
        return len(self.cuda_devices)


def host_facts() -> HostFacts:
    import os

    names = []
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return HostFacts(
        cuda_devices=names,
        torch_xla=importable("torch_xla"),
        accelerate=importable("accelerate"),
        logical_cores=os.cpu_count() or 1,
        torch_version=torch.__version__,
        tpu_chips=tpu_chips(),
        torch_xla_cuda_plugin=importable("torch_xla_cuda_plugin"),
    )


def tpu_chips() -> int:
    """TPU chips visible on this host: /dev/accel* (v2-v4 VMs) or /dev/vfio/<n> (v5e and newer)."""
    import glob

    return len(glob.glob("/dev/accel[0-9]*")) or len(glob.glob("/dev/vfio/[0-9]*"))


def importable(name: str) -> bool:
    """Installed and findable; a broken or hidden package (find_spec raising) counts as absent."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def device_type(platform_device: str, runtime_name: str, facts: HostFacts) -> str:
    """cpu | cuda | xla for this run. XLA runtimes always run on the `xla` device type."""
    if runtime_name.startswith("xla") or platform_device == "xla":
        return "xla"
    if platform_device == "auto":
        return "cuda" if facts.cuda_count else "cpu"
    return platform_device


def torch_env(facts: HostFacts) -> dict:
    """Library and accelerator facts for the record."""
    out = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "cpu_capability": _cpu_capability(),
        "host_facts": asdict(facts),
        "accelerators": [{"index": i, "name": n} for i, n in enumerate(facts.cuda_devices)],
        "driver": _nvidia_driver() if facts.cuda_count else None,
    }
    return out


def _cpu_capability() -> str | None:
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return None


def _nvidia_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: the record says unknown, the run goes on
        return None
