"""Epochs over real data for train-to-target, on one rank of any strategy: the training batches of an epoch
and the evaluation of this rank's shard of the eval set.

Training order: a DistributedSampler reshuffled per epoch with (bench.seed, epoch), `drop_last`, the rank's
indices `rank::world`, in batches of `data.batch_size x devices of the rank x accumulate_steps`. One global
step then trains exactly the samples a single device at the same global batch trains in that step (rank r's
batch i is perm[(i*B + j)*W + r], j < B: together perm[i*G:(i+1)*G]), so curves match across strategies. A
resumed run starts the same epoch's order at the batch it stopped at (`start`). Data sets held as tensors
(TensorDataset) are indexed on the host; others go through a DataLoader with workers.

Evaluation: rank r scores eval samples r::world in fixed-shape batches (`goal.eval_batch_size` per device);
the last batch is padded with targets that count nowhere (-1 for labels, -100 for tokens), so no sample counts
twice and XLA compiles one evaluation graph. Every rank scores the same number of batches, the largest share's
(`ceil(ceil(N / world) / batch)`): a rank with fewer samples ends with batches that are all padding. A sharded
model's forward is a collective (FSDP all-gathers each block's parameters), so a rank with one batch fewer
would leave its peers waiting in that all-gather for good (an eval set of 17 on 2 ranks at batch 8: 9 and 8
samples, 2 and 1 batches). Sums (hits, scored targets, loss) are summed over the ranks by the strategy.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

from xbench.data.feed import pinned
from xbench.metrics import goals

IGNORE_LABEL = -1  # a padded classification sample: never a hit, never counted
IGNORE_TOKEN = -100  # a position without a target (the MLM/LM loss's ignore_index)


class EpochSampler(DistributedSampler):
    """DistributedSampler (drop_last, shuffled per epoch with seed + epoch) that can start mid-epoch."""

    def __init__(self, n: int, world: int, rank: int, seed: int):
        super().__init__(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.start = 0  # indices of this rank's epoch to skip (a resume mid-epoch)

    def __iter__(self):
        return iter(list(super().__iter__())[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start


class TrainFeed:
    """This rank's training batches (host tensors), epoch by epoch."""

    def __init__(
        self, dataset, rank: int, world: int, batch: int, seed: int, data_cfg, collate=None, device=None
    ):
        self.dataset, self.batch, self.data_cfg, self.collate = dataset, batch, data_cfg, collate
        self.pin = pinned(data_cfg, device)  # CUDA: pinned host batches, so their copies can be asynchronous
        self.sampler = EpochSampler(len(dataset), world, rank, seed)
        self.steps_per_epoch = self.sampler.num_samples // batch
        if self.steps_per_epoch < 1:
            raise ValueError(
                f"one step takes {batch} samples per rank over {world} rank(s), but the training set "
                f"has {len(dataset)} samples: lower data.batch_size (per device)"
            )
        self.in_memory = isinstance(dataset, TensorDataset)

    def batches(self, epoch: int, start: int):
        """(inputs, targets) of `epoch` from batch `start` on (the last partial batch is dropped: one
        shape)."""
        self.sampler.set_epoch(epoch)
        self.sampler.start = 0
        if self.in_memory:
            order = torch.tensor(list(self.sampler), dtype=torch.long)
            x, y = self.dataset.tensors
            for b in range(start, self.steps_per_epoch):
                idx = order[b * self.batch:(b + 1) * self.batch]
                yield x[idx], y[idx]
            return
        self.sampler.start = start * self.batch
        d = self.data_cfg
        loader = DataLoader(self.dataset, batch_size=self.batch, sampler=self.sampler, drop_last=True,
                            num_workers=d.num_workers, pin_memory=self.pin, collate_fn=self.collate)
        for i, batch in enumerate(loader):
            if start + i >= self.steps_per_epoch:
                break
            yield batch


def _pad(x: torch.Tensor, y: torch.Tensor, size: int):
    """Pad a batch to `size` samples: zero inputs, targets that count nowhere."""
    n = len(y)
    if n == size:
        return x, y
    fill = IGNORE_LABEL if y.dim() == 1 else IGNORE_TOKEN
    x = torch.cat([x, x.new_zeros((size - n, *x.shape[1:]))])
    y = torch.cat([y, y.new_full((size - n, *y.shape[1:]), fill)])
    return x, y


