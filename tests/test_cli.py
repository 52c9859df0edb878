"""The real CLI, end to end, in a temporary store."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, records, run_cli
from tests.jobs import Jobs
from xbench.records.record import RunRecord

pytestmark = pytest.mark.slow

ENV_KEYS = ("hostname", "python", "cpu", "git", "packages", "torch")


OUT_OF_RANGE = "test_out_of_range_knobs_fail_before_any_device_work_and_ignored_resume_overrides_are_named"


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's CLI runs, started together (tests/jobs.py): each test checks its own, in its own store."""
    root = tmp_path_factory.mktemp("cli")
    with Jobs(request) as jobs:
        jobs.submit("default", run_cli, *FAST, store=root / "default", tests=("test_default_run_leaves_a_complete_record",))
        # one sweep for three claims: one record per point, the threads in force (its batch-8 point), and its
        # points isolated, each forked from the sweep's warm template (bench.isolation after FAST's `shared`)
        jobs.submit("sweep", run_cli, "-m", *FAST, "data.batch_size=8,16", "bench.threads=1", "bench.isolation=auto",
                    store=root / "sweep", tests=("test_threads_in_force_are_recorded",
                                                 "test_multirun_sweep_leaves_one_record_per_point",
                                                 "test_sweep_points_are_forked_from_one_warm_template"))
        jobs.submit("misspelled", run_cli, "data.batchsize=3", store=root / "misspelled",
                    tests=("test_misspelled_key_fails_with_hydra_message",))
        jobs.submit("impossible", run_cli, *FAST, "precision=tf32", "platform=cpu", store=root / "impossible",
                    tests=("test_impossible_combination_fails_before_device_work_with_a_record",))
        jobs.submit("failing", run_cli, *FAST, "fault.kind=exception", "fault.at_step=3", store=root / "failing",
                    tests=("test_failing_run_still_writes_its_record",))
        jobs.submit("failing_point", run_cli, "-m", *FAST, "data.batch_size=-1,8", store=root / "failing_point",
                    tests=("test_failing_point_does_not_stop_a_sweep",))
        jobs.submit("typo", run_cli, *FAST, "optim.lr=nan", "bench.noisy_cv=-1", "model=resnet5", store=root / "typo",
                    tests=(OUT_OF_RANGE,))
        ranges = root / "ranges"  # three runs, one store: only the first writes a record
        jobs.submit("ranges", run_cli, *FAST, "optim.lr=nan", "bench.noisy_cv=-1", store=ranges, tests=(OUT_OF_RANGE,))
        jobs.submit("resume_ignores", run_cli, "resume=somerun", "model=mlp", store=ranges, tests=(OUT_OF_RANGE,))
        jobs.submit("resume_empty", run_cli, "resume=''", store=ranges, tests=(OUT_OF_RANGE,))
        yield jobs, root


def test_default_run_leaves_a_complete_record(runs):
    jobs, root = runs
    p, store = jobs["default"], root / "default"
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    r = RunRecord.from_dict(rec)  # validates
    assert r.status == "ok" and r.reason is None
    m = r.measurements
    assert m["throughput_samples_per_s"] > 0
    assert m["throughput_samples_per_s"] == pytest.approx(
        m["samples_per_window"] / m["window_s"][0], rel=1e-9)
    assert m["step_time_s_p10"] <= m["step_time_s_median"] <= m["step_time_s_p90"]
    assert m["threads_intra"] >= 1 and m["first_step_s"] > 0 and m["warmup_steps"] >= 2
    assert m["flops_per_sample_train"] > m["flops_per_sample_forward"] > 0
    assert m["compiles_warmup"] is None  # eager never compiles
    for key in ENV_KEYS:
        assert key in r.env, key
    assert r.env["cpu"]["model"] and isinstance(r.env["cpu"]["flags"], list)
    assert r.env["packages"]["torch"].startswith("2.")
    assert r.config["model"]["name"] == "cnn_small" and r.config["data"]["batch_size"] == 64
    assert len(r.series["loss"]) == m["warmup_steps"] + 5
    assert "throughput" in p.stdout and "samples/s" in p.stdout


def test_threads_in_force_are_recorded(runs):
    jobs, root = runs
    p = jobs["sweep"]
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = [r for r in records(root / "sweep") if r["config"]["data"]["batch_size"] == 8]  # bench.threads=1
    assert rec["measurements"]["threads_intra"] == 1


def test_multirun_sweep_leaves_one_record_per_point(runs):
    jobs, root = runs
    p, store = jobs["sweep"], root / "sweep"
    assert p.returncode == 0, p.stderr[-3000:]
    recs = records(store)
    assert sorted(r["config"]["data"]["batch_size"] for r in recs) == [8, 16]
    assert all(r["status"] == "ok" for r in recs)
    assert len({r["run_id"] for r in recs}) == 2


