"""The Python API: xbench.run(overrides) -> the RunRecord (stored as the CLI stores it), and
xbench.load(stores) -> the report's tidy table, one row per run."""

from __future__ import annotations

import json

import pytest

import xbench
from tests.conftest import FAST


@pytest.mark.slow
def test_run_returns_the_stored_record_and_load_returns_its_row(store, tmp_path):
    import torch

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    record = xbench.run([*FAST, f"store.root={store}", "model=mlp", "model.options.hidden=16", "data.batch_size=8",
                         f"bench.threads={threads + 1}", "bench.seed=7"])
    assert record.status == "ok" and record.measurements["threads_intra"] == threads + 1
    # the caller's torch is as it was: its intra-op threads and its CPU generator's state
    assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), rng)
    stored = json.loads((store / record.run_id / "record.json").read_text())
    assert stored["measurements"]["throughput_samples_per_s"] == record.measurements["throughput_samples_per_s"] > 0
    assert stored["env"]["xbench_version"] == xbench.__version__

    # a dict of overrides and a config folder of one's own (a platform with a price)
    (tmp_path / "mine" / "platform").mkdir(parents=True)
    (tmp_path / "mine" / "platform" / "lab.yaml").write_text(
        "name: lab\ndevice: cpu\nprice:\n  - {name: machine, amount: 2.0}\n")
    second = xbench.run({**dict(o.split("=") for o in FAST), "store.root": store, "model": "mlp",
                         "model.options.hidden": 16, "data.batch_size": 4, "platform": "lab",
                         "logger.progress": False}, config_dir=tmp_path / "mine")
    assert second.status == "ok" and second.derived["usd_per_hour"] == 2.0

    df = xbench.load(store)
    assert sorted(df["run_id"]) == sorted([record.run_id, second.run_id])
    row = df.set_index("run_id").loc[second.run_id]
    assert row["platform"] == "lab" and row["batch_size_per_device"] == 4
    assert row["throughput_samples_per_s"] == second.measurements["throughput_samples_per_s"]


def test_a_refused_override_raises_with_xbenchs_hint():
    with pytest.raises(ValueError, match=r"\+workload=cnn_mnist adds one"):
        xbench.run(["workload=cnn_mnist"])
    with pytest.raises(ValueError, match="did you mean 'bench.steps'"):
        xbench.run(["bench.step=5"])
    with pytest.raises(ValueError, match="for a sweep, call it in a loop"):
        xbench.run(["-m", "data.batch_size=8,16"])


def test_load_names_a_missing_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="no store at"):
        xbench.load(tmp_path / "absent")


def test_the_api_refuses_what_the_cli_refuses_and_redacts_its_messages():
    """The same function (xbench.hints.refusals) decides; the exception text is redacted by value and name.
    (Numbers out of range are compat's, through the one runner: a `failed` record, tests/test_cli.py.)"""
    with pytest.raises(ValueError, match="store.root='' names no folder"):
        xbench.run(["store.root=''"])
    with pytest.raises(ValueError, match="'bench.step' is not a config key"):  # +key the schema lacks
        xbench.run(["+bench.step=5"])
    from xbench.runner import Refused

    with pytest.warns(UserWarning, match="these overrides are ignored: model=mlp"), \
            pytest.raises(Refused, match="resume='somerun'"):
        xbench.run(["resume=somerun", "model=mlp"])
    with pytest.raises(ValueError) as e:
        xbench.run(["+logger.wandb.api_key=hunter2-api", "bench.steps=hunter2-api"])
    assert "hunter2-api" not in str(e.value) and "<redacted>" in str(e.value)


def test_overrides_come_as_a_list_a_string_or_a_nested_dict():
    from xbench.api import _as_overrides

    assert _as_overrides(None) == [] and _as_overrides("a=1  b=2") == ["a=1", "b=2"]
    assert _as_overrides(("a=1",)) == ["a=1"]
    assert _as_overrides({"data": {"batch_size": 8, "path": None}, "bench": {"x": True}, "o": {}}) == [
        "data.batch_size=8", "data.path=null", "bench.x=true", "o={}"]
    with pytest.raises(TypeError, match=r"got 3 \(int\)"):
        _as_overrides(["a=1", 3])
    with pytest.raises(TypeError, match="not int"):
        _as_overrides(5)
