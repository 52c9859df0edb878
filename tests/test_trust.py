"""Measurement you can trust: sanity gates, energy counters, hardware-vs-platform checks, self-check."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.conftest import FAST, records
from xbench import compat
from xbench.bench.meters import energy
from xbench.config import XBenchConfig
from xbench.metrics.gates import batch_scaling_gate, mfu_gate, record_gates
from xbench.platforms.detect import HostFacts


def test_mfu_gate_thresholds():
    assert mfu_gate({"mfu": 0.40}) == []
    assert "above 65%" in mfu_gate({"mfu": 0.70})[0]
    assert mfu_gate({"mfu": 1.20})[0].startswith("measurement error: MFU 120%")
    assert mfu_gate({}) == [] and record_gates({}, {"mfu": 2.0})


def test_batch_scaling_gate_flags_throughput_that_falls_with_batch():
    assert batch_scaling_gate([(32, 1000.0), (64, 1900.0), (128, 1950.0)]) == []
    assert batch_scaling_gate([(64, 1000.0), (32, 980.0)]) == []  # flat within 5%, any order
    [w] = batch_scaling_gate([(32, 1000.0), (64, 600.0)])
    assert "fell from 1000 to 600" in w and "from 32 to 64" in w


def _rapl(tmp_path, energy_uj, max_uj):
    for i, (e, m) in enumerate(zip(energy_uj, max_uj)):
        d = tmp_path / f"intel-rapl:{i}"
        d.mkdir(exist_ok=True)
        (d / "energy_uj").write_text(f"{e}\n")
        (d / "max_energy_range_uj").write_text(f"{m}\n")
        sub = tmp_path / f"intel-rapl:{i}:0"  # a sub-domain (core): must not be counted twice
        sub.mkdir(exist_ok=True)
        (sub / "energy_uj").write_text("5\n")


def test_rapl_energy_with_counter_wraparound(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_ROOT", tmp_path)
    _rapl(tmp_path, [1_000_000, 999_000_000], [1_000_000_000, 1_000_000_000])
    meter = energy.EnergyMeter("cpu")
    meter.start()
    _rapl(tmp_path, [3_500_000, 1_000_000], [1_000_000_000, 1_000_000_000])  # package 1 wrapped
    out = meter.stop()
    assert out["energy_source"].startswith("rapl")
    assert out["energy_j"] == pytest.approx(2.5 + 2.0)


def test_energy_unavailable_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_ROOT", tmp_path / "absent")
    meter = energy.EnergyMeter("cpu")
    meter.start()
    assert "no RAPL domains" in meter.stop()["energy_unavailable"]
    assert "no energy counter" in energy.EnergyMeter("xla").stop()["energy_unavailable"]


def _cfg(**groups):
    cfg = OmegaConf.structured(XBenchConfig)
    base = {"model": {"name": "cnn_small"}, "data": {"name": "synthetic_cifar10"}, "platform": {"name": "local"},
            "runtime": {"name": "eager"}, "parallel": {"name": "single"}, "precision": {"name": "fp32"},
            "logger": {"name": "none"}}
    for k, v in {**base, **groups}.items():
        cfg[k] = OmegaConf.merge(cfg[k], v)
    return OmegaConf.to_object(cfg)


def test_tpu_platform_on_a_cpu_machine_is_an_error_before_work():
    cfg = _cfg(platform={"name": "tpu_v3_8", "device": "xla", "accelerator": "TPU v3"}, runtime={"name": "xla"})
    reasons = compat.check(cfg, HostFacts(torch_xla=True, logical_cores=2, tpu_chips=0))
    assert any("expects TPU v3 chips, but this machine has no TPU" in r for r in reasons), reasons
    assert not [r for r in compat.check(cfg, HostFacts(torch_xla=True, logical_cores=2, tpu_chips=4))
                if "has no TPU" in r]


def test_gpu_platform_without_that_gpu_is_an_error():
    cfg = _cfg(platform={"name": "h200", "device": "cuda", "accelerator": "H200"})
    reasons = compat.check(cfg, HostFacts(cuda_devices=["NVIDIA A100-SXM4-80GB"], logical_cores=2))
    assert any("expects accelerator 'H200'" in r and "A100" in r for r in reasons), reasons
    assert not compat.check(cfg, HostFacts(cuda_devices=["NVIDIA H200"], logical_cores=2))


@pytest.mark.slow
def test_self_check_measures_two_batch_sizes_and_energy_is_accounted_for(tmp_path):
    """Through the Python API in this process (the claim is the record's, not the process's)."""
    import xbench

    r = xbench.run([*FAST, "bench.self_check=true", "data.batch_size=16", f"store.root={tmp_path}"])
    assert r.status == "ok", r.reason
    [rec] = records(tmp_path)  # the stored record, as the CLI leaves it
    m = rec["measurements"]
    assert m["self_check_batch_sizes"] == [8, 16]
    assert len(m["self_check_throughput_samples_per_s"]) == 2 and min(m["self_check_throughput_samples_per_s"]) > 0
    assert ("energy_j" in m) != ("energy_unavailable" in m)  # either measured or the reason why not
    assert m["peak_host_rss_gib"] > 0.1


def test_every_mode_object_is_a_mode_a_run_can_name():
    """A `Mode` is what bench.mode names; the self-check is a step of throughput's (modes.throughput.self_check),
    not a Mode subclass no run could select."""
    import importlib

    from xbench import modes
    from xbench.modes.base import Mode

    named = {getattr(importlib.import_module(m), c) for m, c in (t.split(":") for t in modes.MODES.values())}
    importlib.import_module("xbench.modes.throughput")

    def every(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    assert {c for c in every(Mode) if c.__module__.startswith("xbench.")} == named


def test_run_energy_counts_each_counter_once_and_every_sample():
    """NVML meters each rank's own GPUs (the run's energy is the sum); RAPL is the host's packages,
    read by every rank (one reading). J/sample divides by every rank's samples in every window."""
    from xbench.metrics.aggregate import across_processes, aggregate

    def rank(i, joules, source):
        return {"rank": i, "device": "x", "window_s": [1.0, 1.0], "samples_per_window": 100, "samples_per_step": 10,
                "data_wait_s": 0.0, "peak_host_rss_gib": 1.0, "energy_j": joules, "energy_source": source}

    gpu = aggregate([rank(0, 30.0, "nvml"), rank(1, 50.0, "nvml")])
    assert gpu["energy_j"] == 80.0 and gpu["energy_j_per_sample"] == pytest.approx(80.0 / 400)
    cpu = aggregate([rank(0, 60.0, "rapl (CPU packages)"), rank(1, 61.0, "rapl (CPU packages)")])
    assert cpu["energy_j"] == 61.0 and cpu["energy_j_per_sample"] == pytest.approx(61.0 / 400)
    two = across_processes([[rank(0, 30.0, "nvml")], [rank(0, 34.0, "nvml")]])
    assert two["energy_j"] == 64.0 and two["energy_j_per_sample"] == pytest.approx(64.0 / 400)
    unmetered = {k: v for k, v in rank(0, 1.0, "nvml").items() if not k.startswith("energy")}
    assert "energy_j_per_sample" not in aggregate([rank(0, 1.0, "nvml"), unmetered])  # one rank had no counter


