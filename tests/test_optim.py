"""The optimizers' kernels for real on this CPU: SGD/AdamW fused where torch has fused kernels, so the
amp_fp16 gradient scaler takes its no-sync path (device-to-host reads counted per step), LARS/LAMB too; their
whole-group foreach update against the per-parameter reference (tests/optim_reference.py) to 1e-6, and
LAMB's step compiled by dynamo without recompiling as the step count grows."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.optim_reference import ReferenceLAMB, ReferenceLARS
from xbench.config import OptimConfig
from xbench.precision import resolve
from xbench.training import optim
from xbench.training.step import make_train_step


class HostReads(TorchDispatchMode):
    """Counts `aten._local_scalar_dense`: the op behind every `.item()` / `bool(tensor)`, the one a CUDA
    stream waits on (a device-to-host sync). On the CPU it does not wait, but it is the same call site.
    Reads of `optimizer`'s step counters are left out: torch's unfused Adam keeps them on the host
    (`capturable=False`), so on CUDA reading them is no sync."""

    def __init__(self, optimizer=None):
        super().__init__()
        self.count = 0
        self.optimizer = optimizer

    def _host_counter(self, t) -> bool:
        return self.optimizer is not None and any(t is s.get("step") for s in self.optimizer.state.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not self._host_counter(args[0]):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _fp16_with_scaler():
    """amp_fp16 as xbench runs it on CUDA (fp16 autocast + a dynamic GradScaler), on the CPU: torch 2.9 has
    both CPU fp16 autocast and GradScaler("cpu"), whose step takes the same two paths as on CUDA."""
    return dataclasses.replace(resolve("amp_bf16", "cpu"), name="amp_fp16", autocast_dtype=torch.float16,
                               scaler=torch.amp.GradScaler("cpu"), compute_dtype="fp16")


def _host_reads_per_step(optimizer, model, steps: int = 3) -> list[int]:
    precision = _fp16_with_scaler()
    step = make_train_step(model, optimizer, "classify", precision)
    g = torch.Generator().manual_seed(1)
    counts = []
    for _ in range(steps):
        x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        with HostReads(optimizer) as reads:
            step(x, y)
        counts.append(reads.count)
    return counts


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_fused_optimizers_let_the_fp16_scaler_step_without_a_host_sync(name):
    cfg = OptimConfig(name=name, weight_decay=1e-4, no_decay_norm_bias=True,
                      **({"betas": [0.9, 0.999]} if name == "adamw" else {}))
    model = _mlp()
    opt = optim.make_optimizer(cfg, model, lr=0.01)
    assert all(g["fused"] for g in opt.param_groups)  # CPU has fused SGD/AdamW in torch 2.9
    assert optim.optimizer_figures(opt, torch.amp.GradScaler("cpu")) == {"optimizer_impl": "fused",
                                                                       "scaler_syncs_per_step": 0}
    assert _host_reads_per_step(opt, model) == [0, 0, 0]
    # torch's default kernels (what make_optimizer built before): GradScaler reads found_inf once a step
    model = _mlp()
    plain = (torch.optim.SGD if name == "sgd" else torch.optim.AdamW)(model.parameters(), lr=0.01)
    assert _host_reads_per_step(plain, model) == [1, 1, 1]
    assert optim.optimizer_figures(plain, torch.amp.GradScaler("cpu")) == {"optimizer_impl": "for_loop",
                                                                         "scaler_syncs_per_step": 1}


def test_lars_lamb_let_the_fp16_scaler_step_without_a_host_sync_and_say_so():
    """They take the scaler's protocol as fused Adam does (tests/test_optim_amp_scaling.py); was 1 read a step."""
    for name in ("lars", "lamb"):
        model = _mlp()
        opt = optim.make_optimizer(OptimConfig(name=name), model, lr=0.01)
        assert _host_reads_per_step(opt, model) == [0, 0, 0]
        assert optim.optimizer_figures(opt, torch.amp.GradScaler("cpu")) == {"optimizer_impl": "foreach",
                                                                           "scaler_syncs_per_step": 0}
        assert optim.optimizer_figures(opt) == {"optimizer_impl": "foreach"}  # no scaler: no count


def test_a_step_compiled_whole_keeps_torchs_default_kernels():
    """dynamo does not trace into a fused optimizer (a graph break, "don't trace into fused optimizer"), so a
    step compiled whole (runtime.target=step) keeps the traceable default; XLA tensors have no fused kernels."""
    opt = optim.make_optimizer(OptimConfig(name="sgd"), _mlp(), lr=0.01, traced=True)
    assert not opt.param_groups[0].get("fused") and optim.optimizer_figures(opt)["optimizer_impl"] == "for_loop"
    assert optim.implementation([torch.zeros(2)]) == "fused"
    assert optim.implementation([torch.zeros(2, dtype=torch.int64)]) == "for_loop"  # fused kernels: floats only
    assert optim.implementation([torch.zeros(2, device="meta")]) == "for_loop"


# ---------- LARS / LAMB: whole-group foreach == the per-parameter reference ----------

