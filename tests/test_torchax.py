"""runtime=torchax (the train step as one jax.jit on JAX's CPU backend here) and parallel=jax_dp (data parallel over
a JAX mesh of 2 host-platform devices): the record's figures, no compilation in the timed windows, parity with
eager at the same steps, the 2-device mesh against one device at the same global batch, the optax mapping of
xbench's optimizers against torch's own, and the refusals before any work."""

from __future__ import annotations

import statistics

import pytest
import torch

from tests.conftest import FAST, cli_env, records, run_cli
from xbench import compat
from xbench.extras import installed
from xbench.metrics.parity import tolerance
from xbench.platforms.detect import HostFacts
from xbench.training.optim import make_optimizer

# Found, not imported: importing torchax registers "jax" as torch's accelerator, and torch's Adam/AdamW steps then fail
# in this process (pytorch/xla#9730); the runs that import it are fresh processes.
pytestmark = pytest.mark.skipif(not all(map(installed, ("torchax", "jax", "optax"))),
                                reason="runtime=torchax needs torchax, jax and optax (the default .venv has them)")

TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "data.batch_size=16", "bench.threads=1",
        "optim.lr=0.05")
CPU_HOST = HostFacts(logical_cores=2, torch_version=torch.__version__)


def _cfg(*overrides):
    from tests.test_runtimes import _cfg as compose_cfg

    return compose_cfg(*overrides)


def _m(rec: dict) -> dict:
    return rec["measurements"]


def _losses(rec: dict) -> dict[int, float]:
    return dict(zip(rec["series"]["step"], rec["series"]["loss"], strict=True))


# ---- the optimizer mapping: optax's update against torch's own, step by step, on the same gradients ----

