"""XLA CLI runs that tests of several modules read, each run once per session (make test-xla). A module uses one by
importing its fixture (`from tests.xla_runs import xla_fsdp_runs  # noqa: F401`; `# noqa: F811` where a test names it).

xla_fsdp_runs: parallel=xla_fsdp on 2 XLA:CPU devices, the tiny Llama decoder, with bench.profile=xla and XLA's dump
of the SPMD partitioner's output (tests/test_xla_fsdp_hlo.py reads the HLO, tests/test_fsdp.py the record's
sharding and memory figures: one ~80 s run where there were two), and beside it one XLA device at the same global
batch (the losses' reference), started together at the first test that asks.

spmd_feed_lines: the SPMD feed's pieces (test_xla_feed.py) and the multi-host feed (test_xla_multihost_feed.py),
both transfers only, in one fresh SPMD process.

shared_runs: the CLI runs of test_xla_feed, test_xla_mp and test_xla_parallel, in one pool for the three."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, cli_env
from tests.jobs import Jobs

LLM = ("+workload=llama_tiny_tokens", "platform=cpu", "precision=fp32", "bench.threads=1")
FSDP_TESTS = ("test_xla_fsdp_partitioned_step_gathers_weights_never_activations",
              "test_xla_fsdp_trains_like_one_device_on_the_same_global_batch",
              "test_xla_fsdp_shards_parameters_over_2_cpu_devices_with_no_timed_compiles")
ONE_TESTS = ("test_xla_fsdp_trains_like_one_device_on_the_same_global_batch",)


def run_llm(store: Path, *args: str, **env) -> subprocess.CompletedProcess:
    """One CLI run of the tiny decoder (the two runs share the cores: a wide timeout)."""
    env = cli_env(PJRT_DEVICE="CPU", **env)
    env.pop("CPU_NUM_DEVICES", None)  # the launcher sets it from parallel.world_size
    return subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *FAST, *LLM, *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)


class Started:
    """{key: a started run}; indexing waits for it. `root`: the folder of the runs' stores (root / key)."""

    def __init__(self, root: Path, futures: dict[str, Future]):
        self.root, self._futures = root, futures

    def __getitem__(self, key: str):
        if key not in self._futures:
            raise KeyError(f"run {key!r} was not started: name the test that reads it in tests/xla_runs.py")
        return self._futures[key].result()


# Each module that imports a fixture holds its own definition of it, so a session-scoped fixture would still run
# once per module: the runs are kept in the session's config stash and every definition hands out the same ones.
_FSDP = pytest.StashKey[Started]()
_FEED = pytest.StashKey[subprocess.CompletedProcess]()


@pytest.fixture(scope="session")
def xla_fsdp_runs(request, tmp_path_factory) -> Started:
    stash = request.config.stash
    if _FSDP not in stash:
        selected = {getattr(item, "originalname", item.name) for item in request.session.items}
        root = tmp_path_factory.mktemp("xla_fsdp")
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="xla_fsdp_runs")
        request.config.add_cleanup(pool.shutdown)  # waits for the runs at the session's end
        futures = {}
        if selected & set(FSDP_TESTS):
            futures["fsdp"] = pool.submit(run_llm, root / "fsdp", "parallel=xla_fsdp", "parallel.world_size=2",
                                          "bench.profile=xla", XLA_FLAGS="--xla_dump_hlo_pass_re=spmd-partitioning")
        if selected & set(ONE_TESTS):
            futures["one"] = pool.submit(run_llm, root / "one", "runtime=xla", "data.batch_size=8")
        stash[_FSDP] = Started(root, futures)
    return stash[_FSDP]


@pytest.fixture(scope="session")
def spmd_feed_lines(request) -> dict[str, str]:
    """One fresh SPMD process over 2 PJRT CPU devices, transfers only (no graph compiles), runs test_xla_feed.py's
    PIECES and then test_xla_multihost_feed.py's HOSTS, each in its own namespace (HOSTS fakes torch-xla's process
    facts: it comes second): {key: value} of the `key: value` lines they printed (their keys differ). One
    interpreter's torch-xla import and PJRT client where there were two."""
    import textwrap

    from tests.test_xla_feed import PIECES
    from tests.test_xla_multihost_feed import HOSTS

    code = "\n".join(f"exec({textwrap.dedent(script)!r}, {{}})" for script in (PIECES, HOSTS))
    if _FEED not in request.config.stash:
        request.config.stash[_FEED] = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(),
                                                     capture_output=True, text=True, timeout=300)
    p = request.config.stash[_FEED]
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return dict(line.split(": ", 1) for line in p.stdout.splitlines() if ": " in line)


# ---- the runs of test_xla_feed, test_xla_mp and test_xla_parallel in one pool ------------------------------------

JOB_MODULES = ("tests.test_xla_feed", "tests.test_xla_mp", "tests.test_xla_parallel")  # the order pytest runs them
_SHARED = pytest.StashKey[dict]()


class _ModuleJobs(Jobs):
    """tests/jobs.py's Jobs for one module (its selected tests), over a pool the modules share."""

    def __init__(self, selected: set[str], pool: ThreadPoolExecutor):  # not Jobs.__init__: no one module asks
        self._selected, self._pool, self._futures = selected, pool, {}

    def __exit__(self, *exc: object) -> None:  # the pool is the session's: shut down at its end
        pass


def shared_runs(request, tmp_path_factory) -> tuple[Jobs, Path]:
    """(jobs, root) of the requesting module, one of JOB_MODULES; each defines submit_runs(jobs, root). At the first
    of them to run, every one of them that has a selected test submits its runs to one pool of 2 workers (the test
    machine's 2 cores), in the order the modules run: a module's last run no longer leaves a core idle while it ends,
    the next module's first run takes it."""
    import importlib

    stash = request.config.stash
    if _SHARED not in stash:
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="xla_module_runs")
        request.config.add_cleanup(pool.shutdown)  # waits for the runs at the session's end
        started = {}
        for name in JOB_MODULES:
            items = [i for i in request.session.items if i.module.__name__ == name]
            if items:
                module = importlib.import_module(name)
                jobs = _ModuleJobs({getattr(i, "originalname", i.name) for i in items}, pool)
                root = tmp_path_factory.mktemp(name.removeprefix("tests.test_"))
                module.submit_runs(jobs, root)
                started[name] = (jobs, root)
        stash[_SHARED] = started
    return stash[_SHARED][request.module.__name__]
