"""Runtimes: how a training step is executed (eager, torch.compile, XLA, Accelerate).

Each runtime is a small class with one job: turn (model, optimizer, task, precision) into a step
callable, and say how to synchronise its device and count its compilations. The measurement loop
is the same for all of them. Modules are imported lazily so that `torch_xla` is imported only when
an XLA runtime is asked for (runtimes/xla.py is the only module that imports it).
"""

from __future__ import annotations

import importlib

# name -> "module:Class"
RUNTIMES: dict[str, str] = {
    "eager": "xbench.runtimes.eager:EagerRuntime",
    "compile": "xbench.runtimes.compiled:CompiledRuntime",
    "xla": "xbench.runtimes.xla:XlaRuntime",
    "xla_compile": "xbench.runtimes.xla:XlaCompileRuntime",
    "accelerate": "xbench.runtimes.accelerate:AccelerateRuntime",
}


def create(cfg, device_type: str, local_rank: int = 0):
    if cfg.name not in RUNTIMES:
        raise ValueError(f"unknown runtime {cfg.name!r}; allowed: {', '.join(RUNTIMES)}")
    module, cls = RUNTIMES[cfg.name].split(":")
    return getattr(importlib.import_module(module), cls)(cfg, device_type, local_rank)
