"""Parallel strategies: how the model is replicated and which launcher starts the ranks.

A strategy is one registry line: the launcher that starts its ranks (`inline`: this process is the
only rank; `torchrun`: one process per rank through torch.distributed's elastic launcher), whether
one process drives several devices (`nn.DataParallel`, XLA SPMD), and the module that wraps the
model for a rank. Data parallel throughout: every device sees `data.batch_size` samples a step.

Add a strategy: a module with `wrap(cfg, model, device)` (and optionally `sync(cfg, device_sync)`,
`place_batch(cfg, inputs, targets)`, `wrap_optimizer(cfg, optimizer)` and `rank_figures(cfg, model)`),
one line in STRATEGIES, a `conf/parallel/<name>.yaml` and, where it cannot run everywhere, a compat rule.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    launcher: str  # inline | torchrun | xla (a fresh SPMD process, or torch_xla.launch)
    multi_process: bool  # one process per rank (its ranks must agree on one record writer)
    module: str | None = None  # module with wrap() / sync() / rank_figures(); None: model unchanged
    devices_in_process: bool = False  # one process drives parallel.world_size devices (DataParallel, SPMD)


STRATEGIES: dict[str, Strategy] = {
    "single": Strategy("single", "inline", False),
    "ddp": Strategy("ddp", "torchrun", True, "xbench.parallel.ddp"),
    "dataparallel": Strategy("dataparallel", "inline", False, "xbench.parallel.dataparallel",
                             devices_in_process=True),
    "xla_spmd": Strategy("xla_spmd", "xla", False, "xbench.parallel.xla_spmd", devices_in_process=True),
    "xla_mp": Strategy("xla_mp", "xla", True, "xbench.parallel.xla_mp"),
    "accelerate": Strategy("accelerate", "torchrun", True, "xbench.parallel.accelerate"),
}


def get(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown parallel strategy {name!r}; allowed: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def _module(cfg):
    s = get(cfg.name)
    return importlib.import_module(s.module) if s.module else None


def devices_per_rank(cfg) -> int:
    """Devices one rank's process drives: world_size for DataParallel, else 1."""
    return cfg.world_size if get(cfg.name).devices_in_process else 1


def wrap(cfg, model, device):
    """The model as this rank trains it (single: unchanged)."""
    mod = _module(cfg)
    return mod.wrap(cfg, model, device) if mod else model


def sync(cfg, device_sync):
    """The loop's synchronisation: the device's, plus whatever the strategy needs at window edges."""
    mod = _module(cfg)
    return mod.sync(cfg, device_sync) if mod and hasattr(mod, "sync") else device_sync


def rank_figures(cfg, model) -> dict:
    """Strategy-specific figures of one rank after training (e.g. a parameter checksum)."""
    mod = _module(cfg)
    return mod.rank_figures(cfg, model) if mod and hasattr(mod, "rank_figures") else {}


def agree(cfg, device):
    """ok -> whether every rank says ok (the warm-up's exit decision); one rank: ok itself."""
    mod = _module(cfg)
    return mod.agree(cfg, device) if mod and hasattr(mod, "agree") else (lambda ok: ok)


def place_batch(cfg, inputs, targets):
    """A batch as the strategy's devices take it (XLA SPMD: split over the mesh); else unchanged."""
    mod = _module(cfg)
    return mod.place_batch(cfg, inputs, targets) if mod and hasattr(mod, "place_batch") else (inputs, targets)


def wrap_optimizer(cfg, optimizer):
    """The optimizer the step calls (xla_mp: gradients all-reduced before stepping); else unchanged."""
    mod = _module(cfg)
    return mod.wrap_optimizer(cfg, optimizer) if mod and hasattr(mod, "wrap_optimizer") else optimizer