class _Net(torch.nn.Module):
    """Weights, a norm and biases (the excluded group), a zero-initialised layer (||w|| = 0 at the first
    step), a weight whose gradient is zero (||g|| = 0) and an unused one (no gradient at all)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.zero = torch.nn.Linear(8, 8)
        torch.nn.init.zeros_(self.zero.weight)
        self.b = torch.nn.Linear(8, 3)
        self.still = torch.nn.Parameter(torch.randn(3, 3))  # gradient set to zeros after backward
        self.unused = torch.nn.Parameter(torch.randn(4, 4))  # never in the graph: grad None

    def forward(self, x):
        h = torch.relu(self.norm(self.a(x)))
        return self.b(h + self.zero(h))


def _run(make, steps: int = 6):
    net = _Net()
    groups = optim.param_groups(net, 0.0, no_decay_norm_bias=True)
    groups[0]["weight_decay"] = 0.05  # large enough to matter in 6 steps
    opt = make(groups)
    g = torch.Generator().manual_seed(2)
    for _ in range(steps):
        x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        net.still.grad = torch.zeros_like(net.still)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return net, opt


@pytest.mark.parametrize("cls, ref, kw", [
    (optim.LARS, ReferenceLARS, dict(lr=2.0, momentum=0.9, trust_coefficient=0.02)),
    (optim.LARS, ReferenceLARS, dict(lr=2.0, momentum=0.9, nesterov=True, trust_coefficient=0.02, eps=1e-9)),
    (optim.LARS, ReferenceLARS, dict(lr=0.5, momentum=0.0, trust_coefficient=0.001)),
    (optim.LAMB, ReferenceLAMB, dict(lr=0.02, betas=(0.9, 0.999), eps=1e-6)),
    (optim.LAMB, ReferenceLAMB, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-8)),
], ids=["lars", "lars-nesterov", "lars-no-momentum", "lamb", "lamb-betas"])
def test_foreach_lars_lamb_match_the_per_parameter_reference(cls, ref, kw):
    ours, ours_opt = _run(lambda groups: cls(groups, **kw))
    theirs, _ = _run(lambda groups: ref(groups, **kw))
    start = _Net()
    for (name, p), q, p0 in zip(ours.named_parameters(), theirs.parameters(), start.parameters()):
        assert (p - q).abs().max().item() <= 1e-6, name
        moved = not torch.equal(p, p0)
        assert moved == (name != "unused"), name  # every parameter with a gradient trained, even from ||w|| = 0
    assert not torch.equal(ours.zero.weight, torch.zeros_like(ours.zero.weight))  # trust ratio 1 at ||w|| = 0
    if cls is optim.LAMB:
        steps = {float(s["step"]) for s in ours_opt.state.values()}
        assert steps == {6.0} and all(s["step"].dim() == 0 for s in ours_opt.state.values())
        assert ours.unused not in ours_opt.state


def test_lars_lamb_step_is_one_vectorised_call_per_op_not_one_per_parameter():
    """The number of kernels the step dispatches does not grow with the number of parameters' Python
    iterations: counted as ATen calls made from Python (foreach ops count once; views, which launch no kernel,
    not at all: optim._spread hands each parameter a view of one buffer)."""

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += not func.is_view
            return func(*args, **(kwargs or {}))

    def calls(cls, width: int, **kw) -> int:
        ps = [torch.nn.Parameter(torch.randn(3, 3)) for _ in range(width)]
        for p in ps:
            p.grad = torch.randn(3, 3)
        opt = cls([{"params": ps, "weight_decay": 0.01, "adapt": True}], lr=0.1, **kw)
        opt.step()  # state created
        with Calls() as c:
            opt.step()
        return c.n

    for cls in (optim.LARS, optim.LAMB):
        assert calls(cls, 4) == calls(cls, 32), cls.__name__  # the reference makes ~10 calls per parameter
    assert calls(ReferenceLARS, 32) > calls(ReferenceLARS, 4)


def test_compiled_lamb_step_does_not_recompile_as_the_step_count_grows():
    """The step count is a tensor: dynamo sees the same graph every step. The reference's Python-int
    count is a new constant each step, and dynamo recompiles it (then marks it dynamic)."""
    from torch._dynamo.utils import counters

    def graphs_per_step(cls) -> list[int]:
        torch._dynamo.reset()
        counters.clear()
        net = _Net()
        opt = cls(optim.param_groups(net, 0.01, no_decay_norm_bias=True), lr=0.01)
        step = torch.compile(opt.step, backend="eager")
        out = []
        for i in range(6):
            torch.nn.functional.cross_entropy(net(torch.randn(4, 6)), torch.tensor([0, 1, 2, i % 3])).backward()
            step()
            opt.zero_grad(set_to_none=True)
            out.append(counters["stats"]["unique_graphs"])
        return out

    ours = graphs_per_step(optim.LAMB)
    assert ours[1] == ours[-1], ours  # first step creates the state (its own graph); none after the second
    theirs = graphs_per_step(ReferenceLAMB)
    assert theirs[-1] > theirs[1], theirs
    torch._dynamo.reset()
