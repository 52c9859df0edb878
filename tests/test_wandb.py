"""W&B runs for real in offline mode; what was logged is read back from its run files."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench.records.record import RunRecord
from xbench.records.wandb_files import read_offline_run
from xbench.sinks.wandb import bar_key

pytestmark = pytest.mark.slow


WANDB_FAST = tuple(a for a in FAST if not a.startswith("logger=")) + ("logger=wandb",)


def _wandb_run(*args, store):
    return run_cli(*args, store=store, env=cli_env(WANDB_MODE="offline"))


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's CLI runs, started together (tests/jobs.py): each test checks its own, in its own folder."""
    root = tmp_path_factory.mktemp("wandb")
    blocker = root / "blocker"  # a W&B dir that cannot be created (a file stands in its way)
    blocker.write_text("not a directory")
    with Jobs(request) as jobs:
        jobs.submit("offline", _wandb_run, *WANDB_FAST, "tags=[nightly]", "bench.repeats=3", store=root / "offline",
                    tests=("test_offline_run_holds_config_series_summary_group_and_tags",))
        jobs.submit("blocked", _wandb_run, *WANDB_FAST, f"logger.wandb.dir={blocker}/sub", store=root / "blocked",
                    tests=("test_wandb_failure_never_loses_the_local_record",))
        # study 1's preset (its sweep: batch 4 and 8), on a tiny model
        jobs.submit("sweep", _wandb_run, "-m", f"hydra.sweep.dir={root / 'sweep'}", "+experiment=tpu_vs_gpu",
                    *WANDB_FAST, "model=mlp", "data=synthetic_mnist", store=root / "sweep_store",
                    tests=("test_sweep_points_share_a_group_and_carry_mode_preset_and_study",))
        yield jobs, root


def test_offline_run_holds_config_series_summary_group_and_tags(runs):
    jobs, root = runs
    p, store = jobs["offline"], root / "offline"
    assert p.returncode == 0, p.stderr[-3000:]
    assert "wandb sync" in p.stderr  # says once how to upload later
    [rec] = records(store)
    art = rec["artifacts"]
    assert art["wandb_mode"] == "offline"
    run = read_offline_run(art["wandb_offline_dir"])
    assert run["name"] == "cnn_small local eager fp32 single b64"  # what ran; the id is in the config
    assert run["group"] == "cnn_small-synthetic_cifar10" and run["job_type"] == "throughput"
    assert {"platform:local", "runtime:eager", "precision:fp32", "parallel:single", "model:cnn_small",
            "mode:throughput", "nightly"} <= set(run["tags"])
    cfg = run["config"]
    assert cfg["data"]["batch_size"] == 64 and cfg["model"]["name"] == "cnn_small"
    # Hardware, versions and the environment; the key the report's bars group by.
    env = cfg["env"]
    assert env["cpu_model"] == rec["env"]["cpu"]["model"] and env["torch"] == rec["env"]["torch"]["torch"]
    assert env["packages"]["wandb"] and env["python"] == rec["env"]["python"]
    assert cfg["comparison"] == bar_key(RunRecord.from_dict(rec)) and " / cnn_small / " in cfg["comparison"]
    # Each window was logged once it had closed, while the run went on (before the record was final) ...
    m = rec["measurements"]
    windows = [h for h in run["history"] if "window" in h]
    assert [h["window"] for h in windows] == [0, 1, 2] == list(range(art["wandb_windows_logged_live"]))
    assert [h["window_s"] for h in windows] == pytest.approx(m["window_s"])
    assert [h["window_throughput_samples_per_s"] for h in windows] == pytest.approx(m["throughput_samples_per_s_windows"])
    # Causal, not a speed: window i+1 is logged after it closed, and it started only once window i was logged.
    stamps = [h["_timestamp"] for h in windows]
    for i in (1, 2):
        assert stamps[i] - stamps[i - 1] >= 0.95 * m["window_s"][i] - 0.01
    # ... each with its steps just before it (warm-up's with the first), against their own `step`.
    steps = [h for h in run["history"] if "loss" in h]
    assert art["wandb_steps_logged_live"] == len(rec["series"]["step"])
    rows = [h.get("window", "step") for h in run["history"] if "loss" in h or "window" in h]
    per_window = m["timed_steps_per_window"]
    assert [rows[:rows.index(w)].count("step") for w in (0, 1, 2)] == \
        [m["warmup_steps"] + per_window * (w + 1) for w in (0, 1, 2)]  # window w's row after its own steps
    assert [h["step"] for h in steps] == rec["series"]["step"]
    assert [h["loss"] for h in steps] == pytest.approx(rec["series"]["loss"])
    assert [h["step_time_s"] for h in steps] == pytest.approx(rec["series"]["step_time_s"])
    assert sum(h["phase_timed"] for h in steps) == 15
    summ = run["summary"]
    assert summ["throughput_samples_per_s"] == pytest.approx(m["throughput_samples_per_s"])
    assert summ["status"] == "ok" and summ["reason"] is None and summ["n_warnings"] == len(rec["warnings"])
    lo, hi = m["throughput_ci95_samples_per_s"]
    assert (summ["throughput_ci95_low_samples_per_s"], summ["throughput_ci95_high_samples_per_s"]) == \
        pytest.approx((lo, hi))
    # The record itself is an artifact; W&B sampled no system metrics beside the windows.
    [record_art] = [a for a in run["artifacts"] if a["type"] == "run-record"]
    assert record_art["name"] == f"record-{rec['run_id']}" and record_art["paths"] == ["record.json"]
    assert run["system_samples"] == 0


