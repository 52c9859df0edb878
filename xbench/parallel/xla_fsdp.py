"""Fully sharded data parallelism with torch-xla SPMD: one process, one program, a 2-D (data, fsdp) mesh.

As parallel=xla_spmd (the launcher switches the process to SPMD with `parallel.world_size` devices), but
the parameters are annotated too: each one whose dim 0 divides is split along it over the mesh's `fsdp`
axis (runtimes/xla.py `shard_parameters`), so a device keeps 1/fsdp of it, and of its gradient and
optimizer state (XLA propagates the sharding to what is computed from it). Batches are split over
both axes (every device gets its own samples), and so is the output of every transformer block and of
the model (`shard_outputs`, FSDPv2's shard_output): XLA's SPMD partitioner then gathers each weight
before use and reduces each gradient to its shard, and never moves activations. Without the block
outputs it computed each block's output projection tensor-parallel (the sharded weight kept in place,
the global batch's activations all-gathered to it, all-to-alls): tests/test_xla_fsdp_hlo.py reads the
partitioned HLO. A gradient leaves the partitioner as an all-reduce sliced to the shard, which XLA's GPU
compiler rewrites into a reduce-scatter (its ReduceScatterCreator pass); XLA:CPU's pipeline has no such
pass, so none shows here. `parallel.fsdp_size` (null: every device; config/parallel.py XlaFsdpOptions) shards
within groups of that many devices and replicates over `world_size / fsdp_size` groups (the mesh must divide
the devices). On a TPU slice and on XLA:CPU devices here alike.

All torch_xla calls go through xbench.runtimes.xla (the only module that imports it).
"""

from __future__ import annotations

from xbench.parallel.fit import fit_reasons
from xbench.parallel.xla_spmd import XlaSpmd
from xbench.runtimes import xla_lazy as rx  # torch_xla at the first use, not when compat asks the rules


class XlaFsdp(XlaSpmd):
    name = "xla_fsdp"

    @classmethod
    def rules(cls, cfg, facts, dev):
        out = super().rules(cfg, facts, dev)
        p = cfg.parallel
        f = p.fsdp_size  # its range: config/parallel.py; here: it must divide the devices
        if f is not None and f >= 1 and p.world_size % f:
            out.append(
                f"parallel.fsdp_size={f!r} does not divide parallel.world_size={p.world_size}: the "
                f"mesh is (world_size / fsdp_size) data x fsdp_size devices; allowed: "
                f"{', '.join(str(d) for d in range(1, p.world_size + 1) if p.world_size % d == 0)} or null"
            )
        if not out:
            out += fit_reasons(cfg, facts, dev, f if (f or 0) >= 1 else p.world_size, p.name)
        return out

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.sharded, self.total, self.sharded_outputs, self.optimizer = 0, 0, 0, None

    def wrap(self, model, device):
        if device.type != "xla":
            raise RuntimeError(
                f"parallel=xla_fsdp runs on XLA devices (runtime=xla / xla_compile), not {device}"
            )
        f = self.cfg.fsdp_size or self.ctx.devices_per_rank
        self.mesh = rx.fsdp_mesh(f)
        self.sharded, self.total = rx.shard_parameters(model, self.mesh), sum(1 for _ in model.parameters())
        from xbench.parallel.fsdp import transformer_blocks  # imports torch: not when compat asks the rules

        # FSDP, not tensor parallelism: each block's output (and the model's) split over the batch, as
        # FSDPv2's shard_output does; the partitioner then gathers the weights, never the activations.
        self.sharded_outputs = rx.shard_outputs([*transformer_blocks(model), model], self.mesh)
        return model

    def wrap_optimizer(self, optimizer):
        self.optimizer = optimizer  # its state is sharded like the parameters: read per device at the end
        return optimizer

    def rank_figures(self, model) -> dict:
        return {**super().rank_figures(model), "xla_fsdp_sharded_params": self.sharded,
                "xla_fsdp_params": self.total, "xla_fsdp_batch_sharded_outputs": self.sharded_outputs,
                "xla_fsdp_param_sharding": rx.sharding_spec(next(iter(model.parameters()))),
                **rx.device_state_memory(model, self.optimizer)}
