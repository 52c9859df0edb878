"""Optimizers of the studies' recipes: SGD with (Nesterov) momentum, AdamW, and the large-batch LARS (MLPerf's
ResNet-50) and LAMB (MLPerf's BERT), with no weight decay on norms and biases when asked.

SGD and AdamW run torch's fused kernels where torch has them for the device (CUDA, CPU): one kernel per
group, and under `amp_fp16` GradScaler hands them the scale and the inf flag (`_step_supports_amp_scaling`)
instead of reading `found_inf.item()` on the host every step. A step that torch.compile traces whole
(runtime.target=step) keeps torch's default instead: dynamo does not trace into a fused optimizer (a graph
break, the kernel run eagerly), while it fuses the traced foreach/for-loop update itself.

LARS and LAMB are written with `torch._foreach_*` ops over each whole param group (one call per op, not
per parameter: a GPU step is not launch-bound by Python) and tensor ops only (no `.item()`): on XLA the
whole update stays in the step's graph, the trust ratios are computed as one vector, their "1 where a
norm is zero" is a `torch.where`, not a branch, and LAMB's step count is a tensor (a Python int would be
a new constant to dynamo and XLA every step). A per-parameter factor (trust ratio, bias correction) reaches
its tensor as one view per parameter of a buffer filled in one kernel (`_spread`), not as a list of 0-dim
tensors: CUDA's multi-tensor kernels need the two lists' tensors to have one shape each, and a list of 0-dim
tensors sends the op down the slow route, one kernel per parameter.

Under `amp_fp16` LARS and LAMB take GradScaler's protocol as torch's fused Adam does
(`_step_supports_amp_scaling`): the scaler sets `grad_scale` and `found_inf` on the optimizer and calls step()
every step; the step unscales the gradients itself and, where found_inf is set, zeroes them and the update
on the device (`_scaler_grads`), so the scaler never reads `found_inf.item()` on the host (it did every step).
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
    if len(optim.betas) != 2:  # each one's range: config/optim.py
        out.append(f"optim.betas must be two numbers, got {list(optim.betas)}")
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


def _torch_default(params: list) -> str:
    """What torch's SGD/AdamW run when neither `fused` nor `foreach` is given."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "foreach" if foreach else "for_loop"


