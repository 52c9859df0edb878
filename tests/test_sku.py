"""A platform is a SKU: a GPU platform matches name + memory + SM count, a TPU platform the type its
runtime reports (xbench/platforms/sku.py). The old rule was a substring ("H100" in the device name, any
TPU for every `tpu_*` platform), so an H100 PCIe or NVL was priced and peaked as the SXM5 of p5.48xlarge.

No GPU or TPU runs here: the host facts are simulated as `host_facts()` builds them, from what the driver
reports for each part (`torch.cuda.get_device_properties`: name, total_memory, multi_processor_count; the
memory is the MiB nvidia-smi shows for that SKU, the H200's as seen on the device machine, KINDS.md) and,
for a TPU VM, what `$TPU_ACCELERATOR_TYPE` / the metadata attribute `accelerator-type` holds.
"""

from __future__ import annotations

import itertools

import pytest
from omegaconf import OmegaConf

from tests import studies_checks
from tests.conftest import CONF
from xbench import compat
from xbench.config import XBenchConfig
from xbench.cost import load_platform
from xbench.platforms import detect, sku
from xbench.platforms.detect import HostFacts

MIB = 1 / 1024  # GiB per MiB

# name, total memory (GiB), SMs: one GPU as the driver reports it
H100_SXM = ("NVIDIA H100 80GB HBM3", 81559 * MIB, 132)
H100_PCIE = ("NVIDIA H100 PCIe", 81559 * MIB, 114)
H100_NVL = ("NVIDIA H100 NVL", 95830 * MIB, 132)
A100_40 = ("NVIDIA A100-SXM4-40GB", 40536 * MIB, 108)
A100_80 = ("NVIDIA A100-SXM4-80GB", 81920 * MIB, 108)
V100_16 = ("Tesla V100-SXM2-16GB", 16160 * MIB, 80)
V100_32 = ("Tesla V100-SXM2-32GB", 32510 * MIB, 80)
H200 = ("NVIDIA H200", 143771 * MIB, 132)
# The H200 NVL as its driver names it; NVIDIA gives both parts 141 GB (same memory reported) and the GH100's 132 SMs
H200_NVL = ("NVIDIA H200 NVL", 143771 * MIB, 132)


def gpus(gpu, n=1, **kw) -> HostFacts:
    name, mem, sms = gpu
    return HostFacts(cuda_devices=[name] * n, cuda_memory_gib=[round(mem, 2)] * n, cuda_sm_counts=[sms] * n,
                     logical_cores=8, torch_version="2.9.0", **kw)


def platform_cfg(name: str, **override) -> XBenchConfig:
    cfg = OmegaConf.structured(XBenchConfig)
    base = {"model": {"name": "cnn_small"}, "data": {"name": "synthetic_cifar10"}, "runtime": {"name": "eager"},
            "parallel": {"name": "single"}, "precision": {"name": "fp32"}, "logger": {"name": "none"}}
    for k, v in base.items():
        cfg[k] = OmegaConf.merge(cfg[k], v)
    cfg.platform = OmegaConf.merge(cfg.platform, OmegaConf.load(CONF / "platform" / f"{name}.yaml"), override)
    return OmegaConf.to_object(cfg)


def platform_reasons(cfg, facts) -> list[str]:
    return compat.platform_is_here(cfg, facts)


# (platform, its own GPU, the GPU of the same name that is another SKU)
PAIRS = [
    ("aws_p5_48xlarge", H100_SXM, H100_PCIE),  # same memory, 114 SMs instead of 132
    ("aws_p5_48xlarge", H100_SXM, H100_NVL),  # same SMs, 94 GB instead of 80
    ("aws_p4d_24xlarge", A100_40, A100_80),
    ("gce_a2_highgpu_1g", A100_40, A100_80),
    ("aws_p3_2xlarge", V100_16, V100_32),
    ("h200", H200, H100_SXM),
    ("h200", H200, H200_NVL),  # same name, memory and SMs: the NVL word tells them apart
    ("h200_nvl", H200_NVL, H200),
]


