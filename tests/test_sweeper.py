"""xbench's sweeper (hydra_plugins/xbench_sweeper, `hydra/sweeper: xbench` in conf/config.yaml): Hydra's grid,
composed lazily, with progress; points that repeat each other refused (up front from the parsed overrides,
as the points run from their composed configs); a batch launcher's batches composed and checked whole.

The in-process tests run Hydra's real multirun (xbench's config tree, its callbacks, this sweeper, Hydra's
basic launcher) with a task function that records which points it was handed instead of running xbench:
the sweeper's contract is with whatever task function Hydra gives it. The real CLI runs once, at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher

from hydra_plugins.xbench_sweeper.sweeper import grid_axes, repeated_values
from tests.conftest import CONF, FAST, REPO, cli_env, records, run_cli
from xbench.hydra_guard import sweep_size

OLD_CPU_VS_GPU = (  # the shape (tests/test_studies.py): the preset overrides the model +workload chose
    "# @package _global_\ndefaults:\n  - override /model: mlp\n  - override /data: synthetic_mnist\n"
    "experiment: old_cpu_vs_gpu\ndata:\n  batch_size: 128\nhydra:\n  sweeper:\n    params:\n"
    "      +workload: mlp_mnist,cnn_mnist,vgg_cifar10\n      bench.threads: 1,2\n")


def _grid(overrides: list[str], params: dict | None = None) -> list[list[str]]:
    args = [f"{k}={v}" for k, v in (params or {}).items()] + overrides
    axes = grid_axes(OverridesParser.create().parse_overrides(args))
    return [[text for text, _ in point] for point in itertools.product(*axes.values())]


def _repeats(overrides: list[str]) -> list[str]:
    return repeated_values(grid_axes(OverridesParser.create().parse_overrides(overrides)))


def test_the_grid_is_hydras_and_values_listed_twice_are_found_without_composing():
    for overrides, params in ((["data.batch_size=8,16", "runtime=eager,compile", "bench.steps=5"], None),
                              (["bench.seed=range(0,4)", "model=mlp"], {"+workload": "a,b", "bench.seed": "7,8"}),
                              (["+workload=a"], {"+workload": "a,b,c"}), ([], None)):
        args = [f"{k}={v}" for k, v in (params or {}).items()] + overrides
        assert _grid(overrides, params) == BasicSweeper.split_arguments(
            OverridesParser.create().parse_overrides(args), None)[0], overrides  # the same points, in its order
        assert len(_grid(overrides, params)) == sweep_size(params, overrides)  # the count the guard refuses by
    assert len(_grid(["bench.seed=range(0,2000)"])) == 2000
    [p] = _repeats(["platform=cpu,cpu", "bench.seed=1,2"])
    assert p.startswith("platform lists cpu twice") and "compose to the same config" in p
    for same in ("bench.seed=1,1.0", "optim.lr=0.1,1e-1", "run_name='a',a", "bench.seed=range(0,3),2",
                 "tags=[a,b],[a, b]"):
        key = same.split("=")[0]
        if same == "bench.seed=range(0,3),2":  # a range is a sweep of its own: the list form repeats
            same = "bench.seed=0,1,2,2"
        [p] = _repeats([same])
        assert p.startswith(f"{key} lists "), p
    for distinct in ("bench.seed=1,2", "bench.self_check=true,1", "run_name='1',1", "optim.lr=1e-300,0",
                     "bench.seed=1180591620717411303424,1180591620717411303425"):  # 2**70 and 2**70+1
        assert _repeats([distinct]) == [], distinct
    assert _repeats(["bench.seed=1,1", "bench.seed=3"]) == []  # the later override replaces the sweep


def test_the_cli_refuses_a_sweep_of_two_identical_points_in_one_line(tmp_path):
    """The real CLI: `-m bench.seed=1,1` is two points of one config: exit 2 before composing, and one line
    that says it is refused and why (it was a heading with the reason indented below it)."""
    p = run_cli("-m", "bench.seed=1,1", *FAST, store=tmp_path / "store", timeout=120)
    said = [line for line in p.stderr.splitlines() if "bench.seed" in line]
    assert p.returncode == 2 and said == [
        "xbench: this sweep repeats configs, nothing was composed or run: bench.seed lists 1 twice: the points "
        "with one and those with the other compose to the same config; the sweep would measure one config twice "
        "under two names"], p.stderr[-2000:]
    assert records(tmp_path / "store") == []


class BatchLauncher(Launcher):
    """A batch launcher (the shape of hydra/launcher=slurm: it is handed whole batches): records each batch
    and says every point completed, without running anything."""

    batches: list = []

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config

    def launch(self, job_overrides, initial_job_idx):
        BatchLauncher.batches.append((initial_job_idx, [list(j) for j in job_overrides]))
        return [JobReturn(overrides=list(j), status=JobStatus.COMPLETED) for j in job_overrides]


@contextlib.contextmanager
def _signals_kept():
    """The guard installs its 'exit at once while preparing' handlers; a refused sweep in this process
    would otherwise leave them for the next test."""
    from xbench.rank import STOP_SIGNALS

    kept = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in kept.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _hydra(tmp_path: Path):
    """Hydra over xbench's config tree, plus tmp_path/extra on the search path (the CLI's --config-dir)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    from xbench.config import register_configs

    register_configs()
    search = create_config_search_path(str(CONF))
    search.append("test", f"file://{tmp_path / 'extra'}", anchor=SearchPathQuery(provider="main"))
    GlobalHydra.instance().clear()
    try:
        with _signals_kept():
            yield Hydra.create_main_hydra2(task_name="xbench", config_search_path=search)
    finally:
        GlobalHydra.instance().clear()


