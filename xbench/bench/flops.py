"""FLOPs per training sample, measured on the real model with torch's FLOP counter (never typed in).

Runs on the meta device: no memory, no compute, well under a second even for ResNet-50 (a model that
reads tensor values on the host runs on a fake CPU instead: xbench/models/zoo.py `abstract_run`).
FlopCounterMode counts 2 FLOPs per multiply-accumulate, the convention of published figures.

Model FLOPs (`train`) are what the model needs, recomputation never counted (PaLM's and torchtitan's MFU
numerator): counted with activation checkpointing off. Where blocks are recomputed in backward (the model's
`checkpoint_blocks` option, or the strategy's, e.g. FSDP's activation_checkpointing), `train_hardware` is
counted again on the model as the rank runs it: torch's non-reentrant checkpoint stops recomputing once the
tensors backward needs are back (a block's last matmul is not redone), so it is measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Callable

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
    args = (
        grad_out_shape,
        x_shape,
        w_shape,
        bias,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )
    total = conv_backward_flop(*args, output_mask, out_val=out_shape)
    if groups > 1 and output_mask[1]:
        weight_grad = conv_backward_flop(*args, [False, True, False], out_val=out_shape)
        total -= weight_grad - weight_grad // groups
    return total


CORRECTED = {torch.ops.aten.convolution_backward: _conv_backward_flop}


# The model option that makes a block recompute its activations in backward (models/decoder.py).
CHECKPOINT_OPTION = "checkpoint_blocks"


def flops_per_sample(model_name: str, spec: InputSpec, options: dict, batch: int = 2,
                     recompute_blocks: Callable[[torch.nn.Module], None] | None = None) -> dict[str, float]:
    """Return {"forward": F, "train": F_fwd+bwd} model FLOPs per sample for one model at one input shape, and
    "train_hardware" (fwd+bwd+recomputation) where blocks are recomputed: by the model option, or by
    `recompute_blocks` (the strategy's own wrapping of the model's blocks, applied to the counted copy)."""
    entry = get(model_name)
    checkpointed = bool(options.get(CHECKPOINT_OPTION))

    def count(device, opts: dict, recompute) -> tuple[int, int]:
        model = build(model_name, spec, opts).train()
        if recompute is not None:
            recompute(model)
        inputs, targets = abstract_batch(spec, batch, entry.task, device)
        with FlopCounterMode(display=False) as fwd_counter:
            out = model(inputs)
        loss = loss_for_task(entry.task, out, targets)
        with FlopCounterMode(display=False, custom_mapping=CORRECTED) as bwd_counter:
            loss.backward()
        return fwd_counter.get_total_flops(), bwd_counter.get_total_flops()

    plain = {**options, CHECKPOINT_OPTION: False} if checkpointed else options
    forward, backward = abstract_run(lambda device: count(device, plain, None))
    out = {"forward": forward / batch, "train": (forward + backward) / batch}
    if checkpointed or recompute_blocks is not None:
        forward_hw, backward_hw = abstract_run(lambda device: count(device, options, recompute_blocks))
        out["train_hardware"] = (forward_hw + backward_hw) / batch
    return out
