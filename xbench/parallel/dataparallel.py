"""nn.DataParallel: one process scatters each batch over `parallel.world_size` GPUs and gathers
the outputs on GPU 0 (the naive wrapper whose imbalance and overhead the DataParallel study shows).

Without CUDA, nn.DataParallel silently calls the module on one device: its rule stops such runs
before any work, and wrap() refuses as a second line of defence.

Each replica runs in a thread of its own, and autocast's dtype is thread-local: torch's parallel_apply
re-enters CUDA autocast there without it (the default is fp16), so the replicas are called under the
step's own autocast state instead (precision.InCallersAutocast).
"""

from __future__ import annotations

import torch
from torch import nn

from xbench.parallel.base import Strategy
from xbench.precision import InCallersAutocast


class AutocastDataParallel(nn.DataParallel):
    """nn.DataParallel whose replicas compute under the caller's autocast dtype (module doc)."""

    autocast_device = "cuda"
    replica_autocast_dtype: str | None = None  # what the last step's replicas computed in (figures)

    def parallel_apply(self, replicas, inputs, kwargs):
        calls = [InCallersAutocast(r, self.autocast_device) for r in replicas]
        self.replica_autocast_dtype = str(calls[0].dtype).removeprefix("torch.") if calls[0].enabled else None
        return super().parallel_apply(calls, inputs, kwargs)


class DataParallel(Strategy):
    name = "dataparallel"

    @classmethod
    def rules(cls, cfg, facts, dev):
        p = cfg.parallel
        if dev != "cuda" or facts.cuda_count < max(2, p.world_size):
            return [f"parallel=dataparallel measures nn.DataParallel over {max(2, p.world_size)} CUDA GPUs "
                    f"in one process, but this run has {facts.cuda_count if dev == 'cuda' else 0} "
                    f"(device {dev}). Without at least 2 GPUs it would silently run one device under "
                    "another name (nn.DataParallel without CUDA just calls the module), so the "
                    "comparison would be meaningless. Use parallel=single or parallel=ddp here"]
        if p.world_size < 2:
            return [
                "parallel=dataparallel needs parallel.world_size >= 2 (GPUs); use parallel=single for one"
            ]
        return []

    def wrap(self, model, device):
        n = self.devices_per_rank
        if device.type != "cuda" or torch.cuda.device_count() < n:
            raise RuntimeError(f"parallel=dataparallel needs {n} CUDA GPUs, "
                               f"{torch.cuda.device_count()} visible (device {device})")
        return AutocastDataParallel(model, device_ids=list(range(n)), output_device=0)

    def rank_figures(self, model) -> dict:
        dtype = getattr(model, "replica_autocast_dtype", None)
        return {"replica_autocast_dtype": dtype} if dtype else {}
