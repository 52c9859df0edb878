"""The per-parameter LARS and LAMB that xbench shipped before its foreach rewrite (test-only code): the
reference that tests/test_optim.py holds xbench/training/optim.py's whole-group update to. Written the
plain way, one parameter at a time, exactly as MLPerf's references state the formulas."""

from __future__ import annotations

import torch


def _trust(w_norm, u_norm, scale: float, eps: float = 0.0):
    """scale x ||w|| / (||u|| + eps), and 1 where either norm is zero (fresh zero-initialised layers)."""
    ratio = scale * w_norm / (u_norm + eps)
    return torch.where((w_norm > 0) & (u_norm > 0), ratio, torch.ones_like(ratio))


class ReferenceLARS(torch.optim.Optimizer):
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


class ReferenceLAMB(torch.optim.Optimizer):
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