# ---- a finite blow-up is a divergence (bench/loop.py rule 9) ------------------------------------------

def _hooks(losses, factor=1000.0):
    from xbench.bench import loop

    it = iter(losses)
    return loop.Hooks(step=lambda x, y: next(it), next_batch=lambda: (None, None), sync=lambda: None,
                      read_losses=lambda ls: [float(v) for v in ls], watch=loop.LossWatch(factor))


def test_a_finite_blow_up_diverges_at_its_step_and_a_steady_loss_does_not():
    from xbench.bench import loop
    from xbench.rank import Diverged

    h = _hooks([2.3, 2.2, 2.1, 2.0] + [1.9] * 10)
    loop.warmup(h, 2, 4, 2, 10.0)
    assert len(loop.timed_window(h, 5).losses) == 5 and h.watch.first == 2.3  # no blow-up: nothing raised
    h = _hooks([2.3, 2.2, 2.1, 2.0, 1.9, 5.0, 4e20, 3.0, 3.0])
    loop.warmup(h, 2, 4, 2, 10.0)
    with pytest.raises(Diverged) as e:
        loop.timed_window(h, 5)
    assert (e.value.step, e.value.loss, e.value.phase) == (6, 4e20, "timed")  # counted over all steps
    assert "loss became 4e+20" in str(e.value)
    h = _hooks([2.3, 2.2, 2.1, 2.0, 1.9, 5.0], factor=2.0)  # the factor is the knob's
    with pytest.raises(Diverged):
        loop.warmup(h, 6, 6, 2, 10.0)


def test_other_ranks_diverge_at_the_same_window_when_one_blew_up():
    from xbench.bench import loop
    from xbench.rank import Diverged

    h = _hooks([2.3, 2.2, 2.1])
    h.agree = lambda ok: False  # another rank said it blew up: this one's losses are fine
    with pytest.raises(Diverged) as e:
        loop.timed_window(h, 3)
    assert e.value.step == 0 and e.value.loss == 2.3


def test_accuracy_below_chance_after_an_epoch_is_a_divergence():
    import pickle

    from xbench.bench import loop

    assert loop.chance_level("top1", 10) == 0.1 and loop.chance_level("top5", 10) == 0.5
    assert loop.chance_level("perplexity", 10) is None
    e = pickle.loads(pickle.dumps(loop.BelowChance(120, 0.01, 0.1, "top1")))  # crosses from rank processes
    assert isinstance(e, loop.Diverged) and "top1 0.01 is below half of chance (0.1)" in str(e) and e.step == 120


@pytest.mark.slow
def test_find_max_batch_stops_at_its_time_bound(tmp_path):
    """bench.max_batch_search_s: the first trial runs, no trial starts after the bound; the record says so."""
    import xbench
    from tests.conftest import FAST

    rec = xbench.run([*FAST, f"store.root={tmp_path}", "bench.mode=find_max_batch", "model=mlp",
                      "model.options.hidden=8", "data=digits", "data.batch_size=4", "bench.max_batch_search_s=0.001"])
    m = rec.measurements
    assert rec.status == "ok" and len(m["batch_search_trials"]) == 1, rec.reason
    assert m["batch_search_time_bound_reached"] and not m["batch_search_limit_reached"]
    assert m["max_batch_size_per_device"] == 4
    assert any("bench.max_batch_search_s=0.001" in w for w in rec.warnings)
