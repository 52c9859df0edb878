"""Real data into the loop: a DataLoader per rank and a `next_batch` that puts batches on the device.

Each rank reads its own shard (DistributedSampler with rank/world_size when there is more than one
rank), epochs cycle without end (the loop decides how many steps it takes), and the copy to the device
is non-blocking when memory is pinned. The loop times the call, so time spent waiting for the loader
shows as `data_wait_s` / `data_wait_fraction`.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


def make_loader(dataset, data, rank: int, world_size: int, seed: int, collate=None,
                batch_size: int | None = None) -> DataLoader:
    """`batch_size`: samples per batch of this rank (default `data.batch_size`; a rank driving several
    devices takes one batch for all of them)."""
    batch_size = batch_size or data.batch_size
    if world_size > 1:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                                     drop_last=True)
    else:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    if len(dataset) // world_size < batch_size:
        raise ValueError(f"data set {data.path} has {len(dataset)} training samples, fewer than one batch of "
                         f"{batch_size} per rank over {world_size} rank(s)")
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,  # fixed shapes
                      num_workers=data.num_workers, pin_memory=data.pin_memory, collate_fn=collate,
                      persistent_workers=data.num_workers > 0)


def device_feed(loader: DataLoader, device, prepare=None):
    """Return next_batch() -> (inputs, targets) on `device`, cycling epochs; `prepare` adjusts the
    inputs once on the device (dtype, memory format)."""
    non_blocking = bool(loader.pin_memory) and device.type == "cuda"
    state = {"epoch": 0, "it": iter(loader)}

    def next_batch():
        try:
            inputs, targets = next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(state["epoch"])  # a new shuffle per epoch on every rank
            state["it"] = iter(loader)
            inputs, targets = next(state["it"])
        inputs = inputs.to(device, non_blocking=non_blocking)
        targets = targets.to(device, non_blocking=non_blocking)
        return (prepare(inputs) if prepare else inputs), targets

    return next_batch
