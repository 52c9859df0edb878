"""Measurement you can trust run to run: statistics valid for the sample size, windows sized by time,
stalls, contention, host vs device time, and what the report says about ratios (issue [R2 5/7])."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from xbench.analysis.frame import to_frame
from xbench.analysis.rows import Rows
from xbench.analysis.scaling import SUPERLINEAR, scaling_rows
from xbench.analysis.spread import SPANS_ONE, ratio, spread
from xbench.bench import loop
from xbench.bench.meters import breakdown, contention
from xbench.bench.meters.contention import ContentionMeter
from xbench.metrics.aggregate import aggregate
from xbench.metrics.stats import ci95, log_moments, ratio_ci95, summarize, t95
from xbench.records.record import RunRecord

# serial: alone, never beside another test (step times, contention and free cores are read from the machine)
pytestmark = pytest.mark.serial

# ---------- statistics ----------


def test_t_quantile_matches_scipy_for_integer_and_fractional_df():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 1.5, 2, 2.7, 3, 4, 7, 9.3, 12, 17.8, 29, 30, 31, 45, 200, 5000):  # Welch's df are fractional
        assert t95(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)


def test_two_windows_give_no_ci_and_never_a_negative_bound():
    """The issue's case: two windows of very different throughput gave -53 to 215 samples/s."""
    s = summarize([40.0, 121.0])
    assert s["ci95_low"] is None and s["ci95_high"] is None
    assert s["ci_note"] == "no CI: 2 samples (a 95% CI needs 3 or more)"
    lo, hi = ci95([40.0, 121.0, 80.0])
    assert 0 < lo < statistics.geometric_mean([40.0, 121.0, 80.0]) < hi
    m = aggregate([{"rank": 0, "device": "cpu", "window_s": [1.0, 1 / 3.025], "samples_per_window": 40,
                    "samples_per_step": 4, "data_wait_s": 0.0, "peak_host_rss_gib": 1.0}])
    assert m["throughput_ci95_samples_per_s"] is None and "needs 3 or more" in m["throughput_ci95_note"]


def test_ratio_ci_by_welch_on_logs_against_hand_computed_values():
    a, b = [110.0, 100.0, 105.0, 108.0], [100.0, 98.0, 102.0]
    lo, hi = ratio_ci95(log_moments(a), log_moments(b))
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = statistics.variance(la) / 4, statistics.variance(lb) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    d, half = statistics.fmean(la) - statistics.fmean(lb), t95(df) * math.sqrt(va + vb)
    assert (lo, hi) == pytest.approx((math.exp(d - half), math.exp(d + half)))
    assert lo < statistics.geometric_mean(a) / statistics.geometric_mean(b) < hi
    assert ratio_ci95(log_moments([1.0, 2.0]), log_moments(b)) is None  # 2 samples a side: no CI


def _run(run_id, tp_windows, devices=1, parallel="single", runtime="eager", **extra):
    m = {"throughput_samples_per_s": statistics.median(tp_windows), "throughput_samples_per_s_windows": tp_windows,
         "devices": devices, "device": "cpu", "threads_intra": 1, **extra}
    cfg = {"model": {"name": "mlp", "options": {}}, "data": {"name": "synthetic_mnist", "batch_size": 16},
           "precision": {"name": "fp32"}, "runtime": {"name": runtime}, "platform": {"name": "cpu"},
           "parallel": {"name": parallel, "world_size": devices}, "bench": {"threads": 1}}
    return RunRecord(run_id=run_id, status="ok", config=cfg, measurements=m)


def test_a_stored_linear_ci_below_zero_never_reaches_the_report():
    old = _run("old", [40.0, 121.0])
    old.measurements["throughput_ci95_samples_per_s"] = [-53.0, 215.0]  # as written before these rules
    lo, hi, _, src = spread(Rows.of(to_frame([old])))
    assert (lo, hi, src) == (None, None, "")  # recomputed from the 2 windows: no CI (3 needed), the stored one unused
    three = _run("three", [90.0, 100.0, 110.0])
    lo, hi, _, src = spread(Rows.of(to_frame([three])))
    assert src == "windows ci95" and 0 < lo < 100 < hi