def test_wandb_failure_never_loses_the_local_record(runs):
    # A W&B dir that cannot be created (a file stands in its way): W&B fails, the run does not.
    jobs, root = runs
    p, store = jobs["blocked"], root / "blocked"
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["status"] == "ok" and rec["measurements"]["throughput_samples_per_s"] > 0
    assert "wandb_error" in rec["artifacts"]
    assert "W&B" in p.stderr and "local record is complete" in p.stderr


def test_sweep_points_share_a_group_and_carry_mode_preset_and_study(runs):
    """One group per Hydra sweep (its folder), job_type per mode, tags for the preset and the study it reruns."""
    jobs, tmp_path = runs
    p, store = jobs["sweep"], tmp_path / "sweep_store"
    assert p.returncode == 0, p.stderr[-3000:]
    runs = [read_offline_run(r["artifacts"]["wandb_offline_dir"]) for r in records(store)]
    assert sorted(r["name"] for r in runs) == [f"mlp local_as_gce_n1_standard_2 eager fp32 single b{b}" for b in (4, 8)]
    assert {r["group"] for r in runs} == {f"sweep {tmp_path / 'sweep'}"}
    assert all(r["job_type"] == "throughput" for r in runs)
    assert all({"preset:tpu_vs_gpu", "study:1", "mode:throughput"} <= set(r["tags"]) for r in runs)
    # One line for the whole sweep, at its end, naming every point's offline run (was: one line per point).
    [sync] = [line for line in p.stderr.splitlines() if "upload later with: wandb sync" in line]
    assert sync.startswith("xbench: W&B offline: upload later with: wandb sync ")
    assert sorted(sync.split("wandb sync ", 1)[1].split()) == sorted(r["artifacts"]["wandb_offline_dir"]
                                                                     for r in records(store))


def test_wandb_missing_is_said_once(monkeypatch, tmp_path):
    """W&B not installed (its import fails, as in an environment without the extra): one console line."""
    import sys

    from xbench.records.record import RunRecord
    from xbench.sinks.wandb import WandbSink

    monkeypatch.setitem(sys.modules, "wandb", None)
    said: list[str] = []
    sink = WandbSink({"mode": "offline"}, say=said.append)
    rec = RunRecord("r1", status="ok", config={"model": {"name": "mlp"}, "data": {"name": "d", "batch_size": 2}})
    assert sink.start(rec, tmp_path) is False
    assert sink.publish(rec, tmp_path) == {"wandb_mode": "unavailable", "wandb_error": "wandb not installed"}
    assert len(said) == 1 and said[0].startswith("W&B: skipped")


