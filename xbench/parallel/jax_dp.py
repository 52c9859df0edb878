"""Data parallel over a JAX mesh (runtime=torchax): one process, a 1-D `data` mesh over `parallel.world_size`
JAX devices, the batch split along dim 0 over it, the parameters (and optimizer state) replicated; XLA's SPMD
partitioner adds the gradient all-reduce. The step is the one-device step: a global batch of `data.batch_size
x devices` trains as it would on one device (parallel/xla_spmd.py is torch-xla's counterpart).

`wrap` hands the runtime the mesh with the model (runtimes/torchax.OnMesh); the runtime puts each batch on the
mesh split and the state replicated. JAX reads its CPU device count once, when its backend starts: on a CPU
the process must start with XLA_FLAGS=--xla_force_host_platform_device_count=<world_size> (checked before any
work).
"""

from __future__ import annotations

from xbench.parallel.base import Strategy
from xbench.runtimes import torchax as rt


class JaxDataParallel(Strategy):
    name = "jax_dp"

    @classmethod
    def rules(cls, cfg, facts, dev):
        out, n = [], cfg.parallel.world_size
        if cfg.runtime.name != "torchax":
            out.append(f"parallel=jax_dp splits the batch over a JAX mesh, which only runtime=torchax drives "
                       f"(asked: runtime={cfg.runtime.name})")
        on_cpu = not facts.cuda_count and not facts.tpu_chips  # JAX's CPU backend: its device count is a flag
        if on_cpu and n > rt.forced_host_devices():
            out.append(
                f"parallel=jax_dp with parallel.world_size={n} on the CPU needs {n} JAX host devices: start "
                f"xbench with XLA_FLAGS=--xla_force_host_platform_device_count={n} in its environment (JAX "
                "reads it once, when its CPU backend starts)"
            )
        return out

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.mesh = None

    def wrap(self, model, device):
        self.mesh = rt.data_mesh(self.devices_per_rank)
        return rt.OnMesh(model, self.mesh)

    def unwrap(self, model):
        return model.module if isinstance(model, rt.OnMesh) else model

    def rank_figures(self, model) -> dict:
        return {
            "jax_mesh_shape": list(self.mesh.devices.shape),
            "jax_mesh_axis_names": list(self.mesh.axis_names),
            "jax_mesh_device_ids": [int(d.id) for d in self.mesh.devices.flat],
        }
