"""Is the accelerator here the one the platform declares? A SKU match, not a substring.

One GPU name covers several parts with different peaks and prices ("H100": SXM5 80 GB with 132 SMs,
PCIe 80 GB with 114, NVL 94 GB with 132; "A100": 40 and 80 GB), so a GPU platform matches on the
name as a whole word plus the memory and the multiprocessor count it declares (`memory_gib`,
`sm_count`). Where two parts share name, memory and SMs (the H200 SXM and the H200 NVL: 141 GB and 132 SMs
each, 989 and 835 dense bf16 TFLOPS, 700 and 600 W), the word the driver adds to the other part's name
(`PART_WORDS`: "NVIDIA H200 NVL") tells them apart: a platform that does not name it refuses that device. A
TPU platform matches the accelerator type the TPU runtime reports (`accelerator_type`:
`v3-8`, `v5litepod-8`). Each mismatch says what was asked and what was found.

Torch-free: it reads the platform config and `HostFacts` only.
"""

from __future__ import annotations

import re

# The driver reports a little less than the datasheet's GB (ECC, reserved memory): an 80 GB H100 shows
# 79.6 GiB, a 12 GB K80 11.2 GiB with ECC, a 141 GB H200 140.4 GiB. The next SKU up is >= 17% larger
# (H100 NVL 94 GB vs 80 GB), so this window tells them apart.
MEMORY_LOW, MEMORY_HIGH = 0.90, 1.03
# Words in a device name that make it another part than the bare name (its own peaks and power): the NVL parts
# (H100 NVL, H200 NVL) are PCIe cards at a lower power limit. A platform for one names the word in
# `accelerator`.
PART_WORDS = ("NVL",)


def _has_word(word: str, text: str) -> bool:
    return re.search(r"(?<![a-z0-9])" + re.escape(word.lower()) + r"(?![a-z0-9])", text.lower()) is not None


def name_matches(accelerator: str, device_name: str) -> bool:
    """`accelerator` as a whole word of the device name: "V100" matches "Tesla V100-SXM2-16GB", not
    "Tesla V100S-PCIE-32GB" or "Quadro GV100"."""
    return _has_word(accelerator, device_name)


def other_part(accelerator: str, device_name: str) -> str | None:
    """The part word (`PART_WORDS`) the device name has and the accelerator does not: "NVL" for an
    accelerator 'H200' and the device 'NVIDIA H200 NVL'; None when they agree."""
    return next((w for w in PART_WORDS if _has_word(w, device_name) and not _has_word(w, accelerator)), None)


def is_tpu(platform) -> bool:
    return "tpu" in (platform.accelerator or "").lower()


def declared(platform) -> str:
    """What the platform asks for, in words: "accelerator 'H100' with 80 GiB and 132 SMs"."""
    if is_tpu(platform):
        kind = platform.accelerator_type
        return f"accelerator {platform.accelerator!r}" + (f" of type {kind}" if kind else "")
    parts = [f"{platform.memory_gib:g} GiB" if platform.memory_gib else None,
             f"{platform.sm_count} SMs" if platform.sm_count else None]
    parts = [p for p in parts if p]
    return f"accelerator {platform.accelerator!r}" + (f" with {' and '.join(parts)}" if parts else "")


def found(facts, i: int) -> str:
    """GPU i as the host reports it: 'NVIDIA H100 PCIe with 79.6 GiB and 114 SMs'."""
    name = facts.cuda_devices[i]
    mem = facts.cuda_memory_gib[i] if i < len(facts.cuda_memory_gib) else None
    sms = facts.cuda_sm_counts[i] if i < len(facts.cuda_sm_counts) else None
    parts = [f"{mem:g} GiB" if mem is not None else "memory not reported",
             f"{sms} SMs" if sms is not None else "SM count not reported"]
    return f"{name} with {' and '.join(parts)}"


def gpu_problem(platform, facts, i: int) -> str | None:
    """Why GPU i is not the platform's SKU, or None."""
    name = facts.cuda_devices[i]
    if not name_matches(platform.accelerator, name):
        return "name"
    if platform.memory_gib:
        mem = facts.cuda_memory_gib[i] if i < len(facts.cuda_memory_gib) else None
        if mem is None or not MEMORY_LOW * platform.memory_gib <= mem <= MEMORY_HIGH * platform.memory_gib:
            return "memory"
    if platform.sm_count:
        sms = facts.cuda_sm_counts[i] if i < len(facts.cuda_sm_counts) else None
        if sms != platform.sm_count:
            return "SM count"
    word = other_part(platform.accelerator, name)
    if word:
        return f"name ({word!r}: another part, with its own peaks)"
    return None


def gpu_mismatches(platform, facts) -> list[str]:
    """One reason per distinct GPU (of the ones the platform uses) that is not its SKU."""
    n = platform.device_count or len(facts.cuda_devices)
    out, seen = [], set()
    for i in range(min(n, len(facts.cuda_devices))):
        what = gpu_problem(platform, facts, i)
        if what is None or found(facts, i) in seen:
            continue
        seen.add(found(facts, i))
        out.append(f"platform {platform.name!r} expects {declared(platform)}, but GPU {i} here is "
                   f"{found(facts, i)} (its {what} differs); use the platform of this GPU, or platform=local "
                   "to describe it")
    if not facts.cuda_devices:
        out.append(f"platform {platform.name!r} expects {declared(platform)}, but this machine has no "
                   "accelerator (CPU only); use platform=local to describe it")
    return out


def tpu_mismatches(platform, facts) -> list[str]:
    """The TPU type the runtime reports against the platform's `accelerator_type`."""
    want = platform.accelerator_type
    if not want or not facts.tpu_chips:
        return []
    got = facts.tpu_accelerator_type
    if got is None:
        return [f"platform {platform.name!r} expects {declared(platform)}, but the TPU runtime reports no "
                f"accelerator type here ({facts.tpu_chips} chip(s) seen; $TPU_ACCELERATOR_TYPE unset and the "
                "VM's metadata unreadable); set TPU_ACCELERATOR_TYPE to this VM's type, or use "
                "platform=local"]
    if got.strip().lower() != want.strip().lower():
        return [f"platform {platform.name!r} expects {declared(platform)}, but this TPU VM is {got} (as its "
                "runtime reports it); use the platform of that type, or platform=local to describe it"]
    return []
