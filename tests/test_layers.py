"""The layering docs/architecture.md draws, as behaviour: the record-first path imports no torch, and
the import-linter contracts `make lint` checks hold (and do catch an import that points up)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def test_nothing_before_the_first_record_write_imports_torch():
    code = ("import sys, xbench.__main__, xbench.runner, xbench.envelope, xbench.launch, xbench.report.__main__, "
            "xbench.cost, xbench.analysis.frame\n"
            "print(sorted(m for m in ('torch', 'torch_xla', 'accelerate', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(LINT is None, reason="import-linter is not installed (requirements/dev.lock installs it)")
def test_layer_contracts_hold_and_catch_an_upward_import(tmp_path):
    ok = subprocess.run([LINT, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "BROKEN" not in ok.stdout and ok.stdout.count("KEPT") >= 5
    # The same contracts over a copy of the package where the loop imports a mode: an upward import.
    shutil.copytree(REPO / "xbench", tmp_path / "xbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "xbench" / "bench" / "loop.py", "a") as f:
        f.write("\n\ndef _upward():\n    from xbench.modes import base  # noqa: F401\n")
    bad = subprocess.run([LINT, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert bad.returncode != 0
    assert "xbench.bench.loop -> xbench.modes.base" in bad.stdout
