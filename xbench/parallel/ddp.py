"""DistributedDataParallel: one process per device, gradients all-reduced in backward.

The process group is set up by the torchrun launcher (xbench/launch/torchrun.py) before the worker
builds the model; here the model is only wrapped. The loop's synchronisation adds a barrier, so every
rank opens and closes a timed window together and the common window is the real one.
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def resolve_backend(backend: str, device_type: str) -> str:
    """auto -> nccl on CUDA, gloo on the CPU."""
    if backend == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    return backend


def wrap(cfg, model, device):
    if not dist.is_initialized():
        raise RuntimeError("parallel=ddp needs a process group; it is started by the torchrun launcher "
                           "(python -m xbench parallel=ddp, or under torchrun)")
    ids = [device.index] if device.type == "cuda" else None  # CPU/gloo: no device_ids
    return DistributedDataParallel(model, device_ids=ids)


def sync(cfg, device_sync):
    def synced():
        device_sync()
        dist.barrier()

    return synced


def agree(cfg, device):
    """All ranks' verdict (MIN over a 0/1 flag): one rank's warm-up decision must not leave the others behind."""
    flag_device = device if device.type == "cuda" else torch.device("cpu")  # NCCL: CUDA tensors; gloo: CPU

    def all_agree(ok: bool) -> bool:
        t = torch.tensor([int(ok)], device=flag_device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    return all_agree


def params_sha256(model) -> str:
    """Exact fingerprint of the parameters: equal on every rank iff the replicas are identical."""
    h = hashlib.sha256()
    with torch.no_grad():
        for p in model.parameters():
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def rank_figures(cfg, model) -> dict:
    return {
        "params_sha256": params_sha256(model),
        "process_group_world_size": dist.get_world_size(),
        "process_group_backend": dist.get_backend(),
    }
