"""torch-xla SPMD data parallelism: one process, one program, a 1-D `data` mesh over the XLA devices.

The launcher (launch/xla.py) has already switched the process to SPMD (`xr.use_spmd()` before any XLA
tensor) with the device count the config asks for. Here the batch is annotated as split along dim 0
over the mesh; parameters stay unannotated, i.e. replicated, and XLA's SPMD partitioner inserts the
gradient all-reduce itself. Real data is transferred already split (`feed_sharding`, through
MpDeviceLoader): each device receives only its shard; on a multi-host slice each host reads only its
share of every global batch (`feed_share`). The model code and the step are unchanged: a global batch of
`data.batch_size x devices` trains exactly as on one device.

All torch_xla calls go through xbench.runtimes.xla (the only module that imports it).
"""

from __future__ import annotations

from xbench import runtimes
from xbench.parallel.base import Strategy
from xbench.runtimes import xla_lazy as rx  # torch_xla at the first use, not when compat asks the rules


def xla_rules(cfg, facts, dev: str) -> list[str]:
    """Both XLA strategies drive XLA devices, which only the XLA runtimes can."""
    if not cfg.runtime.name.startswith("xla"):
        return [f"parallel={cfg.parallel.name} drives XLA devices: use runtime=xla or runtime=xla_compile "
                f"(asked: runtime={cfg.runtime.name})"]
    return []


class XlaSpmd(Strategy):
    name = "xla_spmd"

    @classmethod
    def rules(cls, cfg, facts, dev):
        """On a TPU the mesh spans every core of the slice: the run must be billed for exactly that many."""
        out = xla_rules(cfg, facts, dev)
        p, declared = cfg.parallel, cfg.platform.device_count
        if runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device) == "TPU" and declared \
                and p.world_size != declared:
            out.append(
                f"parallel.world_size={p.world_size}, but the SPMD mesh on platform {cfg.platform.name!r} "
                f"spans all its {declared} TPU cores (the slice that is billed): use "
                f"parallel.world_size={declared}, or the platform of a slice with {p.world_size} cores"
            )
        return out

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.mesh = None
        self.input_sharding = None

    def wrap(self, model, device):
        if device.type != "xla":
            raise RuntimeError(
                f"parallel=xla_spmd runs on XLA devices (runtime=xla / xla_compile), not {device}"
            )
        self.mesh = rx.data_mesh()
        return model  # replicated parameters: nothing to wrap

    def feed_share(self, batch: int) -> tuple[int, int, int]:
        """This host's share of each global batch of `batch` samples: on a multi-host slice every host runs
        this one rank, and reads only its 1/process_count of the data (data/feed.py `host_share`)."""
        from xbench.data import feed  # imports torch: not when compat asks the rules

        return feed.host_share(batch, *rx.process())

    def feed_sharding(self):
        """Real data arrives split over the mesh at transfer time (MpDeviceLoader's input_sharding): each
        device receives only its shard, instead of the whole batch replicated and then resharded. The batch
        a host feeds is its own rows of the global batch (`minibatch`: torch-xla assembles the global batch
        from every host's; on one host, that is the whole batch)."""
        return rx.batch_sharding(self.mesh, minibatch=True)

    def place_batch(self, inputs, targets):
        spec = rx.sharding_spec(inputs)
        # Unannotated: the synthetic pool (resharded once, before timing), train-to-target's batches, or a
        # fed batch cast by `prepare` (an IR node over sharded data: annotating it transfers nothing).
        if not spec:
            inputs, targets = rx.shard_batch(inputs, self.mesh), rx.shard_batch(targets, self.mesh)
        # else: the feed transferred it sharded (feed_sharding); marking it again would reshard it
        if self.input_sharding is None:  # read once for the record: this runs every step of a timed window
            self.input_sharding = spec or rx.sharding_spec(inputs)
        return inputs, targets

    def rank_figures(self, model) -> dict:
        return {
            "xla_spmd_mesh_shape": list(self.mesh.mesh_shape),
            "xla_spmd_axis_names": list(self.mesh.axis_names),
            "xla_spmd_input_sharding": self.input_sharding,
        }
