"""Every failure ends in one line that names the thing and what to do (R4 item 4): the report over extreme
figures, impossible cost inputs, --check-report on damaged reports, interpolation and API mistakes, the
report's --out and empty stores. Real CLIs on real records (one tiny run), no mocks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, drill_test

PY = sys.executable


def _cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-2000:]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two real ok records of a tiny run (mlp on digits): one sweep of two seeds, in one process (one start-up)."""
    root = tmp_path_factory.mktemp("r4") / "store"
    p = _cli("-m", "xbench", "-m", f"store.root={root}", "model=mlp", "data=digits", "bench.steps=3",
             "bench.repeats=1", "bench.min_window_s=0", "bench.warmup_max_steps=4", "bench.warmup_min_steps=1",
             "bench.warmup_stable_steps=1", "bench.warmup_cv_tol=10", "logger=none", "logger.progress=false",
             "bench.isolation=shared", "bench.seed=1,2")
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(list(root.glob("*/record.json"))) == 2
    return root


def test_cv_of_extreme_throughputs_is_finite():
    from xbench.analysis.spread import cv_of

    assert cv_of([1e308, 1e308]) == 0.0
    assert cv_of([1e308, 5.0]) == pytest.approx(2 ** 0.5, rel=1e-9)  # (x, ~0): sd/mean = sqrt(2)
    assert cv_of([10.0, 20.0, 30.0]) == pytest.approx(0.5)  # sd 10 / mean 20


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_report_over_a_1e308_throughput_is_written(store, tmp_path):
    s = tmp_path / "s"
    shutil.copytree(store, s)
    for path in sorted(s.glob("*/record.json"))[:1]:
        d = json.loads(path.read_text())
        d["measurements"]["throughput_samples_per_s"] = 1e308
        path.write_text(json.dumps(d))
    p = _cli("-m", "xbench.report", str(s), "--out", str(tmp_path / "rep"), "--no-progress", "--format", "md,csv")
    _no_traceback(p)  # was: OverflowError in analysis/spread.py, no report
    assert p.returncode == 0 and (tmp_path / "rep" / "report.md").is_file()


def test_report_out_dev_null_and_an_empty_store_are_one_line_errors(store, tmp_path):
    p = _cli("-m", "xbench.report", str(store), "--out", "/dev/null", "--no-progress")
    _no_traceback(p)  # was: FileExistsError traceback
    assert p.returncode == 2 and "--out /dev/null: not a folder" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _cli("-m", "xbench.report", str(empty), "--out", str(tmp_path / "rep"), "--no-progress")
    assert p.returncode == 2, p.stdout  # was: "0 runs", exit 0
    assert f"no run records under {empty}" in p.stderr and "store.root" in p.stderr


def test_cost_refuses_impossible_prices_at_once(store, tmp_path):
    odd = tmp_path / "odd.yaml"
    odd.write_text("name: odd\nprice:\n  - name: gpu\n    amount: 1.0\n    count: 0\n    currency: XYZ\n")
    p = _cli("-m", "xbench.cost", str(store), "--platform", str(odd))
    _no_traceback(p)
    assert p.returncode == 2, p.stdout  # was: exit 0, a table of zeros in XYZ
    assert "count=0 is out of range" in p.stderr and "currency='XYZ' is unknown; known: EUR, USD" in p.stderr
    p = _cli("-m", "xbench.cost", str(store), "--platform", "gce_k80", "--price", "gpu=1e308")
    assert p.returncode == 2 and "amount=1e+308 is out of range; allowed: [0, 1e12]" in p.stderr, p.stdout
    assert "inf" not in p.stdout  # was: inf per hour
    p = _cli("-m", "xbench.cost", str(store), "--platform", "gce_k80")
    assert p.returncode == 0 and "usd_per_hour" in p.stdout


def test_reprice_leaves_an_extreme_throughput_as_recorded():
    from xbench.analysis.reprice import repriced

    base = {"status": "ok", "provider": "local", "hostname": "h", "accelerator": None, "cpu_model": "c",
            "model": "m", "price_currency": "usd"}
    rows = [{**base, "run_id": "a", "platform": "p1", "usd_per_hour": 1.0, "throughput_samples_per_s": 1e308},
            {**base, "run_id": "b", "platform": "p2", "usd_per_hour": 2.0, "throughput_samples_per_s": 1e308}]
    out, notes = repriced(rows, "usd")
    assert notes == [] and all(r.get("samples_per_s_per_usd_per_hour") is None for r in out)


