"""Issue 27 item 4: a signalled multi-rank throughput run keeps every rank's figures (bench/loop.py rule 10).

Ranks agree on a stop without a per-step collective: a rank that sees the stop inside a timed window runs
the window to its end, and the window's edge agreement carries "anyone asked to stop", so every rank stops
at that edge and the launcher gathers every rank's partial figures. The loop's rule is checked in process on
a real (small) CPU workload; the ranks' agreement on two real gloo ranks through the CLI, once per way a
stop reaches them (the whole run signalled; one rank alone).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env, records
from tests.test_loop import Probe
from xbench.bench import loop

# serial: alone, never beside another test (stops are bounded by grace windows in seconds)
pytestmark = pytest.mark.serial


def _stop_at(flag: loop.StopFlag, step: int):
    def on_step(phase, i):
        if i == step:
            flag.requested = True
    return on_step


def _peer(asked: bool):
    """The agreement of this rank with one peer whose flag says `asked` (a MIN over both, as
    parallel/ddp.py's all-reduce computes it; the real collective runs in the CLI tests below)."""
    seen = []

    def agree(ok: bool) -> bool:
        seen.append(ok)
        return ok and not asked
    agree.seen = seen
    return agree


def test_a_stop_mid_window_on_several_ranks_runs_the_window_to_its_edge_and_every_rank_stops_there():
    p, flag = Probe(), loop.StopFlag()
    h = p.hooks(on_step=_stop_at(flag, 3), stop=flag, finish_window_s=loop.finish_window_s(30.0, 2))
    w = loop.timed_window(h, steps=20)
    assert p.steps == 20 and w.steps == 20 and w.stop_seen_at_step == 4  # every step of the window ran
    assert p.syncs == [0, 20]  # still synchronised at the edges only
    with pytest.raises(loop.StopRequested) as e:
        loop.window_end_stop(h, w, stalled=False)
    part = e.value.partial
    assert part["ranks_agreed"] and part["stop_at_window_end"] and part["stop_seen_at_step"] == 4
    assert part["timed_steps"] == 20 and part["window_s"] == w.wall_s and len(part["timed_step_times_s"]) == 20


def test_a_rank_that_got_no_signal_stops_at_the_same_edge_as_its_signalled_peer():
    p = Probe()
    h = p.hooks(agree=_peer(asked=True), finish_window_s=loop.finish_window_s(30.0, 2))
    w = loop.timed_window(h, steps=10)
    assert w.stop_seen_at_step is None and w.steps == 10
    with pytest.raises(loop.StopRequested) as e:
        loop.window_end_stop(h, w, stalled=False)
    assert e.value.partial["ranks_agreed"] and h.agree.seen == [True, True]  # "not stalled, not asked" twice


def test_without_a_stop_the_edge_costs_one_agreement_and_still_reports_a_stall():
    for stalled in (False, True):
        agree = _peer(asked=False)
        h = Probe().hooks(agree=agree, finish_window_s=15.0)
        w = loop.timed_window(h, steps=5)
        assert loop.window_end_stop(h, w, stalled=stalled) is stalled
        assert agree.seen == ([True] if not stalled else [False, True])  # the second only after a "no"


def test_a_window_too_long_for_the_grace_stops_the_rank_at_once_and_says_why():
    p, flag = Probe(sleep_s=0.002), loop.StopFlag()
    h = p.hooks(on_step=_stop_at(flag, 2), stop=flag, finish_window_s=0.05)  # 997 more steps: ~2 s > 0.05 s
    with pytest.raises(loop.StopRequested) as e:
        loop.timed_window(h, steps=1000)
    part = e.value.partial
    assert p.steps == 3 and part["timed_steps"] == 3 and "ranks_agreed" not in part
    assert "stopped after step 3 of the window's 1000 without the other ranks" in part["stop_not_agreed"]
    assert "bench.stop_grace_s" in part["stop_not_agreed"]


def test_one_rank_still_stops_at_the_next_step():
    p, flag = Probe(), loop.StopFlag()
    assert loop.finish_window_s(30.0, 1) == 0.0
    with pytest.raises(loop.StopRequested) as e:
        loop.timed_window(p.hooks(on_step=_stop_at(flag, 3), stop=flag), steps=50)
    assert p.steps == 4 and e.value.partial["timed_steps"] == 4 and "stop_not_agreed" not in e.value.partial
    h = p.hooks(stop=flag)  # a stop after a window's last step: that window is whole, the next step stops
    assert loop.window_end_stop(h, loop.timed_window(p.hooks(), steps=5), stalled=False) is False


# --- two real gloo ranks through the CLI ---------------------------------------------------------------

WINDOW_STEPS = 50
DDP = ("parallel=ddp", "parallel.world_size=2", "model=mlp", "data.batch_size=8", "bench.threads=1",
       "bench.min_window_s=0", f"bench.steps={WINDOW_STEPS}", "bench.warmup_max_steps=6", "bench.warmup_min_steps=2",
       "bench.warmup_stable_steps=2", "bench.warmup_cv_tol=10", "bench.self_check=false",
       "bench.contention_probe_s=0", "bench.breakdown_steps=0", "bench.stop_grace_s=60", "logger=none")


def _both_ranks_agreed(rec: dict, windows: int | None = None) -> list[dict]:
    m, ranks = rec["measurements"], rec["ranks"]
    assert rec["status"] == "interrupted" and "SIGTERM" in rec["reason"], rec["reason"]
    assert m["ranks_reporting"] == 2 and len(ranks) == 2 and all(r.get("figures", 1) is not None for r in ranks)
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:  # both stopped at the same window edge: the same closed windows, the open one run out
        assert r["phase"] == "timed" and r["ranks_agreed"] and r["stop_at_window_end"], r
        assert r["timed_steps"] == WINDOW_STEPS and r["throughput_samples_per_s_partial"] > 0
        assert "stop_not_agreed" not in r and "error" not in r
    assert ranks[0]["windows_completed"] == ranks[1]["windows_completed"]
    assert len(ranks[0]["window_s_completed"]) == ranks[0]["windows_completed"]
    if windows is not None:
        assert ranks[0]["windows_completed"] == windows
    assert m["windows_completed"] == ranks[0]["windows_completed"] and m["timed_steps"] == WINDOW_STEPS
    return ranks


def _start(store, at_step: int) -> tuple[subprocess.Popen, int, bytes]:
    """The run and its console pipe, once rank 0's bar has counted `at_step` timed steps."""
    cmd = [sys.executable, "-m", "xbench", f"store.root={store}", *DDP, "bench.repeats=1000"]
    r, w = os.pipe()
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=w, stderr=w)
    os.close(w)
    seen, deadline = b"", time.monotonic() + 400
    while time.monotonic() < deadline:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        seen += chunk
        counts = re.findall(rb"timed steps[^|]*\|[^|]*\| *(\d+)/", seen[-4096:])
        if counts and int(counts[-1]) >= at_step:
            return proc, r, seen
    raise AssertionError(seen[-2000:])


