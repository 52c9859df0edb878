"""Shared helpers: run the real CLI in a subprocess against a temporary store."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

# pytest rewrites each test module's asserts as it imports it and keeps the result as bytecode, unless
# sys.dont_write_bytecode: with PYTHONDONTWRITEBYTECODE=1 (this machine, CI) every session rewrote all ~200 modules
# again (8 of the 14.5 s make test-fast spent collecting). This process writes its cache; the processes the
# tests start still inherit PYTHONDONTWRITEBYTECODE.
sys.dont_write_bytecode = False

# absl (JAX and optax import it) makes its logging handler at import, holding that moment's sys.stderr, and closes
# that stream when logging's handlers are shut down, as a Hydra run's logging.config.dictConfig does. In a test
# session that stream is pytest's capture: a Hydra multirun in a later test (tests/test_sweeper.py) closed it and
# the process lost sys.stderr. Pointed at the interpreter's own stderr, which absl never closes.
with contextlib.suppress(ImportError):
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_SILENT="true", WANDB_MODE="offline", PYTHONUNBUFFERED="1",
               TORCHINDUCTOR_CACHE_DIR=os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/xbench-inductor-tests"))
    env.update(extra)
    return env


def run_cli(*args: str, store: Path, cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
            module: str = "xbench") -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]  # Hydra's flags (-m) must come before overrides
    cmd = [sys.executable, "-m", module, *flags, f"store.root={store}", *[a for a in args if a not in flags]]
    return subprocess.run(cmd, cwd=cwd or REPO, env=env or cli_env(), capture_output=True, text=True,
                          timeout=timeout)


def records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(store).glob("*/record.json"))]


# Keep every CLI run small: a few steps, no W&B unless the test asks. Windows of exactly bench.steps
# (not sized by time), one of them, and a sweep's points in one process: a test that is about window
# sizing, repeats or isolation says so after FAST (a later override wins).
FAST = ("bench.steps=5", "bench.min_window_s=0", "bench.repeats=1", "bench.isolation=shared",
        "bench.warmup_max_steps=6", "bench.warmup_min_steps=2", "bench.warmup_stable_steps=2",
        "bench.warmup_cv_tol=10", "logger=none", "logger.progress=false")


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "results"


@pytest.fixture(scope="module")
def cached_compose():
    """Hydra compositions of conf/ kept for the session (tests/compose_cache.py); a module opts in with
    `pytestmark = pytest.mark.usefixtures("cached_compose")`."""
    from tests.compose_cache import composing_once

    with composing_once():
        yield


# ---- the fault drill, run once per session for every test that reads it ---------------------------------

DRILL_TIMEOUT_S = 3000  # the drill a session asks for, on a busy machine; the first test to ask waits for it


def drill_test(*cases: str, short: bool = False):
    """Mark a test that reads the session's fault-drill run (the `drill` fixture). The drill runs once, with
    every case the selected tests name (as --only matches a name: part of the case's function name; a test's
    `case` parameter when the mark names none) and the --short subset when one asks for it, so a case two
    tests read runs once and the cases run side by side (--jobs)."""
    def mark(test):
        for m in (pytest.mark.slow, pytest.mark.timeout(DRILL_TIMEOUT_S), pytest.mark.drill(*cases, short=short)):
            test = m(test)
        return test
    return mark


def pytest_configure(config):
    config.addinivalue_line("markers", "drill(*cases, short=False): reads the session's fault drill (drill_test)")
    config.addinivalue_line("markers", "early(name): its command starts with the tests (started_early)")
    config.addinivalue_line("markers", "side_by_side: runs first, beside the session's drill (no timing or "
                            "contention figure is held; see pytest_collection_modifyitems)")
    config.addinivalue_line("markers", "serial: a figure it holds depends on timing, contention or the length of "
                            "warm-up: make test runs it in the one-at-a-time pass, never beside another test")


def pytest_itemcollected(item):
    """The drill, the commands started early and the tests run beside them belong to the one-at-a-time pass
    too: each xdist worker would start its own drill, and the side-by-side order is that pass's."""
    if any(item.get_closest_marker(m) for m in ("drill", "early", "side_by_side")):
        item.add_marker(pytest.mark.serial)


