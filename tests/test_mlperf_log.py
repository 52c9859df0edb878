"""The MLPerf log passes mlperf-logging's own compliance checker (format level, training ruleset 4.0.0): a real
train-to-target run's mlperf.log, checked by `python -m mlperf_logging.compliance_checker`; init_start is the
run's start (start-up inside init), cache_clear is there, and the benchmark name is MLPerf's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlperf_logging.compliance_checker as checker_pkg
import pytest
from omegaconf import OmegaConf

from tests.conftest import CONF, REPO, cli_env, records, run_cli
from xbench.bench.mlperf_log import RULESET, mlperf_benchmark
from xbench.metrics.goals import GOALS

RULES = Path(checker_pkg.__file__).parent / f"training_{RULESET}"


@pytest.mark.parametrize("recipe,benchmark", [("mlperf_resnet50", "resnet"), ("mlperf_bert", "bert")])
def test_an_mlperf_recipe_logs_mlperfs_benchmark_name(recipe, benchmark):
    goal = OmegaConf.load(CONF / "recipe" / f"{recipe}.yaml").goal  # the recipe's own goal, as it composes
    assert mlperf_benchmark(goal.metric) == benchmark


def test_every_goal_metric_maps_to_a_benchmark_the_checkers_ruleset_knows():
    accepted = (RULES / "open_common.yaml").read_text()  # the checker's list of open-division benchmark names
    for name in {mlperf_benchmark(m) for m in GOALS}:
        assert f"'{name}'" in accepted and (RULES / f"open_{name}.yaml").is_file(), name


@pytest.mark.slow
def test_a_train_to_target_log_passes_the_mlperf_compliance_checker(store, tmp_path):
    p = run_cli("+experiment=digits_to_target", "+recipe=digits_sgd", "goal.max_epochs=2", "logger=none",
                "logger.progress=false", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    log = store / rec["run_id"] / rec["artifacts"]["mlperf_log"]
    out = tmp_path / "checker.log"
    c = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--ruleset", RULESET,
                        "--log_output", str(out), str(log)], cwd=REPO, env=cli_env(), capture_output=True,
                       text=True, timeout=120)
    said = out.read_text()
    print(f"\ncompliance checker (ruleset {RULESET}):\n{said}")
    assert c.returncode == 0, said + c.stderr
    assert said.strip().endswith("INFO - SUCCESS") and "WARNING" not in said and "ERROR" not in said
    assert f"training_{RULESET}/open_resnet.yaml" in said  # digits' top-1 is checked as MLPerf's classification

    events = {}
    for line in log.read_text().splitlines():
        e = json.loads(line.split(":::MLLOG ", 1)[1])
        events.setdefault(e["key"], e)
    assert events["submission_benchmark"]["value"] == "resnet" and events["xbench_workload"]["value"] == "mlp_digits"
    assert events["cache_clear"]["value"] is False  # xbench drops no OS caches, and says so
    # init_start is the process's start: start-up (imports, data, model build) is inside init, not before it
    init_s = (events["init_stop"]["time_ms"] - events["init_start"]["time_ms"]) / 1000
    assert init_s >= 0.9 * rec["measurements"]["startup_s"] > 0, (init_s, rec["measurements"]["startup_s"])
