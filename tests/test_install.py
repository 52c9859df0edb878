"""A normal (non-editable) install carries conf/ inside the package and runs from any folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FAST, REPO, cli_env, records

pytestmark = pytest.mark.slow


def test_non_editable_install_runs_from_another_folder(tmp_path):
    target, elsewhere, store = tmp_path / "site", tmp_path / "elsewhere", tmp_path / "results"
    elsewhere.mkdir()
    # --no-deps: torch and friends come from this environment; only xbench itself is installed.
    # uv's venvs carry no pip: use uv where it is, pip otherwise (both build a wheel, then install it).
    installer = ([shutil.which("uv"), "pip", "install", "--python", sys.executable] if shutil.which("uv")
                 else [sys.executable, "-m", "pip", "install"])
    done = subprocess.run([*installer, "--quiet", "--no-deps", "--no-build-isolation", "--target", str(target),
                           str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (target / "xbench" / "conf" / "config.yaml").is_file()
    assert (target / "xbench" / "conf" / "experiment" / "resnet50_tpu.yaml").is_file()
    assert (target / "xbench" / "studies" / "studies.yaml").is_file()  # the studies' manifest is package data
    env = cli_env(PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", "import xbench, xbench.__main__ as m; print(xbench.__file__);"
                            "print(m.config_dir())"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.stdout.splitlines()[0].startswith(str(target)), where.stdout + where.stderr
    assert where.stdout.splitlines()[1] == str(target / "xbench" / "conf")
    p = subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *FAST], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["status"] == "ok"
    assert not os.path.exists(elsewhere / "results")
