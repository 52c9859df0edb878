"""Real data into the loop: a DataLoader per rank and a `next_batch` that puts batches on the device.

Each rank reads its own shard (DistributedSampler with rank/world_size when there is more than one
rank), epochs cycle without end (the loop decides how many steps it takes). The loop times the call, so
time spent waiting for the loader shows as `data_wait_s` / `data_wait_fraction`.

On a CUDA device the host batches are pinned (`data.pin_memory`, on by default there: a copy from
pageable memory is staged through a driver buffer and blocks the host), copied with
`non_blocking=True`, and fetched one batch ahead on a side stream (`OneAhead`): batch i+1's copy
runs while step i computes, and the step's stream waits for the copy (`wait_stream`) and owns the
tensors it reads (`record_stream`, so the allocator does not reuse them under the step). Elsewhere
on the CPU the batches go as before: a plain copy when they are asked for. XLA devices are fed by
torch-xla's MpDeviceLoader (runtimes/xla.py `DeviceFeed`, over `epoch_cycle` here); under SPMD each
device receives only its shard of the batch, and on a multi-host slice each host reads and decodes only
its share of every global batch (`host_share`).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


def pinned(data, device=None) -> bool:
    """Whether host batches are pinned: `data.pin_memory`, or when it is unset (None) on CUDA only (pinned
    pages are host memory the kernel cannot swap; elsewhere nothing copies from them asynchronously)."""
    if data.pin_memory is not None:
        return bool(data.pin_memory)
    return device is not None and torch.device(device).type == "cuda"


def make_loader(dataset, data, rank: int, world_size: int, seed: int, collate=None,
                batch_size: int | None = None, device=None) -> DataLoader:
    """`batch_size`: samples per batch of this rank (default `data.batch_size`; a rank driving several
    devices takes one batch for all of them). `device`: where the batches go (pinned for CUDA)."""
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
                      num_workers=data.num_workers, pin_memory=pinned(data, device), collate_fn=collate,
                      persistent_workers=data.num_workers > 0)


def host_share(global_batch: int, process_index: int, process_count: int) -> tuple[int, int, int]:
    """Multi-host SPMD (one process per host, one program over every host's devices): (reader, readers, batch)
    of this host's DataLoader. Host `process_index` of `process_count` reads only its 1/process_count of each
    global batch (make_loader's DistributedSampler over the hosts: disjoint shares), and the feed hands it
    over as this host's rows of the global batch (ShardingSpec minibatch=True, runtimes/xla.py
    `batch_sharding`). One host: the whole global batch, as before."""
    if process_count < 1 or not 0 <= process_index < process_count:
        raise ValueError(f"process {process_index} of {process_count}: not a process of the run")
    if global_batch % process_count:
        raise ValueError(
            f"the global batch of {global_batch} samples does not split over {process_count} hosts: "
            "use a data.batch_size that gives every host the same share"
        )
    return process_index, process_count, global_batch // process_count


def host_batches(loader: DataLoader):
    """next() -> the loader's next host batch, cycling epochs (a new shuffle per epoch on every rank)."""
    return epoch_cycle(loader)


def epoch_cycle(loader: DataLoader, source=None):
    """next() -> the next batch of `source` (default: the loader itself; XLA: an MpDeviceLoader over it,
    runtimes/xla.py), cycling epochs: the loader's sampler is told the new epoch (a new shuffle on every
    rank) before `source` is iterated again."""
    source = loader if source is None else source
    state = {"epoch": 0, "it": iter(source)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(state["epoch"])
            state["it"] = iter(source)
            return next(state["it"])

    return next_batch


class OneAhead:
    """next_batch() one batch ahead: the next batch is moved (`move(x, y)`: copy, then the model's input
    format) as soon as the current one is handed over, on `stream` when given. The batches and their
    order are exactly `move(*host_next())`'s, each one call early (the first call moves two)."""

    prefetch = True
    feed = "one_ahead"

    def __init__(self, host_next, move, stream=None):
        self.host_next, self.move, self.stream = host_next, move, stream
        self._ahead = None  # nothing moves before the loop asks (the rank is still being built)

    def _load(self):
        x, y = self.host_next()
        if self.stream is None:
            return self.move(x, y)
        with torch.cuda.stream(self.stream):
            return self.move(x, y)

    def __call__(self):
        x, y = self._ahead if self._ahead is not None else self._load()
        if self.stream is not None:
            current = torch.cuda.current_stream(self.stream.device)
            current.wait_stream(self.stream)  # the step reads the batch once its copy has landed
            for t in (x, y):
                if isinstance(t, torch.Tensor):
                    t.record_stream(current)  # allocated on the side stream, freed after the step's use
        self._ahead = self._load()
        return x, y


def device_feed(loader: DataLoader, device, prepare=None):
    """Return next_batch() -> (inputs, targets) on `device`, cycling epochs; `prepare` adjusts the
    inputs once on the device (dtype, memory format). On CUDA: one batch ahead on a side stream
    (`next_batch.prefetch` says so), non-blocking from pinned memory."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    non_blocking = bool(loader.pin_memory) and cuda
    next_host = host_batches(loader)

    def move(inputs, targets):
        inputs = inputs.to(device, non_blocking=non_blocking)
        targets = targets.to(device, non_blocking=non_blocking)
        return (prepare(inputs) if prepare else inputs), targets

    if cuda:
        return OneAhead(next_host, move, torch.cuda.Stream(device))

    def next_batch():
        return move(*next_host())

    next_batch.prefetch = False
    next_batch.feed = "host_copy"
    return next_batch
