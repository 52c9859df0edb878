"""LARS and LAMB under amp_fp16's GradScaler take the scaler's no-sync protocol (`_step_supports_amp_scaling`, as
torch's fused Adam): GradScaler hands `grad_scale` and `found_inf` to step(), which unscales the gradients itself
and skips an inf/nan step on the device. Before, neither optimizer declared the protocol, so GradScaler unscaled
the gradients and read `found_inf.item()` on the host before every step (a device-to-host sync per step on CUDA).

Checked for real on this CPU with GradScaler("cpu"), whose step takes the same two paths as on CUDA: the same
parameters, states and scales, bit for bit, as the plain unscale-then-step path over steps with an inf and a nan gradient
(skipped, scale halved) and a skipped first step; nothing read on the host inside the step; every foreach call
pairs tensors of one shape (CUDA's fast multi-tensor route) and the scale and flag reach the step as tensors.
"""

from __future__ import annotations

import pytest
import torch

from tests.test_optim import HostReads
from xbench.training import optim

CASES = {
    "lars": (optim.LARS, dict(lr=2.0, momentum=0.9, trust_coefficient=0.02, eps=1e-9)),
    "lars_nesterov": (optim.LARS, dict(lr=2.0, momentum=0.9, nesterov=True, trust_coefficient=0.02)),
    "lamb": (optim.LAMB, dict(lr=0.05, betas=(0.9, 0.999), eps=1e-6)),
}
BAD_STEPS = {0: float("inf"), 3: float("nan")}  # the first step skipped (LAMB's t stays 0), and a later one


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _plain(cls):
    """`cls` with torch's default GradScaler path: unscale_, `found_inf.item()`, step or not (the old code)."""
    return type(f"Plain{cls.__name__}", (cls,), {"_step_supports_amp_scaling": False})


def _train(cls, kw, steps: int = 6, unscale_first: bool = False, on_step=None):
    """`steps` steps under a GradScaler (growth every 2 good steps, so the scale moves both ways); the scaled
    gradient of one weight poisoned on BAD_STEPS. Returns the net, optimizer and the scale after each step."""
    net = _net()
    opt = cls(optim.param_groups(net, 0.05, no_decay_norm_bias=True), **kw)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    scales = []
    for i in range(steps):
        x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        scaler.scale(torch.nn.functional.cross_entropy(net(x), y)).backward()
        if i in BAD_STEPS:
            net[0].weight.grad[1, 2] = BAD_STEPS[i]
        if unscale_first:  # as the step does before clipping: scaler.step then hands grad_scale None
            scaler.unscale_(opt)
        (on_step or (lambda step: step()))(lambda: scaler.step(opt))
        scaler.update()
        scales.append(scaler.get_scale())
        opt.zero_grad(set_to_none=True)
    return net, opt, scales


@pytest.mark.parametrize("unscale_first", [False, True], ids=["scaled", "unscaled_first"])
@pytest.mark.parametrize("case", CASES)
def test_the_no_sync_step_equals_unscale_then_step_and_skips_inf_steps(case, unscale_first):
    cls, kw = CASES[case]
    assert cls._step_supports_amp_scaling and not _plain(cls)._step_supports_amp_scaling
    net, opt, scales = _train(cls, kw, unscale_first=unscale_first)
    ref_net, ref_opt, ref_scales = _train(_plain(cls), kw, unscale_first=unscale_first)
    # bad steps halve the scale, two good ones in a row double it: 4096 -> 2048 .. -> 4096 -> 2048 ..
    assert scales == ref_scales == [2048.0, 2048.0, 4096.0, 2048.0, 2048.0, 4096.0]
    for (name, a), b in zip(net.named_parameters(), ref_net.parameters()):
        assert torch.isfinite(a).all(), name
        assert torch.equal(a, b), name  # bit for bit: the same unscale (x 1/scale) and the same update
    for p, q in zip(net.parameters(), ref_net.parameters()):
        for key, value in opt.state[p].items():
            assert torch.equal(value, ref_opt.state[q][key]), key
    if cls is optim.LAMB:  # 6 steps, 2 skipped: the count (a tensor) moved on the 4 good ones only
        assert {float(s["step"]) for s in opt.state.values()} == {4.0}


@pytest.mark.parametrize("case", CASES)
def test_the_step_reads_nothing_on_the_host_and_takes_the_fast_foreach_route(case, monkeypatch):
    """On the old code: GradScaler.step read `found_inf` (`aten._local_scalar_dense`) once a step, and the
    optimizer's step saw no `found_inf` (the scaler had unscaled and decided on the host)."""
    cls, kw = CASES[case]
    calls, mixed, seen = [], [], []
    for name in [n for n in dir(torch) if n.startswith("_foreach_")]:
        fn = getattr(torch, name)

        def wrapped(*args, _fn=fn, _name=name, **kwargs):
            lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
            calls.append(_name)
            mixed.extend((_name, a.shape, b.shape) for other in lists[1:] for a, b in zip(lists[0], other)
                         if a.shape != b.shape)
            return _fn(*args, **kwargs)

        monkeypatch.setattr(torch, name, wrapped)
    original = cls.step

    def step(self, *a, **k):
        seen.append((getattr(self, "found_inf", None), getattr(self, "grad_scale", None)))
        return original(self, *a, **k)

    monkeypatch.setattr(cls, "step", step)
    reads = []

    def count(scaler_step):
        with HostReads() as host:
            scaler_step()
        reads.append(host.count)

    net, _, _ = _train(cls, kw, steps=4, on_step=count)
    assert reads == [0, 0, 0, 0]  # the bad step 0 included: skipped on the device
    assert len(seen) == 4 and all(isinstance(f, torch.Tensor) and isinstance(s, torch.Tensor) for f, s in seen)
    assert "_foreach_mul_" in calls and "_foreach_norm" in calls
    assert mixed == [], mixed[:3]
    assert all(torch.isfinite(p).all() for p in net.parameters())