def _ended(run) -> int | Exception | None:
    """How a sweep ended: None (it returned), a SystemExit's code, or the exception it raised."""
    try:
        run()
    except SystemExit as e:
        return e.code
    except Exception as e:  # a point that cannot compose: Hydra's error, as the CLI would print it
        return e
    return None


def _multirun(tmp_path: Path, overrides: list[str]) -> tuple[list, int | Exception | None]:
    """Hydra's real multirun (xbench's callbacks, this sweeper, Hydra's basic launcher): the points the task
    function was handed (job number, seed, model), and how the sweep ended."""
    handed: list = []

    def task(cfg):
        handed.append((HydraConfig.get().job.num, cfg.bench.seed, cfg.model.name))

    with _hydra(tmp_path) as hydra:
        code = _ended(lambda: hydra.multirun(config_name="config", task_function=task, overrides=[
            f"store.root={tmp_path / 'store'}", "logger=none", *overrides]))
    return handed, code


def _batch_sweep(tmp_path: Path, overrides: list[str], max_batch_size: int | None = None):
    """The sweeper as Hydra builds it, its launcher a BatchLauncher (Hydra takes launchers by name only from
    the hydra_plugins package, so it is set here, where Hydra's setup would have put it)."""
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext, RunMode

    from hydra_plugins.xbench_sweeper.sweeper import XbenchSweeper

    setup_globals()
    with _hydra(tmp_path) as hydra:
        cfg = hydra.compose_config("config", [f"store.root={tmp_path / 'store'}", "logger=none", *overrides],
                                   run_mode=RunMode.MULTIRUN)
        sweeper = XbenchSweeper(max_batch_size=max_batch_size, params=cfg.hydra.sweeper.params)
        sweeper.hydra_context = HydraContext(config_loader=hydra.config_loader, callbacks=None)
        sweeper.config, sweeper.launcher = cfg, BatchLauncher()
        return _ended(lambda: sweeper.sweep(arguments=list(cfg.hydra.overrides.task)))


@pytest.fixture
def extra(tmp_path) -> Path:
    (tmp_path / "extra" / "experiment").mkdir(parents=True)
    (tmp_path / "extra" / "experiment" / "old_cpu_vs_gpu.yaml").write_text(OLD_CPU_VS_GPU)
    return tmp_path