def test_sweep_points_are_forked_from_one_warm_template(runs):
    """Each point of an isolated sweep runs in a process of its own, forked from the sweep's one template, and
    the sweep ends with a table of its points and the report command. Before, each point spawned a fresh
    interpreter and paid Python's, torch's and the rank wing's imports again (a 3-point 5-step MLP sweep: 6.5-8.3 s
    start-up per point), and the sweep ended on its last point's summary."""
    jobs, root = runs
    p = jobs["sweep"]
    assert p.returncode == 0, p.stderr[-3000:]
    recs = sorted(records(root / "sweep"), key=lambda r: r["env"]["point"]["job_num"])
    points = [r["env"]["point"] for r in recs]
    assert [pt["process"] for pt in points] == ["template fork"] * 2, points
    [template] = {pt["template_pid"] for pt in points}
    [runner] = {pt["runner_pid"] for pt in points}
    assert [r["measurements"]["parent_pid"] for r in recs] == [template] * 2  # forked by the template
    ranks = {r["measurements"]["rank_pids"][0] for r in recs}
    assert len(ranks) == 2 and not ranks & {runner, template}  # each point its own process
    # Point 1's start-up holds the whole process's (Python, Hydra, torch) and the template's; point 2's a fork's.
    first, later = (r["measurements"]["startup_to_first_step_s"] for r in recs)
    assert later < first / 2, (first, later)
    assert "xbench: sweep: 2 point(s) ran" in p.stderr
    rows = [line.split() for line in p.stderr.splitlines() if line.startswith("  ") and "data.batch_size=" in line]
    assert [(r[0], r[1], r[-1]) for r in rows] == [("0", "ok", "data.batch_size=8"), ("1", "ok", "data.batch_size=16")]
    assert f"xbench: report: python -m xbench.report {(root / 'sweep').resolve()}" in p.stderr


def test_misspelled_key_fails_with_hydra_message(runs):
    jobs, root = runs
    p, store = jobs["misspelled"], root / "misspelled"
    assert p.returncode != 0
    assert "batchsize" in p.stderr
    assert not records(store)  # nothing ran: composition failed before a record existed


def test_impossible_combination_fails_before_device_work_with_a_record(runs):
    jobs, root = runs
    p, store = jobs["impossible"], root / "impossible"
    assert p.returncode == 1
    [rec] = records(store)
    assert rec["status"] == "failed"
    assert "tf32 needs a CUDA GPU" in rec["reason"]
    assert rec["measurements"] == {}  # stopped before any measurement


def test_failing_run_still_writes_its_record(runs):
    jobs, root = runs
    p, store = jobs["failing"], root / "failing"
    assert p.returncode == 1
    [rec] = records(store)
    assert rec["status"] == "failed"
    assert "injected fault at step 3" in rec["reason"]
    assert (store / rec["run_id"] / "traceback.txt").read_text().count("RuntimeError") >= 1


def test_failing_point_does_not_stop_a_sweep(runs):
    jobs, root = runs
    p, store = jobs["failing_point"], root / "failing_point"
    assert p.returncode == 1  # the sweep reports that a point failed ...
    by_bs = {r["config"]["data"]["batch_size"]: r for r in records(store)}
    assert by_bs[-1]["status"] == "failed" and "data.batch_size=-1 is out of range" in by_bs[-1]["reason"]
    assert by_bs[8]["status"] == "ok"  # ... after running every point


def test_out_of_range_knobs_fail_before_any_device_work_and_ignored_resume_overrides_are_named(runs):
    """Every number out of its range in one `failed` record, the ranges in the reason, nothing measured;
    a group option typo gets the closest options; what resume= ignores is said."""
    jobs, root = runs
    store = root / "ranges"
    p = jobs["typo"]
    assert p.returncode == 1 and "did you mean model=resnet50" in p.stderr, p.stderr[-2000:]
    assert not records(root / "typo")  # Hydra refused the option: nothing written
    p = jobs["ranges"]
    assert p.returncode == 1, p.stderr[-2000:]
    [rec] = records(store)
    assert rec["status"] == "failed" and not rec["measurements"].get("throughput_samples_per_s")
    assert "optim.lr=nan is out of range; allowed: (0, 1e6]" in rec["reason"]
    assert "bench.noisy_cv=-1.0 is out of range; allowed: (0, 100]" in rec["reason"]
    p = jobs["resume_ignores"]
    assert p.returncode == 2 and "these overrides are ignored: model=mlp" in p.stderr, p.stderr[-2000:]
    p = jobs["resume_empty"]
    assert p.returncode == 2 and "resume='' names no run" in p.stderr
    assert len(records(store)) == 1
