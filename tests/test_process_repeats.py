"""Whole-process repeats (bench.process_repeats): the merge and the process-level summary against
hand-computed values, the compat rule, and the real CLI running two fresh processes."""

from __future__ import annotations

import math
import statistics

import pytest

from tests.conftest import FAST, records, run_cli
from tests.jobs import Jobs
from xbench import compat
from xbench.config import XBenchConfig
from xbench.metrics.aggregate import across_processes, aggregate, merge_processes, noisy_spread
from xbench.platforms.detect import HostFacts


def _rank(rank, windows, samples=640, pid=None):
    return {"rank": rank, "device": "cpu", "window_s": windows, "samples_per_window": samples,
            "samples_per_step": samples // 10, "devices_per_rank": 1, "data_wait_s": 0.0,
            "peak_host_rss_gib": 1.0, "step_time_cv": 0.01, "pid": pid, "first_step_s": 0.1 + rank}


# ---------- pure units ----------

def test_merge_concatenates_windows_per_rank_and_keeps_the_first_process_figures():
    a = [_rank(0, [1.0, 2.0], pid=11), _rank(1, [1.25, 2.0], pid=11)]
    b = [_rank(0, [0.5, 1.0], pid=22), _rank(1, [0.5, 0.8], pid=22)]
    b[0]["first_step_s"] = 9.0
    merged = merge_processes([a, b])
    assert [r["window_s"] for r in merged] == [[1.0, 2.0, 0.5, 1.0], [1.25, 2.0, 0.5, 0.8]]
    assert merged[0]["first_step_s"] == 0.1 and merged[0]["pid"] == 11  # the first process's
    assert a[0]["window_s"] == [1.0, 2.0]  # inputs untouched
    with pytest.raises(ValueError, match="different numbers of ranks"):
        merge_processes([a, b[:1]])


def test_figures_counted_over_windows_cover_every_process():
    """Two identical processes: the wait share and the steady step time are those of one process
    (they were halved and doubled when `data_wait_s` and `repeats` came from the first process only)."""
    from xbench.metrics.derived import derive
    from xbench.metrics.overhead import steady_step_s

    def proc(pid):
        r = _rank(0, [1.0, 1.0], pid=pid)
        r.update(data_wait_s=1.0, repeats=2, timed_steps_per_window=10, xla_trace_s_median=0.05)
        return [r]

    one = aggregate(proc(1))
    both = across_processes([proc(1), proc(2)])
    assert both["repeats"] == 4  # windows in the run: 2 processes x 2
    assert one["data_wait_fraction"] == both["data_wait_fraction"] == pytest.approx(0.5)
    assert steady_step_s(one) == steady_step_s(both) == pytest.approx(0.1)  # 2 s / 20 steps, 4 s / 40 steps
    assert derive(both, {})["host_overhead_fraction"] == pytest.approx(0.5)  # 0.05 s of a 0.1-s step


def test_across_processes_against_hand_computed_values():
    # Process A: common windows [1.25, 2.0] -> 1280 samples / w = [1024, 640], median 832.
    # Process B: common windows [0.5, 1.0] -> [2560, 1280], median 1920.
    a = [_rank(0, [1.0, 2.0], pid=11), _rank(1, [1.25, 2.0], pid=11)]
    b = [_rank(0, [0.5, 1.0], pid=22), _rank(1, [0.5, 0.8], pid=22)]
    m = across_processes([a, b], noisy_cv=0.05)
    # All four windows: [1024, 640, 2560, 1280], median (1024 + 1280) / 2.
    assert m["throughput_samples_per_s_windows"] == [1024.0, 640.0, 2560.0, 1280.0]
    assert m["throughput_samples_per_s"] == 1152.0
    assert m["window_s"] == [1.25, 2.0, 0.5, 1.0] and m["samples_per_window"] == 1280
    assert m["process_repeats"] == 2 and m["process_pids"] == [11, 22]
    assert m["throughput_samples_per_s_processes"] == [832.0, 1920.0]
    assert m["throughput_process_median_samples_per_s"] == 1376.0
    assert m["throughput_process_mean_samples_per_s"] == 1376.0
    assert m["throughput_process_olympic_mean_samples_per_s"] == 1376.0  # under 3 values: the mean
    std = 1088 / math.sqrt(2)  # two values: |x1 - x2| / sqrt(2)
    assert m["throughput_process_cv"] == pytest.approx(std / 1376, rel=1e-12)
    # Two processes give no CI (the linear t interval from 2 values went from -5535 to 8287 here).
    assert m["throughput_process_ci95_samples_per_s"] is None
    assert m["throughput_process_ci95_note"] == "no CI: 2 samples (a 95% CI needs 3 or more)"
    assert m["noisy"] is True and "pid" not in m  # pid is a per-rank figure


