"""A stored record is data, not code (R4 5/7 item 2): an interpolation planted in a stored config is refused at
`resume=` naming its key, never resolved in the environment of whoever resumes; a checkpoint's progress and a
record's epochs are range-checked against the run (a planted `epoch: 1e12` resumed into an ok record of a
trillion epochs)."""

from __future__ import annotations

import math
import re

import pytest
from omegaconf import OmegaConf

from xbench import runner
from xbench.bench.training import progress_problems
from xbench.config import XBenchConfig
from xbench.records.record import RunRecord
from xbench.records.store import write_record

PLANTED = "xbench-planted-env-value-5e1f"


def _stored(tmp_path, config: dict):
    write_record(tmp_path, RunRecord(run_id="r1", status="interrupted", reason="SIGTERM", config=config))
    (tmp_path / "r1" / "checkpoint.pt").write_bytes(b"state")
    dcfg = OmegaConf.structured(XBenchConfig)
    dcfg.store.root = str(tmp_path)
    dcfg.resume = "r1"
    return dcfg


@pytest.mark.parametrize("where, planted, named", [
    ("experiment", "${oc.env:XB_PLANTED}", "experiment"),
    ("tags", ["ok", "x-${oc.env:XB_PLANTED}"], "tags[1]"),
    ("model", {"name": "mlp", "options": {"note": "${oc.env:XB_PLANTED,fallback}"}}, "model.options.note"),
    ("data", {"path": "${oc.decode:'/tmp'}"}, "data.path"),
])
def test_an_interpolation_planted_in_a_stored_config_is_refused_naming_its_key(tmp_path, monkeypatch, where, planted,
                                                                              named):
    """Was: `${oc.env:XB_PLANTED}` merged into the resumed config and resolved here: this machine's variable went
    into the attempt's record in the shared store."""
    monkeypatch.setenv("XB_PLANTED", PLANTED)
    dcfg = _stored(tmp_path, {"bench": {"mode": "train_to_target"}, where: planted})
    with pytest.raises(runner.Refused, match=rf"interpolation at {re.escape(named)}"):
        runner.resume_config(dcfg, *runner.check_resume(dcfg))
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == ["checkpoint.pt", "record.json"]
    assert all(PLANTED not in p.read_text(errors="replace") for p in (tmp_path / "r1").iterdir())


def test_a_resolved_config_as_xbench_stores_it_resumes():
    assert runner.interpolations({"a": {"b": [1, "x", {"c": "$HOME {x}"}]}, "d": None}) == []
    assert runner.interpolations({"a": [{"b": "${x}"}], "c": "${y}"}) == ["a[0].b", "c"]


def _progress(**over) -> dict:
    p = {"epoch": 1, "batch": 3, "step": 13, "samples": 13 * 32, "train_time_s": 1.5, "eval_time_s": 0.1,
         "wall_s": 4.0, "evals": 1, "resumes": 0, "pending_loss_sum": 0.7, "pending_loss_steps": 1}
    return {**p, **over}


@pytest.mark.parametrize("over, says", [
    ({"epoch": 1e12}, "epoch=1000000000000.0 is not a whole number"),
    ({"epoch": 10**12, "step": 10**13, "samples": 32 * 10**13}, "epoch 1000000000000 (batch 3) is beyond this run's "
                                                                "goal.max_epochs=20"),
    ({"epoch": 20, "batch": 1}, "beyond this run's goal.max_epochs=20"),
    ({"step": -1}, "step=-1 is not a whole number >= 0"),
    ({"train_time_s": math.nan}, "train_time_s=nan is not a finite number >= 0"),
    ({"wall_s": -3.0}, "wall_s=-3.0 is not a finite number >= 0"),
    ({"pending_loss_sum": math.inf}, "pending_loss_sum=inf is not a finite number"),
    ({"batch": 11, "step": 21, "samples": 21 * 32}, "batch 11 is beyond an epoch's 10 steps"),
    ({"step": 99}, "step 99 is not the 13 that epoch 1, batch 3 imply"),
    ({"samples": 5}, "samples 5 is not the 416 that 13 steps of 32 imply"),
])
def test_a_checkpoints_progress_beyond_its_run_is_refused(over, says):
    assert progress_problems(_progress(), 20, 10, 32) == []
    assert progress_problems(_progress(epoch=20, batch=0, step=200, samples=6400), 20, 10, 32) == []  # the end
    bad = progress_problems(_progress(**over), 20, 10, 32)
    assert any(says in b for b in bad), bad


def test_a_record_with_more_epochs_than_its_run_allows_is_not_a_valid_record():
    config = {"bench": {"mode": "train_to_target"}, "goal": {"max_epochs": 20}}
    ok = RunRecord(run_id="r", status="ok", config=config, measurements={"epochs_done": 20.0})
    assert not [p for p in ok.problems() if "epochs_done" in p]
    rec = RunRecord(run_id="r", status="ok", config=config, measurements={"epochs_done": 1e12})
    assert "measurements.epochs_done=1e+12 is beyond the run's goal.max_epochs=20" in rec.problems()