def _drain(proc: subprocess.Popen, r: int) -> int:
    while os.read(r, 65536):  # keep the console drained until the launcher exits
        pass
    os.close(r)
    return proc.wait(timeout=180)


@pytest.mark.slow
def test_sigterm_to_rank_0_alone_stops_both_ranks_at_the_same_window_edge(store):
    """A real SIGTERM to rank 0's own process (fault.kind=signal: os.kill of its pid) 20 steps into the second
    window: rank 1 got no signal, learns of the stop at the window's edge, and both report; the run is
    `interrupted` with both ranks' figures, one closed window each, the second run to its end."""
    at = 3 + WINDOW_STEPS + 20  # the warm-up's 3 steps, one whole window, then 20 steps
    p = subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *DDP, "bench.repeats=3",
                        "logger.progress=false", "fault.kind=signal", "fault.signal=SIGTERM", "fault.rank=0",
                        f"fault.at_step={at}"], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    [rec] = records(store)
    assert p.returncode == 130, p.stderr[-3000:]
    ranks = _both_ranks_agreed(rec, windows=1)
    assert ranks[0]["stop_seen_at_step"] == 21 and ranks[1]["stop_seen_at_step"] is None


@pytest.mark.slow
def test_a_window_too_long_for_the_grace_stops_the_signalled_rank_at_once_and_the_record_says_why(store):
    """The bound: rank 0 signalled 20 steps into a 100,000-step window, with bench.stop_grace_s=6 (3 s to run
    the window out: far too little). It stops at once, saying why; rank 1's next collective fails, and it
    reports what it had (its error, its warm-up); the run is `interrupted` with both ranks in `ranks`."""
    p = subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *DDP, "bench.steps=100000",
                        "bench.repeats=1", "bench.stop_grace_s=6", "logger.progress=false", "fault.kind=signal",
                        "fault.signal=SIGTERM", "fault.rank=0", "fault.at_step=22"],
                       cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    [rec] = records(store)
    assert p.returncode == 130 and rec["status"] == "interrupted", p.stderr[-3000:]
    r0, r1 = rec["ranks"]
    assert r0["rank"] == 0 and r0["timed_steps"] == 20 and "ranks_agreed" not in r0
    assert "stopped after step 20 of the window's 100000 without the other ranks" in r0["stop_not_agreed"]
    assert "bench.stop_grace_s" in r0["stop_not_agreed"] and r0["throughput_samples_per_s_partial"] > 0
    assert r1["rank"] == 1 and r1["error"] and r1["warmup_steps"] == 3 and r1["windows_completed"] == 0
    assert rec["measurements"]["ranks_reporting"] == 2


