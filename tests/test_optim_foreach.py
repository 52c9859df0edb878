"""LARS and LAMB take CUDA's fast foreach route: every foreach call that pairs two tensor lists pairs tensors of one
shape (a per-parameter factor used to come as a list of 0-dim tensors, which sends CUDA's multi-tensor kernels
down their slow route, one kernel per parameter), the update is bit for bit the one the previous implementation
made (kept below as `OldLARS` / `OldLAMB`), and a step reads nothing on the host (no `.item()`, `float()`,
`bool()`, `.tolist()` of a tensor).

No GPU runs here: the fast route's condition (ATen's `can_use_fast_route`: the lists' tensors pairwise of one size
and stride, one device and dtype) is checked on the arguments themselves, on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from tests.test_optim import _run
from xbench.training import optim


class OldLARS(optim.LARS):
    """xbench's LARS before the fast route (commit 343d676): per-parameter factors as lists of 0-dim tensors."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            params = optim._with_grads(group)
            if not params:
                continue
            grads = [p.grad for p in params]
            upd = torch._foreach_add(grads, params, alpha=wd) if wd else grads
            if group["adapt"]:
                w_norm = optim._norms(params)
                scale = lr * optim._trust(w_norm, optim._norms(grads) + wd * w_norm, group["trust_coefficient"],
                                          group["eps"])
                upd = torch._foreach_mul(upd, list(scale.unbind()))
            else:
                upd = torch._foreach_mul(upd, lr)
            bufs = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                bufs.append(state["momentum_buffer"])
            torch._foreach_mul_(bufs, m)
            torch._foreach_add_(bufs, upd)
            if group["nesterov"]:
                torch._foreach_add_(upd, bufs, alpha=m)
                torch._foreach_sub_(params, upd)
            else:
                torch._foreach_sub_(params, bufs)


class OldLAMB(optim.LAMB):
    """xbench's LAMB before the fast route (commit 343d676)."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            (b1, b2), lr, wd, eps = group["betas"], group["lr"], group["weight_decay"], group["eps"]
            params = optim._with_grads(group)
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            steps = [self.state[p]["step"] for p in params]
            ms = [self.state[p]["exp_avg"] for p in params]
            vs = [self.state[p]["exp_avg_sq"] for p in params]
            torch._foreach_add_(steps, 1.0)
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, grads, alpha=1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
            t = torch.stack(steps)
            u = torch._foreach_div(ms, list((1 - b1 ** t).unbind()))
            denom = torch._foreach_div(vs, list((1 - b2 ** t).unbind()))
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            torch._foreach_div_(u, denom)
            if wd:
                torch._foreach_add_(u, params, alpha=wd)
            if group["adapt"]:
                torch._foreach_mul_(u, list(optim._trust(optim._norms(params), optim._norms(u), 1.0).unbind()))
            torch._foreach_mul_(u, lr)
            torch._foreach_sub_(params, u)


CASES = [
    (optim.LARS, OldLARS, dict(lr=2.0, momentum=0.9, trust_coefficient=0.02)),
    (optim.LARS, OldLARS, dict(lr=2.0, momentum=0.9, nesterov=True, trust_coefficient=0.02, eps=1e-9)),
    (optim.LAMB, OldLAMB, dict(lr=0.05, betas=(0.9, 0.999), eps=1e-6)),
    (optim.LAMB, OldLAMB, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-8)),
]


@pytest.mark.parametrize("new,old,kw", CASES, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_the_update_is_bit_for_bit_the_previous_one(new, old, kw):
    net_new, opt_new = _run(lambda g: new(g, **kw), steps=7)
    net_old, opt_old = _run(lambda g: old(g, **kw), steps=7)
    for (name, a), b in zip(net_new.named_parameters(), net_old.parameters()):
        assert torch.equal(a, b), name
    for p_new, p_old in zip(net_new.parameters(), net_old.parameters()):
        for key, value in opt_new.state[p_new].items():
            assert torch.equal(value, opt_old.state[p_old][key]), key


def _tensor_lists(args) -> list[list]:
    return [list(a) for a in args if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a)]


@pytest.mark.parametrize("new,old,kw", CASES, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_every_foreach_call_pairs_tensors_of_one_shape_and_nothing_is_read_on_the_host(new, old, kw, monkeypatch):
    """On the old code: `_foreach_mul` paired weights (8, 6) with a 0-dim trust ratio."""
    calls, mixed, host_reads = [], [], []
    for name in [n for n in dir(torch) if n.startswith("_foreach_")]:
        fn = getattr(torch, name)

        def wrapped(*args, _fn=fn, _name=name, **kwargs):
            lists = _tensor_lists(args)
            calls.append(_name)
            for other in lists[1:]:
                shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(lists[0], other) if a.shape != b.shape]
                if shapes:
                    mixed.append((_name, shapes[0]))
            return _fn(*args, **kwargs)

        monkeypatch.setattr(torch, name, wrapped)
    for method in ("item", "tolist", "__float__", "__bool__", "__int__"):
        orig = getattr(torch.Tensor, method)

        def counted(self, *a, _orig=orig, _m=method, **k):
            host_reads.append(_m)
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, method, counted)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    opt = new(optim.param_groups(net, 0.01, no_decay_norm_bias=True), **kw)
    for _ in range(3):
        net(torch.randn(4, 6)).sum().backward()
        host_reads.clear()  # backward's own reads are not the step's
        opt.step()
        assert host_reads == [], host_reads
        opt.zero_grad(set_to_none=True)
    assert "_foreach_norm" in calls  # the wrapper saw the optimizer's calls
    assert mixed == [], mixed
