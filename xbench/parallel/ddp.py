"""DistributedDataParallel: one process per device, gradients all-reduced in backward.

The process group is set up by the torchrun launcher (xbench/launch/torchrun.py) before the worker
builds the model; here the model is only wrapped. The loop's synchronisation adds a barrier, so every
rank opens and closes a timed window together and the common window is the real one.
"""

from __future__ import annotations

import hashlib
import inspect

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from xbench.config import DDP_OPTIONS
from xbench.parallel.base import Strategy
from xbench.parallel.fit import fit_reasons
from xbench.training.memory import SavedActivations, StateMemory


def resolve_backend(backend: str, device_type: str) -> str:
    """auto -> nccl on CUDA, gloo on the CPU."""
    if backend == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    return backend


def params_sha256(model) -> str:
    """Exact fingerprint of the parameters: equal on every rank iff the replicas are identical."""
    h = hashlib.sha256()
    with torch.no_grad():
        for p in model.parameters():
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def torchrun_rules(cfg, facts, dev: str) -> list[str]:
    """What every strategy started by the torchrun launcher needs (DDP, Accelerate)."""
    p, out = cfg.parallel, []
    if p.backend == "nccl" and dev != "cuda":
        out.append(f"parallel.backend=nccl needs CUDA GPUs; this run is on {dev}: use auto or gloo")
    if dev == "xla":
        out.append(f"parallel={p.name} runs torch.distributed over CPU/CUDA devices; for XLA devices use "
                   "an XLA strategy (parallel=xla_spmd, or parallel=xla_mp on TPU)")
    if p.nnodes >= 1 and p.world_size % p.nnodes:
        out.append(f"parallel.world_size={p.world_size} must be a multiple of parallel.nnodes={p.nnodes} "
                   "(processes in all = nodes x processes per node)")
    if p.nnodes > 1 and not p.rdzv_endpoint:
        out.append("parallel.nnodes > 1 needs parallel.rdzv_endpoint=host:port of node 0")
    per_node = p.world_size // max(1, p.nnodes)
    if dev == "cuda" and per_node > facts.cuda_count:
        out.append(f"parallel={p.name} with {per_node} processes per node needs {per_node} GPUs, "
                   f"{facts.cuda_count} visible")
    return out


class DDP(Strategy):
    name = "ddp"

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        # memory per device (training/memory.py)
        self.states, self.activations = StateMemory(), SavedActivations()

    @classmethod
    def rules(cls, cfg, facts, dev):
        out = torchrun_rules(cfg, facts, dev)
        # a whole replica per device: 1 shard (parallel=fsdp shards it)
        return out + (fit_reasons(cfg, facts, dev, 1, cfg.parallel.name) if not out else [])

    def options(self) -> dict:
        """DistributedDataParallel's keywords, from the config. torch >= 2.15 renamed `broadcast_buffers` to
        `forward_sync_buffers` and warns once per rank on the old name: the new name where DDP takes it (its
        one difference, buffers still synced once at wrap, changes nothing here: every rank builds the same
        seeded model)."""
        out = {k: getattr(self.cfg, k) for k in DDP_OPTIONS}
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
            out["forward_sync_buffers"] = out.pop("broadcast_buffers")
        return out

    def wrap(self, model, device):
        if not dist.is_initialized():
            raise RuntimeError(
                f"parallel={self.cfg.name} needs a process group; it is started by the torchrun "
                f"launcher (python -m xbench parallel={self.cfg.name}, or under torchrun)"
            )
        ids = [device.index] if device.type == "cuda" else None  # CPU/gloo: no device_ids
        self.activations.watch(model)
        return DistributedDataParallel(model, device_ids=ids, **self.options())

    def wrap_optimizer(self, optimizer):
        self.states.watch(optimizer)
        return optimizer

    def sync(self, device_sync):
        def synced():
            device_sync()
            dist.barrier()

        return synced

    def agree(self, device):
        """All ranks' verdict (MIN over a 0/1 flag): one rank's decision must not leave the others behind."""
        # NCCL: CUDA tensors; gloo: CPU
        flag_device = device if device.type == "cuda" else torch.device("cpu")

        def all_agree(ok: bool) -> bool:
            t = torch.tensor([int(ok)], device=flag_device)
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            return bool(t.item())

        return all_agree

    def all_sum(self, values: list[float], device) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def gather(self, obj) -> list:
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def unwrap(self, model):
        return model.module if isinstance(model, DistributedDataParallel) else model

    def rank_figures(self, model) -> dict:
        return {
            "params_sha256": params_sha256(model),
            "process_group_world_size": dist.get_world_size(),
            "process_group_backend": dist.get_backend(),
            **ddp_figures(model),
            **self.states.figures(),
            **self.activations.figures(),
        }


def ddp_figures(model) -> dict:
    """The options in force, read back from the DistributedDataParallel object itself (ddp_*)."""
    if not isinstance(model, DistributedDataParallel):
        return {}
    # every option of config.DDP_OPTIONS, so one added there is recorded too; the bucket cap is kept in bytes
    return {f"ddp_{k}": model.bucket_bytes_cap / 2**20 if k == "bucket_cap_mb" else getattr(model, k)
            for k in DDP_OPTIONS}
