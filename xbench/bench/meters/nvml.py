"""CUDA ordinal -> NVML device handle, the one mapping every meter uses (utilisation, energy, contention).

NVML numbers GPUs its own way: its indices ignore CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (CUDA's
default order is FASTEST_FIRST; NVML enumerates by PCI bus id), so `nvmlDeviceGetHandleByIndex(ordinal)`
meters another GPU whenever the two differ (SLURM, a shared node, CUDA_VISIBLE_DEVICES=2,3). A handle is
found, in order:

1. torch imported with CUDA devices (the timed windows, and the probe before the rank builds): CUDA's own
   identity of the device, `get_device_properties(i).uuid` (NVML's `GPU-<uuid>`, or `MIG-<uuid>`), else its
   PCI bus id (`nvmlDeviceGetHandleByPciBusId`), whatever CUDA_DEVICE_ORDER says. Reading the properties
   initialises torch's CUDA state in this process (a CUDA run's rank does so a moment later anyway) but
   creates no context on any device (`held_contexts` still reads none);
2. otherwise (no torch, or a torch without CUDA here): the environment read the way CUDA reads it. UUIDs
(`GPU-...`, unique prefixes allowed; `MIG-...`) name one device
   each; indices mean PCI order only under CUDA_DEVICE_ORDER=PCI_BUS_ID (NVML's devices sorted by bus
   id here, not by NVML index); on a host with one GPU there is nothing to get wrong;
3. else no handle: `Unmapped` says why, and the figure says it is unavailable. Never a guess.

torch is read only when already imported (`sys.modules`): nothing here imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys


class Unmapped(Exception):
    """No NVML handle can be named for a CUDA ordinal without guessing; the message says why."""


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@contextlib.contextmanager
def session():
    """pynvml, initialised (NVML's init is reference counted: every session shuts its own down).
    Raises what import or nvmlInit raises (no library, no driver)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _cuda():
    """torch.cuda when it is imported and initialised in this process, else None (never initialises it)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:  # a torch without CUDA support
        return None


def _cuda_devices():
    """torch.cuda where torch is imported here and CUDA has devices (initialised or not), else None: its
    properties name each device as CUDA numbers it (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER applied)."""
    cuda = _cuda()
    if cuda is not None:
        return cuda
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_available() and cuda.device_count() > 0 else None
    # a torch without CUDA support, or a driver that does not answer: the environment's rules
    except Exception:
        return None


def held_contexts(ordinals: list[int]) -> set[int]:
    """The CUDA ordinals among `ordinals` on which this process holds a context (none before CUDA starts)."""
    cuda = _cuda()
    if cuda is None:
        return set()
    has = getattr(sys.modules["torch"]._C, "_cuda_hasPrimaryContext", None)
    return {i for i in ordinals if has is None or has(i)}


def _pci(nvml, h) -> tuple[int, int, int]:
    info = nvml.nvmlDeviceGetPciInfo(h)
    return int(info.domain), int(info.bus), int(info.device)


def _by_cuda_identity(nvml, cuda, ordinal: int):
    props = cuda.get_device_properties(ordinal)
    uuid = _text(getattr(props, "uuid", "") or "")
    tried = []
    if uuid:  # CUDA prints the bare uuid; NVML names it GPU-<uuid> (MIG-<uuid> for a MIG instance)
        for name in ([uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]):
            tried.append(name)
            with contextlib.suppress(Exception):
                return nvml.nvmlDeviceGetHandleByUUID(name)
    if hasattr(props, "pci_bus_id"):
        bus = f"{int(props.pci_domain_id):08x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
        tried.append(bus)
        with contextlib.suppress(Exception):
            return nvml.nvmlDeviceGetHandleByPciBusId(bus)
    raise Unmapped(f"NVML knows no device by CUDA device {ordinal}'s identity ({', '.join(tried) or 'none'})")


def visible_devices(value: str | None) -> list[int] | list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA parses it: None (unset: every device), GPU-/MIG- ids, or indices (each
    read like strtoul; the list ends at the first entry that is not one; a repeated entry hides every GPU)."""
    if value is None:
        return None
    out: list = []
    if value.startswith(("GPU-", "MIG-")):
        for e in value.split(","):
            e = e.strip()
            if not e.startswith(("GPU-", "MIG-")):
                break
            if e in out:
                return []
            out.append(e)
        return out
    for e in value.split(","):
        digits = ""
        for c in e.strip():
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        if int(digits) in out:
            return []
        out.append(int(digits))
    return out


def _by_environment(nvml, ordinal: int):
    devices = [nvml.nvmlDeviceGetHandleByIndex(k) for k in range(nvml.nvmlDeviceGetCount())]
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = visible_devices(raw)
    shown = f"CUDA_VISIBLE_DEVICES={raw!r}" if raw is not None else "CUDA_VISIBLE_DEVICES unset"
    if visible and isinstance(visible[0], str):
        if ordinal >= len(visible):
            raise Unmapped(f"CUDA device {ordinal}, but {shown} names {len(visible)} GPU(s)")
        name = visible[ordinal]
        if name.startswith("MIG-"):
            try:
                return nvml.nvmlDeviceGetHandleByUUID(name)
            except Exception as e:
                raise Unmapped(f"NVML knows no {name} ({shown}): {type(e).__name__}: {e}") from None
        hits = [h for h in devices if _text(nvml.nvmlDeviceGetUUID(h)).startswith(name)]
        if len(hits) != 1:
            raise Unmapped(f"{name} ({shown}) matches {len(hits)} of NVML's {len(devices)} GPUs")
        return hits[0]
    if visible is not None:  # CUDA drops the list from the first index past the last device
        visible = visible[:next((k for k, v in enumerate(visible) if v >= len(devices)), len(visible))]
    physical = list(range(len(devices))) if visible is None else visible
    if ordinal >= len(physical):
        raise Unmapped(
            f"CUDA device {ordinal}, but {shown} leaves {len(physical)} of NVML's {len(devices)} GPUs"
        )
    if len(devices) == 1:
        return devices[0]
    order = os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    if order != "PCI_BUS_ID":
        raise Unmapped(
            f"{shown} with CUDA_DEVICE_ORDER={order}: CUDA numbers {len(devices)} GPUs fastest first, "
            "an order NVML cannot reproduce (set CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID)"
        )
    return sorted(devices, key=lambda h: _pci(nvml, h))[physical[ordinal]]


def handles(nvml, ordinals: list[int]) -> dict[int, object]:
    """{CUDA ordinal: NVML handle} for this process's CUDA numbering (the module doc's rules); raises
    Unmapped when a handle cannot be named without guessing."""
    cuda = _cuda_devices()
    return {i: _by_cuda_identity(nvml, cuda, i) if cuda is not None else _by_environment(nvml, i)
            for i in ordinals}
