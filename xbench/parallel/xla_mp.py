"""torch-xla multi-replica data parallelism: the classic TPU recipe (`torch_xla.launch` starts one
replica per device: a process per chip on TPU v4+, threads of one process on TPU v2/v3 and on PJRT
CPU; gradients all-reduced by `xm.optimizer_step`). Launched by launch/xla.py.

Each replica seeds and builds its model under one process-wide lock (bench/worker.py): replicas that
are threads of one process share the global RNG, and drawing from it in turn gave each replica, replica
0 included, different weights from run to run. Replica 0's parameters and buffers are then broadcast to
every replica (a guard: they are equal already). `params_sha256_built` (as built),
`params_sha256_at_start` (after the broadcast) and `params_sha256` (at the end) are recorded per replica. On
PJRT CPU the replicas are threads over `CPU_NUM_DEVICES` devices (runtimes/xla.py: serialise_graph_launches
says what XLA:CPU's collectives need there).
"""

from __future__ import annotations

import pickle

from xbench.parallel.base import Strategy
from xbench.parallel.ddp import params_sha256
from xbench.parallel.xla_spmd import xla_rules
from xbench.runtimes import xla_lazy as rx  # torch_xla at the first use, not when compat asks the rules


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
        return xla_rules(cfg, facts, dev)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.params_at_start = self.params_built = None

    def wrap(self, model, device):
        if device.type != "xla":
            raise RuntimeError(
                f"parallel=xla_mp runs on XLA devices (runtime=xla / xla_compile), not {device}"
            )
        # as built from bench.seed (equal on every replica: worker's lock)
        self.params_built = params_sha256(model)
        rx.broadcast_parameters(model)  # every replica starts from replica 0's weights
        self.params_at_start = params_sha256(model)
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
        return {"params_sha256": params_sha256(model), "params_sha256_at_start": self.params_at_start,
                "params_sha256_built": self.params_built,
                "xla_world_size": world, "xla_global_ordinal": ordinal,
                "xla_local_ordinal": local}