def test_superlinear_scaling_is_flagged_and_efficiency_has_a_ci():
    one = _run("a", [100.0, 101.0, 99.0, 100.0])
    two = _run("b", [216.0, 214.0, 217.0, 215.0], devices=2, parallel="ddp")  # 108%: the DDP run
    fine = _run("c", [190.0, 191.0, 189.0, 190.0], devices=4, parallel="ddp")
    rows = {r["devices"]: r for r in scaling_rows(to_frame([one, two, fine]))}
    assert rows[2]["scaling_efficiency"] == pytest.approx(215.5 / 200) and rows[2]["flag"] == SUPERLINEAR
    lo, hi = rows[2]["scaling_efficiency_ci95"]
    assert 1.0 < lo < 215.5 / 200 < hi
    assert rows[4]["flag"] is None and rows[4]["scaling_efficiency_ci95"][1] < 0.5


def test_report_says_when_a_speedup_ci_spans_one():
    from xbench.report.rows import Context
    from xbench.report.tables import overhead_table

    eager = _run("e", [100.0, 104.0, 96.0, 100.0], window_s_total=4.0, timed_steps_per_window=10, repeats=4)
    same = _run("c", [101.0, 97.0, 105.0, 99.0], runtime="compile", window_s_total=3.97, timed_steps_per_window=10,
                repeats=4, compile_time_s=20.0)
    _, ci = ratio(Rows.of(to_frame([same])), Rows.of(to_frame([eager])))
    assert ci[0] < 1 < ci[1]
    t = overhead_table(Rows.of(to_frame([eager, same])), Context())
    row = t.frame[t.frame["runtime"] == "compile"].iloc[0]
    assert row["versus eager"] == SPANS_ONE
    faster = _run("f", [150.0, 151.0, 149.0, 150.0], runtime="compile", window_s_total=2.67,
                  timed_steps_per_window=10, repeats=4, compile_time_s=20.0)
    t = overhead_table(Rows.of(to_frame([eager, faster])), Context())
    row = t.frame[t.frame["runtime"] == "compile"].iloc[0]
    assert row["versus eager"] == "faster than eager"
    # 0.1 s eager step, 0.06675 s compiled: 20 s of compiling pays back after 20 / 0.03325 = 601.5 steps.
    assert row["break-even vs eager [steps]"] == pytest.approx(20.0 / (0.1 - 0.06675))


def test_overhead_table_has_host_device_compile_and_break_even_for_every_runtime():
    """The framework-overhead table: host vs device time per step for every runtime that measured them,
    compile time, and break-even against eager, 'never' for a compiled runtime that is not faster (the
    median over its pairs, a pair that never pays back counted as infinite), blank for one that compiles
    nothing."""
    from xbench.report.rows import Context
    from xbench.report.tables import NEVER, overhead_table

    def rec(run_id, runtime, step_s, **extra):
        return _run(run_id, [64 / step_s] * 3, runtime=runtime, window_s_total=step_s * 30, timed_steps_per_window=10,
                    repeats=3, host_s_per_step=step_s * 0.8, device_s_per_step=step_s * 0.2, **extra)

    runs = [rec("e", "eager", 0.002), rec("a", "accelerate", 0.0021),
            rec("x1", "xla", 0.004, compile_time_s=0.74), rec("x2", "xla", 0.0019, compile_time_s=0.74),
            rec("x3", "xla", 0.0041, compile_time_s=0.74),
            rec("c1", "compile", 0.001, compile_time_s=20.0), rec("c2", "compile", 0.0015, compile_time_s=20.0)]
    t = overhead_table(Rows.of(to_frame(runs)), Context())
    by = {r["runtime"]: r for r in t.frame.to_dict("records")}
    assert by["xla"]["break-even vs eager [steps]"] == NEVER  # 2 of 3 rounds never pay back: the median is never
    assert by["compile"]["break-even vs eager [steps]"] == pytest.approx(statistics.median([20 / 0.001, 20 / 0.0005]))
    assert by["accelerate"]["break-even vs eager [steps]"] is None or math.isnan(by["accelerate"]["break-even vs eager [steps]"])
    assert by["compile"]["compile time [s]"] == 20.0 and by["xla"]["compile time [s]"] == pytest.approx(0.74)
    for name, r in by.items():
        assert r["host per step [s]"] > 0 and r["device per step [s]"] > 0, name


# ---------- windows sized by time, stalls ----------


