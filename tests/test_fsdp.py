"""parallel=fsdp (xbench/parallel/fsdp.py): FSDP2 over 2 gloo ranks for real, memory per device against DDP
at the same global batch, and the strategy's refusals before any work.

The gloo runs share one module fixture: five runs through the Python API in this process (the CLI's runner;
their ranks are fresh processes either way), DDP, FSDP2, FSDP2 with activation checkpointing, FSDP2 with
per-block torch.compile, and find_max_batch under FSDP2. The XLA:CPU run is the real CLI, run once per session
for this module and test_xla_fsdp_hlo.py (tests/xla_runs.py)."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, records
from tests.xla_runs import xla_fsdp_runs  # noqa: F401  (the fixture: the session's xla_fsdp run)
from xbench.config import XBenchConfig
from xbench.platforms.detect import HostFacts

LLM = ("+workload=llama_tiny_tokens", "platform=cpu", "precision=amp_bf16", "parallel.world_size=2")


# One run each, in this process (xbench.run), its own store; the FSDP2 run without checkpointing serves both the
# memory claim against DDP and the checkpointing one.
GLOO_RUNS = {"ddp": ("parallel=ddp",), "fsdp": ("parallel=fsdp",),
             "fsdp_ac": ("parallel=fsdp", "parallel.activation_checkpointing=true"),
             "fsdp_compile": ("parallel=fsdp", "parallel.compile_blocks=true"),
             "max_batch": ("parallel=fsdp", "bench.mode=find_max_batch", "bench.max_batch_limit=8")}


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory) -> dict:
    """{name: its record as stored}; every run ok (a failed one fails here, with its reason)."""
    import xbench

    root = tmp_path_factory.mktemp("fsdp_gloo")
    out = {}
    for name, extra in GLOO_RUNS.items():
        rec = xbench.run([*FAST, *LLM, *extra, f"store.root={root / name}"])
        assert rec.status == "ok", (name, rec.reason)
        [out[name]] = records(root / name)
    return out


def _check(cfg, **facts):
    from xbench import compat

    return compat.check(cfg, HostFacts(torch_xla=True, logical_cores=2, torch_version="2.9.0", **facts))


def _fsdp_cfg(*overrides: str) -> XBenchConfig:
    """The config the CLI composes for the tiny decoder under parallel=fsdp (and `overrides`)."""
    from omegaconf import OmegaConf

    from xbench.api import compose

    return OmegaConf.to_object(compose([*LLM, "parallel=fsdp", "logger=none", *overrides]))


def test_fsdp_config_is_accepted_and_its_options_read():
    from xbench.parallel.fsdp import options

    assert _check(_fsdp_cfg()) == []
    o = options(_fsdp_cfg("parallel.reshard_after_forward=false").parallel)
    assert o["param_dtype"] == "bf16" and o["reduce_dtype"] == "fp32" and o["reshard_after_forward"] is False


@pytest.mark.parametrize("overrides,words", [
    (["parallel.shard_size=3"], "parallel.shard_size=3 does not divide parallel.world_size=2"),
        (["parallel.param_dtype=int8"], "parallel.param_dtype='int8' is unknown; allowed: bf16, fp32"),
    (["precision=amp_fp16"], "sharded gradient scaler"),
    (["precision=fp32", "parallel.param_dtype=bf16"], "computes in bf16, but precision=fp32"),
    (["parallel.backend=nccl"], "parallel.backend=nccl needs CUDA GPUs"),
    (["runtime=xla"], "runtime=eager or compile"),
])
def test_bad_fsdp_configs_are_refused_before_work(overrides, words):
    reasons = _check(_fsdp_cfg(*overrides))
    assert any(words in r for r in reasons), reasons


def test_a_model_that_cannot_fit_even_sharded_is_refused():
    """Llama 3.1 8B's fp32 parameters + gradients + AdamW state are 16 bytes x 8.03B = 119.7 GiB: over 2 ranks
    of 40 GiB devices that is 59.8 GiB each, refused with the shards it would need; over 8 of them, 15 GiB, fine."""
    cfg = _fsdp_cfg("model=llama3_8b", "data.vocab_size=128256", "platform.memory_gib=40")
    [reason] = [r for r in _check(cfg) if "cannot fit" in r]
    assert "8.03B parameters" in reason and "59.8 GiB per device" in reason and "at least 3 shards" in reason
    cfg.parallel.world_size = 8
    assert not [r for r in _check(cfg) if "cannot fit" in r]


@pytest.mark.slow
def test_fsdp_halves_parameter_gradient_and_optimizer_memory_against_ddp(gloo_runs):
    """The same tiny decoder and global batch on 2 gloo ranks under DDP and FSDP2: FSDP's parameters +
    gradients + optimizer state per device, read from the local shards, are half of DDP's (within 10%);
    parameters are DTensors, both train, both record tokens/s and memory per device."""
    recs = {r["config"]["parallel"]["name"]: r for r in (gloo_runs["ddp"], gloo_runs["fsdp"])}
    assert sorted(recs) == ["ddp", "fsdp"]
    for name, r in recs.items():
        m = r["measurements"]
        assert r["status"] == "ok", r["reason"]
        assert m["world_size"] == 2 and m["global_batch_size"] == 8 and m["loss_first"] != m["loss_last"], name
        assert all(x["process_group_backend"] == "gloo" for x in r["ranks"])
        assert m["memory_activations_gib"] > 0
    fsdp_ranks = recs["fsdp"]["ranks"]
    assert all(x["fsdp_params_dtensor"] and x["fsdp_sharded_blocks"] == 2 for x in fsdp_ranks)
    assert len({x["params_local_sha256"] for x in fsdp_ranks}) == 2  # each rank holds its own shard
    ratio = recs["fsdp"]["measurements"]["memory_states_gib"] / recs["ddp"]["measurements"]["memory_states_gib"]
    assert ratio == pytest.approx(0.5, rel=0.10)
    for k in ("params", "grads", "optimizer"):
        assert recs["fsdp"]["ranks"][1][f"memory_{k}_gib"] < recs["ddp"]["ranks"][1][f"memory_{k}_gib"]


@pytest.mark.parametrize("overrides,words", [
    (["parallel.fsdp_size=3"], "parallel.fsdp_size=3 does not divide parallel.world_size=2"),
    (["parallel.shard_size=2"], "parallel.shard_size=2 is a FSDP option: it applies to parallel=fsdp, not parallel=xla_fsdp"),
    (["runtime=eager"], "use runtime=xla or runtime=xla_compile"),
])
def test_bad_xla_fsdp_configs_are_refused_before_work(overrides, words):
    from omegaconf import OmegaConf

    from xbench.api import compose

    cfg = OmegaConf.to_object(compose([*LLM, "parallel=xla_fsdp", "logger=none", *overrides]))
    reasons = _check(cfg)
    assert any(words in r for r in reasons), reasons


@pytest.mark.slow
@pytest.mark.xla
def test_xla_fsdp_shards_parameters_over_2_cpu_devices_with_no_timed_compiles(xla_fsdp_runs):  # noqa: F811
    """SPMD on 2 XLA:CPU devices: every parameter of the tiny decoder split along dim 0 over the fsdp axis,
    the batch over both mesh axes; a device holds half of the parameters and of AdamW's state; it trains,
    and after warm-up nothing compiles again. The run is the session's fp32 xla_fsdp run (tests/xla_runs.py,
    whose HLO test_xla_fsdp_hlo.py reads: bench.profile=xla adds its dumps, nothing else)."""
    p = xla_fsdp_runs["fsdp"]
    assert p.returncode == 0, p.stderr[-3000:]
    [r] = records(xla_fsdp_runs.root / "fsdp")
    m = r["measurements"]
    assert r["status"] == "ok" and m["devices"] == 2 and m["loss_first"] != m["loss_last"]
    assert m["xla_spmd_mesh_shape"] == [1, 2] and m["xla_spmd_axis_names"] == ["data", "fsdp"]
    assert m["xla_fsdp_sharded_params"] == m["xla_fsdp_params"] == 21
    assert m["xla_fsdp_param_sharding"] == m["xla_spmd_input_sharding"] == "{devices=[2,1]0,1}"
    full = m["params_count"] * 4 / 2**30
    assert m["memory_params_gib"] == pytest.approx(full / 2) and m["memory_optimizer_gib"] == pytest.approx(full)
    assert m["compiles_timed"] == 0


def test_ddp_refuses_a_model_whose_replica_cannot_fit_and_points_to_fsdp():
    """Under DDP every device keeps the whole 119.7 GiB of Llama 3.1 8B's fp32 states: on 80 GiB H100s it is
    refused before work, naming FSDP and the shards it needs; FSDP over the same 8 GPUs is accepted."""
    from omegaconf import OmegaConf

    from xbench.api import compose

    base = ["platform=aws_p5_48xlarge", "precision=amp_bf16", "parallel.world_size=8", "logger=none"]
    cuda = dict(cuda_devices=["NVIDIA H100 80GB HBM3"] * 8, cuda_memory_gib=[79.1] * 8, cuda_sm_counts=[132] * 8)
    ddp = OmegaConf.to_object(compose(["+workload=llama3_8b_c4_synthetic", *base, "parallel=ddp"]))
    [reason] = [r for r in _check(ddp, **cuda) if "cannot fit" in r]
    assert "under parallel=ddp over 1 shard(s)" in reason and "use parallel=fsdp" in reason and "at least 2" in reason
    fsdp = OmegaConf.to_object(compose(["+workload=llama3_8b_c4_synthetic", *base, "parallel=fsdp"]))
    assert not [r for r in _check(fsdp, **cuda) if "cannot fit" in r]


@pytest.mark.slow
def test_activation_checkpointing_under_fsdp_keeps_less_and_trains_the_same(gloo_runs):
    """Each block checkpointed inside its FSDP unit: autograd keeps under a quarter of the activations
    (3.6 MiB -> 0.42 MiB here), and the recomputation gives the same losses, bf16 casts included."""
    recs = {r["measurements"]["fsdp_activation_checkpointing"]: r["measurements"]
            for r in (gloo_runs["fsdp"], gloo_runs["fsdp_ac"])}
    assert sorted(recs) == [False, True]
    assert 0 < recs[True]["memory_activations_gib"] < 0.25 * recs[False]["memory_activations_gib"]
    assert recs[True]["memory_states_gib"] == recs[False]["memory_states_gib"]
    assert recs[True]["loss_last"] == pytest.approx(recs[False]["loss_last"], rel=1e-6)


@pytest.mark.slow
def test_fsdp_per_block_compile_records_its_compile_figures(gloo_runs):
    """parallel.compile_blocks=true under runtime=eager: FSDP compiles each block in place (inductor),
    and dynamo's meter counts it on every rank: compile time, compilations all in warm-up (the two identical
    blocks share one graph: 1 here), none in the timed window, nothing given up on. Cross-check on the
    loop's own clock: the compile happens inside the first step, and the slowest rank's compile is most of
    it (the other rank waits for it in the collectives; 61 and 76 s of a 77.5 s first step, loaded).
    The eager FSDP run, which compiles nothing, has no compile figures."""
    r = gloo_runs["fsdp_compile"]
    assert r["measurements"]["fsdp_compile_blocks"] is True
    assert not any("compilation(s) during a timed window" in w for w in r["warnings"]), r["warnings"]
    for m in r["ranks"]:
        assert m["compile_target"] == "blocks" and m["compile_backend"] == "inductor" and m["fsdp_sharded_blocks"] == 2
        assert m["compiles_warmup"] >= 1 and m["graphs_compiled"] == m["compiles_warmup"] and m["compiles_timed"] == 0
        assert m["warmup_stable"] and m["warmup_steps"] >= 3  # flat compile count over the last 2 steps
        assert 0 < m["compile_time_s"] <= m["first_step_s"]
        for k in ("dynamo_graph_breaks", "dynamo_recompiles", "dynamo_cache_limit_hits", "dynamo_eager_frames"):
            assert m[f"{k}_timed"] == 0, k
    assert max(m["compile_time_s"] for m in r["ranks"]) > 0.5 * r["measurements"]["first_step_s"]
    eager = gloo_runs["fsdp"]["measurements"]
    assert eager["compiles_warmup"] is None and "compile_time_s" not in eager


def test_fsdp_options_under_ddp_are_refused_not_ignored():
    from omegaconf import OmegaConf

    from xbench.api import compose

    cfg = OmegaConf.to_object(compose([*LLM, "parallel=ddp", "logger=none", "parallel.activation_checkpointing=true"]))
    assert "parallel.activation_checkpointing=True is a FSDP option: it applies to parallel=fsdp, not parallel=ddp" \
        in _check(cfg)
    assert _check(OmegaConf.to_object(compose([*LLM, "parallel=ddp", "logger=none"]))) == []


@pytest.mark.slow
def test_find_max_batch_runs_under_fsdp_on_2_gloo_ranks(gloo_runs):
    """bench.mode=find_max_batch parallel=fsdp: every trial trains the tiny decoder under FSDP2 on both ranks
    (its samples/s are the global batch's, 2 x the per-device batch, over its step time); the CPU has no
    out-of-memory to find, so the search doubles from 4 to bench.max_batch_limit=8 and says it stopped there."""
    r = gloo_runs["max_batch"]
    m = r["measurements"]
    assert r["status"] == "ok", r["reason"]
    assert r["config"]["parallel"]["name"] == "fsdp" and r["config"]["parallel"]["world_size"] == 2
    assert [t["batch_size"] for t in m["batch_search_trials"]] == [4, 8]
    assert all(t["fits"] for t in m["batch_search_trials"])
    assert m["max_batch_size_per_device"] == 8 and m["min_failing_batch_size_per_device"] is None
    assert m["batch_search_limit_reached"] is True
    for t in m["batch_search_trials"]:
        assert t["throughput_samples_per_s"] == pytest.approx(2 * t["batch_size"] / t["step_time_s"], rel=0.05)