class DrillRun:
    """The rows of one drill run (scripts/fault_drill.py --json), its exit status, its console and the
    stores it kept (--keep: one folder per case, NN-<case>)."""

    def __init__(self, rows: list[dict], returncode: int, console: str, keep: Path):
        self.rows, self.returncode, self.console, self.keep = rows, returncode, console, keep

    def rows_of(self, only: str) -> list[dict]:
        """The rows `--only only` would have given."""
        return [r for r in self.rows if only in r["case"]]

    def folder(self, case: str) -> Path:
        [path] = self.keep.glob(f"[0-9][0-9]-{case}")
        return path


def _drill_command(items, keep_base: Path) -> list[str]:
    """The drill the selected tests read: every case they name, --short if one asks."""
    names, short = set(), False
    for item in items:
        if (m := item.get_closest_marker("drill")) is not None:
            param = getattr(item, "callspec", None) and item.callspec.params.get("case")
            names.update(m.args or ([param] if param else []))
            short = short or m.kwargs.get("short", False)
    cmd = ["bash", str(REPO / "scripts" / "fault_drill.sh"), "--json", str(keep_base / "rows.json"),
           "--keep", str(keep_base / "runs")]
    return cmd + ["--short"] * short + (["--only", ",".join(sorted(names))] if names else [])


class Started:
    """A command started when the tests start (pytest_runtestloop), in its own process group, its console in a
    file in its folder; a test waits for it. Killed with its group if the session ends first."""

    def __init__(self, cmd: list[str], folder: Path, env: dict | None = None):
        self.cmd, self.folder, self.log = cmd, folder, folder / "console.txt"
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=env or {**os.environ, "PYTHON": sys.executable})

    def wait(self, timeout_s: float) -> tuple[int, str]:
        """(exit status, console); past `timeout_s` the command is killed (its status then says so)."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        return code, self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


# name -> command(folder) -> (argv, env): what a test marked started_early(name) reads through early(name)
_EARLY: dict = {}
_STARTED: dict[str, Started] = {}


def started_early(name: str, command):
    """Mark a test whose long command (`command(folder)` -> (argv, env)) starts with the tests, beside the first
    ones (side_by_side), rather than when the test comes: the test reads it with early(name). For a command that
    holds no timing figure, on this 2-core machine where the tests otherwise run one at a time."""
    _EARLY[name] = command

    def mark(test):
        return pytest.mark.early(name)(test)
    return mark


def early(name: str, timeout_s: float = 1500) -> tuple[Path, int, str]:
    """(its folder, exit status, console) of the command started for the test marked started_early(name)."""
    if name not in _STARTED:
        pytest.fail(f"{name!r} was not started: the test reading it lacks started_early({name!r}, ...)")
    job = _STARTED[name]
    return (job.folder, *job.wait(timeout_s))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Start the drill and the started_early commands of the selected tests, beside the first tests (the
    side_by_side ones: see pytest_collection_modifyitems)."""
    if session.config.option.collectonly or not session.items:
        return
    temp = session.config._tmp_path_factory
    if any(i.get_closest_marker("drill") for i in session.items):
        base = temp.mktemp("drill")
        _STARTED["drill"] = Started(_drill_command(session.items, base), base)
    for name in {m.args[0] for i in session.items for m in i.iter_markers("early")}:
        folder = temp.mktemp(name)
        argv, env = _EARLY[name](folder)
        _STARTED[name] = Started(argv, folder, env)


def pytest_unconfigure(config):
    for job in _STARTED.values():
        job.kill()


@pytest.fixture(scope="session")
def drill() -> DrillRun:
    folder, code, console = early("drill", DRILL_TIMEOUT_S - 60)
    if not (folder / "rows.json").exists():
        pytest.fail(f"the drill left no rows ({' '.join(_STARTED['drill'].cmd[2:])}), exit {code}:\n{console[-6000:]}")
    return DrillRun(json.loads((folder / "rows.json").read_text()), code, console, folder / "runs")


