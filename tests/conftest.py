"""Shared helpers: run the real CLI in a subprocess against a temporary store."""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="session")
def drill(request, tmp_path_factory) -> DrillRun:
    names, short = set(), False
    for item in request.session.items:
        if (m := item.get_closest_marker("drill")) is not None:
            param = getattr(item, "callspec", None) and item.callspec.params.get("case")
            names.update(m.args or ([param] if param else []))
            short = short or m.kwargs.get("short", False)
    base = tmp_path_factory.mktemp("drill")
    out, keep = base / "rows.json", base / "runs"
    cmd = ["bash", str(REPO / "scripts" / "fault_drill.sh"), "--json", str(out), "--keep", str(keep)]
    cmd += ["--short"] * short + (["--only", ",".join(sorted(names))] if names else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=DRILL_TIMEOUT_S - 60,
                       env={**os.environ, "PYTHON": sys.executable})
    if not out.exists():
        pytest.fail(f"the drill left no rows ({' '.join(cmd[2:])}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return DrillRun(json.loads(out.read_text()), p.returncode, p.stdout + p.stderr, keep)


# ---- --every-module: the session fails when a module of the project was never imported (make test-fast) ----

def pytest_addoption(parser):
    parser.addoption("--every-module", action="store_true",
                     help="fail when a module of xbench or hydra_plugins was never imported by the tests that ran "
                          "(tests/module_coverage.py); make test-fast passes it")


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
    if not session.config.getoption("--every-module"):
        return
    from tests.module_coverage import never_imported

    why = _narrowed(session.config)
    missing = [] if why else never_imported(sys.modules)
    session.config.stash[_MISSING] = (why, missing)
    if missing and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
