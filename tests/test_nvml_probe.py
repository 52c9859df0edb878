"""The probe before a rank builds (CUDA not yet initialised in the process) names the rank's GPUs in NVML by
CUDA's own identity of each device (its UUID, else its PCI bus id), so it no longer needs
CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers GPUs fastest first by default, NVML by PCI bus id, and the old
probe refused to guess (every contention and utilisation figure of a multi-GPU host without the variable was
"unavailable").

No GPU and no driver here: NVML is tests/test_meters.py's FakeNVML, written from pynvml's documented API
(nvmlDeviceGetHandleByUUID, nvmlDeviceGetHandleByPciBusId taking "dddddddd:bb:dd.0", nvmlDeviceGetPciInfo), and
torch.cuda's `get_device_properties` gives what CUDA reports (`uuid`, `pci_domain_id`, `pci_bus_id`,
`pci_device_id`).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch

from tests.test_meters import GPUS, FakeNVML
from xbench.bench.meters import nvml


def _cuda_not_initialised(monkeypatch, ordinals_to_nvml: list[int], uuid: bool = True):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(ordinals_to_nvml))

    def props(i):
        u, (d, b, dev), *_ = GPUS[ordinals_to_nvml[i]]
        return SimpleNamespace(uuid=u.removeprefix("GPU-") if uuid else "", pci_domain_id=d, pci_bus_id=b,
                               pci_device_id=dev)

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)


def test_the_probe_names_gpus_in_cudas_fastest_first_order_without_pci_bus_id_order(monkeypatch):
    """Before: Unmapped 'CUDA_VISIBLE_DEVICES unset with CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA numbers 4 GPUs
    fastest first, an order NVML cannot reproduce'."""
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    _cuda_not_initialised(monkeypatch, [3, 0, 2, 1])  # CUDA's fastest-first order, not the bus order
    with nvml.session() as m:
        assert {i: h.nvml_index for i, h in nvml.handles(m, [0, 1, 2, 3]).items()} == {0: 3, 1: 0, 2: 2, 3: 1}
    # by PCI bus id where CUDA reports no uuid NVML knows
    _cuda_not_initialised(monkeypatch, [1, 3], uuid=False)
    with nvml.session() as m:
        assert {i: h.nvml_index for i, h in nvml.handles(m, [0, 1]).items()} == {0: 1, 1: 3}
    assert nvml.held_contexts([0, 1]) == set()  # not initialised: no context is counted as this run's
    assert fake.inits == 0


def test_without_cuda_devices_the_environment_rules_still_apply(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with nvml.session() as m:
        assert {i: h.nvml_index for i, h in nvml.handles(m, [0]).items()} == {0: 2}