def test_olympic_mean_over_three_processes():
    procs = [[_rank(0, [w], samples=320)] for w in (1.0, 0.5, 0.8)]  # 320, 640, 400 samples/s
    m = across_processes(procs, noisy_cv=1.0)
    assert m["throughput_samples_per_s_processes"] == [320.0, 640.0, 400.0]
    assert m["throughput_process_median_samples_per_s"] == 400.0
    assert m["throughput_process_mean_samples_per_s"] == pytest.approx(1360 / 3)
    assert m["throughput_process_olympic_mean_samples_per_s"] == 400.0  # 320 and 640 dropped
    assert m["noisy"] is False


def test_process_spread_alone_makes_a_run_noisy():
    # Six windows of 100 samples/s in one process, six of 110 in the other.
    # Windows: mean 105, sample variance 12 * 25 / 11 -> CV 0.04974 (under 0.06).
    # Processes: [100, 110], std 7.071 -> CV 0.06734 (over 0.06).
    procs = [[_rank(0, [1.0] * 6, samples=100)], [_rank(0, [100 / 110] * 6, samples=100)]]
    windows_only = aggregate(merge_processes(procs), noisy_cv=0.06)
    assert windows_only["throughput_cv"] == pytest.approx(math.sqrt(300 / 11) / 105, rel=1e-9)
    assert windows_only["noisy"] is False
    m = across_processes(procs, noisy_cv=0.06)
    assert m["throughput_process_cv"] == pytest.approx(math.sqrt(50) / 105, rel=1e-9)
    assert m["noisy"] is True
    assert noisy_spread(m, 0.06) == "throughput_process_cv=0.0673"


def _cfg(**bench) -> XBenchConfig:
    cfg = XBenchConfig()
    for k, v in bench.items():
        setattr(cfg.bench, k, v)
    return cfg


def test_compat_rule_says_what_is_allowed(monkeypatch):
    facts = HostFacts(logical_cores=2, torch_version="2.9.0")
    assert compat.process_repeats_fit(_cfg(process_repeats=3), facts) == []
    assert compat.process_repeats_fit(_cfg(process_repeats=0), facts) == []  # its range: the field's knob
    assert compat.knobs_in_range(_cfg(process_repeats=0), facts) == [
        "bench.process_repeats=0 is out of range; allowed: [1, 10000]"]
    [r] = compat.process_repeats_fit(_cfg(process_repeats=2, mode="find_max_batch"), facts)
    assert "bench.mode=throughput only" in r and "'find_max_batch'" in r
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # a rank torchrun started: it cannot be restarted
    [r] = compat.process_repeats_fit(_cfg(process_repeats=2), facts)
    assert "without the torchrun command" in r


# ---------- the real CLI ----------

@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's CLI runs, started together (tests/jobs.py): each test checks its own, in its own store."""
    root = tmp_path_factory.mktemp("process_repeats")
    with Jobs(request) as jobs:
        jobs.submit("two", run_cli, *FAST, "data.batch_size=16", "bench.process_repeats=2", "bench.repeats=2",
                    store=root / "two", tests=("test_cli_two_fresh_processes_two_windows_each",))
        jobs.submit("bad", run_cli, "-m", *FAST, "bench.process_repeats=0,2", "bench.mode=train_to_target",
                    store=root / "bad", tests=("test_cli_refuses_bad_process_repeats_with_a_record",))
        jobs.submit("sigterm", run_cli, *FAST, "model=mlp", "data=synthetic_mnist", "data.batch_size=8",
                    "bench.process_repeats=2", "fault.kind=sigterm", "fault.at_step=4", store=root / "sigterm",
                    tests=("test_cli_sigterm_in_a_repeat_process_leaves_an_interrupted_record",))
        yield jobs, root


