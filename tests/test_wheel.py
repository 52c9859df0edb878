"""The wheel, as a new user gets it: built from this checkout, installed into a fresh virtual environment
with only its declared dependencies (resolved against requirements/dev.lock as constraints, from uv's
cache when it is warm), then run from an unrelated folder: a throughput run, a train-to-target run and
a report (first without the report extra: one line saying what to install; then with it).

Measured here (2 cores, warm uv cache): build ~1.5 s, fresh venv ~0.1 s, install ~4 s (uv hard-links
torch out of its cache), the three runs ~35 s; the whole test ~45 s. A cold cache downloads torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, cli_env

pytestmark = pytest.mark.slow
UV = shutil.which("uv")


@pytest.mark.skipif(UV is None, reason="uv is not installed (this test builds and installs the wheel with it)")
def test_wheel_in_a_fresh_venv_runs_every_mode_and_the_report_from_anywhere(tmp_path):
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = elsewhere / "results"
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    timings: dict[str, float] = {}

    def step(name, cmd, ok=True, cwd=elsewhere):
        t0 = time.perf_counter()
        p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        timings[name] = round(time.perf_counter() - t0, 1)
        if ok:
            assert p.returncode == 0, f"{name}: {p.stderr[-3000:]}"
        return p

    lock = REPO / "requirements" / "dev.lock"
    step("build", [UV, "build", "--wheel", "--out-dir", dist, REPO], cwd=tmp_path)
    [wheel] = dist.glob("xbench-*.whl")
    step("venv", [UV, "venv", "-q", venv, "--python", sys.executable], cwd=tmp_path)
    py, xbench = venv / "bin" / "python", venv / "bin" / "xbench"
    step("install", [UV, "pip", "install", "-q", "--python", py, f"{wheel}[data]", "-c", lock], cwd=tmp_path)

    where = step("where", [py, "-c", "import xbench; print(xbench.__file__)"])
    assert where.stdout.strip().startswith(str(venv)), where.stdout  # the installed package, not the checkout
    assert step("version", [xbench, "--version"]).stdout.startswith("xbench ")

    step("throughput", [xbench, f"store.root={store}", *FAST, "data.batch_size=8"])
    target = step("train_to_target", [xbench, "+experiment=digits_to_target", f"store.root={store}", "logger=none"])
    assert "epoch 1/20" in target.stderr and "top1 0." in target.stderr  # the bar: epoch and latest evaluation
    recs = {r["config"]["bench"]["mode"]: r for r in map(json.loads, map(Path.read_text, store.glob("*/record.json")))}
    assert recs["throughput"]["status"] == "ok" and recs["throughput"]["measurements"]["throughput_samples_per_s"] > 0
    assert recs["train_to_target"]["status"] == "ok" and recs["train_to_target"]["measurements"]["target_reached"]
    assert recs["train_to_target"]["artifacts"]["mlperf_log"]  # mlperf-logging came with the core install

    bare = step("report_without_extra", [py, "-m", "xbench.report", store, "--out", elsewhere / "report"], ok=False)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    assert bare.stderr.strip() == ("xbench.report: python -m xbench.report needs matplotlib, which is not installed "
                                   "here: pip install 'xbench[report]'")
    step("install_report", [UV, "pip", "install", "-q", "--python", py, f"{wheel}[data,report]", "-c", lock],
         cwd=tmp_path)
    step("report", [py, "-m", "xbench.report", store, "--out", elsewhere / "report"])
    assert (elsewhere / "report" / "report.html").is_file()
    print(f"\nwheel test timings (s): {timings}")
