"""The one training step every runtime shares: forward under the precision policy, loss, backward,
optimizer step. Runtimes wrap it (torch.compile, XLA sync, Accelerate) instead of rewriting it, so
the step being compared is the same code everywhere.

A recipe adds three things here (`StepOptions`): label smoothing in the classification loss, gradient
accumulation (one step = `accumulate` micro-batches, then one optimizer update; under DDP the gradients of
all but the last micro-batch stay local, `no_sync`), and gradient clipping (`grad_clip_norm`: the global L2
norm of every gradient the optimizer steps clipped to it before the update, as `clip_grad_norm_`; under a
gradient scaler the gradients are unscaled first, so the norm is the true one). The learning rate is set
outside the step (training/schedule.py), and the optimizer is built in training/optim.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class StepOptions:
    label_smoothing: float = 0.0
    accumulate: int = 1  # micro-batches per optimizer step; the step's batch is split into this many
    grad_clip_norm: float | None = None  # clip the gradients' global L2 norm to this before each update

    @classmethod
    def of(cls, optim) -> StepOptions:
        return cls(optim.label_smoothing, optim.accumulate_steps, getattr(optim, "grad_clip_norm", None))


def loss_for_task(task: str, logits, targets, label_smoothing: float = 0.0):
    if task == "classify":
        return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)
    if task in ("lm", "mlm"):
        # logits (B, T, V), targets (B, T); -100 marks positions that carry no loss (MLM).
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100,
                               label_smoothing=label_smoothing)
    raise ValueError(f"unknown task {task!r}; allowed: classify, lm, mlm")


def forward_loss(model, task, precision, inputs, targets, label_smoothing: float = 0.0):
    with precision.autocast():
        logits = model(inputs)
    return loss_for_task(task, logits, targets, label_smoothing)


def make_train_step(model, optimizer, task, precision, backward=None, options: StepOptions | None = None):
    """Return step(inputs, targets) -> detached loss tensor (never read on the host here).

    `backward` lets a runtime substitute its own (Accelerate's `accelerator.backward`).
    """
    scaler = precision.scaler
    opts = options or StepOptions()
    k, smooth, clip = opts.accumulate, opts.label_smoothing, opts.grad_clip_norm
    no_sync = getattr(model, "no_sync", None)  # DDP: all-reduce only with the last micro-batch

    def backward_of(loss):
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            (backward or torch.Tensor.backward)(loss)

    def update():
        if clip:
            if scaler is not None:
                # the true gradients' norm; scaler.step then does not unscale again
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], clip)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def step(inputs, targets):
        loss = forward_loss(model, task, precision, inputs, targets, smooth)
        backward_of(loss)
        update()
        return loss.detach()

    def accumulated_step(inputs, targets):
        losses = []
        for i, (x, y) in enumerate(zip(inputs.chunk(k), targets.chunk(k))):
            local = no_sync() if no_sync is not None and i < k - 1 else contextlib.nullcontext()
            with local:
                loss = forward_loss(model, task, precision, x, y, smooth)
                backward_of(loss / k)  # the mean over the step's micro-batches, as one batch of k x theirs
            losses.append(loss.detach())
        update()
        return torch.stack(losses).mean()

    return step if k == 1 else accumulated_step
