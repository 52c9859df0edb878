"""Train to target on the real digits set: reaches its target, resumes after SIGTERM and SIGKILL with its
curve and clock continuing, and leaves an MLPerf log that mlperf-logging's own parser reads."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench.records.record import RunRecord

pytestmark = pytest.mark.slow

QUIET = ("logger=none", "logger.progress=false")
# An unreachable target keeps the run going for a fixed curve: 3 epochs, evaluated every 25 steps.
FIXED = ("+experiment=digits_to_target", "goal.target=1.0", "goal.max_epochs=3", "goal.eval_every_steps=25",
         "goal.checkpoint_every_evals=1", *QUIET)


def _parse_mllog(path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="4.1.0")
    assert not errors, errors
    return lines


def _sigterm_then_resume(store):
    """Stopped by SIGTERM at step 60, then resumed: (the stopped run, its record, checkpoint there, the resume)."""
    cut = run_cli(*FIXED, "fault.kind=sigterm", "fault.at_step=60", store=store)
    cut_recs = records(store)
    saved = bool(cut_recs) and (store / cut_recs[0]["run_id"] / "checkpoint.pt").is_file()
    resumed = run_cli(f"resume={cut_recs[0]['run_id']}", *QUIET, store=store) if len(cut_recs) == 1 else None
    return cut, cut_recs, saved, resumed


def _sigkill_then_resume(store):
    """SIGKILLed past its first checkpoint, then resumed: (the killed run's records, its checkpoint's progress,
    the resume)."""
    cmd = [sys.executable, "-m", "xbench", f"store.root={store}", *FIXED, "goal.max_epochs=40"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 900  # wide: the module's other runs share the cores
        while time.time() < deadline and not list(store.glob("*/checkpoint.pt")):
            time.sleep(0.2)
        time.sleep(0.5)  # let it run past the checkpoint: that work is lost and redone
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    dead = records(store)
    from xbench.bench.training import load_checkpoint

    saved = load_checkpoint(store / dead[0]["run_id"])["progress"]
    resumed = run_cli(f"resume={store / dead[0]['run_id']}", "goal.max_epochs=1", *QUIET, store=store)  # stored config wins
    return dead, saved, resumed


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's CLI runs, started together (tests/jobs.py): each test checks its own."""
    root = tmp_path_factory.mktemp("target")
    with Jobs(request) as jobs:
        # the two chains first: each is two runs in turn, the longest path
        jobs.submit("sigterm", _sigterm_then_resume, root / "sigterm",
                    tests=("test_sigterm_checkpoints_and_resume_gives_the_uninterrupted_curve",))
        jobs.submit("sigkill", _sigkill_then_resume, root / "sigkill",
                    tests=("test_sigkill_then_resume_continues_curve_and_clock",))
        jobs.submit("digits", run_cli, "+experiment=digits_to_target", "platform=gce_n1_standard_8", *QUIET,
                    store=root / "digits", tests=("test_digits_reaches_target_and_records_time_epochs_cost_and_mllog",))
        jobs.submit("ref", run_cli, *FIXED, store=root / "ref",
                    tests=("test_sigterm_checkpoints_and_resume_gives_the_uninterrupted_curve",))
        jobs.submit("synthetic", run_cli, "bench.mode=train_to_target", "model=mlp", "data=synthetic_mnist", *QUIET,
                    store=root / "synthetic", tests=("test_train_to_target_needs_real_data",))
        yield jobs, root


def test_digits_reaches_target_and_records_time_epochs_cost_and_mllog(runs):
    jobs, root = runs
    p, store = jobs["digits"], root / "digits"
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    r = RunRecord.from_dict(rec)
    m, d, s = r.measurements, r.derived, r.series
    assert r.status == "ok" and m["target_reached"] is True and m["target_status"] == "reached"
    assert m["metric_at_target"] >= 0.95 and s["top1"][-1] == m["metric_at_target"]
    assert max(s["top1"][:-1], default=0) < 0.95  # it stopped at the first evaluation that met the target
    assert 1 <= m["epochs_to_target"] <= 20 and m["epochs_to_target"] == s["epoch"][-1]
    assert m["samples_to_target"] == m["epochs_to_target"] * m["steps_per_epoch"] * 32
    # training time excludes evaluation and start-up; wall time includes both
    assert m["wall_time_to_target_s"] >= m["train_time_to_target_s"] + m["eval_time_s"] + m["startup_s"] - 0.5
    assert s["train_time_s"] == sorted(s["train_time_s"]) and s["train_time_s"][-1] == m["train_time_to_target_s"]
    # cost of reaching the target on a per-second-billed VM with a 1-minute minimum: the minimum applies
    rate = 8 * 0.0475 / 3600  # conf/platform/gce_n1_standard_8.yaml: 8 vCPUs x $0.0475
    assert d["train_cost_to_target_usd"] == pytest.approx(rate * max(60, round(m["train_time_to_target_s"] + 0.5)), rel=0.02)
    assert r.artifacts["mlperf_log"] == "mlperf.log"
    keys = [ln.key for ln in _parse_mllog(store / r.run_id / "mlperf.log")]
    for k in ("init_start", "init_stop", "run_start", "epoch_start", "epoch_stop", "eval_accuracy", "run_stop"):
        assert k in keys, k
    assert keys.count("eval_accuracy") == len(s["top1"])
    assert "epochs to target" in p.stdout


