"""torch-xla multi-process data parallelism: the classic TPU recipe (one process per chip, started by
`torch_xla.launch`; gradients all-reduced by `xm.optimizer_step`). Launched by launch/xla.py.

Its collectives do not work on PJRT CPU (multi-process rendezvous times out), so its rule stops it
there with more than one process; one process on CPU runs the same code path with nothing to reduce.
"""

from __future__ import annotations

import pickle

from xbench import runtimes
from xbench.parallel.base import Strategy
from xbench.parallel.ddp import params_sha256
from xbench.parallel.xla_spmd import xla_rules
from xbench.runtimes import xla as rx


class AllReduceOptimizer:
    """The optimizer as the step sees it: `step()` averages gradients over the replicas first."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        rx.optimizer_step(self.optimizer)

    def __getattr__(self, name):  # zero_grad, param_groups, state, ...: the wrapped optimizer's
        return getattr(self.optimizer, name)


class XlaMultiProcess(Strategy):
    name = "xla_mp"

    @classmethod
    def rules(cls, cfg, facts, dev):
        out = xla_rules(cfg, facts, dev)
        p = cfg.parallel
        if runtimes.default_pjrt_device(facts.tpu_chips) == "CPU" and p.world_size > 1:
            out.append(f"parallel=xla_mp with {p.world_size} processes needs TPU (or GPU) collectives: on PJRT CPU "
                       "torch-xla's multi-process collectives do not work (torch_xla.launch + xm.all_reduce abort "
                       "after a rendezvous timeout), and this machine has no TPU. Use parallel=xla_spmd for XLA "
                       "data parallelism over CPU devices, or run this on a TPU VM (docs/parallel.md gives the command)")
        return out

    def wrap(self, model, device):
        if device.type != "xla":
            raise RuntimeError(f"parallel=xla_mp runs on XLA devices (runtime=xla / xla_compile), not {device}")
        return model

    def wrap_optimizer(self, optimizer):
        return AllReduceOptimizer(optimizer)

    def agree(self, device):
        return rx.all_replicas_agree

    def all_sum(self, values: list[float], device) -> list[float]:
        return [sum(col) for col in zip(*self.gather(list(values)))]

    def gather(self, obj) -> list:
        return [pickle.loads(b) for b in rx.gather_bytes("xbench_gather", pickle.dumps(obj))]

    def rank_figures(self, model) -> dict:
        ordinal, world, local = rx.replica()
        return {"params_sha256": params_sha256(model), "xla_world_size": world, "xla_global_ordinal": ordinal,
                "xla_local_ordinal": local}