def implementation(params, traced: bool = False) -> str:
    """How SGD/AdamW update `params`: "fused" where torch has fused kernels for their device (and the step
    is not traced whole by torch.compile), else torch's own default ("foreach" on CUDA, "for_loop" on the
    CPU and XLA)."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    params = list(params)
    fusable = _get_fused_kernels_supported_devices()
    if not traced and params and all(p.device.type in fusable and p.is_floating_point() for p in params):
        return "fused"
    return _torch_default(params)


def make_optimizer(optim, model, lr: float | None = None, traced: bool = False):
    """The optimizer of `optim` over `model`'s parameters; `lr` overrides optim.lr (the linear scaling rule);
    `traced`: the step is compiled whole (torch.compile, runtime.target=step), so SGD/AdamW are not fused."""
    lr = optim.lr if lr is None else lr
    groups = param_groups(model, optim.weight_decay, optim.no_decay_norm_bias)
    impl = implementation((p for g in groups for p in g["params"]), traced)
    kernels = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    if optim.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=optim.momentum, nesterov=optim.nesterov, **kernels)
    if optim.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(optim.betas), eps=optim.eps, **kernels)
    if optim.name == "lars":
        return LARS(groups, lr=lr, momentum=optim.momentum, nesterov=optim.nesterov,
                    trust_coefficient=optim.trust_coefficient, eps=optim.eps)
    if optim.name == "lamb":
        return LAMB(groups, lr=lr, betas=tuple(optim.betas), eps=optim.eps)
    raise ValueError(f"unknown optimizer {optim.name!r}; allowed: {', '.join(OPTIMIZERS)}")


def optimizer_figures(optimizer, scaler=None) -> dict:
    """For the record: the update's kernels (`optimizer_impl`: fused | foreach | for_loop) and, with a
    gradient scaler (amp_fp16), the device-to-host syncs its step costs: 0 where the optimizer takes the
    scale and inf flag itself (fused), else 1 (`found_inf.item()`, tests/test_optim.py counts both)."""
    opt = getattr(optimizer, "optimizer", optimizer)  # xla_mp's and Accelerate's wrappers hold it here
    group = opt.param_groups[0] if opt.param_groups else {}
    if isinstance(opt, (LARS, LAMB)):
        impl = "foreach"
    elif group.get("fused"):
        impl = "fused"
    elif group.get("foreach") is None:
        impl = _torch_default([p for g in opt.param_groups for p in g["params"]])
    else:
        impl = "foreach" if group["foreach"] else "for_loop"
    out = {"optimizer_impl": impl}
    if scaler is not None:
        out["scaler_syncs_per_step"] = 0 if getattr(opt, "_step_supports_amp_scaling", False) else 1
    return out


def _trust(w_norm, u_norm, scale: float, eps: float = 0.0):
    """scale x ||w|| / (||u|| + eps), and 1 where either norm is zero (fresh zero-initialised layers);
    element-wise over vectors of norms (one per parameter)."""
    ratio = scale * w_norm / (u_norm + eps)
    return torch.where((w_norm > 0) & (u_norm > 0), ratio, torch.ones_like(ratio))


def _norms(tensors) -> torch.Tensor:
    """The L2 norm of each tensor, as one vector (one foreach call for the whole group)."""
    return torch.stack(torch._foreach_norm(tensors))


_REPEATS: dict = {}  # (device, numels) -> the numels as a device tensor: made once, not copied in every step


def _spread(values: torch.Tensor, like: list) -> list:
    """values[i] over a tensor shaped like like[i], for every i: views of one buffer that one
    repeat_interleave fills on the device (output_size given: no host read), so a foreach op taking them
    beside `like` has tensors of one shape pairwise, its fast route. Element for element the same products and
    quotients as a 0-dim factor per tensor."""
    numels = tuple(t.numel() for t in like)
    key = (values.device, numels)
    if key not in _REPEATS:
        _REPEATS[key] = torch.tensor(numels, device=values.device)
    flat = torch.repeat_interleave(values, _REPEATS[key], output_size=sum(numels))
    return [v.view(t.shape) for v, t in zip(flat.split(numels), like)]


def _with_grads(group):
    return [p for p in group["params"] if p.grad is not None]


def _scaler_grads(optimizer, params: list):
    """The gradients a step applies and `skip`: a 0-dim bool tensor, True where GradScaler found an inf/nan
    (None, with `params`' own gradients, when no scaler handed its flag: the plain step). Under the scaler
    the gradients are unscaled (grad_scale None: scaler.unscale_ ran already, for clipping) into views of one
    buffer, zeroed on the device when skipped: every factor below stays finite, so the update can be
    zeroed by a multiply (an inf or nan gradient times 0 would still be nan) and nothing is read on the
    host."""
    grads = [p.grad for p in params]
    found_inf = getattr(optimizer, "found_inf", None)
    if found_inf is None:
        return grads, None
    device = params[0].device
    skip = found_inf.to(device, non_blocking=True) > 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    grad_scale = getattr(optimizer, "grad_scale", None)
    # the reciprocal as GradScaler.unscale_ takes it: the same gradients, bit for bit
    if grad_scale is not None:
        flat.mul_(grad_scale.to(device, non_blocking=True).double().reciprocal().float())
    flat.masked_fill_(skip, 0.0)
    return [v.view(g.shape) for v, g in zip(flat.split([g.numel() for g in grads]), grads)], skip


def _unless(skip, factor: float):
    """`factor`, or 1 on a skipped step (a 0-dim tensor: the buffers it multiplies stay as they were)."""
    return factor if skip is None else torch.where(skip, 1.0, factor)


def _gated(skip, factor: float):
    """`factor`, or 0 on a skipped step (a 0-dim tensor: the update it multiplies adds nothing)."""
    return factor if skip is None else torch.where(skip, 0.0, factor)


class LARS(torch.optim.Optimizer):
    """Layer-wise Adaptive Rate Scaling (You et al. 2017) as in MLPerf's ResNet-50 reference:
    g' = g + wd w;  lr_l = lr x eta ||w|| / (||g|| + wd ||w|| + eps);  v = m v + lr_l g';  w -= v
    (Nesterov: w -= m v + lr_l g'). Groups with `adapt` False (norms, biases) take plain momentum SGD."""

    _step_supports_amp_scaling = True  # GradScaler hands grad_scale / found_inf over (see _scaler_grads)

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
            params = _with_grads(group)
            if not params:
                continue
            grads, skip = _scaler_grads(self, params)
            # g' = g + wd w, a new list: the gradients themselves are left as backward wrote them
            upd = torch._foreach_add(grads, params, alpha=wd) if wd else grads
            if group["adapt"]:
                w_norm = _norms(params)
                scale = _gated(skip, lr) * _trust(
                    w_norm, _norms(grads) + wd * w_norm, group["trust_coefficient"], group["eps"]
                )
                upd = torch._foreach_mul(upd, _spread(scale, upd))
            else:
                upd = torch._foreach_mul(upd, _gated(skip, lr))
            bufs = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                bufs.append(state["momentum_buffer"])
            torch._foreach_mul_(bufs, _unless(skip, m))
            torch._foreach_add_(bufs, upd)
            if group["nesterov"]:
                torch._foreach_add_(upd, bufs, alpha=m)
                if skip is not None:  # m v is not zero: a skipped step must not apply it
                    torch._foreach_mul_(upd, _gated(skip, 1.0))
                torch._foreach_sub_(params, upd)
            else:  # the buffer, kept as it was on a skipped step, is not applied either
                torch._foreach_sub_(
                    params, bufs if skip is None else torch._foreach_mul(bufs, _gated(skip, 1.0))
                )
        return loss


class LAMB(torch.optim.Optimizer):
    """Layer-wise Adaptive Moments for Batch training (You et al. 2019) as in MLPerf's BERT reference:
    Adam moments with bias correction, u = m_hat / (sqrt(v_hat) + eps) + wd w, w -= lr x ||w|| / ||u|| x u.
    Groups with `adapt` False (norms, biases) take the Adam update without the trust ratio."""

    _step_supports_amp_scaling = True  # GradScaler hands grad_scale / found_inf over (see _scaler_grads)

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=True))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            (b1, b2), lr, wd, eps = group["betas"], group["lr"], group["weight_decay"], group["eps"]
            params = _with_grads(group)
            if not params:
                continue
            grads, skip = _scaler_grads(self, params)
            for p in params:
                state = self.state[p]
                if not state:
                    # fp32 on the parameter's device: no host scalar, no new constant per step
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            steps = [self.state[p]["step"] for p in params]
            ms = [self.state[p]["exp_avg"] for p in params]
            vs = [self.state[p]["exp_avg_sq"] for p in params]
            # a tensor increment as a list (0-dim beside 0-dim): a lone 0-dim tensor binds to the Scalar
            # overload, which reads it on the host
            torch._foreach_add_(steps, 1.0 if skip is None else [_gated(skip, 1.0)] * len(steps))
            torch._foreach_mul_(ms, _unless(skip, b1))
            torch._foreach_add_(ms, grads, alpha=1 - b1)
            torch._foreach_mul_(vs, _unless(skip, b2))
            torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
            t = torch.stack(steps)
            # a skipped first step leaves t = 0, and 1 - b ** 0 = 0 would make 0 / 0 = nan
            if skip is not None:
                t = t.clamp_min(1.0)
            u = torch._foreach_div(ms, _spread(1 - b1 ** t, ms))
            denom = torch._foreach_div(vs, _spread(1 - b2 ** t, vs))
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            torch._foreach_div_(u, denom)
            if wd:
                torch._foreach_add_(u, params, alpha=wd)
            if group["adapt"]:
                torch._foreach_mul_(u, _spread(_trust(_norms(params), _norms(u), 1.0), u))
            torch._foreach_mul_(u, _gated(skip, lr))
            torch._foreach_sub_(params, u)
        return loss
