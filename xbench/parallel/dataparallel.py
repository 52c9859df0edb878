"""nn.DataParallel: one process scatters each batch over `parallel.world_size` GPUs and gathers
the outputs on GPU 0 (the naive wrapper whose imbalance and overhead the DataParallel study shows).

Without CUDA, nn.DataParallel silently calls the module on one device: its rule stops such runs
before any work, and wrap() refuses as a second line of defence.
"""

from __future__ import annotations

import torch
from torch import nn

from xbench.parallel.base import Strategy


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
            return ["parallel=dataparallel needs parallel.world_size >= 2 (GPUs); use parallel=single for one"]
        return []

    def wrap(self, model, device):
        n = self.devices_per_rank
        if device.type != "cuda" or torch.cuda.device_count() < n:
            raise RuntimeError(f"parallel=dataparallel needs {n} CUDA GPUs, "
                               f"{torch.cuda.device_count()} visible (device {device})")
        return nn.DataParallel(model, device_ids=list(range(n)), output_device=0)