def test_sigterm_checkpoints_and_resume_gives_the_uninterrupted_curve(runs):
    jobs, root = runs
    p, store = jobs["ref"], root / "sigterm"
    assert p.returncode == 0, p.stderr[-3000:]
    [ref] = records(root / "ref")
    assert ref["measurements"]["target_reached"] is False and ref["measurements"]["target_status"] == "max_epochs"
    assert any("not reached" in w for w in ref["warnings"])

    p, cut_recs, checkpointed, resumed = jobs["sigterm"]
    assert p.returncode == 130, p.stderr[-3000:]
    [cut] = cut_recs
    assert cut["status"] == "interrupted" and cut["measurements"]["samples_seen"] == 61 * 32
    assert checkpointed  # checkpoint.pt in the run's folder when it stopped

    p = resumed
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    assert rec["run_id"] == cut["run_id"] and rec["status"] == "ok" and rec["measurements"]["resumes"] == 1
    s, rs = rec["series"], ref["series"]
    assert s["step"] == rs["step"] == [25, 50, 75, 100, 125, 150]
    assert s["attempt"] == [0, 0, 1, 1, 1, 1]
    assert s["top1"] == pytest.approx(rs["top1"], abs=1e-9)  # same data order, same weights: same curve
    assert s["train_time_s"] == sorted(s["train_time_s"]) and s["wall_s"] == sorted(s["wall_s"])
    m = rec["measurements"]
    assert m["train_time_s"] == pytest.approx(s["train_time_s"][-1], rel=0.5)
    assert m["wall_s_total"] >= m["train_time_s"] + m["eval_time_s"]
    keys = [ln.key for ln in _parse_mllog(store / rec["run_id"] / "mlperf.log")]
    assert keys.count("run_start") == 1 and keys.count("xbench_resume") == 1 and keys.count("eval_accuracy") == 6


def test_sigkill_then_resume_continues_curve_and_clock(runs):
    jobs, root = runs
    store = root / "sigkill"
    [dead], saved, p = jobs["sigkill"]
    assert dead["status"] == "running"  # SIGKILL leaves no chance to write
    assert saved["evals"] >= 1
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    s, m = rec["series"], rec["measurements"]
    assert m["resumes"] == 1 and rec["config"]["goal"]["max_epochs"] == 40 and m["epochs_done"] == 40
    n = saved["evals"]
    assert s["eval"] == list(range(len(s["eval"]))) and s["attempt"][:n] == [0] * n and set(s["attempt"][n:]) == {1}
    assert s["train_time_s"][:n] == saved["curve"]["train_time_s"]  # the checkpointed curve is kept as it was
    assert all(b > a for a, b in zip(s["train_time_s"], s["train_time_s"][1:]))  # the clock goes on from it
    assert all(b > a for a, b in zip(s["wall_s"], s["wall_s"][1:]))
    assert s["step"] == [25 * (i + 1) for i in range(len(s["step"]))]
    assert m["wall_s_total"] > saved["wall_s"] and any("resumed 1 time" in w for w in rec["warnings"])
    assert json.loads((store / rec["run_id"] / "record.json").read_text())["status"] == "ok"


def test_train_to_target_needs_real_data(runs):
    jobs, root = runs
    p = jobs["synthetic"]
    assert p.returncode == 1
    [rec] = records(root / "synthetic")
    assert "needs a real data set" in rec["reason"]


def test_inputs_take_the_parameter_dtype_but_token_ids_stay_integers():
    """Throughput runs and train-to-target share one input format (target.py cast token ids to bf16,
    which an embedding refuses)."""
    import torch

    from xbench.bench.worker import input_format
    from xbench.precision import resolve

    bf16, fp32 = resolve("bf16", "cpu"), resolve("fp32", "cpu")
    ids = torch.randint(0, 50, (4, 16))
    assert input_format(ids, bf16, False).dtype == torch.int64
    images = torch.randn(4, 3, 8, 8)
    assert input_format(images, bf16, False).dtype == torch.bfloat16
    nhwc = input_format(images, fp32, True)
    assert nhwc.dtype == torch.float32 and nhwc.is_contiguous(memory_format=torch.channels_last)
    assert not images.is_contiguous(memory_format=torch.channels_last)