class EvalShard:
    """This rank's share of the eval set (samples rank::world) in batches of `batch`, the last one padded;
    then batches of padding alone up to `batches_per_eval`, the same count on every rank (see the module
    docstring)."""

    def __init__(self, dataset, rank: int, world: int, batch: int, data_cfg, collate=None, device=None):
        self.dataset, self.batch, self.data_cfg, self.collate = dataset, batch, data_cfg, collate
        self.pin = pinned(data_cfg, device)
        self.indices = list(range(rank, len(dataset), world))
        self.size = len(dataset)
        # rank 0's share: the largest
        self.batches_per_eval = math.ceil(math.ceil(len(dataset) / world) / batch)

    def __iter__(self):
        n, last = 0, None
        for xb, yb in self._own():
            n, last = n + 1, (xb, yb)
            yield _pad(xb, yb, self.batch)
        if n < self.batches_per_eval:
            x, y = last if last is not None else self._sample()
            blank = _pad(x[:0], y[:0], self.batch)  # counts nowhere; keeps this rank in step with its peers
            for _ in range(self.batches_per_eval - n):
                yield blank

    def _own(self):
        """This rank's samples in batches of `batch` (the last one short)."""
        if isinstance(self.dataset, TensorDataset):
            x, y = (t[self.indices] for t in self.dataset.tensors)
            for i in range(0, len(self.indices), self.batch):
                yield x[i:i + self.batch], y[i:i + self.batch]
            return
        d = self.data_cfg
        loader = DataLoader(Subset(self.dataset, self.indices), batch_size=self.batch, shuffle=False,
                            num_workers=d.num_workers, pin_memory=self.pin, collate_fn=self.collate)
        yield from loader

    def _sample(self):
        """One sample of the eval set as a batch: the shapes of a rank that holds no sample (eval set <
        world)."""
        if isinstance(self.dataset, TensorDataset):
            return tuple(t[:1] for t in self.dataset.tensors)
        return next(iter(DataLoader(Subset(self.dataset, [0]), batch_size=1, collate_fn=self.collate)))


@torch.no_grad()
def score(model, shard: EvalShard, metric: str, precision, to_device, cut) -> list[float]:
    """[hits, scored targets, loss sum] of this rank's shard. `to_device(x, y)` places a batch as the strategy
    takes it; `cut()` ends a lazy (XLA) graph after each batch, so one evaluation graph is compiled."""
    g = goals.get(metric)
    was_training = model.training
    model.eval()
    sums = None
    for xb, yb in shard:
        xb, yb = to_device(xb, yb)
        with precision.autocast():
            logits = model(xb)
        logits = logits.float()
        if not g.per_token:  # top-k over samples
            k = min(g.top_k or 1, logits.shape[-1])
            top = logits.topk(k, dim=-1).indices
            valid = yb >= 0
            part = torch.stack(
                [
                    ((top == yb.unsqueeze(-1)).any(-1) & valid).sum().float(),
                    valid.sum().float(),
                    torch.zeros((), device=logits.device),
                ]
            )
        else:
            flat, tgt = logits.flatten(0, -2), yb.flatten()
            valid = tgt != IGNORE_TOKEN
            safe = torch.where(valid, tgt, torch.zeros_like(tgt))  # fixed shapes: mask, never select
            nll = torch.nn.functional.cross_entropy(flat, safe, reduction="none")
            hits = ((flat.argmax(-1) == tgt) & valid).sum().float()
            part = torch.stack([hits, valid.sum().float(), (nll * valid).sum()])
        sums = part if sums is None else sums + part
        cut()
    if was_training:
        model.train()
    return [0.0, 0.0, 0.0] if sums is None else [float(v) for v in sums.cpu().tolist()]


def metric_value(metric: str, hits: float, count: float, loss_sum: float) -> float:
    """The goal metric from the summed counts (metrics/goals.py says how): an accuracy as a fraction,
    perplexity, or log-perplexity (the mean held-out cross-entropy in nats: MLPerf's Llama 3.1 8B target is
    3.3)."""
    if count <= 0:
        raise ValueError("the eval set has no scored target")
    return goals.get(metric).value(hits, count, loss_sum)