def test_check_report_refuses_empty_and_damaged_figures(tmp_path):
    from xbench import studies
    from xbench.studies.__main__ import main

    s = studies.get("cpu_vs_gpu")
    (tmp_path / "tables").mkdir()
    (tmp_path / "plots").mkdir()
    for fig in s["small"]["figures"]:
        kind, name = fig.split(":", 1)
        (tmp_path / ("tables" if kind == "table" else "plots") / f"{name}.{'csv' if kind == 'table' else 'png'}") \
            .write_bytes(b"")
    assert main(["cpu_vs_gpu", "--check-report", str(tmp_path)]) == 1  # was: 0 (0-byte files passed)
    missing = studies.missing_figures(s, tmp_path)
    assert len(missing) == len(s["small"]["figures"]) and all("is empty (0 bytes)" in m for m in missing)
    plot = next(f.split(":", 1)[1] for f in s["small"]["figures"] if f.startswith("plot:"))
    (tmp_path / "plots" / f"{plot}.png").write_bytes(studies.PNG_MAGIC + b"x" * 100)
    (tmp_path / "plots" / f"{plot}.json").write_text("{bad json")
    said = [m for m in studies.missing_figures(s, tmp_path) if m.startswith(f"plot:{plot}")]
    assert said and "is not the report's plot summary: JSONDecodeError" in said[0]  # was: a JSONDecodeError traceback
    p = _cli("-m", "xbench.studies", "cpu_vs_gpu", "--check-report", str(tmp_path / "nowhere"))
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "no such folder" in p.stderr


def test_interpolation_mistake_is_one_line_before_any_record(tmp_path):
    p = _cli("-m", "xbench", f"store.root={tmp_path / 's'}", "data.batch_size=${nosuch}", "logger=none", timeout=120)
    _no_traceback(p)  # was: Hydra's "Error executing job" and an InterpolationKeyError traceback
    assert p.returncode == 2
    assert "xbench: data.batch_size: Interpolation key 'nosuch' not found" in p.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("sweep", ["data.batch_size=range(0,3,0)", "optim.lr=range(0,3,0)"])
def test_a_sweep_grammar_mistake_is_one_line_before_any_point(tmp_path, sweep):
    """Grammar Hydra parses but cannot expand (a step of 0); what it cannot parse it says in its own short lines."""
    p = _cli("-m", "xbench", "-m", f"store.root={tmp_path / 's'}", sweep, "logger=none", timeout=120)
    _no_traceback(p)  # was: range()'s ValueError as a traceback, after a callback warning
    assert p.returncode == 2 and "nothing was composed or run" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "s").exists()


def test_api_mistakes_are_one_clear_exception():
    from xbench import api

    with pytest.raises(TypeError, match=r"stores must be a folder path .* not int \(123\)"):
        api.load(123)  # was: TypeError: 'int' object is not iterable
    with pytest.raises(TypeError, match="config_dir must be a folder path"):
        api.compose(config_dir=123)
    with pytest.raises(TypeError, match="got None"):
        api.compose([None])
    with pytest.raises(ValueError) as e:
        api.compose(["bench.seed=range(0,"])
    assert "\n" not in str(e.value) and "no viable alternative" in str(e.value)
    with pytest.raises(ValueError, match=r"^data.batch_size: Interpolation key 'nosuch' not found"):
        api.compose(["data.batch_size=${nosuch}"])  # was: InterpolationKeyError from deep in OmegaConf
    assert api.compose({"data": {"batch_size": 3}}).data.batch_size == 3  # nested dicts are dotted overrides


@pytest.mark.parametrize("sinfo, said", [
    ("sleep 100", "sinfo did not answer within 10 s"),
    ('echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1', "sinfo failed (sinfo: error: Unable"),
    ('echo "debug*|2|4000|infinite"', "sbatch failed (FailedJobError: sbatch: error: Batch job submission failed"),
])
@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_a_failing_or_hung_slurm_is_one_line(tmp_path, sinfo, said):
    """SLURM's commands stand in as scripts (no SLURM here): a hung sinfo is bounded (was 60 s, then a
    traceback), a failing sinfo or sbatch is one line naming it (were tracebacks)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    import os
    import time

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # srun: submitit asks only that it exists (it looks for it before sbatch), and a machine without SLURM has none
    for name, body in (("sinfo", sinfo), ("sbatch", 'echo "sbatch: error: Batch job submission failed: Invalid '
                                                   'account" >&2; exit 1'), ("srun", "exit 1")):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    t = time.monotonic()
    p = subprocess.run([PY, "-m", "xbench", "-m", "hydra/launcher=slurm", f"store.root={tmp_path / 's'}",
                        "bench.seed=0,1", "logger=none"], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"})
    took = time.monotonic() - t
    _no_traceback(p)
    assert p.returncode == 1 and f"xbench: SLURM: nothing submitted: {said}" in p.stderr, p.stderr[-1500:]
    assert took < 45, took  # start-up, plus sinfo's 10 s bound at most


@drill_test("planted_data_cache", "report_cost_mistakes")
def test_drill_rows_of_round_4(drill):
    rows = drill.rows_of("planted_data_cache") + drill.rows_of("report_cost_mistakes")
    assert len(rows) == 4 and all(r["verdict"] == "ok" for r in rows), rows
