"""What every parallel strategy answers, and `single` (one device, nothing to do)."""

from __future__ import annotations

from xbench.parallel import get
from xbench.rank import RankContext


class Strategy:
    """One rank's view of a data-parallel strategy; built once by `parallel.create`.

    The defaults are those of one device: the model, optimizer and batch unchanged, the device's own
    sync, and every warm-up verdict its own.
    """

    name = "base"
    # How wrap makes the model's blocks recompute their activations in backward (activation checkpointing),
    # or None: bench/flops.py applies it to its meta copy to count the hardware FLOPs.
    recompute_blocks = None
    # True: wrap takes a model built on the meta device (one with init_parameters) and materialise then
    # allocates and initialises what this rank keeps (FSDP: its shards), never the whole model per rank.
    builds_on_meta = False

    def __init__(self, cfg, ctx: RankContext):
        self.cfg, self.ctx = cfg, ctx
        self.info = get(cfg.name)

    @classmethod
    def rules(cls, cfg, facts, dev: str) -> list[str]:
        """Why `cfg` (the whole config) cannot run here with this strategy; `dev` is the device type."""
        return []

    @property
    def devices_per_rank(self) -> int:
        return self.ctx.devices_per_rank

    def wrap(self, model, device):
        """The model as this rank trains it."""
        return model

    def materialise(self, model, device) -> None:
        """After wrap, for a model built on the meta device (builds_on_meta): allocate and initialise it."""
        raise NotImplementedError(f"parallel={self.cfg.name} builds whole models, not on the meta device")

    def wrap_optimizer(self, optimizer):
        """The optimizer the step calls."""
        return optimizer

    def place_batch(self, inputs, targets):
        """A batch as the strategy's devices take it."""
        return inputs, targets

    def feed_share(self, batch: int) -> tuple[int, int, int]:
        """(reader, readers, batch) of this rank's DataLoader over real data, `batch` being this rank's
        samples per step: its own shard (one process per rank); multi-host SPMD: its host's share
        (xla_spmd)."""
        return self.ctx.rank, self.ctx.world_size, batch

    def feed_sharding(self):
        """How the data feed transfers real batches to the device (XLA SPMD: split over the mesh); None:
        whole."""
        return None

    def sync(self, device_sync):
        """The loop's synchronisation: the device's, plus whatever the strategy needs at window edges."""
        return device_sync

    def agree(self, device):
        """ok -> whether every rank says ok (the warm-up's exit decision)."""
        return lambda ok: ok

    def all_sum(self, values: list[float], device) -> list[float]:
        """Element-wise sum of `values` over the ranks, on every rank (evaluation counts)."""
        return list(values)

    def gather(self, obj) -> list:
        """Every rank's `obj` (picklable), in rank order, on every rank (e.g. RNG states for a checkpoint)."""
        return [obj]

    def unwrap(self, model):
        """The module itself, without the strategy's wrapper (what a checkpoint stores and loads)."""
        return model

    def rank_figures(self, model) -> dict:
        """Strategy-specific figures of one rank after training (e.g. a parameter checksum)."""
        return {}

    def state_dicts(self, module, optimizer) -> tuple[dict, dict]:
        """Model and optimizer state for a checkpoint, called on every rank (rank 0 writes it); a sharded
        strategy gathers its shards here (parallel/fsdp.py)."""
        return module.state_dict(), optimizer.state_dict()

    def load_state_dicts(self, module, optimizer, model_state: dict, optimizer_state: dict) -> None:
        """A checkpoint's states into this rank's model and optimizer (a sharded strategy keeps its shard)."""
        module.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)


class Single(Strategy):
    name = "single"
