"""FLOPs per training sample, measured on the real model with torch's FLOP counter (never typed in).

Runs on the meta device: no memory, no compute, well under a second even for ResNet-50.
FlopCounterMode counts 2 FLOPs per multiply-accumulate, the convention of published figures.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from xbench.data.spec import InputSpec
from xbench.data.synthetic import make_batch
from xbench.models import build, get
from xbench.training.step import loss_for_task


def flops_per_sample(model_name: str, spec: InputSpec, options: dict, batch: int = 2) -> dict[str, float]:
    """Return {"forward": F, "train": F_fwd+bwd} FLOPs per sample for one model at one input shape."""
    entry = get(model_name)
    with torch.device("meta"):
        model = build(model_name, spec, options)
        inputs, targets = make_batch(spec, batch, entry.task, device=torch.device("meta"), generator=None)
    model.train()
    with FlopCounterMode(display=False) as fwd_counter:
        out = model(inputs)
    forward = fwd_counter.get_total_flops()
    loss = loss_for_task(entry.task, out, targets)
    with FlopCounterMode(display=False) as bwd_counter:
        loss.backward()
    backward = bwd_counter.get_total_flops()
    return {"forward": forward / batch, "train": (forward + backward) / batch}
