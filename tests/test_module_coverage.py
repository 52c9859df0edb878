"""`--every-module` (make test-fast): a session that never imported one of the project's modules fails and names
it; a narrowed session (-k, test paths) is not checked and says so. The modules are read from the files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import REPO
from tests.module_coverage import never_imported, project_modules


def test_modules_are_listed_from_the_files_packages_and_namespace_packages_alike(tmp_path):
    for path in ("xbench/__init__.py", "xbench/a.py", "xbench/sub/__init__.py", "xbench/sub/b.py",
                 "hydra_plugins/p/__init__.py", "hydra_plugins/p/q.py", "xbench/notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert project_modules(tmp_path) == ["hydra_plugins.p", "hydra_plugins.p.q", "xbench", "xbench.a", "xbench.sub",
                                         "xbench.sub.b"]
    assert never_imported({"xbench": 1, "xbench.sub.b": 1, "hydra_plugins.p": 1}, tmp_path) == [
        "hydra_plugins.p.q", "xbench.a", "xbench.sub"]
    real = project_modules()
    assert {"xbench.report.browser", "xbench.bench.meters.energy", "hydra_plugins.xbench_sweeper.sweeper"} <= set(real)


def _session(tmp_path, *args: str, imports: tuple[str, ...] = ("xbench.version",)) -> subprocess.CompletedProcess:
    """A pytest session of one test per module in `imports`, each importing it, with this repo's conftest hooks."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = t\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import (pytest_addoption, pytest_sessionfinish, pytest_terminal_summary,  # noqa: F401\n"
        "                            pytest_testnodedown)\n")
    shutil.rmtree(tmp_path / "t", ignore_errors=True)
    (tmp_path / "t").mkdir()
    for i, module in enumerate(imports):
        (tmp_path / "t" / f"test_{i}.py").write_text(f"import {module}\n\n\ndef test_{i}():\n    assert {module}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no hydra plugin: 1 s less
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--every-module", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_whole_session_missing_a_module_fails_and_names_it_a_narrowed_one_is_not_checked(tmp_path):
    whole = _session(tmp_path)
    assert whole.returncode == 1, whole.stdout[-2000:]
    assert "1 passed" in whole.stdout
    line = next(x for x in whole.stdout.splitlines() if x.startswith("--every-module:"))
    assert "xbench.report.browser" in line and "hydra_plugins.xbench_slurm" in line
    assert "xbench.version," not in line and "xbench, " not in line  # what the test imported is covered
    narrowed = _session(tmp_path, "-k", "test_0")
    assert narrowed.returncode == 0, narrowed.stdout[-2000:]
    assert "--every-module: not checked (-k narrowed it" in narrowed.stdout


def test_two_passes_and_their_workers_are_counted_together(tmp_path):
    """make test-fast: a serial pass leaves its modules in --modules-seen; the xdist pass counts them, and each of
    its workers' own, before it names what no test imported."""
    seen = tmp_path / "seen.txt"
    first = _session(tmp_path, "-p", "no:xdist", f"--modules-seen={seen}", imports=("xbench.report.escape",))
    assert first.returncode == 1 and "xbench.report.escape" in seen.read_text().split(), first.stdout[-2000:]
    second = _session(tmp_path, "-p", "xdist.plugin", "-n", "2", "--dist", "loadfile", f"--modules-seen={seen}",
                      imports=("xbench.metrics.stats", "xbench.records.redact"))
    assert "2 passed" in second.stdout, second.stdout[-2000:]
    line = next(x for x in second.stdout.splitlines() if x.startswith("--every-module:"))
    assert "xbench.report.browser" in line
    for module in ("xbench.report.escape", "xbench.metrics.stats", "xbench.records.redact"):  # pass 1's, each worker's
        assert f"{module}," not in line and not line.endswith(module), line
