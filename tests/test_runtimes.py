"""Runtimes: compile, XLA on CPU (for real, PJRT_DEVICE=CPU), Accelerate; their compat rules; parity;
the break-even arithmetic; and xbench running without torch-xla (absence simulated honestly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import CONF, FAST, REPO, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench import compat
from xbench.analysis.frame import to_frame
from xbench.analysis.overhead import versus_eager
from xbench.config import register_configs
from xbench.metrics.overhead import break_even
from xbench.metrics.parity import compare_losses, tolerance
from xbench.platforms.detect import HostFacts
from xbench.records.record import RunRecord

# A tiny MLP on MNIST-shaped data, one thread: seconds per run even under XLA on a shared CPU.
TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "data.batch_size=16", "bench.threads=1",
        "optim.lr=0.05")


def _cfg(*overrides):
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="config", overrides=list(overrides)))


HERE = HostFacts(torch_xla=True, accelerate=True, logical_cores=2, torch_version="2.9.0")


HIDE_XLA = '''
import sys
class _NoXla:
    """Behave as if torch-xla were not installed: importing it fails like a missing package."""
    def find_spec(self, name, path=None, target=None):
        if name == "torch_xla" or name.startswith("torch_xla."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoXla())
'''


def _jobs(root: Path) -> dict:
    """{test name: (what it runs, its store)}: the module's fresh processes (the real CLI, xbench.parity, the
    overhead bench), independent of each other."""
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_XLA)
    xla_env = cli_env(PJRT_DEVICE="CPU")
    return {
        "test_bench_overhead_quick_prints_ratios_for_xla": (lambda _: subprocess.run(
            [sys.executable, "scripts/bench_overhead.py", "--quick", "--runtime", "xla"], cwd=REPO,
            env=cli_env(PYTHONPATH=str(REPO), PJRT_DEVICE="CPU"), capture_output=True, text=True, timeout=600), None),
        "test_parity_fails_with_a_different_learning_rate": (lambda store: run_cli(
            "--a=runtime=eager", "--b=runtime=accelerate optim.lr=0.5", "--steps=6", *TINY, *FAST, store=store,
            module="xbench.parity"), root / "parity_lr"),
        "test_xla_on_cpu_trains_without_compiling_in_the_window_fp32_and_bf16": (lambda store: run_cli(
            "-m", "runtime=xla", "precision=fp32,bf16", *TINY, *FAST, "bench.steps=8", store=store, env=xla_env),
            root / "xla"),
        "test_xbench_runs_without_torch_xla_and_says_why_xla_cannot": (lambda store: run_cli(
            "-m", "runtime=eager,xla", *TINY, *FAST, store=store, env=cli_env(PYTHONPATH=f"{site}:{REPO}")),
            root / "no_xla"),
    }


@pytest.fixture(scope="module")
def cli_runs(request, tmp_path_factory):
    """(the started jobs, {test name: its store}) (tests/jobs.py). The processes are independent and mostly on one
    core (Python start-up, bench.threads=1), so the ones the session selected start together, three at a time,
    the longest first, at the first test that needs one: both cores work, and each test waits for its own. The
    eager-vs-compile parity runs alone, before them: run beside them once on a loaded machine, compile's loss left
    eager's at the first timed step (2.33 against 1.99); run alone, twice, they matched to 1.2e-7."""
    jobs = _jobs(tmp_path_factory.mktemp("runtimes_cli"))
    with Jobs(request, workers=3) as started:
        for name, (run, store) in jobs.items():
            started.submit(name, run, store)
        yield started, {name: store for name, (_, store) in jobs.items()}


def _finished(cli_runs, name):
    started, stores = cli_runs
    return started[name], stores[name]