def test_local_points_compose_one_at_a_time_with_progress_and_a_redacted_sweep_file(extra, capfd):
    # point 3 cannot compose (bench.seed is an int): points 1 and 2 ran first, so it was not composed before
    # them (Hydra's basic sweeper composes the whole batch first, and would have run none)
    handed, code = _multirun(extra, ["bench.seed=0,1,notanumber", "+model.options.db_password=sw-secret-41"])
    err = capfd.readouterr().err
    assert [h[:2] for h in handed] == [(0, 0), (1, 1)], err[-2000:]
    assert "bench.seed=notanumber" in str(code)
    assert "point 1/3 (#0): bench.seed=0" in err and "point 3/3 (#2): bench.seed=notanumber" in err
    assert "Launching 1 jobs locally" not in err and "#0 :" not in err  # Hydra's own lines: said once, by the sweeper
    [sweep_file] = (extra / "store").glob(".hydra/*/multirun.yaml")
    assert "sw-secret-41" not in sweep_file.read_text() and "db_password=<redacted>" in sweep_file.read_text()


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_a_local_point_that_composes_to_an_earlier_points_config_is_not_run(extra, capfd):
    handed, code = _multirun(extra, ["+experiment=old_cpu_vs_gpu"])
    err = capfd.readouterr().err
    assert code == 2 and [h[0] for h in handed] == [0, 1], err[-2000:]  # mlp at 1 and 2 threads; 4 repeats not run
    assert err.count("compose to the same config") == 4 and "4 of 6 points were not run" in err
    assert ("point 3/6 (#2) [+workload=cnn_mnist bench.threads=1] and point 1 (#0) [+workload=mlp_mnist "
            "bench.threads=1] compose to the same config: +workload=cnn_mnist changes nothing") in err


def test_a_batch_launcher_gets_each_batch_composed_and_checked_whole(extra, capfd):
    BatchLauncher.batches.clear()
    assert _batch_sweep(extra, ["bench.seed=0,1"]) is None
    [(first, batch)] = BatchLauncher.batches  # one batch, the whole sweep
    assert first == 0 and [job[-1] for job in batch] == ["bench.seed=0", "bench.seed=1"]
    BatchLauncher.batches.clear()
    code = _batch_sweep(extra, ["+experiment=old_cpu_vs_gpu"], max_batch_size=2)
    err = capfd.readouterr().err
    # the first batch (mlp at 1 and 2 threads) is distinct and handed over; the second repeats it: refused whole
    assert code == 2 and [(i, len(b)) for i, b in BatchLauncher.batches] == [(0, 2)], err[-2000:]
    assert "nothing of points 3-4 was submitted" in err and err.count("compose to the same config") == 2


@pytest.mark.slow
def test_a_2000_point_sweep_starts_its_first_point_at_once_and_a_sigterm_keeps_its_records(tmp_path):
    """The issue's shape: 2,000 points (bench.seed), each a run that fails fast (a config error: a `failed`
    record). The last point cannot compose (bench.seed=x): the first point's record exists before it could
    have been composed (Hydra's basic sweeper composes every point first, fails on point 2,000 and runs
    none). Then SIGTERM: exit 130, every record whole and final, no later point started."""
    store = tmp_path / "results"
    seeds = ",".join([*map(str, range(1999)), "x"])
    cmd = [sys.executable, "-m", "xbench", "-m", f"store.root={store}", *FAST, "data.batch_size=-1",
           "sweep_max_points=2000", f"bench.seed={seeds}"]
    p = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 240  # a deadline, not a measurement: the old sweeper composes for minutes
        while not list(store.glob("*/record.json")) and p.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()[1][-3000:]
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-3000:]
    started = len(re.findall(r"xbench: point \d+/2,000", err))
    assert "xbench: point 1/2,000 (#0): bench.seed=0" in err and "point 2000/2,000" not in err, err[-3000:]
    assert "bench.seed=x" not in err  # point 2,000 was never composed (its error would name it)
    recs = records(store)
    assert 1 <= len(recs) <= started <= len(recs) + 1 < 2000  # a record per point started (one the signal
    # found composing has none)
    for r in recs:
        assert r["status"] in ("failed", "interrupted"), r["status"]
    # the first record exists from its run's start (record first): the signal finds point 1 failed, or still in its
    # start-up, which a stop ends at once (envelope._Signals.at_once)
    assert ((recs[0]["status"] == "failed" and "data.batch_size=-1 is out of range" in recs[0]["reason"])
            or (recs[0]["status"] == "interrupted" and recs[0]["reason"] == "SIGTERM during start-up")), recs[0]
    assert all(json.loads(p_.read_text()) for p_ in store.glob("*/record.json"))