def pytest_collection_modifyitems(config, items):
    """Run order: the side_by_side tests first (while the drill runs beside them: they hold no timing or
    contention figure, and the drill's own cases already run two at a time), then the tests that read the drill
    (they wait for it), then the rest on a machine the drill has left. One at a time, the suite's tests mostly
    keep one of the 2 cores busy (its CPU time was 1.03x its wall time); beside the drill they keep both.
    side_by_side is for tests whose work runs in other processes (an in-process test moved first changes what
    the later ones inherit). Not for a test whose figures depend on how long warm-up took: a run's warm-up ends
    on steady step times, so under load it runs more steps (torchax's bf16 parity compared steps 0-17 instead of
    0-5 beside the drill, and its losses had drifted past the tolerance by then); those are `serial` alone.
    This order is the one-at-a-time pass's (make test's first): the tests not marked serial run in the second,
    on both cores (pytest-xdist)."""
    rank = {id(i): 0 if i.get_closest_marker("side_by_side") else
            1 if i.get_closest_marker("drill") or i.get_closest_marker("early") else 2 for i in items}
    items.sort(key=lambda i: rank[id(i)])  # stable: within each part, the usual order


# ---- --every-module: the session fails when a module of the project was never imported (make test-fast) ----

def pytest_addoption(parser):
    parser.addoption("--every-module", action="store_true",
                     help="fail when a module of xbench or hydra_plugins was never imported by the tests that ran "
                          "(tests/module_coverage.py); make test-fast passes it")
    parser.addoption("--modules-seen", metavar="FILE",
                     help="add the modules of xbench and hydra_plugins this session imported to FILE, and count "
                          "those FILE already names (an earlier pass's) as imported; make test-fast's two passes")


def _narrowed(config) -> str:
    """Why this session is not the whole selection (then --every-module says nothing), or ''."""
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return "test paths were given"
    for flag, said in (("keyword", "-k"), ("lf", "--lf"), ("deselect", "--deselect")):
        if getattr(config.option, flag, None):
            return f"{said} narrowed it"
    return ""


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not (config.getoption("--every-module") or config.getoption("--modules-seen")):
        return
    from tests.module_coverage import PACKAGES, never_imported

    imported = {m for m in sys.modules if m.split(".")[0] in PACKAGES}
    if hasattr(config, "workeroutput"):  # an xdist worker: its controller counts every worker's modules
        config.workeroutput["imported"] = sorted(imported)
        return
    imported |= config.stash.get(_WORKERS_IMPORTED, set())
    if seen := config.getoption("--modules-seen"):
        path = Path(seen)
        imported |= set(path.read_text().split()) if path.exists() else set()
        path.write_text("".join(f"{m}\n" for m in sorted(imported)))
    if not config.getoption("--every-module"):
        return
    why = _narrowed(config)
    missing = [] if why else never_imported(imported)
    config.stash[_MISSING] = (why, missing)
    if missing and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: gather what each worker imported (its sessionfinish put it in workeroutput)."""
    seen = node.config.stash.setdefault(_WORKERS_IMPORTED, set())
    seen.update(getattr(node, "workeroutput", {}).get("imported", ()))


def pytest_terminal_summary(terminalreporter, config):
    why, missing = config.stash.get(_MISSING, ("", None))
    if why:
        terminalreporter.write_line(f"--every-module: not checked ({why}: only the whole selection can say)")
    elif missing:
        terminalreporter.write_line(f"--every-module: {len(missing)} module(s) no test that ran imported "
                                    f"(add a cheap test of each): {', '.join(missing)}", red=True)
    elif missing is not None:
        terminalreporter.write_line("--every-module: every module of xbench and hydra_plugins was imported")


_MISSING = pytest.StashKey[tuple]()
_WORKERS_IMPORTED = pytest.StashKey[set]()