@pytest.mark.parametrize("overrides,facts,expect", [
    (("runtime=xla",), HostFacts(torch_xla=False, accelerate=True, logical_cores=2), "needs torch-xla"),
    (("runtime=xla_compile",), HostFacts(torch_xla=False, accelerate=True, logical_cores=2), "needs torch-xla"),
    (("runtime=accelerate",), HostFacts(torch_xla=True, accelerate=False, logical_cores=2), "needs HF Accelerate"),
    (("runtime=xla", "precision=amp_fp16"), HERE, "amp_fp16"),
    (("runtime=xla", "precision=tf32"), HERE, "tf32 needs a CUDA GPU"),
    (("runtime=compile", "runtime.backend=nosuch"), HERE, "unknown to torch.compile"),
    (("runtime=compile", "runtime.backend=openxla"), HERE, "runs on XLA devices"),
    (("runtime=compile", "runtime.mode=fastest"), HERE, "runtime.mode='fastest' is unknown; allowed: null, default, reduce-overhead"),
    (("runtime=compile", "runtime.target=loop"), HERE, "runtime.target='loop' is unknown; allowed: model, step"),
    (("runtime=xla_compile", "runtime.backend=inductor"), HERE, "allowed: torch_xla, openxla"),
    (("runtime=eager", "platform=tpu_v3_8"), HERE, "only runtime=xla or runtime=xla_compile"),
    (("+experiment=resnet50_tpu",), HERE, "this machine has no TPU"),
])
def test_invalid_runtime_pairs_fail_with_their_reason(overrides, facts, expect, monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    reasons = compat.check(_cfg(*overrides), facts)
    assert any(expect in r for r in reasons), reasons


@pytest.mark.parametrize("overrides", [("runtime=xla", "precision=bf16"), ("runtime=xla", "precision=amp_bf16"),
                                       ("runtime=compile",), ("runtime=compile_step",), ("runtime=xla_openxla",),
                                       ("runtime=accelerate",), ("runtime=compile_max_autotune",)])
def test_valid_runtime_pairs_pass(overrides):
    assert compat.check(_cfg(*overrides), HERE) == []


def test_break_even_pays_back_only_when_faster():
    eager = {"window_s_total": 1.0, "timed_steps_per_window": 10, "repeats": 1}  # 0.1 s/step
    fast = {"window_s_total": 0.5, "timed_steps_per_window": 10, "repeats": 1, "compile_time_s": 20.0}
    slow = {"window_s_total": 2.0, "timed_steps_per_window": 10, "repeats": 1, "compile_time_s": 20.0}
    assert break_even(fast, eager) == pytest.approx({"speedup_vs_eager": 2.0, "break_even_steps_vs_eager": 400.0})
    assert break_even(slow, eager)["break_even_steps_vs_eager"] is None
    cfg = {"model": {"name": "mlp"}, "runtime": {"name": "eager"}}
    recs = [{"run_id": "e", "status": "ok", "config": cfg, "measurements": eager},
            {"run_id": "c", "status": "ok", "config": {**cfg, "runtime": {"name": "compile"}}, "measurements": fast},
            {"run_id": "o", "status": "ok", "config": {"model": {"name": "cnn"}, "runtime": {"name": "compile"}},
             "measurements": fast}]
    rows = to_frame([RunRecord(**r) for r in recs])
    assert versus_eager(rows) == {"c": break_even(fast, eager)}  # "o" has no eager twin


def test_parity_comparison_and_tolerance():
    assert tolerance("fp32", "bf16") == tolerance("bf16", "bf16") > tolerance("fp32", "fp32")
    same = compare_losses([2.3, 2.0, 1.5], [2.3, 2.0000001, 1.5], 3, 1e-3)
    assert same["parity_passed"] and same["parity_max_rel_dev"] < 1e-6
    off = compare_losses([2.3, 2.0, 1.5], [2.3, 1.9, 1.0], 3, 1e-3)
    assert not off["parity_passed"] and off["parity_worst_step"] == 2
    with pytest.raises(ValueError, match="needs 3 losses"):
        compare_losses([1.0], [1.0, 2.0, 3.0], 3, 1e-3)


@pytest.mark.serial  # the steps compared start after warm-up
@pytest.mark.slow
def test_parity_eager_vs_compile_passes_and_compile_reports_its_cost(store):
    """Alone, before the module's background runs start (the next test): losses compared step by step."""
    p = run_cli("--a=runtime=eager", "--b=runtime=compile", "--steps=6", *TINY, *FAST,
                store=store, module="xbench.parity")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    recs = records(store)
    parity = next(r for r in recs if r["experiment"] == "parity")
    assert parity["status"] == "ok" and parity["measurements"]["parity_passed"]
    assert parity["measurements"]["parity_max_rel_dev"] <= parity["measurements"]["parity_tolerance_rel"]
    comp = next(r for r in recs if r["config"].get("runtime", {}).get("name") == "compile")
    m = comp["measurements"]
    assert comp["status"] == "ok" and m["compile_time_s"] > 0 and m["compiles_warmup"] >= 1
    assert m["compiles_timed"] == 0 and m["dynamo_graph_breaks"] == 0 and "graph_breaks" not in m  # one name per figure


@pytest.mark.slow
@pytest.mark.xla
def test_xla_on_cpu_trains_without_compiling_in_the_window_fp32_and_bf16(cli_runs):
    """One process, two points (torch_xla imported once): fp32 and bf16 parameters on XLA:CPU."""
    p, store = _finished(cli_runs, "test_xla_on_cpu_trains_without_compiling_in_the_window_fp32_and_bf16")
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["config"]["precision"]["name"]: r for r in records(store)}
    assert set(recs) == {"fp32", "bf16"}
    for name, r in recs.items():
        m = r["measurements"]
        assert r["status"] == "ok", r["reason"]
        assert m["pjrt_device"] == "CPU"
        assert m["compiles_timed"] == 0, f"{name}: compilation inside the timed window"
        assert 1 <= m["compiles_warmup"] <= 4, m["compiles_warmup"]  # step 0, then step 1 with optimizer state
        assert m["compile_time_s"] > 0 and m["xla_trace_s_median"] > 0
        # PJRT's CPU client keeps no allocator statistics: the record says so instead of a number.
        assert m["device_memory_unavailable"].startswith("CPU: ") and "peak_device_used_gib" not in m
        assert m["peak_host_rss_gib"] > 0.1
        assert not any("compilation(s) during a timed window" in w for w in r["warnings"])
        losses = r["series"]["loss"]
        assert min(losses[-4:]) < losses[0], f"{name}: loss did not go down: {losses}"
    assert recs["bf16"]["measurements"]["compute_dtype"] == "bf16"


