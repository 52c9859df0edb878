"""W&B runs for real in offline mode; what was logged is read back from its run files."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, cli_env, records, run_cli
from xbench.sinks.wandb_files import read_offline_run

pytestmark = pytest.mark.slow


def test_offline_run_holds_config_series_summary_group_and_tags(store):
    args = [a for a in FAST if not a.startswith("logger=")] + ["logger=wandb", "tags=[nightly]"]
    p = run_cli(*args, store=store, env=cli_env(WANDB_MODE="offline"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "wandb sync" in p.stderr  # says once how to upload later
    [rec] = records(store)
    art = rec["artifacts"]
    assert art["wandb_mode"] == "offline"
    run = read_offline_run(art["wandb_offline_dir"])
    assert run["name"] == rec["run_id"]
    assert run["group"] == "cnn_small-synthetic_cifar10"
    assert {"platform:local", "runtime:eager", "precision:fp32", "parallel:single", "model:cnn_small",
            "nightly"} <= set(run["tags"])
    assert run["config"]["data"]["batch_size"] == 64 and run["config"]["model"]["name"] == "cnn_small"
    hist = run["history"]
    assert len(hist) == len(rec["series"]["loss"])
    assert [h["loss"] for h in hist] == pytest.approx(rec["series"]["loss"])
    assert [h["step_time_s"] for h in hist] == pytest.approx(rec["series"]["step_time_s"])
    assert sum(h["phase_timed"] for h in hist) == 5
    assert run["summary"]["throughput_samples_per_s"] == pytest.approx(
        rec["measurements"]["throughput_samples_per_s"])
    assert run["summary"]["status"] == "ok"


def test_wandb_failure_never_loses_the_local_record(store, tmp_path):
    # A W&B dir that cannot be created (a file stands in its way): W&B fails, the run does not.
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    args = [a for a in FAST if not a.startswith("logger=")] + ["logger=wandb", f"logger.wandb.dir={blocker}/sub"]
    p = run_cli(*args, store=store, env=cli_env(WANDB_MODE="offline"))
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["status"] == "ok" and rec["measurements"]["throughput_samples_per_s"] > 0
    assert "wandb_error" in rec["artifacts"]
    assert "W&B" in p.stderr and "local record is complete" in p.stderr