def test_an_offline_file_still_being_written_is_read_again_until_whole(tmp_path):
    """run.finish() can return before wandb-core has written the offline file out: the read-back waits while it
    grows and finds it whole; a file that stops growing without its end is cut (after the settle time). Real
    files: a whole offline run written by wandb here, then a copy cut to its header and grown back by a thread.
    Before: the first read decided, and 1 of 3 sweeps on a loaded machine said 'cut short' of a whole file."""
    import shutil
    import threading
    import time

    import wandb

    from xbench.sinks.wandb import offline_cut_short

    run = wandb.init(mode="offline", dir=str(tmp_path), project="x", settings=wandb.Settings(console="off",
                     x_disable_stats=True))
    run.log({"a": 1})
    run.finish()
    [folder] = (tmp_path / "wandb").glob("offline-run-*")
    [whole] = folder.glob("run-*.wandb")
    deadline = time.monotonic() + 30
    while offline_cut_short(folder, settle_s=1.0) is not None and time.monotonic() < deadline:
        time.sleep(0.2)  # this test's own run: wait for wandb-core, as the sink now does
    data = whole.read_bytes()
    growing = tmp_path / "growing"
    shutil.copytree(folder, growing)
    [copy] = growing.glob("run-*.wandb")
    copy.write_bytes(data[:7])  # the header alone, as the sink read it
    threading.Timer(0.5, copy.write_bytes, (data,)).start()  # then wandb-core writes the rest
    assert offline_cut_short(growing, settle_s=2.0) is None
    copy.write_bytes(data[:len(data) // 2])  # cut where a full disk cut it, and never grows again
    t0 = time.monotonic()
    said = offline_cut_short(growing, settle_s=0.3)
    assert "is cut short" in said and 0.3 <= time.monotonic() - t0 < 5


_OFFLINE_START = """
import json, sys
from pathlib import Path
from xbench.records.record import RunRecord
from xbench.sinks.wandb import WandbSink
names = ("model", "platform", "runtime", "precision", "parallel")
rec = RunRecord("r1", status="ok", config={**{k: {"name": k} for k in names}, "data": {"name": "d", "batch_size": 2}})
sink = WandbSink({"mode": "auto"}, say=print)
assert sink.start(rec, Path(sys.argv[1]))
sink.log_window({"window": 0, "window_s": 0.1, "window_throughput_samples_per_s": 20.0, "window_steps": 1,
                 "steps_first": 0, "steps_timed_from": 0, "steps_step": [0], "steps_time_s": [0.1], "steps_loss": [1.0]})
art = sink.publish(rec, Path(sys.argv[1]))
import pydantic
import wandb
from pydantic._internal import _docs_extraction, _fields
class Later(pydantic.BaseModel, use_attribute_docstrings=True):
    x: int = 0
    'read after the start'
print(json.dumps({"artifacts": art, "imported": [m for m in ("wandb.sdk.launch", "opentelemetry.sdk.metrics")
                                                 if m in sys.modules],
                  "described": wandb.Settings.model_fields["console"].description,
                  "later": Later.model_fields["x"].description,
                  "restored": _fields.extract_docstrings_from_cls is _docs_extraction.extract_docstrings_from_cls}))
"""


def test_an_offline_run_starts_without_launch_pip_list_telemetry_or_docstrings(tmp_path):
    """An offline run (auto without credentials: WANDB_MODE unset) in a fresh process: W&B's init asked W&B Launch
    for staged inputs (importing wandb.sdk.launch, 0.4-0.8 s), parsed every package's metadata for its pip list
    (0.1-0.4 s, a `files` record), the first log built OpenTelemetry exporters for api.wandb.ai (0.1-0.2 s), and
    W&B's import read every settings field's docstring from source (1.2-1.9 s with torch loaded). None of them
    now (pydantic reads docstrings again after); the run is still whole, with its window and step."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO
    from xbench.analysis.wandb_source import wandb_records

    env = {**cli_env(), "NETRC": str(tmp_path / "no-netrc")}
    env.pop("WANDB_MODE")
    script = tmp_path / "start.py"  # a file: pydantic reads a docstring from the class's source
    script.write_text(_OFFLINE_START)
    p = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    art = out["artifacts"]
    assert art["wandb_mode"] == "offline" and "wandb_error" not in art and art["wandb_windows_logged_live"] == 1
    assert out["imported"] == []
    assert out["described"] is None and out["later"] == "read after the start" and out["restored"]
    [f] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    kinds = [r.WhichOneof("record_type") for r in wandb_records(f)]
    assert "files" not in kinds and "history" in kinds and kinds[-1] == "exit"


_POLLED_START = """
import json, sys
from pathlib import Path
from wandb.sdk.lib.service import service_port_file as port_file
from xbench.records.record import RunRecord
from xbench.sinks.wandb import WandbSink
asked, own = [], port_file._SLEEP
def sleep(s):
    asked.append(s)
    own(s)
port_file._SLEEP = sleep
names = ("model", "platform", "runtime", "precision", "parallel")
rec = RunRecord("r1", status="ok", config={**{k: {"name": k} for k in names}, "data": {"name": "d", "batch_size": 2}})
assert WandbSink({"mode": "offline"}, say=print).start(rec, Path(sys.argv[1]))
print(json.dumps({"asked": asked, "restored": port_file._SLEEP is sleep}))
"""


def test_wandb_core_is_looked_for_every_few_ms_while_the_run_opens(tmp_path):
    """W&B looks for its service's port file every 0.2 s; wandb-core listens 2-10 ms after its start, so every
    run waited ~0.2 s more (the sink's start 0.44-0.58 -> 0.26-0.35 s with it, alternated, load 3). While the
    sink opens its run the looks are SERVICE_POLL_S apart, and W&B's own pace is back after. A fresh process: the
    service starts once per process."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO
    from xbench.sinks.wandb import SERVICE_POLL_S

    p = subprocess.run([sys.executable, "-c", _POLLED_START, str(tmp_path)], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["asked"] and max(out["asked"]) <= SERVICE_POLL_S and out["restored"]
