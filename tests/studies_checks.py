"""The studies' manifest checks that only the tests use (moved out of xbench.studies, which ships them no longer):
a sweep's points against its `expect`, a platform's price against the devices it declares, and the host a
platform describes (HostFacts keyword arguments, for compat checks of a machine that is not this one)."""

from __future__ import annotations

from xbench.studies import FACTS, cores_per_chip


def mismatches(got: list[dict], expect: dict) -> list[str]:
    """Where the sweep's points differ from `expect`: a list value is the set of values over the points,
    a scalar is every point's value (numbers to 1e-3 relative)."""
    out = []
    for key, want in expect.items():
        if key not in FACTS:
            out.append(f"expect names {key!r}, which facts() does not give; known: {', '.join(FACTS)}")
            continue
        values = [f[key] for f in got]
        if isinstance(want, list):
            seen = sorted({_norm(v) for v in values}, key=str)
            if seen != sorted({_norm(v) for v in want}, key=str):
                out.append(f"{key}: the points have {seen}, expected {want}")
        elif any(_norm(v) != _norm(want) for v in values):
            out.append(f"{key}: the points have {sorted({_norm(v) for v in values}, key=str)}, expected {want}")
    return out


def _norm(v):
    return round(float(v), 4) if isinstance(v, float) else v


def platform_problems(p: dict) -> list[str]:
    """Does the platform's price bill exactly the devices it declares? Per-chip prices x cores per chip
    = device_count; per-vCPU prices = cpu_vcpus; a priced accelerator says how many devices it has."""
    out, name = [], p.get("name")
    for c in p.get("price") or []:
        if c.get("per") == "chip" and p.get("device_count") != int(c.get("count", 1)) * cores_per_chip(p.get("accelerator")):
            out.append(f"platform {name}: component {c.get('name')} bills {c.get('count', 1)} chips "
                       f"(x {cores_per_chip(p.get('accelerator'))} cores), but device_count is {p.get('device_count')}")
        if c.get("per") == "vcpu" and p.get("cpu_vcpus") != int(c.get("count", 1)):
            out.append(f"platform {name}: component {c.get('name')} bills {c.get('count', 1)} vCPUs, "
                       f"but cpu_vcpus is {p.get('cpu_vcpus')}")
    if p.get("price") and p.get("device") in ("cuda", "xla") and not p.get("device_count"):
        out.append(f"platform {name}: priced {p.get('device')} platform without device_count")
    if p.get("price") and p.get("device") == "cpu" and not p.get("cpu_vcpus"):
        out.append(f"platform {name}: priced CPU platform without cpu_vcpus")
    return out


def simulated_host(p: dict) -> dict:
    """Keyword arguments for xbench.platforms.detect.HostFacts describing a machine of platform `p`: its
    GPUs by name, memory and SMs, its TPU chips and type, its vCPUs (torch-xla and Accelerate installed)."""
    n = p.get("device_count") or 1
    acc = p.get("accelerator") or ""
    out = {"torch_xla": True, "accelerate": True, "torch_version": "2.9.0", "logical_cores": p.get("cpu_vcpus") or 2,
           "cuda_devices": [], "tpu_chips": 0}
    if p.get("device") == "cuda":
        out["cuda_devices"] = [f"NVIDIA {acc or 'GPU'}"] * n
        if p.get("memory_gib"):  # the driver reports ~2% under the datasheet's figure (platforms/sku.py)
            out["cuda_memory_gib"] = [round(0.98 * p["memory_gib"], 2)] * n
        if p.get("sm_count"):
            out["cuda_sm_counts"] = [p["sm_count"]] * n
        out["torch_xla_cuda_plugin"] = True  # a GPU host set up for XLA too (study 4 runs both)
    if p.get("device") == "xla" and "tpu" in acc.lower():
        out["tpu_chips"] = max(1, n // cores_per_chip(acc))
        out["tpu_accelerator_type"] = p.get("accelerator_type")
    return out
