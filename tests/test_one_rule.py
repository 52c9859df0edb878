"""One of each: the "started as a rank" rule (env_vars.launched_rank) that launch/torchrun.under_torchrun and
bench/meters/contention.launcher_pid both read."""

from __future__ import annotations

import os

from xbench.bench.meters import contention
from xbench.env_vars import launched_rank, srun_step_tasks
from xbench.launch import torchrun


def test_launched_rank_reads_torchrun_and_srun_facts_alike():
    assert not launched_rank({})
    assert launched_rank({"TORCHELASTIC_RUN_ID": "x"})
    assert launched_rank({"LOCAL_RANK": "0", "WORLD_SIZE": "2"}) and not launched_rank({"LOCAL_RANK": "0"})
    step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert launched_rank(step) and srun_step_tasks(step) == 2
    assert not launched_rank({**step, "SLURM_STEP_NUM_TASKS": "1"})  # a step of one task: submitit's jobs
    assert not launched_rank({"SLURM_STEP_NUM_TASKS": "4"})  # the batch script itself (no step)


def test_under_torchrun_and_the_contention_launcher_agree(monkeypatch):
    for k in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "WORLD_SIZE", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(k, raising=False)
    assert not torchrun.under_torchrun() and contention.launcher_pid() is None
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert torchrun.under_torchrun() and contention.launcher_pid() == (os.getppid() if os.getppid() > 1 else None)


def _run(run_id, runtime, step_s, experiment="e", batch=8):
    return {"run_id": run_id, "status": "ok", "runtime": runtime, "experiment": experiment, "model": "m", "data": "d",
            "precision": "fp32", "batch_size_per_device": batch, "device_kind": "cpu", "devices": 1,
            "parallel": "single", "window_s_total": step_s * 10, "timed_steps_per_window": 5, "repeats": 2,
            "throughput_samples_per_s": batch / step_s, "compile_time_s": 1.0}


def test_eager_twins_one_rule_for_runs_tables_and_findings():
    """Of several eager twins: the same experiment's first, then the one with the median step (the lower middle
    one of an even count); another batch size is no twin."""
    from xbench.analysis.overhead import eager_twins, versus_eager

    groups = [[_run("c", "compile", 0.1)], [_run("e1", "eager", 0.4, "other")], [_run("e2", "eager", 0.2, "other")],
              [_run("e3", "eager", 0.3, "other")], [_run("e4", "eager", 0.9, "other")], [_run("b", "compile", 0.1, batch=4)]]
    assert eager_twins(groups) == {0: 3}  # steps 0.2, 0.3, 0.4, 0.9: the lower middle, 0.3 (e3)
    own = [_run("e5", "eager", 0.8)]  # the compiled run's own experiment: chosen over the median
    assert eager_twins([*groups, own]) == {0: 6}
    # per run (versus_eager) and per configuration (the table, the findings) read the same pairing
    rows = [g[0] for g in groups]
    assert set(versus_eager(rows)) == {"c"} and abs(versus_eager(rows)["c"]["speedup_vs_eager"] - 3.0) < 1e-9


def test_one_number_formatter_keeps_each_readers_form():
    """metrics.numbers: the report's cells (4 digits, whole from 1,000), the findings' and plot labels' (3 digits,
    whole from 100) and the console's fixed decimals, each as it was before they shared one module."""
    from xbench.analysis.findings import fmt
    from xbench.metrics.numbers import compact, human, whole
    from xbench.report.layout import nice
    from xbench.report.render import fmt as cell

    assert [cell(x) for x in (23640.4, 1e308, 5.0, 0.0137251, None, float("nan"), True, False, 24150)] == [
        "23,640", "1e+308", "5", "0.01373", "", "", "yes", "", "24150"]
    assert [fmt(x) for x in (8000.2, 123.4, 3.21, 0.0137251, None, 2.0)] == ["8,000", "123", "3.21", "0.0137", "n/a", "2"]
    assert [nice(x) for x in (8000.2, 3.2, 0.0137251, None)] == ["8,000", "3.2", "0.0137", "n/a"]
    assert compact(99.5, 3, whole_from=100) == "99.5" and compact(-0.5) == "-0.5"
    assert [human(x) for x in (24150.3, 241.53, 2.4153, 0.024153, 7, 3e-12)] == [
        "24,150", "241.5", "2.415", "0.02415", "7", "3.000e-12"]
    assert (whole(2.0), whole(2.5), whole("x")) == ("2", "2.5", "x")