@pytest.mark.slow
def test_cli_two_fresh_processes_two_windows_each(runs):
    jobs, root = runs
    p, store = jobs["two"], root / "two"
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["status"] == "ok", rec["reason"]
    m = rec["measurements"]
    tps = m["throughput_samples_per_s_processes"]
    assert m["process_repeats"] == 2 and len(tps) == 2 and all(t > 0 for t in tps)
    pids = m["process_pids"]
    assert len(pids) == 2 and len(set(pids)) == 2 and all(isinstance(x, int) for x in pids)
    windows = m["throughput_samples_per_s_windows"]
    assert len(m["window_s"]) == 4 and len(windows) == 4
    # Each process's throughput is the median of its own two windows; the run's is over all four.
    assert tps == pytest.approx([statistics.median(windows[:2]), statistics.median(windows[2:])], rel=1e-9)
    assert m["throughput_samples_per_s"] == pytest.approx(statistics.median(windows), rel=1e-9)
    assert m["throughput_process_median_samples_per_s"] == pytest.approx(statistics.median(tps), rel=1e-9)
    assert m["throughput_process_mean_samples_per_s"] == pytest.approx(statistics.fmean(tps), rel=1e-9)
    cv = statistics.stdev(tps) / statistics.fmean(tps)
    assert m["throughput_process_cv"] == pytest.approx(cv, rel=1e-9)
    assert m["throughput_process_ci95_samples_per_s"] is None and "no CI: 2 samples" in m["throughput_process_ci95_note"]
    lo, hi = m["throughput_ci95_samples_per_s"]  # four windows: a CI of their geometric mean
    assert 0 < lo <= statistics.geometric_mean(windows) <= hi
    assert m["noisy"] == (cv > 0.05 or m["throughput_cv"] > 0.05)
    if cv > 0.05:
        assert any("throughput_process_cv=" in w for w in rec["warnings"])
    assert "process repeat 1/2:" in p.stderr and "process repeat 2/2:" in p.stderr
    assert len(rec["series"]["loss"]) == m["warmup_steps"] + 2 * 5  # the first process's series


@pytest.mark.slow
def test_cli_refuses_bad_process_repeats_with_a_record(runs):
    jobs, root = runs
    p, store = jobs["bad"], root / "bad"
    assert p.returncode != 0
    by_n = {r["config"]["bench"]["process_repeats"]: r for r in records(store)}
    assert sorted(by_n) == [0, 2] and all(r["status"] == "failed" for r in by_n.values())
    assert "bench.process_repeats=0 is out of range; allowed: [1, 10000]" in by_n[0]["reason"]
    assert "bench.process_repeats=2 applies to bench.mode=throughput only" in by_n[2]["reason"]
    assert "'train_to_target'" in by_n[2]["reason"]


def test_report_spread_of_a_single_run_is_the_processes_ci():
    from xbench.analysis.frame import to_frame
    from xbench.analysis.rows import Rows
    from xbench.analysis.spread import spread
    from xbench.records.record import RunRecord

    procs = [[_rank(0, [w, w], samples=320)] for w in (1.0, 0.5, 0.8)]  # 320, 640, 400 samples/s
    m = across_processes(procs, noisy_cv=1.0)
    rec = RunRecord(run_id="r1", experiment=None, config={"model": {"name": "mlp"}}, status="ok",
                    measurements=m)
    lo, hi, cv, src = spread(Rows.of(to_frame([rec])))
    assert [lo, hi] == pytest.approx(m["throughput_process_ci95_samples_per_s"])
    assert cv == pytest.approx(m["throughput_process_cv"]) and src == "3 processes ci95"


@pytest.mark.slow
def test_cli_sigterm_in_a_repeat_process_leaves_an_interrupted_record(runs):
    """The stop crosses back from the repeat's fresh process with the signal's name and the repeat."""
    jobs, root = runs
    p, store = jobs["sigterm"], root / "sigterm"
    assert p.returncode == 130, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["status"] == "interrupted" and rec["reason"].startswith("SIGTERM during"), rec["reason"]
    assert rec["measurements"]["process_repeat"] == 1


def test_cpu_capability_is_refused_in_a_rank_another_launcher_started(monkeypatch):
    facts = HostFacts(logical_cores=2, torch_version="2.9.0")
    assert compat.cpu_capability_fits(_cfg(cpu_capability="default"), facts) == []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert compat.cpu_capability_fits(_cfg(cpu_capability="default"), facts) == [
        "bench.cpu_capability=default needs xbench to start the processes (torch reads it at start); run "
        "python -m xbench without the torchrun command"]
