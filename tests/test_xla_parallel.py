"""XLA and Accelerate data parallelism for real on this CPU: SPMD over 2 PJRT CPU devices (losses equal
to one device on the same global batch), xla_mp's launcher in one process (2 replicas: test_xla_mp.py), and
Accelerate's multi-process launch over 2 gloo ranks (one world, identical replicas)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import CONF, FAST, REPO, cli_env, records
from tests.jobs import Jobs
from tests.xla_runs import shared_runs
from xbench import compat, launch, parallel
from xbench.config import register_configs
from xbench.platforms.detect import HostFacts

pytestmark = pytest.mark.xla  # torch-xla's own paths: run in .venv-xla (make test-xla)

TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "optim.lr=0.05")
CPU_HOST = HostFacts(torch_xla=True, accelerate=True, logical_cores=2, torch_version="2.9.0")


def _cfg(*overrides):
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="config", overrides=list(overrides)))


def _start(store, *args, env=None):
    threads = () if any(a.startswith("bench.threads=") for a in args) else ("bench.threads=1",)
    cmd = [sys.executable, "-m", "xbench", f"store.root={store}", *FAST, *TINY, *threads, *args]
    return subprocess.Popen(cmd, cwd=REPO, env=env or cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(proc, timeout=400) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


def _run(store, *args, env=None, timeout=900) -> tuple[int, str]:
    """One CLI run to its end: (exit status, console output). Killed past its timeout (runs started together
    share the cores: the timeout is wider than one run's alone)."""
    return _ended(_start(store, *args, env=env), timeout)


def _ended(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """A started run to its end: (exit status, console output); killed and reaped past its timeout."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out


def _xla_env():
    env = cli_env(PJRT_DEVICE="CPU")
    env.pop("CPU_NUM_DEVICES", None)
    return env


SPMD = "test_spmd_on_2_cpu_devices_trains_like_one_device_on_the_same_global_batch"


def submit_runs(jobs: Jobs, root) -> None:
    """The module's CLI runs (tests/jobs.py): each test checks its own, in its own store."""
    jobs.submit("spmd", _run, root / "spmd", "parallel=xla_spmd", "parallel.world_size=2", "data.batch_size=16",
                env=_xla_env(), tests=(SPMD,))
    jobs.submit("one", _run, root / "one", "runtime=xla", "data.batch_size=32", env=_xla_env(), tests=(SPMD,))
    jobs.submit("xla_mp", _run, root / "xla_mp", "parallel=xla_mp", "parallel.world_size=1", "data.batch_size=16",
                env=cli_env(PJRT_DEVICE="CPU"), tests=("test_xla_mp_launcher_runs_one_replica_on_cpu",))
    # 2 threads per rank: Accelerate would reset them to cores // ranks (1 here) if xbench did not keep them
    jobs.submit("accelerate", _run, root / "accelerate", "parallel=accelerate", "parallel.world_size=2",
                "data.batch_size=16", "bench.threads=2",
                tests=("test_accelerate_launches_2_cpu_processes_as_one_synchronised_job",))
    jobs.submit("sigterm", _run, root / "sigterm", "parallel=xla_spmd", "data.batch_size=8", "bench.steps=20",
                "fault.kind=sigterm", "fault.at_step=8", env=cli_env(PJRT_DEVICE="CPU"),
                tests=("test_spmd_process_stopped_by_sigterm_leaves_an_interrupted_record",))


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """(jobs, root): started with test_xla_feed's and test_xla_mp's, in one pool (tests/xla_runs.py)."""
    return shared_runs(request, tmp_path_factory)


def _ok(jobs, key) -> str:
    code, out = jobs[key]
    assert code == 0, out[-3000:]
    return out


# ---------- configs and compat (no device work) ----------

def test_strategies_name_their_launchers_and_select_their_runtime():
    assert parallel.get("xla_spmd").launcher == "xla" and not parallel.get("xla_spmd").multi_process
    assert parallel.get("xla_mp").launcher == "xla" and parallel.get("xla_mp").multi_process
    assert parallel.get("accelerate").launcher == "torchrun"
    assert _cfg("parallel=xla_spmd").runtime.name == "xla"
    assert _cfg("parallel=xla_mp").runtime.name == "xla"
    assert _cfg("parallel=accelerate").runtime.name == "accelerate"
    assert _cfg("parallel=xla_spmd", "runtime=xla_compile").runtime.name == "xla_compile"  # the user's wins


def test_xla_environment_is_set_for_the_devices_asked(monkeypatch):
    from xbench.launch.xla import xla_env

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert xla_env(_cfg("parallel=xla_spmd", "parallel.world_size=4")) == {"PJRT_DEVICE": "CPU",
                                                                             "CPU_NUM_DEVICES": "4"}
    assert xla_env(_cfg("parallel=xla_mp", "parallel.world_size=1")) == {"PJRT_DEVICE": "CPU"}
    monkeypatch.setenv("PJRT_DEVICE", "TPU")  # on a TPU the mesh spans the chips PJRT finds
    assert xla_env(_cfg("parallel=xla_spmd")) == {"PJRT_DEVICE": "TPU"}


def test_xla_mp_with_several_replicas_is_accepted_on_cpu_threads_and_on_tpu(monkeypatch):
    """On PJRT CPU the replicas are threads over CPU_NUM_DEVICES devices (tests/test_xla_mp.py trains 2)."""
    from xbench.launch.xla import xla_env

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert compat.check(_cfg("parallel=xla_mp", "parallel.world_size=8"), CPU_HOST) == []
    assert compat.check(_cfg("parallel=xla_mp", "parallel.world_size=1"), CPU_HOST) == []
    assert xla_env(_cfg("parallel=xla_mp", "parallel.world_size=2")) == {
        "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "XLA_ENABLE_PARAM_ALIASING": "false"}
    monkeypatch.delenv("PJRT_DEVICE", raising=False)  # an XLA run earlier in this process set it (runtimes.xla_module)
    on_tpu = HostFacts(torch_xla=True, logical_cores=96, torch_version="2.9.0", tpu_chips=4)
    assert compat.check(_cfg("parallel=xla_mp", "parallel.world_size=8"), on_tpu) == []


@pytest.mark.parametrize("overrides,expect", [
    (("parallel=xla_spmd", "runtime=eager"), "use runtime=xla or runtime=xla_compile"),
    (("parallel=xla_mp", "runtime=compile"), "use runtime=xla or runtime=xla_compile"),
    (("parallel=accelerate", "runtime=eager"), "which is runtime=accelerate"),
    (("parallel=ddp", "runtime=xla"), "use an XLA strategy"),
])
def test_mismatched_strategy_and_runtime_say_why(overrides, expect, monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    reasons = compat.check(_cfg(*overrides), CPU_HOST)
    assert any(expect in r for r in reasons), reasons


def test_one_record_writer(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert launch.writes_record(_cfg("parallel=xla_spmd"))  # off TPU: host 0 without asking torch_xla
    assert launch.writes_record(_cfg("parallel=xla_mp"))


# ---------- for real ----------

@pytest.mark.slow
def test_spmd_on_2_cpu_devices_trains_like_one_device_on_the_same_global_batch(runs):
    jobs, root = runs
    for key in ("spmd", "one"):
        _ok(jobs, key)
    [spmd], [one] = records(root / "spmd"), records(root / "one")
    assert spmd["status"] == "ok" and one["status"] == "ok", (spmd["reason"], one["reason"])
    m = spmd["measurements"]
    assert (m["devices"], m["devices_per_rank"], m["world_size"]) == (2, 2, 1)
    assert m["global_batch_size"] == 32 == one["measurements"]["global_batch_size"]
    assert m["xla_spmd_mesh_shape"] == [2] and m["xla_spmd_input_sharding"].startswith("{devices=[2,")
    assert m["pjrt_device"] == "CPU" and m["compiles_timed"] == 0 and m["compiles_warmup"] >= 1
    # global throughput: the whole global batch per step over the window
    assert m["throughput_samples_per_s"] == pytest.approx(32 * m["timed_steps_per_window"] / m["window_s"][0])
    a, b = spmd["series"]["loss"], one["series"]["loss"]
    n = min(len(a), len(b))
    assert n >= 6 and a[-1] < a[0]
    # Same data, same initial weights: the same trajectory (float rounding of the sharded reduction aside).
    assert a[:n] == pytest.approx(b[:n], rel=1e-5)


@pytest.mark.slow
def test_xla_mp_launcher_runs_one_replica_on_cpu(runs):
    jobs, root = runs
    _ok(jobs, "xla_mp")
    [rec] = records(root / "xla_mp")
    m = rec["measurements"]
    assert rec["status"] == "ok", rec["reason"]
    assert m["xla_world_size"] == 1 and m["xla_global_ordinal"] == 0 and m["compiles_timed"] == 0
    assert rec["series"]["loss"][-1] < rec["series"]["loss"][0]


@pytest.mark.slow
def test_accelerate_launches_2_cpu_processes_as_one_synchronised_job(runs):
    jobs, root = runs
    _ok(jobs, "accelerate")  # bench.threads=2 (the fixture says why)
    [rec] = records(root / "accelerate")  # one record, by rank 0
    assert rec["status"] == "ok", rec["reason"]
    m, ranks = rec["measurements"], rec["ranks"]
    assert m["world_size"] == 2 and [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:  # no silent world of one: Accelerate and the process group both see 2 processes
        assert r["accelerate_num_processes"] == 2 and r["process_group_world_size"] == 2
        assert r["accelerate_distributed_type"] == "DistributedType.MULTI_CPU"
        assert r["threads_intra"] == r["threads_intra_at_end"] == 2  # Accelerate did not reset bench.threads
    assert len({r["params_sha256"] for r in ranks}) == 1  # different data per rank, identical replicas
    assert m["global_batch_size"] == 32
    common = max(r["window_s"][0] for r in ranks)
    assert m["throughput_samples_per_s"] == pytest.approx(sum(r["samples_per_window"] for r in ranks) / common)


def test_warmup_ends_only_when_every_rank_agrees():
    """A rank whose own step times settled must wait for the others (else DDP collectives fall out of step)."""
    from xbench.bench import loop

    votes = []

    def others_ready_at_the_fourth_vote(ok):
        votes.append(ok)
        return ok and len(votes) >= 4  # this rank: stable from the first vote; the others: 3 votes later

    h = loop.Hooks(step=lambda x, y: 0.0, next_batch=lambda: (None, None), sync=lambda: None,
                   read_losses=lambda xs: [float(x) for x in xs], agree=others_ready_at_the_fourth_vote)
    wu = loop.warmup(h, min_steps=2, max_steps=20, stable_steps=2, cv_tol=10.0)
    assert wu.stable and wu.steps == 3 + 3 and votes == [True] * 4


@pytest.mark.slow
def test_spmd_process_stopped_by_sigterm_leaves_an_interrupted_record(runs):
    """The stop crosses back from the launched SPMD process with what was measured and the signal's name."""
    jobs, root = runs
    code, out = jobs["sigterm"]
    assert code == 130, out[-3000:]
    [rec] = records(root / "sigterm")
    assert rec["status"] == "interrupted" and rec["reason"] == "SIGTERM during timed", rec["reason"]
