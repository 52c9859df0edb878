"""nn.DataParallel: one process scatters each batch over `parallel.world_size` GPUs and gathers
the outputs on GPU 0 (the naive wrapper whose imbalance and overhead the DataParallel study shows).

Without CUDA, nn.DataParallel silently calls the module on one device: a compat rule stops such runs
before any work, and wrap() refuses as a second line of defence.
"""

from __future__ import annotations

import torch
from torch import nn


def wrap(cfg, model, device):
    if device.type != "cuda" or torch.cuda.device_count() < cfg.world_size:
        raise RuntimeError(f"parallel=dataparallel needs {cfg.world_size} CUDA GPUs, "
                           f"{torch.cuda.device_count()} visible (device {device})")
    return nn.DataParallel(model, device_ids=list(range(cfg.world_size)), output_device=0)
