"""Parallel strategies: how the model is replicated and which launcher starts the ranks.

A strategy is a small class (`base.Strategy`) built once per rank from its config section and the
rank's facts, then asked everything (wrap the model, place a batch, synchronise, agree, figures).
Its registry line here says, without importing torch, which launcher starts its ranks (`inline`:
this process is the only rank; `torchrun`: one process per rank; `xla`: a fresh SPMD process or
torch_xla.launch's processes), whether one process drives several devices, and which optional
packages it needs. Data parallel throughout: every device sees `data.batch_size` samples a step.

Add a strategy: a `Strategy` subclass in its own module (with its compat `rules`), one line in
STRATEGIES, and `conf/parallel/<name>.yaml`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    launcher: str  # inline | torchrun | xla
    multi_process: bool  # one process per rank (its ranks must agree on one record writer)
    impl: str  # "module:Class"
    devices_in_process: bool = False  # one process drives parallel.world_size devices (DataParallel, SPMD)
    requires: tuple[str, ...] = ()  # importable packages it needs (a compat reason names what is missing)


STRATEGIES: dict[str, StrategyInfo] = {
    "single": StrategyInfo("single", "inline", False, "xbench.parallel.base:Single"),
    "ddp": StrategyInfo("ddp", "torchrun", True, "xbench.parallel.ddp:DDP"),
    "dataparallel": StrategyInfo("dataparallel", "inline", False, "xbench.parallel.dataparallel:DataParallel",
                                 devices_in_process=True),
    "xla_spmd": StrategyInfo("xla_spmd", "xla", False, "xbench.parallel.xla_spmd:XlaSpmd",
                             devices_in_process=True, requires=("torch_xla",)),
    "xla_fsdp": StrategyInfo("xla_fsdp", "xla", False, "xbench.parallel.xla_fsdp:XlaFsdp",
                             devices_in_process=True, requires=("torch_xla",)),
    "xla_mp": StrategyInfo("xla_mp", "xla", True, "xbench.parallel.xla_mp:XlaMultiProcess",
                           requires=("torch_xla",)),
    "accelerate": StrategyInfo("accelerate", "torchrun", True, "xbench.parallel.accelerate:AccelerateDDP",
                               requires=("accelerate",)),
    "fsdp": StrategyInfo("fsdp", "torchrun", True, "xbench.parallel.fsdp:FSDP"),
    "jax_dp": StrategyInfo("jax_dp", "inline", False, "xbench.parallel.jax_dp:JaxDataParallel",
                           devices_in_process=True),  # runtime=torchax checks torchax/jax/optax
}


def get(name: str) -> StrategyInfo:
    if name not in STRATEGIES:
        raise ValueError(f"unknown parallel strategy {name!r}; allowed: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def strategy_class(name: str):
    """The Strategy subclass of `name` (imports its module)."""
    module, cls = get(name).impl.split(":")
    return getattr(importlib.import_module(module), cls)


def create(cfg, ctx):
    """This rank's strategy, resolved once: `cfg` is the parallel section, `ctx` the RankContext."""
    return strategy_class(cfg.name)(cfg, ctx)