@pytest.mark.parametrize("name,right,wrong", PAIRS, ids=lambda v: v if isinstance(v, str) else v[0])
def test_a_gpu_platform_takes_its_sku_and_refuses_the_other_naming_both(name, right, wrong):
    cfg = platform_cfg(name, device_count=1)
    assert platform_reasons(cfg, gpus(right)) == []
    [reason] = platform_reasons(cfg, gpus(wrong))
    p = cfg.platform
    assert f"expects accelerator {p.accelerator!r} with {p.memory_gib:g} GiB and {p.sm_count} SMs" in reason, reason
    assert f"GPU 0 here is {wrong[0]} with {round(wrong[1], 2):g} GiB and {wrong[2]} SMs" in reason, reason


def test_the_reason_says_which_figure_differs():
    cfg = platform_cfg("aws_p5_48xlarge", device_count=1)
    assert "its SM count differs" in platform_reasons(cfg, gpus(H100_PCIE))[0]
    assert "its memory differs" in platform_reasons(cfg, gpus(H100_NVL))[0]
    assert "its name differs" in platform_reasons(cfg, gpus(H200))[0]


def test_an_h200_nvl_is_not_given_the_sxm_peaks():
    """The old rule passed an H200 NVL as platform=h200 (989 bf16 TFLOPS: MFU ~16% low); now it is refused with
    the reason, and platform=h200_nvl takes it with the NVL's datasheet peaks."""
    [reason] = platform_reasons(platform_cfg("h200"), gpus(H200_NVL))
    assert "GPU 0 here is NVIDIA H200 NVL" in reason and "its name ('NVL': another part" in reason, reason
    assert platform_reasons(platform_cfg("h200_nvl"), gpus(H200_NVL)) == []
    assert platform_reasons(platform_cfg("h200_x8"), gpus(H200_NVL, 8)) != []
    sxm, nvl = load_platform("h200")["peak_tflops"], load_platform("h200_nvl")["peak_tflops"]
    assert (sxm["bf16"], nvl["bf16"]) == (989.4, 835.5)
    assert nvl["bf16"] / sxm["bf16"] == pytest.approx(0.844, abs=1e-3)  # the 16% an NVL's MFU read low
    assert sku.other_part("H200", "NVIDIA H200 NVL") == "NVL"
    assert sku.other_part("H200 NVL", "NVIDIA H200 NVL") is None
    assert sku.other_part("H100", "NVIDIA H100 80GB HBM3") is None


def test_every_gpu_the_platform_uses_is_checked():
    """8 x H100 SXM5 declared; GPU 5 of the host is a PCIe part: refused, naming GPU 5."""
    cfg = platform_cfg("aws_p5_48xlarge")
    facts = gpus(H100_SXM, 8)
    assert platform_reasons(cfg, facts) == []
    facts.cuda_sm_counts[5] = 114
    facts.cuda_devices[5] = H100_PCIE[0]
    [reason] = platform_reasons(cfg, facts)
    assert "GPU 5 here is NVIDIA H100 PCIe" in reason


def test_the_name_is_a_whole_word_not_a_substring():
    assert sku.name_matches("V100", "Tesla V100-SXM2-16GB")
    assert sku.name_matches("H100", "NVIDIA H100 80GB HBM3")
    assert sku.name_matches("1080", "NVIDIA GeForce GTX 1080")
    assert not sku.name_matches("V100", "Tesla V100S-PCIE-32GB")  # V100S: another part
    assert not sku.name_matches("V100", "Quadro GV100")
    assert not sku.name_matches("H100", "NVIDIA GH100")


def test_a_gpu_whose_memory_is_not_reported_is_not_taken_for_the_sku():
    cfg = platform_cfg("h200")
    facts = HostFacts(cuda_devices=["NVIDIA H200"], logical_cores=2)  # no memory or SMs in the facts
    [reason] = platform_reasons(cfg, facts)
    assert "memory not reported" in reason


