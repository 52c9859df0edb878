"""Runtimes: how a training step is executed (eager, torch.compile, XLA, Accelerate).

Each runtime is a small class with one job: turn (model, optimizer, task, precision) into a step
callable, and say how to synchronise its device and count its compilations. The measurement loop
is the same for all of them. Modules are imported lazily so that `torch_xla` is imported only when
an XLA runtime is asked for (runtimes/xla.py is the only module that imports it).
"""

from __future__ import annotations

import contextlib
import importlib
import os

from xbench.extras import installed, torch_xla_loaded

# name -> ("module:Class", packages it needs beyond torch). The packages are judged from the host's
# facts before the module is imported (runtimes/xla.py imports torch_xla at import time).
RUNTIMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "eager": ("xbench.runtimes.eager:EagerRuntime", ()),
    "compile": ("xbench.runtimes.compiled:CompiledRuntime", ()),
    "xla": ("xbench.runtimes.xla:XlaRuntime", ("torch_xla",)),
    "xla_compile": ("xbench.runtimes.xla:XlaCompileRuntime", ("torch_xla",)),
    "accelerate": ("xbench.runtimes.accelerate:AccelerateRuntime", ("accelerate",)),
    # torchax, jax and optax: checked by its own rules (no xbench extra installs them; its module
    # imports none)
    "torchax": ("xbench.runtimes.torchax:TorchaxRuntime", ()),
}


def requires(name: str) -> tuple[str, ...]:
    return RUNTIMES[name][1]


# Runtimes whose module imports what compat must not (torch_xla writes PJRT_DEVICE at import): their compat
# rules live in a light module, and compat asks `rules(name)`, never the class.
LIGHT_RULES = {"xla": "xbench.runtimes.xla_rules:xla", "xla_compile": "xbench.runtimes.xla_rules:xla_compile"}
XLA_MODULE = "xbench.runtimes.xla"


def runtime_class(name: str):
    """The Runtime subclass of `name` (imports its module; runtimes/xla.py through xla_module())."""
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {name!r}; allowed: {', '.join(RUNTIMES)}")
    module, cls = RUNTIMES[name][0].split(":")
    return getattr(xla_module() if module == XLA_MODULE else importlib.import_module(module), cls)


def rules(name: str):
    """`name`'s compat rules, (cfg, facts, dev) -> reasons, without importing torch_xla for the XLA runtimes
    (the same checks as the class's `rules`: the base Runtime rule refuses nothing for a runtime that drives
    XLA)."""
    if name in LIGHT_RULES:
        module, fn = LIGHT_RULES[name].split(":")
        return getattr(importlib.import_module(module), fn)
    return runtime_class(name).rules


def xla_module():
    """The one door to torch_xla (xbench/extras.py says why it stays out until an XLA run is about to use it):
    runtimes/xla.py, imported at the first call, with PJRT_DEVICE set first when unset (PJRT reads it once, at
    torch_xla's import): the only place xbench itself sets it in its own process, when XLA is about to run,
    never as a side effect of importing a module. A launched XLA process applies its environment first."""
    if not torch_xla_loaded():
        os.environ.setdefault("PJRT_DEVICE", default_pjrt_device())
    return importlib.import_module(XLA_MODULE)


class _LazyXla:
    """runtimes/xla.py behind an attribute read: the XLA strategies name it at module level, so that importing
    them (compat asking their rules) imports no torch_xla; the first use imports it through xla_module()."""

    def __getattr__(self, name: str):
        return getattr(xla_module(), name)


xla_lazy = _LazyXla()


def create(cfg, device_type: str, local_rank: int = 0):
    return runtime_class(cfg.name)(cfg, device_type, local_rank)


def default_pjrt_device(tpu_chips: int | None = None, platform_device: str | None = None) -> str:
    """PJRT device torch-xla will use: $PJRT_DEVICE, else TPU on a TPU VM (accelerator device nodes
    present; `tpu_chips` when the caller already counted them), else CUDA when the platform declares
    CUDA GPUs (an XLA run there must not fall back to the CPU while the GPUs are billed), else CPU.
    No torch_xla import."""
    if os.environ.get("PJRT_DEVICE"):
        return os.environ["PJRT_DEVICE"]
    if tpu_chips is None:
        from xbench.platforms.detect import tpu_chips as count

        tpu_chips = count()
    if tpu_chips:
        return "TPU"
    return "CUDA" if platform_device == "cuda" else "CPU"


XLA_PLUGINS = {"CUDA": "torch_xla_cuda_plugin"}  # PJRT devices whose client is a separate package


def xla_environment(cfg, tpu_chips: int | None = None) -> dict[str, str]:
    """What the XLA processes need in their environment before torch_xla is imported: the PJRT
    device, and for SPMD exactly `parallel.world_size` devices (PJRT reads the count once, at start)."""
    env = {"PJRT_DEVICE": default_pjrt_device(tpu_chips, cfg.platform.device)}
    n = str(cfg.parallel.world_size)
    if cfg.parallel.name in ("xla_spmd", "xla_fsdp") and env["PJRT_DEVICE"] == "CPU":
        env["CPU_NUM_DEVICES"] = n
    if cfg.parallel.name in ("xla_spmd", "xla_fsdp", "xla_mp") and env["PJRT_DEVICE"] == "CUDA":
        env["GPU_NUM_DEVICES"] = n
        if "CUDA_VISIBLE_DEVICES" not in os.environ:  # the mesh spans exactly the GPUs asked for
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(cfg.parallel.world_size)))
    return env


def runnable_here(names: tuple[str, ...], script: str) -> tuple[tuple[str, ...], str | None]:
    """The benchmark runtimes of `names` this environment can run, and why `xla` is left out (None when it
    is not): torch-xla's last release needs torch 2.9.0, so it lives in .venv-xla, not beside the newest
    torch."""
    if "xla" not in names or installed("torch_xla"):
        return names, None
    return (tuple(n for n in names if n != "xla"),
            f"no torch-xla in this environment; `.venv-xla/bin/python {script} --runtime xla` runs it "
            "(make install-xla)")


def preload_xla(mentions: str) -> None:
    """Import torch_xla now if an XLA runtime will run later in this process (a sweep, a parity pair).

    The XLA device must exist before the process's first backward pass: the autograd engine sizes
    its per-device queues once, and an XLA backward after an eager one then fails an internal assert
    (importing torch_xla is not enough; creating the device is).
    """
    if "xla" in mentions and installed("torch_xla"):
        # A broken torch-xla must not sink the other points; the XLA run itself reports it.
        with contextlib.suppress(Exception):
            xla_module().init_device()
