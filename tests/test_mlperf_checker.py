"""Every way a train-to-target run ends leaves an mlperf.log that mlperf-logging's own compliance checker passes
(`python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0 FILE`), on real digits runs: the
target met at an evaluation inside an epoch and at an epoch's last one, the epochs exhausted, a time limit, a stop
by signal, and that stop resumed. The log's source paths are relative and its epoch numbers one meaning: an
evaluation's epoch_num lies inside the epoch that holds it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench.bench.mlperf_log import RULESET

pytestmark = pytest.mark.slow

QUIET = ("+experiment=digits_to_target", "logger=none", "logger.progress=false")
STEPS_PER_EPOCH = 50  # digits: 1,617 training images at batch 32, the last short batch dropped

# how the run ends -> its overrides (each a real run of seconds)
ENDINGS = {
    "reached_at_epoch_end": ("goal.target=0.5", "goal.eval_every_steps=50"),
    "reached_inside_epoch": ("goal.target=0.5", "goal.eval_every_steps=20"),
    "epochs_exhausted": ("goal.target=1.0", "goal.max_epochs=2"),
    # evaluated every 5 steps, so the limit falls after evaluations (the checker wants one eval_accuracy)
    "time_limit": ("goal.target=1.0", "goal.max_epochs=1000", "goal.max_time_s=0.3", "goal.eval_every_steps=5"),
    "signal": ("goal.target=1.0", "goal.max_epochs=3", "goal.eval_every_steps=25", "goal.checkpoint_every_evals=1",
               "fault.kind=sigterm", "fault.at_step=60"),
}


def _stop_then_resume(store):
    cut = run_cli(*QUIET, *ENDINGS["signal"], store=store)
    [rec] = records(store)
    log_after_stop = (store / rec["run_id"] / "mlperf.log").read_text()
    resumed = run_cli(f"resume={rec['run_id']}", "logger=none", "logger.progress=false", store=store)
    return cut, log_after_stop, resumed


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("mlperf_checker")
    with Jobs(request) as jobs:
        jobs.submit("resumed", _stop_then_resume, root / "resumed",
                    tests=("test_a_stop_by_signal_and_its_resume_each_pass_the_checker",))
        for name, overrides in ENDINGS.items():
            if name != "signal":
                jobs.submit(name, run_cli, *QUIET, *overrides, store=root / name,
                            tests=("test_every_ending_passes_the_mlperf_checker",))
        yield jobs, root


def check(log_text: str, tmp_path, name: str) -> str:
    """The compliance checker's verdict on `log_text` (its whole output), asserting it passed."""
    path = tmp_path / f"{name}.log"
    path.write_text(log_text)
    out = tmp_path / f"{name}.checker"
    c = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                        "--ruleset", RULESET, "--log_output", str(out), str(path)], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=120)
    said = out.read_text() if out.exists() else ""
    print(f"\n[{name}] compliance checker (ruleset {RULESET}):\n{said}{c.stderr[-2000:]}")
    assert c.returncode == 0 and said.strip().endswith("SUCCESS"), f"{name}: {said}{c.stderr[-2000:]}"
    return said


def events(log_text: str) -> list[dict]:
    return [json.loads(ln.split(":::MLLOG ", 1)[1]) for ln in log_text.splitlines() if ":::MLLOG " in ln]


def consistent(evs: list[dict]) -> None:
    """One run_stop; epochs numbered 1, 2, ... each stopped once; every evaluation inside the epoch holding it
    (epoch_num in (n - 1, n]); source files relative."""
    keys = [e["key"] for e in evs]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1 and keys[-1] == "run_stop", keys
    open_epoch = None
    for e in evs:
        meta = e["metadata"]
        assert not meta["file"].startswith("/"), meta["file"]
        if e["key"] == "epoch_start":
            assert open_epoch is None
            open_epoch = meta["epoch_num"]
        elif e["key"] == "epoch_stop":
            assert meta["epoch_num"] == open_epoch, (meta, open_epoch)
            open_epoch = None
        elif e["key"] in ("eval_start", "eval_stop", "eval_accuracy"):
            # an evaluation right after an epoch's edge belongs to the epoch just ended
            n = open_epoch or max(x["metadata"]["epoch_num"] for x in evs if x["key"] == "epoch_stop"
                                  and evs.index(x) < evs.index(e))
            assert n - 1 < meta["epoch_num"] <= n, (e, n)
    assert open_epoch is None  # the last epoch was stopped
    starts = [e["metadata"]["epoch_num"] for e in evs if e["key"] == "epoch_start"]
    assert starts == list(range(1, len(starts) + 1))


@pytest.mark.parametrize("ending", [k for k in ENDINGS if k != "signal"])
def test_every_ending_passes_the_mlperf_checker(runs, ending, tmp_path):
    jobs, root = runs
    p = jobs[ending]
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(root / ending)
    m = rec["measurements"]
    want = {"reached_at_epoch_end": "reached", "reached_inside_epoch": "reached", "epochs_exhausted": "max_epochs",
            "time_limit": "max_time"}[ending]
    assert m["target_status"] == want, m["target_status"]
    if want == "reached":  # where the target fell: at an epoch's last step, or inside one
        step = rec["series"]["step"][-1]
        assert (step % STEPS_PER_EPOCH == 0) == (ending == "reached_at_epoch_end"), step
    text = (root / ending / rec["run_id"] / "mlperf.log").read_text()
    check(text, tmp_path, ending)
    evs = events(text)
    consistent(evs)
    stop = evs[-1]["metadata"]["status"]
    assert stop == ("success" if want == "reached" else "aborted")


def test_a_stop_by_signal_and_its_resume_each_pass_the_checker(runs, tmp_path):
    jobs, root = runs
    cut, after_stop, resumed = jobs["resumed"]
    assert cut.returncode == 130, cut.stderr[-3000:]
    check(after_stop, tmp_path, "stopped")
    evs = events(after_stop)
    consistent(evs)
    assert evs[-1]["metadata"]["status"] == "aborted" and evs[-1]["metadata"]["xbench_stop"] is True
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [rec] = records(root / "resumed")
    text = (root / "resumed" / rec["run_id"] / "mlperf.log").read_text()
    check(text, tmp_path, "resumed")
    evs = events(text)
    consistent(evs)  # the stop's closing lines were dropped: one run_stop, epoch 2 stopped once
    keys = [e["key"] for e in evs]
    assert keys.count("xbench_resume") == 1 and keys.count("epoch_start") == 3 == keys.count("epoch_stop")
    assert not any(e["metadata"].get("xbench_stop") for e in evs)
