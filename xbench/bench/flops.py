"""FLOPs per training sample, measured on the real model with torch's FLOP counter (never typed in).

Runs on the meta device: no memory, no compute, well under a second even for ResNet-50 (a model that
reads tensor values on the host runs on a fake CPU instead: xbench/models/zoo.py `abstract_run`).
FlopCounterMode counts 2 FLOPs per multiply-accumulate, the convention of published figures.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop

from xbench.data.spec import InputSpec
from xbench.models import build, get
from xbench.models.zoo import abstract_batch, abstract_run
from xbench.training.step import loss_for_task


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                        output_padding, groups, output_mask, out_shape) -> int:
    """torch's formula (2.9) counts a grouped convolution's weight gradient once per group too many
    (it convolves every input channel with every output channel): a depthwise 3x3 backward read 33x its
    forward. Each output channel sees only its group's input channels, so that term is divided by groups."""
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    total = conv_backward_flop(*args, output_mask, out_val=out_shape)
    if groups > 1 and output_mask[1]:
        weight_grad = conv_backward_flop(*args, [False, True, False], out_val=out_shape)
        total -= weight_grad - weight_grad // groups
    return total


CORRECTED = {torch.ops.aten.convolution_backward: _conv_backward_flop}


def flops_per_sample(model_name: str, spec: InputSpec, options: dict, batch: int = 2) -> dict[str, float]:
    """Return {"forward": F, "train": F_fwd+bwd} FLOPs per sample for one model at one input shape."""
    entry = get(model_name)

    def count(device) -> tuple[int, int]:
        model = build(model_name, spec, options).train()
        inputs, targets = abstract_batch(spec, batch, entry.task, device)
        with FlopCounterMode(display=False) as fwd_counter:
            out = model(inputs)
        loss = loss_for_task(entry.task, out, targets)
        with FlopCounterMode(display=False, custom_mapping=CORRECTED) as bwd_counter:
            loss.backward()
        return fwd_counter.get_total_flops(), bwd_counter.get_total_flops()

    forward, backward = abstract_run(count)
    return {"forward": forward / batch, "train": (forward + backward) / batch}