def test_window_steps_cover_the_minimum_time_and_every_rank_agrees():
    h = loop.Hooks(step=None, next_batch=None, sync=None)
    assert loop.window_steps(h, 0.0023, 2.0, 10, 20000) == (870, "time")  # ceil(2 / 0.0023)
    assert loop.window_steps(h, 2.0, 2.0, 10, 20000) == (10, "steps floor")  # a 2-s step: the floor
    assert loop.window_steps(h, 1e-6, 2.0, 10, 20000) == (20000, "cap")
    assert loop.window_steps(h, 0.01, 0.0, 7, 20000) == (7, "steps floor")  # min_window_s=0: the count


def test_ranks_run_the_same_window_steps_whatever_their_own_step_time():
    """Two ranks (threads standing in for processes; agree() is a collective AND through a barrier) whose
    warm-ups measured slightly different step times: both run the larger need, never different counts."""
    import threading

    barrier, votes, results = threading.Barrier(2), {}, {}

    def agree_of(rank):
        def agree(ok):
            votes[rank] = ok
            barrier.wait()
            verdict = all(votes.values())
            barrier.wait()
            return verdict
        return agree

    def rank(i, step_s):
        h = loop.Hooks(step=None, next_batch=None, sync=None, agree=agree_of(i))
        results[i] = loop.window_steps(h, step_s, 2.0, 10, 20000)

    threads = [threading.Thread(target=rank, args=(0, 0.0100)), threading.Thread(target=rank, args=(1, 0.0097))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results[0] == results[1] == (math.ceil(2.0 / 0.0097), "time")


def _window(times):
    return loop.WindowResult(len(times), sum(times), times, "host", [0.0] * len(times), None, 0.0)


def test_stall_needs_outliers_that_cost_a_share_of_the_window():
    steady = [0.002] * 500
    assert loop.stall(_window(steady), 5.0, 0.05) == loop.Stall(0, 0.0, False)
    hiccup = steady[:-1] + [0.02]  # one 20-ms preemption in a 1-s window: counted, not a stall
    st = loop.stall(_window(hiccup), 5.0, 0.05)
    assert st.outliers == 1 and st.excess_s == pytest.approx(0.018) and not st.stalled
    stopped = steady[:-1] + [6.0]  # a process stopped for 6 s inside the window
    st = loop.stall(_window(stopped), 5.0, 0.05)
    assert st.stalled and st.excess_s == pytest.approx(5.998)


def _fake_rank(stall_at: set[int], step_s: float = 0.002, pause_s: float = 0.4):
    """A real CPU step (a small matmul, then a sleep) that pauses on the chosen global step indices."""
    w, x = torch.randn(32, 32), torch.randn(8, 32)
    counter = [0]

    def step(a, b):
        i = counter[0]
        counter[0] += 1
        time.sleep(pause_s if i in stall_at else step_s)
        return (a @ w).sum()

    hooks = loop.Hooks(step=step, next_batch=lambda: (x, None), sync=lambda: None,
                       read_losses=lambda ls: [float(v) for v in ls])
    work = SimpleNamespace(runtime=SimpleNamespace(device=torch.device("cpu")))
    return SimpleNamespace(work=work, hooks=hooks, threads={"threads_intra": 1}, samples_per_step=8,
                           devices_per_rank=1, ranks_on_host=1), counter


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_a_stalled_window_is_measured_again_once_then_kept_and_flagged():
    from xbench.bench.windows import WindowPlan, _timed_windows
    from xbench.config import XBenchConfig

    cfg = XBenchConfig()
    plan = WindowPlan(1, 2, 1, 10.0, steps=20, repeats=3, stall_remeasure=1)
    # 20-ms steps: an outlier is a step over 100 ms (5x the median), which a loaded machine's preemption of a
    # sleeping step seldom reaches (with 2-ms steps any 10-ms hiccup stalled an unplanned window); 1-s pauses
    p, _ = _fake_rank(stall_at={5, 65}, step_s=0.02, pause_s=1.0)  # window 0 (remeasured), window 3 = 3rd kept
    wu = SimpleNamespace(steps=0)
    warnings: list[str] = []
    windows, fig = _timed_windows(cfg, p, plan, wu, warnings, steps=20)
    assert len(windows) == 3 and fig["stalled_windows_remeasured"] == 1 and fig["stalled_windows_kept"] == 1, fig
    assert fig["stalled"] and fig["outlier_steps_per_window"] == [0, 0, 1]
    assert fig["window_s_stalled"][0] > 1.0 and fig["stall_excess_s_total"] > 1.8
    assert any(w.startswith("stalled window measured again") for w in warnings)
    assert any(w.startswith("stalled: 1 timed window(s)") for w in warnings)
    assert "other_cpu_cores_during" in fig and fig["util_source"] == "edges"


def test_oversubscribed_threads_are_warned():
    from xbench.bench.windows import _oversubscribed

    p = SimpleNamespace(threads={"threads_intra": 2})
    before = {"free_cores": 1, "physical_cores": 2, "other_cores": 1.2}
    [w] = _oversubscribed(p, "cpu", before)
    assert w.startswith("oversubscribed: 2 threads, but only 1 of 2 physical cores were free")
    assert _oversubscribed(p, "cpu", {**before, "free_cores": 2}) == []
    assert _oversubscribed(p, "cuda", before) == []


# ---------- contention ----------


def _busy_child():
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _foreign_busy() -> int:
    """A busy process that is not this one's descendant (its parent exits: another user's job)."""
    out = subprocess.run([sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen("
                          "[sys.executable, '-c', 'while True: pass'], stdout=subprocess.DEVNULL, "
                          "stderr=subprocess.DEVNULL).pid)"], capture_output=True, text=True, timeout=60)
    return int(out.stdout)


def test_contention_sees_a_busy_process_and_calls_the_run_contended(monkeypatch):
    import os
    import signal

    monkeypatch.delenv(contention.ROOT_ENV, raising=False)  # this process is the run
    pid = _foreign_busy()
    try:
        time.sleep(0.3)
        meter = ContentionMeter(threads=contention.physical_cores(), device_type="cpu").start()
        a = meter._a
        time.sleep(1.0)
        fig = meter.stop()
        b = contention.snapshot()
    finally:
        os.kill(pid, signal.SIGKILL)
    assert pid not in b.own
    mine = (b.procs[pid][1] - a.procs[pid][1]) / (b.wall - a.wall)
    assert mine > 0.05  # it ran, whatever share a busy machine gave it
    assert fig["other_cpu_cores_during"] >= mine * 0.8 - 0.05  # counted among the others (system-wide)
    assert fig["contended"] and "other processes kept" in fig["contended_reason"]
    assert fig["own_cpu_cores_during"] < 0.5  # this test slept: its own use is near zero


def test_the_run_own_processes_are_not_others(monkeypatch):
    """A child of the run's root (an isolated point's rank, a DDP rank) is the run, not contention."""
    child = _busy_child()
    try:
        monkeypatch.setenv(contention.ROOT_ENV, f"{__import__('os').getpid()}:0")
        a = contention.snapshot()
        time.sleep(0.6)
        b = contention.snapshot()
    finally:
        child.kill()
        child.wait()
    assert child.pid in b.own
    fig = contention.between(a, b)
    assert all(t["pid"] != child.pid for t in fig["top"])
    assert fig["own_cores"] > 0.05


def test_probe_gives_free_cores_and_the_threads_default_uses_them(monkeypatch):
    from xbench.config import XBenchConfig
    from xbench.launch.preamble import threads_asked

    p = contention.probe(0.2, reuse_s=0)
    assert 1 <= p["free_cores"] <= p["physical_cores"] == contention.physical_cores()
    assert p["free_cores"] == max(1, p["physical_cores"] - round(p["other_cores"]))
    monkeypatch.delenv(contention.FREE_ENV, raising=False)
    monkeypatch.delenv(contention.ROOT_ENV, raising=False)
    cfg = XBenchConfig()
    asked = threads_asked(cfg)
    assert asked["threads"] >= 1 and asked["threads_policy"].startswith("free physical cores")
    # Decided once per process: a later point of the sweep gets the same count, whatever the load now.
    again = threads_asked(cfg)
    assert again["threads"] == asked["threads"] and again["threads_policy"].endswith("first run)")
    cfg.bench.threads = 3
    assert threads_asked(cfg) == {"threads": 3, "threads_policy": "bench.threads"}


# ---------- host vs device time ----------


def test_breakdown_xla_from_its_clocks():
    fig = breakdown.xla_split({"xla_trace_s_median": 0.004, "xla_sync_s_median": 0.001, "xla_executions": 50,
                               "xla_execute_s_total": 1.0})
    assert fig["host_s_per_step"] == pytest.approx(0.005) and fig["device_s_per_step"] == pytest.approx(0.02)
    assert breakdown.profile_steps(3, 25) == 2 and breakdown.profile_steps(3, 5) == 1
    assert breakdown.profile_steps(0, 1000) == 0


def test_breakdown_cpu_splits_a_real_step_into_compute_and_the_rest():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step(a, b):
        loss = torch.nn.functional.cross_entropy(model(a), b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    hooks = loop.Hooks(step=step, next_batch=lambda: (x, y), sync=lambda: None)
    for _ in range(3):
        step(x, y)
    t0 = time.perf_counter()
    for _ in range(20):
        step(x, y)
    steady = (time.perf_counter() - t0) / 20
    fig = breakdown.split(hooks, "cpu", {}, 3, 100, steady)
    assert fig["breakdown_steps"] == 3 and fig["device_s_per_step"] > 0
    assert fig["host_s_per_step"] == pytest.approx(max(0.0, steady - fig["device_s_per_step"]))


def test_other_processes_on_the_run_gpu_make_it_contended(monkeypatch):
    """NVML's process list (faked: no GPU here): a compute context of another pid on the run's GPU."""
    import os

    me = os.getpid()
    monkeypatch.setattr(contention, "_gpu", lambda idx: {i: {"pids": {me: 2**30, 424242: 2**31}, "util_percent": 87.0}
                                                         for i in idx})
    snap = contention.snapshot([0])
    assert contention.gpu_others(snap, snap.own) == {"0": [424242]}
    fig = ContentionMeter(threads=1, device_type="cuda", gpus=[0]).start().stop()
    assert fig["contended"] and fig["gpu_other_pids_during"] == {"0": [424242]}
    assert "other processes used the GPU(s)" in fig["contended_reason"]
    p = contention.probe(0.05, gpus=[0], reuse_s=0)
    assert p["gpu_other_pids"] == {"0": [424242]} and p["gpu_util_percent"] == {"0": 87.0}


# ---------- defaults that do not mislead on a small machine ----------


def _baseline_query(report_command: str) -> dict[str, str]:
    import shlex

    words = shlex.split(report_command)
    if "--baseline" not in words:
        return {}
    return dict(kv.split("=", 1) for kv in words[words.index("--baseline") + 1].split("&"))


def _matches(facts: dict, query: dict[str, str]) -> bool:
    return all(str(facts.get(k)).lower() == v.lower() or (v == "none" and facts.get(k) is None)
               for k, v in query.items())


@pytest.mark.slow  # over 3 s: make test-fast's budget
@pytest.mark.usefixtures("cached_compose")  # it composes every study's small commands: once per session
def test_study_small_baselines_are_not_oversubscribed():
    """Each study's small command, as run on a small machine: a point that pins its threads asks for no
    more cores than the instance it is priced as (ranks x threads <= vCPUs), a point that leaves them
    unset gets the free cores at run time, and the configuration its report normalises to (--baseline)
    runs one thread per rank: the reference row is never the one that waits for cores."""
    from omegaconf import OmegaConf

    from tests.conftest import CONF
    from xbench import studies
    from xbench.studies.sweep import compose_point, expand

    baselines = 0
    for study in studies.all_studies():
        query = _baseline_query(study["report"]["small"])
        for command in studies.small_commands(study):
            cmd = studies.parse(command)
            for job in (expand(CONF, cmd.overrides) if cmd.multirun else [cmd.overrides]):
                cfg = OmegaConf.to_container(compose_point(CONF, job), resolve=True)
                f = studies.facts(cfg, cmd.env)
                if cfg["platform"].get("device") != "cpu":
                    continue
                if f["threads"] is not None:
                    assert f["devices"] * f["threads"] <= cfg["platform"]["cpu_vcpus"], (study["id"], job)
                if query and _matches(f, query):
                    baselines += 1
                    assert f["threads"] == 1, (study["id"], job, f["threads"])
    # cpu_vs_gpu's six 1-vCPU workloads; xla_speedup's eager DDP (2 ranks x 1 thread) and its eager batch search;
    # llm_pretrain's eager DDP (2 ranks x 1 thread), the study added in round 3
    assert baselines == 9