@pytest.mark.parametrize("overrides", [
    {"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-2},
    {"name": "sgd", "momentum": 0.0, "weight_decay": 0.0},
    {"name": "adamw", "weight_decay": 0.05, "betas": [0.8, 0.99], "eps": 1e-6},
    {"name": "adamw", "weight_decay": 0.05, "no_decay_norm_bias": True},  # two groups: optax.multi_transform
    # optax.lars (||g + wd w|| in its trust ratio) is 0.038 away after 4 steps here; this mapping is within 1e-8
    {"name": "lars", "momentum": 0.9, "weight_decay": 0.5, "trust_coefficient": 0.1},
    {"name": "lars", "nesterov": True, "weight_decay": 1e-2, "no_decay_norm_bias": True},  # a group not adapted
    {"name": "lamb", "weight_decay": 0.01, "no_decay_norm_bias": True},
])
def test_optax_mapping_updates_as_torch_does(overrides):
    import jax
    import optax

    from xbench.config import OptimConfig
    from xbench.runtimes.torchax import optax_of

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
    opt = make_optimizer(OptimConfig(lr=0.1, **overrides), model)
    names = {id(p): n for n, p in model.named_parameters()}
    tx = optax_of(opt, names)
    weights = {n: jax.numpy.asarray(p.detach().numpy()) for n, p in model.named_parameters()}
    state = tx.init(weights)
    for _ in range(4):
        grads = {n: torch.randn_like(p) for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            p.grad = grads[n].clone()
        opt.step()
        updates, state = tx.update({n: jax.numpy.asarray(g.numpy()) for n, g in grads.items()}, state, weights)
        weights = optax.apply_updates(weights, updates)
    # fp32 rounding (torch's fused kernels order the arithmetic otherwise) is ~1e-6 here; a different rule is not:
    # weight decay coupled instead of decoupled, or left on the second group, moves a weight by ~1e-3 a step
    for n, p in model.named_parameters():
        assert abs(p.detach().numpy() - weights[n]).max() < 2e-5, n


# ---- refusals: one line each, before any work ----

@pytest.mark.parametrize("overrides, expect", [
    (("precision=amp_fp16",), "runtime torchax: precision amp_fp16 needs a gradient scaler, and torchax has none"),
    (("precision=tf32",), "runtime torchax: precision tf32 is a CUDA setting of torch's matmuls"),
    (("optim.accumulate_steps=2",), "runtime torchax: optim.accumulate_steps=2"),
    (("bench.mode=train_to_target",), "does not write them back: use bench.mode=throughput"),
    (("parallel=ddp",), "runtime torchax: parallel=ddp is a torch strategy"),
])
def test_unsupported_configs_are_refused_with_their_reason(overrides, expect):
    reasons = compat.check(_cfg("runtime=torchax", *overrides), CPU_HOST)
    assert any(r.startswith(expect) or expect in r for r in reasons), reasons
    assert all("\n" not in r for r in reasons)


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_supported_configs_pass(monkeypatch):
    for overrides in [(), ("precision=bf16",), ("precision=amp_bf16", "optim.name=adamw"), ("optim.name=lars",),
                      ("optim.name=lamb",)]:
        assert compat.check(_cfg("runtime=torchax", *overrides), CPU_HOST) == [], overrides
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert compat.check(_cfg("parallel=jax_dp"), CPU_HOST) == []


def test_jax_dp_on_the_cpu_needs_the_host_device_count_and_torchax(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    reasons = compat.check(_cfg("parallel=jax_dp"), CPU_HOST)
    assert reasons == ["parallel=jax_dp with parallel.world_size=2 on the CPU needs 2 JAX host devices: start xbench "
                       "with XLA_FLAGS=--xla_force_host_platform_device_count=2 in its environment (JAX reads it "
                       "once, when its CPU backend starts)"]
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    reasons = compat.check(_cfg("parallel=jax_dp", "runtime=eager"), CPU_HOST)
    assert any("only runtime=torchax drives" in r for r in reasons), reasons


@pytest.mark.slow
def test_refusal_is_one_line_before_any_work(store):
    p = run_cli("runtime=torchax", "precision=amp_fp16", "optim.accumulate_steps=2", *TINY, *FAST, store=store)
    [rec] = records(store)
    assert p.returncode == 1 and rec["status"] == "failed", p.stderr[-2000:]
    assert "torchax has none" in rec["reason"] and "optim.accumulate_steps=2" in rec["reason"]
    assert "throughput_samples_per_s" not in rec["measurements"] and "jax_platform" not in rec["measurements"]
    line = next(x for x in p.stdout.splitlines() if "FAILED" in x)
    assert "torchax has none" in line and "optim.accumulate_steps=2" in line


# ---- real runs: the CLI in a fresh process ----

@pytest.mark.slow
def test_throughput_record_has_the_runtime_figures_and_no_timed_compilation(store):
    p = run_cli("runtime=torchax", *TINY, *FAST, "bench.repeats=2", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    m = _m(rec)
    assert rec["status"] == "ok" and m["jax_platform"] == "cpu" and m["jax_mesh_devices"] == 1
    # compiled in warm-up, never in the timed windows (nothing traced there either: no jit cache miss)
    assert m["compiles_warmup"] >= 1 and m["compiles_timed"] == 0 and m["jax_compiles_timed"] == 0
    assert m["jax_traces"] >= 1 and m["jax_traces_timed"] == 0
    assert m["compile_time_s"] > 0 and m["jax_backend_compile_s"] > 0
    assert m["compile_time_s"] == pytest.approx(m["jax_trace_s"] + m["jax_lower_s"] + m["jax_backend_compile_s"])
    assert m["first_step_s"] > m["step_time_s_median"]  # the first step compiled
    assert m["step_time_source"] == "host" and "jax.block_until_ready" in m["step_time_clock"]
    # the throughput is the windows' median of their samples over their wall time
    assert m["samples_per_window"] == 16 * 5
    assert m["throughput_samples_per_s"] == pytest.approx(statistics.median(80 / w for w in m["window_s"]), rel=1e-6)
    # FLOPs from the torch model, as for eager (2 x MAC: MLP 784-32-32-10; backward 2x forward but for the
    # first layer's input gradient, which nothing needs)
    forward = 2 * (784 * 32 + 32 * 32 + 32 * 10)
    assert m["flops_per_sample_forward"] == pytest.approx(forward, rel=0.01)
    assert m["flops_per_sample_train"] == pytest.approx(3 * forward - 2 * 784 * 32, rel=0.01)
    # memory: JAX's CPU reports none (absent, not 0); the host's peak is measured as for every run
    assert "device_memory_used_gib" not in m and "Device.memory_stats() is None" in m["device_memory_unavailable"]
    assert m["peak_host_rss_gib"] > 0
    assert m["loss_last"] < m["loss_first"]
    # torch.profiler's breakdown does not see JAX's execution: the record says so
    assert any("does not see JAX's execution" in w for w in rec["warnings"]), rec["warnings"]


@pytest.mark.serial  # the steps compared start after warm-up, which runs longer under load
@pytest.mark.slow
@pytest.mark.parametrize("precision, optim", [("fp32", "optim.name=sgd optim.nesterov=true optim.weight_decay=0.01"),
                                              ("amp_bf16", "optim.name=adamw optim.weight_decay=0.05 optim.lr=0.005"),
                                              ("fp32", "optim.name=lars optim.weight_decay=0.01 "
                                                       "optim.no_decay_norm_bias=true optim.lr=1")])
def test_parity_with_eager(store, precision, optim):
    """xbench.parity: the same seed, weights and batches under eager and torchax, losses at the same steps."""
    p = run_cli("--a=runtime=eager", "--b=runtime=torchax", "--steps=6", f"precision={precision}", *TINY, *FAST,
                *optim.split(), store=store, module="xbench.parity")
    recs = records(store)
    verdict = next(r for r in recs if r["experiment"] == "parity")
    assert p.returncode == 0 and verdict["status"] == "ok", (verdict.get("reason"), p.stderr[-2000:])
    eager, tax = (next(r for r in recs if r["config"]["runtime"]["name"] == n) for n in ("eager", "torchax"))
    a, b = _losses(eager), _losses(tax)
    steps = sorted(set(a) & set(b))[:6]  # what parity compared (later, near-zero losses magnify rounding)
    assert len(steps) == 6
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
    # fp32: the same arithmetic in another order (XLA's kernels); amp_bf16: torchax's autocast table vs torch's, an
    # 8-bit significand whose rounding the updates carry on (xbench.metrics.parity's bf16 tolerance)
    assert worst < (1e-5 if precision == "fp32" else tolerance(precision, precision)), worst
    if precision == "amp_bf16":
        assert _m(tax)["autocast_dtype"] == _m(eager)["autocast_dtype"] == "bfloat16"
        assert abs(a[0] - b[0]) / a[0] < 1e-3  # step 0: the same weights and batch, one bf16 forward each


@pytest.mark.serial  # compares losses step by step after warm-up
@pytest.mark.slow
def test_two_device_mesh_trains_the_global_batch_as_one_device(store):
    """parallel=jax_dp over 2 host-platform devices at 8 per device against one device at 16: the same 16 samples
    per step, the same losses; the record's batch figures count both devices."""
    env = cli_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    p = run_cli("--a=parallel=single data.batch_size=16", "--b=parallel=jax_dp parallel.world_size=2 data.batch_size=8",
                "--steps=6", "runtime=torchax", *TINY[:3], *TINY[4:], *FAST, store=store, env=env,
                module="xbench.parity")
    recs = records(store)
    verdict = next(r for r in recs if r["experiment"] == "parity")
    assert p.returncode == 0 and verdict["status"] == "ok", (verdict.get("reason"), p.stderr[-2000:])
    one, mesh = (next(r for r in recs if r["config"]["parallel"]["name"] == n) for n in ("single", "jax_dp"))
    m1, m2 = _m(one), _m(mesh)
    assert (m1["jax_mesh_devices"], m2["jax_mesh_devices"]) == (1, 2)
    assert m2["jax_mesh_shape"] == [2] and m2["jax_mesh_device_ids"] == [0, 1]
    assert (m2["batch_size_per_device"], m2["devices_per_rank"], m2["samples_per_step"]) == (8, 2, 16)
    assert m2["global_batch_size"] == m1["global_batch_size"] == 16
    assert m2["compiles_timed"] == m2["jax_traces_timed"] == 0
    a, b = _losses(one), _losses(mesh)
    steps = sorted(set(a) & set(b))
    assert len(steps) >= 6 and max(abs(a[s] - b[s]) / a[s] for s in steps[:6]) < 1e-5
