"""Optimizers of the studies' recipes: SGD with (Nesterov) momentum, AdamW, and the large-batch LARS (MLPerf's
ResNet-50) and LAMB (MLPerf's BERT), with no weight decay on norms and biases when asked.

LARS and LAMB are written with tensor ops only (no `.item()`): on XLA the whole update stays in the step's
graph, and the trust ratio's "1 where a norm is zero" is a `torch.where`, not a branch.
"""

from __future__ import annotations

import torch

OPTIMIZERS = ("sgd", "adamw", "lars", "lamb")
# Which optimizer reads which option (a non-default value for an optimizer that does not read it is refused).
OPTION_OWNERS = {"momentum": ("sgd", "lars"), "nesterov": ("sgd", "lars"), "betas": ("adamw", "lamb"),
                 "trust_coefficient": ("lars",)}
OPTION_DEFAULTS = {"momentum": 0.9, "nesterov": False, "betas": [0.9, 0.999], "trust_coefficient": 0.001}


def rules(optim) -> list[str]:
    """Why this optimizer config cannot run (compat, before any work)."""
    if optim.name not in OPTIMIZERS:
        return [f"optim.name={optim.name!r} is unknown; allowed: {', '.join(OPTIMIZERS)}"]
    out = []
    for key, owners in OPTION_OWNERS.items():
        value = getattr(optim, key)
        default = OPTION_DEFAULTS[key]
        same = list(value) == default if isinstance(default, list) else value == default
        if optim.name not in owners and not same:
            out.append(f"optim.{key}={value} applies to {'/'.join(owners)}, not optim.name={optim.name}")
    if optim.name == "sgd" and optim.nesterov and optim.momentum <= 0:
        out.append("optim.nesterov needs optim.momentum > 0")
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        out.append(f"optim.betas must be two numbers in [0, 1), got {list(optim.betas)}")
    if optim.weight_decay < 0:
        out.append(f"optim.weight_decay must be >= 0, got {optim.weight_decay}")
    if not 0 <= optim.label_smoothing < 1:
        out.append(f"optim.label_smoothing must be in [0, 1), got {optim.label_smoothing}")
    if optim.accumulate_steps < 1:
        out.append(f"optim.accumulate_steps must be >= 1, got {optim.accumulate_steps}")
    if optim.name in ("lars", "lamb") and optim.trust_coefficient <= 0:
        out.append(f"optim.trust_coefficient must be > 0, got {optim.trust_coefficient}")
    return out


def param_groups(model, weight_decay: float, no_decay_norm_bias: bool) -> list[dict]:
    """One group, or two: parameters of one dimension (biases, BatchNorm/LayerNorm scales and shifts) get no
    weight decay and no layer-wise adaptation (`adapt`: False), the rest `weight_decay`."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not no_decay_norm_bias:
        return [{"params": params, "weight_decay": weight_decay, "adapt": True}]
    decay = [p for p in params if p.ndim > 1]
    plain = [p for p in params if p.ndim <= 1]
    return [g for g in ({"params": decay, "weight_decay": weight_decay, "adapt": True},
                        {"params": plain, "weight_decay": 0.0, "adapt": False}) if g["params"]]


def make_optimizer(optim, model, lr: float | None = None):
    """The optimizer of `optim` over `model`'s parameters; `lr` overrides optim.lr (the linear scaling rule)."""
    lr = optim.lr if lr is None else lr
    groups = param_groups(model, optim.weight_decay, optim.no_decay_norm_bias)
    if optim.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=optim.momentum, nesterov=optim.nesterov)
    if optim.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(optim.betas), eps=optim.eps)
    if optim.name == "lars":
        return LARS(groups, lr=lr, momentum=optim.momentum, nesterov=optim.nesterov,
                    trust_coefficient=optim.trust_coefficient, eps=optim.eps)
    if optim.name == "lamb":
        return LAMB(groups, lr=lr, betas=tuple(optim.betas), eps=optim.eps)
    raise ValueError(f"unknown optimizer {optim.name!r}; allowed: {', '.join(OPTIMIZERS)}")


def _trust(w_norm, u_norm, scale: float, eps: float = 0.0):
    """scale x ||w|| / (||u|| + eps), and 1 where either norm is zero (fresh zero-initialised layers)."""
    ratio = scale * w_norm / (u_norm + eps)
    return torch.where((w_norm > 0) & (u_norm > 0), ratio, torch.ones_like(ratio))


class LARS(torch.optim.Optimizer):
    """Layer-wise Adaptive Rate Scaling (You et al. 2017) as in MLPerf's ResNet-50 reference:
    g' = g + wd w;  lr_l = lr x eta ||w|| / (||g|| + wd ||w|| + eps);  v = m v + lr_l g';  w -= v
    (Nesterov: w -= m v + lr_l g'). Groups with `adapt` False (norms, biases) take plain momentum SGD."""

    def __init__(self, params, lr: float, momentum: float = 0.9, nesterov: bool = False,
                 trust_coefficient: float = 0.001, eps: float = 0.0, weight_decay: float = 0.0):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, trust_coefficient=trust_coefficient,
                        eps=eps, weight_decay=weight_decay, adapt=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if group["adapt"]:
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(g)
                    local = _trust(w_norm, g_norm + wd * w_norm, group["trust_coefficient"], group["eps"])
                    g = (g + wd * p if wd else g) * (lr * local)
                else:
                    g = g + wd * p if wd else g
                    g = g * lr
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                v = state["momentum_buffer"]
                v.mul_(m).add_(g)
                p.sub_(g.add(v, alpha=m) if group["nesterov"] else v)
        return loss


class LAMB(torch.optim.Optimizer):
    """Layer-wise Adaptive Moments for Batch training (You et al. 2019) as in MLPerf's BERT reference:
    Adam moments with bias correction, u = m_hat / (sqrt(v_hat) + eps) + wd w, w -= lr x ||w|| / ||u|| x u.
    Groups with `adapt` False (norms, biases) take the Adam update without the trust ratio."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=True))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            (b1, b2), lr, wd, eps = group["betas"], group["lr"], group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]  # a Python int: bias corrections are host scalars (device data on XLA)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
                if wd:
                    u = u + wd * p
                if group["adapt"]:
                    u = u * _trust(torch.linalg.vector_norm(p), torch.linalg.vector_norm(u), 1.0)
                p.sub_(u * lr)
        return loss
