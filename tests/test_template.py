"""The warm template a sweep's isolated points are forked from (xbench/launch/template.py): where it is refused.

The fork itself, its pids and start-up, and the sweep's end table are checked on a real sweep
(tests/test_cli.py::test_sweep_points_are_forked_from_one_warm_template)."""

from __future__ import annotations

import sys

import pytest

from xbench.config import XBenchConfig
from xbench.launch import template

# serial: alone, never beside another test (a template must leave within 1 s of its runner)
pytestmark = pytest.mark.serial


def _cfg(**sections) -> XBenchConfig:
    cfg = XBenchConfig()
    cfg.parallel.name, cfg.runtime.name, cfg.bench.isolation = "single", "eager", "auto"
    for key, value in sections.items():
        section, field = key.split("__")
        setattr(getattr(cfg, section), field, value)
    return cfg


def test_points_that_cannot_be_forked_safely_are_spawned_with_the_reason():
    """JAX's and torch_xla's threads, a setting torch reads when it starts, or the user's word: spawned, and why
    (each said once per sweep); a strategy with a launcher of its own is left to it. Before, every point spawned."""
    assert template.refusal(_cfg()) is None if sys.platform.startswith("linux") else True
    assert "JAX" in template.refusal(_cfg(runtime__name="torchax"))
    assert "torch_xla" in template.refusal(_cfg(runtime__name="xla_compile"))
    assert "ATEN_CPU_CAPABILITY" in template.refusal(_cfg(bench__cpu_capability="avx2"))
    assert template.refusal(_cfg(bench__isolation="spawn")) == "bench.isolation=spawn"
    assert template.decide(_cfg(parallel__name="ddp")) == {"process": "torchrun launcher"}
    said = template._SAID.copy()
    try:
        template._SAID.clear()
        for _ in range(2):
            assert template.decide(_cfg(runtime__name="torchax"))["process"] == "spawn"
        assert len(template._SAID) == 1
    finally:
        template._SAID.clear()
        template._SAID.update(said)


def test_warm_imported_outside_a_template_holds_no_signal_and_keeps_pythons_exit():
    """warm.py imported by anyone but the template (here: pytest, with no runner's mark) changes no signal
    disposition and does not take the quick exit (make test-fast's importer of the module; the real template's
    exit is the slow test below)."""
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    from xbench.launch import warm

    assert warm.LEAVES_AT_ONCE is False
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.slow  # a real template started by a throwaway runner: 8-30 s
def test_the_template_leaves_at_once_when_its_runner_goes_and_a_plain_import_does_not():
    """The template (multiprocessing's forkserver with launch/warm.py) holds the runner's stdout and stderr for
    its points, so its exit is the end of the runner's output for whoever reads it: it leaves by os._exit, no
    interpreter teardown (1-2 s with torch imported: a sweep's output ended that long after the runner).
    Real template, started by a throwaway runner process; the test process itself imports warm.py without
    the runner's mark and keeps Python's normal exit. Before: no quick exit (the flag did not exist)."""
    import subprocess
    import time

    from tests.conftest import REPO, cli_env
    from xbench.launch import warm

    assert warm.LEAVES_AT_ONCE is False  # imported here, by pytest: not a template
    code = ("import json, time\nfrom xbench.launch import template, warm\n"
            "ctx = template._context()\n"
            "with template._pool(ctx) as pool:\n    facts = pool.submit(warm.facts).result()\n"
            "print(json.dumps(facts), flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    facts = __import__("json").loads(proc.stdout.readline())
    assert facts["forked"] and facts["template_leaves_at_once"] is True
    assert proc.wait(timeout=120) == 0, proc.stderr.read()[-2000:]
    t_runner = time.perf_counter()
    rest = proc.stdout.read()  # EOF once every holder of the pipe, the template included, has exited
    waited_s = time.perf_counter() - t_runner
    assert rest == "" and waited_s < 1.0, waited_s


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_a_runner_that_used_the_template_still_hears_its_stop_signals():
    """The template holds the stop signals (a group's SIGTERM must not end it while a forked point runs); the
    runner must not: it asked the template for its facts by importing warm.py, whose import installed the holds
    in the runner too, so a SIGTERM at a sweep's end was swallowed and the sweep went on (the drill's
    signal_phases row 'SIGTERM at end (sweep of 2)': 2 records, exit 0). Real template, in a fresh process
    standing for the runner; warm.py imported anywhere but the template holds nothing."""
    import subprocess

    from tests.conftest import REPO, cli_env

    code = ("import signal\nfrom xbench.launch import template\n"
            "mine = lambda *a: None\nfor s in (signal.SIGTERM, signal.SIGHUP): signal.signal(s, mine)\n"
            "pid, why = template.check()\nassert pid is not None and why is None, why\n"
            "import xbench.launch.warm\n"
            "print(all(signal.getsignal(s) is mine for s in (signal.SIGTERM, signal.SIGHUP)))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr[-2000:]


@pytest.mark.slow  # two 2-rank DDP runs
def test_ddp_ranks_are_forked_from_the_warm_template_with_the_runners_environment(tmp_path, monkeypatch):
    """torchrun's ranks start from the warm template (elastic's forkserver start method), as a sweep's points
    do: each spawned rank imported torch and the rank wing anew (~2.5 s of a 2-rank MLP run's 8.6-9.0 s on 2
    cores). A forked rank takes the runner's environment as it launched, not the template's from its start
    (OMP_NUM_THREADS set after the template started reaches both ranks), with the agent's own variables (each
    rank its RANK); `bench.isolation=spawn` spawns them. The record says which (`rank_process`)."""
    import xbench
    from tests.conftest import FAST, records

    if template.refusal(_cfg(parallel__name="ddp")) is not None:
        pytest.skip(template.refusal(_cfg(parallel__name="ddp")))
    assert template.check()[1] is None  # the template runs before the variable below is set
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    runs = {}
    for how in ("auto", "spawn"):
        store = tmp_path / how
        rec = xbench.run([*FAST, "parallel=ddp", "parallel.world_size=2", "model=mlp", "bench.threads=1",
                          f"bench.isolation={how}", f"store.root={store}"])
        assert rec.status == "ok", rec.reason
        [runs[how]] = records(store)
    forked, spawned = runs["auto"], runs["spawn"]
    assert [r["rank_process"] for r in forked["ranks"]] == ["template fork"] * 2
    assert forked["measurements"]["rank_process"] == "template fork"
    assert [r["rank_process"] for r in spawned["ranks"]] == ["spawn"] * 2
    for rec in (forked, spawned):
        assert [r["omp_num_threads_env"] for r in rec["ranks"]] == ["3", "3"], rec["ranks"]
        assert [r["rank"] for r in rec["ranks"]] == [0, 1] and len({r["pid"] for r in rec["ranks"]}) == 2
