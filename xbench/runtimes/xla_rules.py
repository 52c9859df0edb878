"""The XLA runtimes' compat rules, askable without importing torch_xla (runtimes/xla.py imports it, and
importing torch_xla writes PJRT_DEVICE when it is unset): compat asks these through `runtimes.rules`, and
XlaRuntime / XlaCompileRuntime's `rules` are these same functions."""

from __future__ import annotations

from importlib import metadata

from xbench.runtimes import XLA_PLUGINS, default_pjrt_device

BACKENDS = ("torch_xla", "openxla")  # runtime=xla_compile: torch_xla.compile over the step | dynamo's openxla


def _xla_version() -> str:
    try:
        return metadata.version("torch-xla")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def xla(cfg, facts, dev) -> list[str]:
    """The PJRT device must be the one the platform bills, and its client must be installed."""
    out = []
    pjrt = default_pjrt_device(facts.tpu_chips, cfg.platform.device)
    if cfg.platform.device == "cuda" and pjrt != "CUDA":
        out.append(f"platform {cfg.platform.name!r} bills CUDA GPUs, but PJRT_DEVICE={pjrt} would run XLA on "
                   f"the {pjrt}: unset PJRT_DEVICE (xbench then uses CUDA) or use a CPU platform")
    plugin = XLA_PLUGINS.get(pjrt)
    if plugin and not getattr(facts, plugin, False):
        out.append(
            f"XLA on PJRT {pjrt} needs the {plugin} package matching torch-xla {_xla_version()}, which is "
            "not installed here; torch-xla 2.9 removed XLA on NVIDIA GPUs and no plugin was published for "
            "it (the last pair: torch 2.8 + torch-xla 2.8 + torch_xla_cuda_plugin 2.8). For XLA on NVIDIA "
            "GPUs today use runtime=torchax (JAX's XLA, jax[cuda13])"
        )
    return out


def xla_compile(cfg, facts, dev) -> list[str]:
    """runtime=xla's rules, and a backend it knows."""
    out = xla(cfg, facts, dev)
    if cfg.runtime.backend not in BACKENDS:
        out.append(
            f"runtime xla_compile: backend {cfg.runtime.backend!r} is unknown; allowed: {', '.join(BACKENDS)}"
        )
    return out