# A survivor rank whose collective failed as its peer's process ended; torchrun._leave is wrapped so that the
# elastic agent's SIGTERM (sent to the survivor the moment it sees the peer's process gone) arrives just
# before the rank leaves its figures: the order that, once in CI, left the record without its ranks.
SURVIVOR = """
import os, signal, sys, types
from xbench.launch import torchrun

def rank_main(work, on_step, stop, process):
    e = RuntimeError("[pair.cc:561] Connection closed by peer [127.0.0.1]:15075")
    e.xbench_partial = {"phase": "timed", "timed_steps": 20, "warmup_steps": 3, "windows_completed": 0}
    raise e

leave = torchrun._leave
def leave_after_the_agents_sigterm(exchange, rank, obj):
    os.kill(os.getpid(), signal.SIGTERM)
    leave(exchange, rank, obj)

torchrun.rank_main, torchrun._leave = rank_main, leave_after_the_agents_sigterm
work = types.SimpleNamespace(plan=types.SimpleNamespace(bench=types.SimpleNamespace(stop_grace_s=6)))
os.environ["RANK"] = "1"
try:
    torchrun._spawned_rank(work, sys.argv[1])
except RuntimeError:
    sys.exit(3)
"""


def test_a_stop_signal_while_a_failed_rank_leaves_its_figures_waits_for_them(tmp_path):
    """The rank's own code (launch/torchrun._spawned_rank) with its work replaced by a collective that failed:
    the stop signal that arrives as it leaves what it measured no longer ends it at once (it did: exit 143,
    nothing left); its figures are in the exchange and it exits with its error. A rank that left nothing
    is still listed in the stop's ranks, with no figures."""
    p = subprocess.run([sys.executable, "-c", SURVIVOR, str(tmp_path)], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stderr[-2000:])
    from xbench.launch.gathered import RankLost, stopped_of
    from xbench.launch.torchrun import _left
    from xbench.rank import StopRequested

    [(rank, lost)] = _left(str(tmp_path)).items()
    assert rank == 1 and isinstance(lost, RankLost) and "Connection closed by peer" in lost.error
    assert lost.partial == {"phase": "timed", "timed_steps": 20, "warmup_steps": 3, "windows_completed": 0,
                            "rank": 1}
    alone = stopped_of({0: StopRequested({"phase": "timed", "rank": 0})}, None, world=2).partial
    assert alone["rank_partials"] == [{"phase": "timed", "rank": 0}, None] and alone["ranks_reporting"] == 1


@pytest.mark.slow
def test_sigterm_to_the_launcher_mid_window_keeps_both_ranks_closed_windows(store):
    """A spot preemption: SIGTERM to the launching process while the windows run. The elastic agent passes it
    to both ranks; each runs its window to the edge, they stop there together, rank 0 gathers, and the record
    holds both ranks' figures with the same closed windows, within bench.stop_grace_s."""
    proc, r, seen = _start(store, at_step=WINDOW_STEPS + 10)  # into the second window (of 1,000)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    rc = _drain(proc, r)
    exit_s = time.monotonic() - t0
    [rec] = records(store)
    assert rc == 130, seen[-2000:]
    assert _both_ranks_agreed(rec)[0]["windows_completed"] >= 1
    assert exit_s < 60, exit_s


def _rank_processes(launcher_pid: int) -> list:
    """The launcher's ranks: spawned (multiprocessing's spawn_main) or forked from its warm template (children
    of the forkserver, which is the launcher's own child)."""
    import psutil

    def cmd(c):
        return " ".join(c.cmdline())

    return [c for c in psutil.Process(launcher_pid).children(recursive=True)
            if "resource_tracker" not in cmd(c)
            and ("spawn_main" in cmd(c) or ("forkserver" in cmd(c) and c.ppid() != launcher_pid))]


@pytest.mark.slow
def test_a_killed_rank_still_ends_the_run_and_the_survivor_keeps_its_closed_windows(store):
    """SIGKILL to one rank mid-run: nothing can be agreed with it. Its peer's collective fails, the run ends
    `failed` (exit 1) naming both ranks, and the survivor's closed windows are in its entry of `ranks`."""

    proc, r, seen = _start(store, at_step=WINDOW_STEPS + 10)  # into the second window (of 1,000)
    ranks = _rank_processes(proc.pid)
    assert len(ranks) == 2, ranks
    max(ranks, key=lambda c: c.create_time()).send_signal(signal.SIGKILL)
    rc = _drain(proc, r)
    [rec] = records(store)
    assert rc == 1 and rec["status"] == "failed", (rc, rec["status"], rec.get("reason"))
    [killed] = [x for x in rec["ranks"] if x.get("exitcode") == -signal.SIGKILL]
    [survivor] = [x for x in rec["ranks"] if x is not killed]
    assert "figures" not in killed
    kept = survivor["figures"]
    assert kept["rank"] == survivor["rank"] and kept["windows_completed"] >= 1
    assert len(kept["window_s_completed"]) == kept["windows_completed"]
    assert kept["throughput_samples_per_s_partial"] > 0 and survivor["error"]  # its collective's failure
