"""What hardware and software torch sees here, and which device a platform config resolves to.

`host_facts()` is cheap and side-effect free (no CUDA context, no torch_xla import): compat checks
run on it before any device work. A GPU is described by its name, memory and multiprocessor count (one
name covers several SKUs: "H100" is the SXM5, PCIe and NVL parts), a TPU host by the accelerator type its
runtime reports (`v3-8`, `v5litepod-8`), so a platform is matched as a SKU, not a substring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from xbench.extras import installed


@dataclass
class HostFacts:
    cuda_devices: list[str] = field(default_factory=list)  # device names, index = CUDA ordinal
    # total memory per GPU, as the driver reports it
    cuda_memory_gib: list[float] = field(default_factory=list)
    cuda_sm_counts: list[int] = field(default_factory=list)  # streaming multiprocessors per GPU
    torch_xla: bool = False  # installed (not imported)
    accelerate: bool = False
    logical_cores: int = 1
    torch_version: str = ""
    tpu_chips: int = 0  # TPU device files seen (no torch_xla import needed)
    tpu_accelerator_type: str | None = None  # what the TPU runtime reports, e.g. v3-8, v5litepod-8
    torch_xla_cuda_plugin: bool = False  # PJRT's CUDA client for torch-xla (a separate package)

    @property
    def cuda_count(self) -> int:
        return len(self.cuda_devices)


def host_facts() -> HostFacts:
    import os

    gpus = []  # get_device_properties is what get_device_name reads: no context is created
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    chips = tpu_chips()
    return HostFacts(
        cuda_devices=[g.name for g in gpus],
        cuda_memory_gib=[round(g.total_memory / 2**30, 2) for g in gpus],
        cuda_sm_counts=[g.multi_processor_count for g in gpus],
        torch_xla=installed("torch_xla"),
        accelerate=installed("accelerate"),
        logical_cores=os.cpu_count() or 1,
        torch_version=torch.__version__,
        tpu_chips=chips,
        tpu_accelerator_type=tpu_accelerator_type() if chips else None,
        torch_xla_cuda_plugin=installed("torch_xla_cuda_plugin"),
    )


def tpu_chips() -> int:
    """TPU chips visible on this host: /dev/accel* (v2-v4 VMs) or /dev/vfio/<n> (v5e and newer)."""
    import glob

    return len(glob.glob("/dev/accel[0-9]*")) or len(glob.glob("/dev/vfio/[0-9]*"))


TPU_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type"


def tpu_accelerator_type(metadata_timeout_s: float = 2.0) -> str | None:
    """The TPU VM's accelerator type (`v3-8`, `v4-8`, `v5litepod-8`), where torch-xla reads it:
    $TPU_ACCELERATOR_TYPE, else the VM's metadata attribute `accelerator-type` (asked only on a host with
    TPU chips). None when neither answers."""
    import os

    if os.environ.get("TPU_ACCELERATOR_TYPE"):
        return os.environ["TPU_ACCELERATOR_TYPE"].strip()
    import urllib.request

    try:
        req = urllib.request.Request(TPU_METADATA_URL, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=metadata_timeout_s) as resp:
            return resp.read().decode().strip() or None
    except (OSError, ValueError):  # no metadata server (not a TPU VM, or no network): unknown
        return None


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
        "accelerators": [
            {
                "index": i,
                "name": n,
                "memory_gib": _at(facts.cuda_memory_gib, i),
                "sm_count": _at(facts.cuda_sm_counts, i),
            }
            for i, n in enumerate(facts.cuda_devices)
        ],
        "driver": _nvidia_driver() if facts.cuda_count else None,
    }
    return out


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


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
