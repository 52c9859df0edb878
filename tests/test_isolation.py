"""Sweep points in fresh processes (bench.isolation), and a real stall found in a timed window.

The CLI tests here are the expensive kind (XLA points, fresh processes), hence few: one isolated sweep
against one shared sweep of the same two points, and one run stopped by SIGSTOP mid-window.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from tests.conftest import FAST, REPO, cli_env, records, run_cli
from xbench.config import XBenchConfig
from xbench.launch import isolation

TINY = ("model=mlp", "data=synthetic_mnist", "data.batch_size=16", "platform=cpu", "bench.threads=1")


# ---------- the decision and the point's facts ----------

def _cfg(mode: str) -> XBenchConfig:
    cfg = XBenchConfig()
    cfg.bench.isolation = mode
    return cfg


def test_auto_isolates_the_points_of_a_sweep_only(monkeypatch):
    monkeypatch.setattr(isolation, "hydra_job", lambda: {"multirun": True, "job_num": 3, "overrides": ["a=1"]})
    assert isolation.isolated(_cfg("auto")) and isolation.isolated(_cfg("process"))
    assert not isolation.isolated(_cfg("shared"))
    monkeypatch.setattr(isolation, "hydra_job", lambda: {"multirun": False, "job_num": None, "overrides": []})
    assert not isolation.isolated(_cfg("auto")) and isolation.isolated(_cfg("process"))
    monkeypatch.setattr(isolation, "hydra_job", lambda: None)  # the Python API: no Hydra job
    assert not isolation.isolated(_cfg("auto"))


def test_point_facts_redact_secret_overrides(monkeypatch):
    monkeypatch.setattr(isolation, "hydra_job", lambda: {"multirun": True, "job_num": 1,
                                                         "overrides": ["runtime=xla", "+api_token=hunter2x"]})
    facts = isolation.point_facts(_cfg("auto"))
    assert facts["xbench_version"] and facts["point"]["job_num"] == 1 and facts["point"]["isolated"]
    assert facts["point"]["overrides"][0] == "runtime=xla" and "hunter2x" not in str(facts)


def test_a_later_point_starts_when_it_begins(monkeypatch):
    monkeypatch.setattr(isolation, "_POINTS_SEEN", [])
    monkeypatch.delenv(isolation.POINT_ENV, raising=False)
    first = isolation.begin_point()
    import psutil

    from xbench.rank import process_started_at

    # The process's start, to the clock tick (/proc): psutil's create_time rounds the boot time down and read
    # up to 1 s early (0.97 s on this VM), which every first point's start-up carried.
    assert first == isolation.point_started_at() and abs(first - process_started_at()) < 0.05
    assert first >= psutil.Process().create_time() - 0.05
    time.sleep(0.05)
    later = isolation.begin_point()
    assert later > first + 0.04 and isolation.point_started_at() == later
    assert os.environ[isolation.POINT_ENV].startswith(f"{os.getpid()}:")


# ---------- the real CLI ----------

def _by_runtime(store) -> dict:
    return {r["config"]["runtime"]["name"]: r for r in records(store)}


def _created(rec) -> float:
    return datetime.fromisoformat(rec["created_at"]).timestamp()


@pytest.mark.slow
@pytest.mark.xla
def test_isolated_sweep_points_own_their_compilations_and_start_up(store):
    """`xla_compile` after `xla`: isolated (the default for a sweep), it compiles its own 2 graphs; sharing
    the process it found them cached (0 compilations, 0 s) and now says so. The two sweeps are independent
    and each point mostly on one core (bench.threads=1): they run at the same time."""
    args = ("-m", *FAST, *TINY, "+experiment=framework_overhead", "runtime=xla,xla_compile", "bench.round=0")
    with ThreadPoolExecutor(max_workers=2) as pool:
        isolated, shared_sweep = (pool.submit(run_cli, *args, f"bench.isolation={how}", store=store / folder,
                                              timeout=900) for how, folder in (("auto", "isolated"), ("shared", "shared")))
        p, p_shared = isolated.result(), shared_sweep.result()
    assert p.returncode == 0, p.stderr[-3000:]
    iso = _by_runtime(store / "isolated")
    for job, name in enumerate(("xla", "xla_compile")):
        rec = iso[name]
        m, point = rec["measurements"], rec["env"]["point"]
        assert rec["status"] == "ok", rec["reason"]
        assert m["compiles_warmup"] == 2 and m["compile_time_s"] > 0 and m["xla_compiles_before_run"] == 0
        assert point["isolated"] and point["multirun"] and point["job_num"] == job
        assert f"runtime={name}" in point["overrides"] and rec["env"]["xbench_version"]
        assert not any("compile figures read low" in w for w in rec["warnings"])
    pids = [iso[n]["measurements"]["rank_pids"][0] for n in ("xla", "xla_compile")]
    runner = {iso[n]["env"]["point"]["runner_pid"] for n in ("xla", "xla_compile")}
    assert len(runner) == 1 and len(set(pids)) == 2 and not runner & set(pids)  # each point its own process
    later = iso["xla_compile"]
    # Its start-up is its own: from its point's start, not the sweep's (seconds-resolution stamps, +1 s).
    since_sweep = _created(later) - _created(iso["xla"]) + later["measurements"]["startup_to_first_step_s"]
    assert later["measurements"]["startup_to_first_step_s"] < since_sweep - 1

    assert p_shared.returncode == 0, p_shared.stderr[-3000:]
    shared = _by_runtime(store / "shared")["xla_compile"]
    m = shared["measurements"]
    assert m["xla_compiles_before_run"] == 2 and m["compiles_warmup"] == 0 and m["compile_time_s"] == 0
    assert any("compile figures read low: 2 XLA graph(s)" in w for w in shared["warnings"])
    assert shared["env"]["point"]["isolated"] is False
    assert m["rank_pids"] == [shared["env"]["point"]["runner_pid"]]


@pytest.mark.serial  # clean windows are compared with a 1.5 s stop
@pytest.mark.slow
def test_a_process_stopped_mid_window_is_a_stall_measured_again(store):
    """SIGSTOP of the measuring process for 1.5 s inside a timed window (the CLI draws its progress bar,
    which says when the timed steps began), then SIGCONT: the window is flagged, measured again, and the
    throughput is that of the clean windows."""
    cmd = [sys.executable, "-m", "xbench", f"store.root={store}", *FAST, *TINY, "logger.progress=true",
           "bench.min_window_s=1.5", "bench.repeats=3", "bench.stall_remeasure=1"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    seen, stopped = bytearray(), threading.Event()

    def watch():
        while chunk := os.read(proc.stderr.fileno(), 4096):
            seen.extend(chunk)
            if not stopped.is_set() and b"timed steps" in seen:
                stopped.set()
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(1.5)
                os.kill(proc.pid, signal.SIGCONT)

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    assert proc.wait(timeout=600) == 0, bytes(seen[-3000:]).decode(errors="replace")
    reader.join(10)
    assert stopped.is_set()
    [rec] = records(store)
    m = rec["measurements"]
    assert rec["status"] == "ok" and m["stalled"] is True
    assert m["stalled_windows_remeasured"] == 1 and m["stalled_windows_kept"] == 0 and m["repeats"] == 3
    assert m["window_s_stalled"][0] >= 1.4 and m["stall_excess_s_total"] >= 1.0
    # The kept windows do not hold the 1.5 s stop: none is a stop longer than the quickest, and the typical one is
    # a second shorter than the stalled (a noisy shared machine spreads the clean ones by a few tenths).
    assert max(m["window_s"]) < min(m["window_s"]) + 1.0, (m["window_s"], m["window_s_stalled"])
    assert statistics.median(m["window_s"]) < m["window_s_stalled"][0] - 1.0
    assert any(w.startswith("stalled window measured again") for w in rec["warnings"])
    # Windows were sized by time from the warm-up's step time, and the machine was probed.
    assert m["window_sized_by"] in ("time", "steps floor")
    if m["window_sized_by"] == "time":
        assert m["timed_steps_per_window"] == math.ceil(1.5 / m["warmup_step_s_steady"])
    assert m["other_cpu_cores_before"] >= 0 and m["free_cores_before"] >= 1 and "contended" in m


# ---------- the harness's cost at process level (make bench: scripts/bench_process.py) ----------

@pytest.mark.serial  # it measures its own load as the only other busy core
@pytest.mark.slow
def test_process_level_pair_under_the_benchmark_own_load():
    """One loaded pair of scripts/bench_process.py, small: the CLI and the plain script train the same
    model on the same numbers (parameter counts and first losses checked by the script), the competing load is started by the benchmark and
    gone after it, xbench's record sees it as another process's busy core, and the ratio is a ratio of
    two real throughputs."""
    import importlib.util

    import psutil

    spec = importlib.util.spec_from_file_location("bench_process", REPO / "scripts" / "bench_process.py")
    bp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bp)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    r = bp.condition("eager", "loaded", 1, ["bench.min_window_s=0", "bench.steps=40", "bench.repeats=3",
                                            "bench.warmup_max_steps=6", "bench.warmup_min_steps=2"], False)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before  # the load was stopped
    assert r["pairs"] == 1 and r["windows"] == 3 and r["steps_per_window"] == 40
    assert r["ratio_ci95"] == [None, None]  # one pair: no CI, and the script says so
    assert r["xbench_samples_per_s_median"] > 0 and r["hand_samples_per_s_median"] > 0
    assert r["ratio_median"] == pytest.approx(r["xbench_samples_per_s_median"] / r["hand_samples_per_s_median"])
    assert 0.3 < r["ratio_median"] < 3 and 0.3 < r["ratio_best_window"] < 3
    assert r["verdict"] == ("met" if r["ratio_median"] >= bp.GOAL else "NOT met (median below)")  # no CI to weigh
    assert r["other_cpu_cores_during_median"] >= 0.5  # the spinner, at least, was another's busy core
    assert r["cpu_per_step_ratio_median"] is not None and r["cpu_per_step_ratio_median"] > 0
    # The pair counts as free of outside load only when xbench's windows saw no more than the spinner.
    assert r["clean_pairs"] == (r["other_cpu_cores_during_median"] <= 1.0 + bp.OUTSIDE_SLACK_CORES)


def test_process_level_verdict_weighs_the_ci_against_the_goal():
    """A median on one side of 0.98 with its CI across it is not called a miss (or a clean pass)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_process", REPO / "scripts" / "bench_process.py")
    bp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bp)
    assert bp.verdict(1.0, 0.99, 1.01) == "met"
    assert bp.verdict(0.99, 0.95, 1.03) == "met (median; the CI spans the goal)"
    assert bp.verdict(0.97, 0.95, 1.01).startswith("not shown: median below, CI spans the goal")
    assert bp.verdict(0.90, 0.85, 0.95) == "NOT met (the whole CI is below)"
