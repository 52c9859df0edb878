"""parallel=xla_mp with several replicas, for real on PJRT CPU: torch_xla.launch runs the replicas as
threads of one process (CPU_NUM_DEVICES=2), as it does on TPU v2/v3. The stop flag is installed once,
by a process's main thread, and shared by its rank threads (a replica thread used to install signal
handlers itself: ValueError: signal only works in main thread); each replica builds bench.seed's
weights (seed and build under one lock) and replica 0's are broadcast to every replica; 2 replicas
train as one world."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, cli_env, records
from tests.jobs import Jobs
from tests.test_xla_parallel import _run, _xla_env
from tests.xla_runs import shared_runs

pytestmark = pytest.mark.xla  # torch-xla's own paths: run in .venv-xla (make test-xla)


def _python(code: str, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout)


STOP_FLAG = """
        import os, signal, threading, time
        from xbench.launch import child

        def in_thread(fn):
            box = []

            def run():
                try:
                    box.append(fn())
                except Exception as e:
                    box.append(e)

            t = threading.Thread(target=run)
            t.start(); t.join()
            if isinstance(box[0], Exception):
                raise box[0]
            return box[0]

        try:
            in_thread(child.stop_on_signals)
        except RuntimeError as e:
            print("first-in-thread:", "main thread" in str(e))
        flag = child.stop_on_signals()
        shared = in_thread(child.stop_on_signals)
        print("same:", shared is flag, "busy:", flag.busy)
        with child.reason_on_stop(flag):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            print("stopped:", in_thread(lambda: (shared.requested, shared.reason)))
        print("busy after:", flag.busy)

        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked process: the flag comes along and is this process's now
            f = in_thread(child.stop_on_signals)
            f.requested = False
            with child.reason_on_stop(f):
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.1)
                os.write(w, f"{f is flag} {f.requested} {f.reason}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print("forked:", os.read(r, 100).decode())
"""


def _broadcast(tmp_path):
    script, out = tmp_path / "bcast.py", tmp_path / "out.txt"
    script.write_text(textwrap.dedent(BROADCAST))
    p = subprocess.run([sys.executable, str(script), str(out)], cwd=REPO, env=cli_env(), capture_output=True,
                       text=True, timeout=300)
    return p, out


def _two_replicas(store, *args):
    return _run(store, "parallel=xla_mp", "parallel.world_size=2", "data.batch_size=16", *args, env=_xla_env())


# Exactly 3 warm-up steps, then one window of 20: replica 0 signals its own process (the replicas' threads share
# its stop flag) at step 8, the window's 6th; its other 14 steps take far less than the window may run on.
STOPPED_MID_WINDOW = ("bench.warmup_min_steps=3", "bench.warmup_max_steps=3", "bench.steps=20",
                      "fault.kind=signal", "fault.signal=SIGTERM", "fault.at_step=8", "fault.rank=0")


def submit_runs(jobs: Jobs, root) -> None:
    """The module's fresh processes (tests/jobs.py): each test checks its own."""
    jobs.submit("stop_flag", _python, STOP_FLAG,
                tests=("test_rank_threads_share_the_stop_flag_their_main_thread_installed",))
    jobs.submit("broadcast", _broadcast, root,
                tests=("test_broadcast_gives_every_replica_replica_0s_parameters_and_buffers",))
    jobs.submit("replicas", _two_replicas, root / "replicas",
                tests=("test_xla_mp_2_replicas_on_pjrt_cpu_train_as_one_world_with_equal_weights",))
    jobs.submit("stopped", _two_replicas, root / "stopped", *STOPPED_MID_WINDOW,
                tests=("test_a_stop_mid_window_keeps_every_replicas_figures",))


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """(jobs, root): started with test_xla_feed's and test_xla_parallel's, in one pool (tests/xla_runs.py)."""
    return shared_runs(request, tmp_path_factory)


def test_rank_threads_share_the_stop_flag_their_main_thread_installed(runs):
    """In a fresh interpreter (pytest's own handlers stay untouched): a thread's call returns the main
    thread's flag without installing anything, and a SIGTERM to the process reaches it; a forked process
    adopts the inherited flag in a thread too; a thread that comes first is told what the launcher owes it."""
    p = runs[0]["stop_flag"]
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    out = p.stdout
    assert "first-in-thread: True" in out
    assert "same: True busy: True" in out
    assert "stopped: (True, 'SIGTERM')" in out
    assert "busy after: False" in out
    assert "forked: True True SIGTERM" in out  # the first stop's reason is kept (flag.reason or ...)


def test_replica_threads_build_the_seeds_weights_whatever_their_turns():
    """xla_mp's replicas on TPU v2/v3 and PJRT CPU are threads of one process. Each seeds (prepare_rank),
    sets up its device, then builds: the real build_workload in 2 threads that seed and then meet, as
    replicas do. Before: both drew from the one global RNG after both had seeded, so at most one got
    bench.seed's weights and which one depended on the turns (replica 0's weights varied run to run,
    params_sha256_at_start with them); now each builds exactly a lone build's weights, every time."""
    import threading

    import torch
    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench.worker import build_workload
    from xbench.parallel.ddp import params_sha256
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["model=mlp", "model.options.hidden=32", "data=synthetic_mnist",
                                       "platform=cpu", "logger=none", "bench.seed=7"]))
    plan = resolve(cfg, host_facts())
    torch.manual_seed(cfg.bench.seed)
    alone = params_sha256(build_workload(plan, RankContext()).model)
    for attempt in range(3):
        met, got = threading.Barrier(2), {}

        def replica(ordinal, met, got):
            torch.manual_seed(cfg.bench.seed)  # as prepare_rank does, before the device is set up
            met.wait()
            got[ordinal] = params_sha256(build_workload(plan, RankContext(rank=ordinal, world_size=2)).model)

        threads = [threading.Thread(target=replica, args=(i, met, got)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == {0: alone, 1: alone}, attempt


BROADCAST = """
    import os, sys
    os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2", XLA_ENABLE_PARAM_ALIASING="false")
    import torch
    from xbench.parallel.ddp import params_sha256
    from xbench.runtimes import xla as rx

    def replica(index, out):
        import torch_xla
        ordinal, world, _ = rx.replica()
        rx.serialise_graph_launches()
        torch.manual_seed(100 + ordinal)  # replicas that build different weights, on purpose
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        model[1].running_mean.fill_(float(ordinal + 1))  # a buffer that differs too (on the CPU: a value
        model = model.to(torch_xla.device())  # traced on the device would make each replica's graph differ)
        before = params_sha256(model)
        rx.broadcast_parameters(model)
        after = params_sha256(model)
        mean = model[1].running_mean.cpu().tolist()
        got = rx.gather_bytes("t", f"{ordinal} {world} {before} {after} {mean}".encode())
        if ordinal == 0:
            open(out, "w").write("\\n".join(b.decode() for b in got))

    if __name__ == "__main__":
        rx.launch_processes(replica, (sys.argv[1],), single_process=False, start_method="fork")
"""


@pytest.mark.slow
@pytest.mark.xla
def test_broadcast_gives_every_replica_replica_0s_parameters_and_buffers(runs):
    p, out = runs[0]["broadcast"]
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    rows = [line.split(" ", 4) for line in out.read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("0", "2"), ("1", "2")]  # both replicas, one world of 2
    (_, _, before0, after0, mean0), (_, _, before1, after1, mean1) = rows
    assert before0 != before1  # different seeds: different weights before the broadcast
    assert after0 == after1 == before0  # replica 0's everywhere after it
    assert mean0 == mean1 == "[1.0, 1.0, 1.0]"  # buffers too


@pytest.mark.slow
@pytest.mark.xla
def test_xla_mp_2_replicas_on_pjrt_cpu_train_as_one_world_with_equal_weights(runs):
    """The CLI's xla_mp with 2 replicas (threads over 2 PJRT CPU devices): one record of a world of 2,
    gradients all-reduced (xm.optimizer_step) so the replicas end equal, and equal from the start
    (broadcast; without it they drew different weights from the shared RNG, seen here)."""
    jobs, root = runs
    code, out = jobs["replicas"]
    assert code == 0, out[-3000:]
    [rec] = records(root / "replicas")
    assert rec["status"] == "ok", rec["reason"]
    m, ranks = rec["measurements"], rec["ranks"]
    assert (m["world_size"], m["devices"], m["global_batch_size"]) == (2, 2, 32)
    assert [(r["rank"], r["xla_global_ordinal"], r["xla_world_size"]) for r in ranks] == [(0, 0, 2), (1, 1, 2)]
    assert len({r["params_sha256_at_start"] for r in ranks}) == 1
    assert len({r["params_sha256"] for r in ranks}) == 1
    # each replica built bench.seed's weights itself (before the broadcast; they took turns on one RNG)
    assert {r["params_sha256_built"] for r in ranks} == {ranks[0]["params_sha256_at_start"]}
    assert ranks[0]["params_sha256"] != ranks[0]["params_sha256_at_start"]  # it trained
    assert m["compiles_timed"] == 0 and m["pjrt_device"] == "CPU"
    assert rec["series"]["loss"][-1] < rec["series"]["loss"][0]


def test_a_stop_mid_window_keeps_every_replicas_figures(runs):
    """A SIGTERM in the timed window of 2 xla_mp replicas: both run the window to its edge and stop there together
    (bench/loop.py rule 10), and the record keeps both replicas' partial figures, as for torchrun's ranks
    (launch/gathered.py); before, the first replica's exception was the record and the other's figures were lost."""
    jobs, root = runs
    code, out = jobs["stopped"]
    assert code == 130, out[-3000:]
    [rec] = records(root / "stopped")
    m = rec["measurements"]
    assert rec["status"] == "interrupted" and rec["reason"] == "SIGTERM during timed", rec["reason"]
    assert m["ranks_reporting"] == 2 and m["stop_at_window_end"] and m["ranks_agreed"], m
    assert [r["rank"] for r in rec["ranks"]] == [0, 1], rec["ranks"]
    for r in rec["ranks"]:  # each replica's own window, run to the edge: 20 steps
        assert r["timed_steps"] == 20 and len(r["timed_step_times_s"]) == 20, r
    assert m["throughput_samples_per_s_partial"] > 0
