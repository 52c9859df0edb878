"""Synthetic batches generated once, directly on the device, shaped like the data set they imitate.

The timed window cycles through a small pool of them, so no host I/O or host-to-device copy is
ever inside it: throughput measures the chip and the framework, not the loader.
"""

from __future__ import annotations

import torch

from xbench.models.spec import InputSpec


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
    elif task in ("lm", "mlm"):
        targets = ints(spec.vocab_size, (batch_size, spec.seq_len))
    else:
        raise ValueError(f"unknown task {task!r}; allowed: classify, lm, mlm")
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