def test_every_gpu_platform_declares_memory_and_sms_and_every_tpu_platform_its_type():
    names = sorted(p.stem for p in (CONF / "platform").glob("*.yaml"))
    for name in names:
        p = load_platform(name)
        if p["device"] == "cuda":
            assert p["accelerator"] and p["memory_gib"] and p["sm_count"], name
        if p["device"] == "xla" and "tpu" in (p["accelerator"] or "").lower():
            assert p["accelerator_type"], name
            assert p["accelerator_type"].split(" ")[0] == p["instance"].split(" ")[0], name


def test_two_gpu_platforms_accept_each_others_hosts_only_when_they_are_one_sku():
    """The simulated host of each GPU platform (tests/studies_checks.py simulated_host, what the study checks use) passes
    its own platform, and another platform's only when name, memory and SMs are the same."""
    gpu = [n for n in sorted(p.stem for p in (CONF / "platform").glob("*.yaml"))
           if load_platform(n)["device"] == "cuda"]
    plain = {n: load_platform(n) for n in gpu}
    cfgs = {n: platform_cfg(n, device_count=1) for n in gpu}
    for a, b in itertools.product(gpu, gpu):
        pa, pb = plain[a], plain[b]
        facts = HostFacts(**studies_checks.simulated_host(pa))
        same = (pa["accelerator"], pa["memory_gib"], pa["sm_count"]) == (pb["accelerator"], pb["memory_gib"],
                                                                          pb["sm_count"])
        reasons = [r for r in platform_reasons(cfgs[b], facts) if "expects" in r]
        assert (reasons == []) == same, (a, b, reasons)


def tpu(kind, chips=4) -> HostFacts:
    return HostFacts(torch_xla=True, logical_cores=96, torch_version="2.9.0", tpu_chips=chips,
                     tpu_accelerator_type=kind)


def test_a_tpu_platform_takes_its_type_and_refuses_another_naming_both():
    cfg = platform_cfg("tpu_v3_8")
    assert platform_reasons(cfg, tpu("v3-8")) == []
    [reason] = platform_reasons(cfg, tpu("v5litepod-8", chips=8))  # the old rule: any TPU chips passed
    assert "expects accelerator 'TPU v3' of type v3-8" in reason and "this TPU VM is v5litepod-8" in reason
    [reason] = platform_reasons(platform_cfg("tpu_v2_8"), tpu("v3-8"))
    assert "of type v2-8" in reason and "is v3-8" in reason
    [reason] = platform_reasons(platform_cfg("tpu_v2_32"), tpu("v2-8"))  # one v2-8 is not a pod slice
    assert "of type v2-32" in reason


def test_a_tpu_whose_type_is_not_reported_is_refused_with_the_fix():
    [reason] = platform_reasons(platform_cfg("tpu_v3_8"), tpu(None))
    assert "reports no accelerator type" in reason and "TPU_ACCELERATOR_TYPE" in reason


def test_the_tpu_type_is_read_where_torch_xla_reads_it(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    assert detect.tpu_accelerator_type() == "v5litepod-8"
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE")
    # not a TPU VM: the metadata server does not answer, the type is unknown (never an exception)
    assert detect.tpu_accelerator_type(metadata_timeout_s=0.5) is None


def test_the_record_carries_each_gpus_memory_and_sms():
    env = detect.torch_env(gpus(H100_PCIE, 2))
    assert env["accelerators"] == [{"index": i, "name": "NVIDIA H100 PCIe", "memory_gib": 79.65, "sm_count": 114}
                                   for i in range(2)]
    here = detect.host_facts()  # this machine: lists of one length (none without a GPU)
    assert len(here.cuda_devices) == len(here.cuda_memory_gib) == len(here.cuda_sm_counts)
