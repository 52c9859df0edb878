"""The one training step every runtime shares: forward under the precision policy, loss, backward,
optimizer step. Runtimes wrap it (torch.compile, XLA sync, Accelerate) instead of rewriting it, so
the step being compared is the same code everywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def loss_for_task(task: str, logits, targets):
    if task == "classify":
        return F.cross_entropy(logits.float(), targets)
    if task in ("lm", "mlm"):
        # logits (B, T, V), targets (B, T); -100 marks positions that carry no loss (MLM).
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
    raise ValueError(f"unknown task {task!r}; allowed: classify, lm, mlm")


def make_optimizer(optim_cfg, params):
    if optim_cfg.name == "sgd":
        return torch.optim.SGD(
            params, lr=optim_cfg.lr, momentum=optim_cfg.momentum, weight_decay=optim_cfg.weight_decay
        )
    if optim_cfg.name == "adamw":
        return torch.optim.AdamW(params, lr=optim_cfg.lr, weight_decay=optim_cfg.weight_decay)
    raise ValueError(f"unknown optimizer {optim_cfg.name!r}; allowed: sgd, adamw")


def forward_loss(model, task, precision, inputs, targets):
    with precision.autocast():
        logits = model(inputs)
    return loss_for_task(task, logits, targets)


def make_train_step(model, optimizer, task, precision, backward=None):
    """Return step(inputs, targets) -> detached loss tensor (never read on the host here).

    `backward` lets a runtime substitute its own (Accelerate's `accelerator.backward`).
    """
    scaler = precision.scaler

    def step(inputs, targets):
        loss = forward_loss(model, task, precision, inputs, targets)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            (backward or torch.Tensor.backward)(loss)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step