@pytest.mark.serial  # the steps compared start after warm-up
@pytest.mark.slow
def test_parity_fails_with_a_different_learning_rate(cli_runs):
    p, store = _finished(cli_runs, "test_parity_fails_with_a_different_learning_rate")
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-3000:]
    recs = records(store)
    parity = next(r for r in recs if r["experiment"] == "parity")
    assert parity["status"] == "failed" and "parity: losses differ" in parity["reason"]
    acc = next(r for r in recs if r["config"].get("runtime", {}).get("name") == "accelerate")
    assert acc["status"] == "ok" and acc["measurements"]["accelerate_device"] == "cpu"  # Accelerate trains




@pytest.mark.slow
def test_xbench_runs_without_torch_xla_and_says_why_xla_cannot(cli_runs):
    p, store = _finished(cli_runs, "test_xbench_runs_without_torch_xla_and_says_why_xla_cannot")
    site = store.parent / "site"
    env = cli_env(PYTHONPATH=f"{site}:{REPO}")
    probe = subprocess.run([sys.executable, "-c", "import torch_xla"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named" in probe.stderr  # the hook really hides it
    assert p.returncode == 1  # the sweep ran both points; one did not succeed
    recs = {r["config"]["runtime"]["name"]: r for r in records(store)}
    assert recs["eager"]["status"] == "ok", recs["eager"]["reason"]
    assert recs["xla"]["status"] == "failed" and "needs torch-xla" in recs["xla"]["reason"]
    assert "torch_xla" not in recs["eager"]["env"].get("torch", {}).get("host_facts", {}) or \
        recs["eager"]["env"]["torch"]["host_facts"]["torch_xla"] is False


@pytest.mark.slow
@pytest.mark.xla
def test_bench_overhead_quick_prints_ratios_for_xla(cli_runs):
    """The bench's short mode on XLA:CPU (the eager case runs in the device check's dry run): a ratio
    with its interval, and the same compilations on both sides, none inside a timed window."""
    p, _ = _finished(cli_runs, "test_bench_overhead_quick_prints_ratios_for_xla")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ratio xbench/hand" in p.stdout
    r = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    assert r["runtime"] == "xla" and r["pairs"] == 2 and r["ratio_median"] > 0
    assert r["ratio_ci95"] == [None, None] and "no CI: 2 samples" in r["ratio_ci95_text"]  # 2 pairs: no CI
    assert r["xbench_compiles_timed"] == r["hand_compiles_timed"] == 0
    assert r["xbench_compiles_warmup"] == r["hand_compiles_warmup"] >= 1


def test_xla_host_overhead_fraction_is_derived_from_tracing_time():
    from xbench.metrics.derived import derive

    m = {"xla_trace_s_median": 0.002, "window_s_total": 1.0, "timed_steps_per_window": 100, "repeats": 1}
    assert derive(m, {})["host_overhead_fraction"] == pytest.approx(0.2)
    assert "host_overhead_fraction" not in derive({**m, "xla_trace_s_median": None}, {})
