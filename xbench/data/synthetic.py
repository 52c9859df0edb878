"""Synthetic batches generated once, directly on the device, shaped like the data set they imitate.

The timed window cycles through a small pool of them, so no host I/O or host-to-device copy is
ever inside it: throughput measures the chip and the framework, not the loader.
"""

from __future__ import annotations

import torch

from xbench.data.spec import InputSpec


def make_batch(spec: InputSpec, batch_size: int, task: str, device, generator):
    """One (inputs, targets) pair. `task` decides the targets: class ids, next tokens or masked tokens."""
    kw = {"device": device}
    if device.type == "meta":
        rand = lambda *shape: torch.empty(*shape, **kw)  # noqa: E731
        ints = lambda high, shape: torch.empty(shape, dtype=torch.long, **kw)  # noqa: E731
    else:
        rand = lambda *shape: torch.randn(*shape, generator=generator, **kw)  # noqa: E731
        ints = lambda high, shape: torch.randint(0, high, shape, generator=generator, **kw)  # noqa: E731
    if spec.modality == "image":
        inputs = rand(batch_size, spec.channels, spec.image_size, spec.image_size)
    elif spec.modality == "features":
        inputs = rand(batch_size, spec.num_features)
    elif spec.modality == "tokens":
        inputs = ints(spec.vocab_size, (batch_size, spec.seq_len))
    else:
        raise ValueError(f"unknown modality {spec.modality!r}; allowed: image, tokens, features")
    if task == "classify":
        targets = ints(spec.num_classes, (batch_size,))
    elif task == "lm":
        targets = ints(spec.vocab_size, (batch_size, spec.seq_len))
    elif task == "mlm":
        if device.type == "meta":
            targets = ints(spec.vocab_size, (batch_size, spec.seq_len))
        else:
            inputs, targets = mask_tokens(inputs, spec.vocab_size, generator)
    else:
        raise ValueError(f"unknown task {task!r}; allowed: classify, lm, mlm")
    return inputs, targets


MLM_MASK_FRACTION = 0.15  # BERT's recipe: 15% of positions carry a target ...
MASK_TOKEN_ID = 103  # ... of which 80% become [MASK] (id 103 in BERT's vocabulary), 10% random, 10% kept


def mask_tokens(ids, vocab_size: int, generator):
    """BERT-style masking: returns (inputs, targets) with targets -100 where no loss is taken."""
    masked = torch.rand(ids.shape, generator=generator, device=ids.device) < MLM_MASK_FRACTION
    if not masked.any():  # tiny test batches: keep at least one target so the loss is defined
        masked.view(-1)[0] = True
    targets = torch.where(masked, ids, torch.full_like(ids, -100))
    roll = torch.rand(ids.shape, generator=generator, device=ids.device)
    mask_id = min(MASK_TOKEN_ID, vocab_size - 1)
    inputs = torch.where(masked & (roll < 0.8), torch.full_like(ids, mask_id), ids)
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(masked & (roll >= 0.8) & (roll < 0.9), random_ids, inputs)
    return inputs, targets


def synthetic_pool(spec: InputSpec, batch_size: int, task: str, count: int, device, seed: int):
    """`count` distinct batches, generated on the host with a fixed seed, then moved to the device once.

    Generating on the host keeps the values identical across devices and runtimes (parity checks
    compare loss trajectories), and the copy happens before any timing starts.
    """
    gen = torch.Generator().manual_seed(seed)
    pool = []
    for _ in range(count):
        inputs, targets = make_batch(spec, batch_size, task, torch.device("cpu"), gen)
        pool.append((inputs.to(device), targets.to(device)))
    return pool
