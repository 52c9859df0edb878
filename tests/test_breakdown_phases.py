"""The per-step split into forward, backward and optimizer (bench/meters/breakdown.py `phases`), from torch.profiler's
own annotations over profiled steps, without changing the step. A step whose forward, backward and optimizer
each sleep a known, widely spaced time must have each sleep land in its own phase (sleeps are lower bounds,
so a busy machine only adds to them)."""

from __future__ import annotations

import time

import pytest
import torch

from xbench.bench import loop
from xbench.bench.meters import breakdown

# serial: alone, never beside another test (each phase is timed against a planted sleep)
pytestmark = pytest.mark.serial

FWD_S, BWD_S, OPT_S = 0.25, 0.5, 1.0  # a phase that took in another's sleep grows by FWD_S at least
SLEPT_S: dict[str, float] = {}  # what each sleep really took: a loaded machine oversleeps, and that is its phase's


def _sleep(phase: str, s: float) -> None:
    t0 = time.perf_counter()
    time.sleep(s)
    SLEPT_S[phase] = time.perf_counter() - t0


class _SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        _sleep("backward", BWD_S)
        return g


class _SlowModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)

    def forward(self, x):
        _sleep("forward", FWD_S)
        return self.lin(_SlowBackward.apply(x))


class _SlowSGD(torch.optim.SGD):
    def step(self, closure=None):  # torch wraps every optimizer's step in an Optimizer.step#... range
        _sleep("optimizer", OPT_S)
        return super().step(closure)


def _hooks(model, opt, backward=True):
    x, y = torch.randn(8, 16, requires_grad=True), torch.randint(0, 4, (8,))

    def step(a, b):
        loss = torch.nn.functional.cross_entropy(model(a), b)
        if backward:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.detach()

    return loop.Hooks(step=step, next_batch=lambda: (x, y), sync=lambda: None)


@pytest.mark.slow  # 2 x 1.75 s of sleeps, and the profiler's first start (~10 s on a busy machine)
def test_each_phase_of_a_real_step_gets_its_own_time():
    model = _SlowModel()
    hooks = _hooks(model, _SlowSGD(model.parameters(), lr=0.1))
    hooks.step(*hooks.next_batch())  # as the timed windows do before the profiled one: first-call work is not a phase's
    fig = breakdown.split(hooks, "cpu", {}, 1, 100, FWD_S + BWD_S + OPT_S)  # steady step ~ the sleeps
    assert fig["breakdown_steps"] == 1 and "phases_unavailable" not in fig, fig
    # Each phase holds its own sleep as really slept (a lower bound: load only adds) and not a whole other sleep
    # (the rest of a phase is a few ms of real work, far below the shortest sleep): no upper bound set in advance,
    # which a loaded machine's oversleep would break (CI saw 0.8 s take 1.29).
    assert set(SLEPT_S) == {"forward", "backward", "optimizer"}, SLEPT_S
    for phase, slept in SLEPT_S.items():
        assert slept <= fig[f"{phase}_s_per_step"] < slept + FWD_S, (phase, SLEPT_S, fig)
    assert 0 <= fig["other_s_per_step"] < FWD_S, fig
    assert "ProfilerStep" in fig["phases_source"]
    # the host/device split is still there, and still leaves the ProfilerStep spans out
    assert fig["device_s_per_step"] >= 0 and "host_s_per_step" in fig


def test_a_step_without_backward_ops_and_xla_say_why_they_are_not_split():
    model = torch.nn.Linear(16, 4)
    fig = breakdown.split(_hooks(model, None, backward=False), "cpu", {}, 1, 100, 0.01)
    assert "forward_s_per_step" not in fig and "no autograd backward ops" in fig["phases_unavailable"]
    xla = breakdown.xla_split({"xla_trace_s_median": 0.004, "xla_sync_s_median": 0.001, "xla_executions": 5,
                               "xla_execute_s_total": 0.1})
    assert "forward_s_per_step" not in xla and "one graph" in xla["phases_unavailable"]


def test_cuda_phases_are_the_gpu_time_of_each_phases_kernels():
    """No GPU here: a profile of one CUDA step built from torch's own FunctionEvent, as torch.profiler documents
    it (kernels attached to the CPU op that launched them, device_time_total summing an op's and its children's;
    backward's ops on autograd's device thread while the main thread waits)."""
    from torch.autograd.profiler_util import FunctionEvent

    made = []

    def ev(name, start, end, thread=1, parent=None, kernel_us=0.0):
        e = FunctionEvent(len(made), name, thread, start, end, use_device="cuda")
        if kernel_us:
            e.append_kernel(f"{name}_kernel", 0, kernel_us)
        if parent is not None:
            e.set_cpu_parent(parent)
            parent.append_cpu_child(e)
        made.append(e)
        return e

    step = ev("ProfilerStep#0", 0, 1000)
    ev("aten::linear", 10, 100, parent=step, kernel_us=50)
    ev("aten::cross_entropy_loss", 100, 150, parent=step, kernel_us=20)
    ev("autograd::engine::evaluate_function: NllLossBackward0", 160, 200, thread=2, kernel_us=30)
    ev("autograd::engine::evaluate_function: AddmmBackward0", 210, 450, thread=2, kernel_us=300)
    opt = ev("Optimizer.step#SGD.step", 700, 800, parent=step)
    ev("aten::_foreach_add_", 710, 790, parent=opt, kernel_us=40)
    fig = breakdown.phases(made, cuda=True)
    got = {k: round(v * 1e6, 6) for k, v in fig.items() if k.endswith("_per_step")}  # microseconds
    assert got == {"forward_s_per_step": 70, "backward_s_per_step": 330,
                   "optimizer_s_per_step": 40,  # the kernels of its child op count for it
                   "forward_host_s_per_step": 160,  # the step's start to its backward region
                   "backward_host_s_per_step": 290,  # one region, 160-450, the engine's gap included
                   "optimizer_host_s_per_step": 100, "other_host_s_per_step": 450}
    assert "GPU time" in fig["phases_source"]
