"""A W&B run back to a record, item by item (analysis/wandb_source.record_from_wandb): the summary's figures
kept, W&B's own keys and the history series' last values left out, a CI from its two ends only, one key per
GPU gathered, and a run without an xbench status failed with the reason it gave or one that says why."""

from __future__ import annotations

from xbench.analysis.wandb_source import record_from_wandb

SUMMARY = {"_step": 9, "_wandb": {"runtime": 3}, "status": "ok", "run_id": "r1", "warnings": "a; b",
           "n_warnings": 2, "goal_metric": "top1", "top1": 0.9, "throughput_samples_per_s": 10.0, "loss": 0.1,
           "window_throughput_samples_per_s": 9.0, "throughput_ci95_low_samples_per_s": 9.5,
           "throughput_ci95_high_samples_per_s": 10.5, "step_ci95_low_samples_per_s": 1.0,
           "gpu_util_percent/0": 50.0, "gpu_util_percent/1": 70.0, "noisy": False, "note": None,
           "nested": {"x": 1}, "step_times_s": [0.1, 0.2],
           "throughput_samples_per_s_windows": [9.0, 11.0]}
CONFIG = {"_wandb": {}, "env": {"hostname": "h", "cpu_model": "c"}, "xbench_version": "1.2", "comparison": "x",
          "run_id": "cfg", "experiment": "e", "model": {"name": "mlp"}}


def test_a_summary_becomes_the_records_figures():
    rec = record_from_wandb("name", CONFIG, SUMMARY, [{"eval": 1, "epoch": 1, "top1": 0.5}])
    assert rec.run_id == "r1" and rec.status == "ok" and rec.warnings == ["a", "b"]
    assert rec.config == {"experiment": "e", "model": {"name": "mlp"}} and rec.experiment == "e"
    assert rec.env == {"xbench_version": "1.2", "hostname": "h", "cpu": {"model": "c"},
                       "wandb_env": {"hostname": "h", "cpu_model": "c"}}
    assert rec.measurements == {"goal_metric": "top1", "throughput_samples_per_s": 10.0, "noisy": False,
                                "note": None, "throughput_samples_per_s_windows": [9.0, 11.0],
                                "throughput_ci95_samples_per_s": [9.5, 10.5],
                                "gpu_util_percent_mean": {"0": 50.0, "1": 70.0}}
    assert list(rec.measurements) == ["goal_metric", "throughput_samples_per_s", "noisy", "note",
                                      "throughput_samples_per_s_windows",
                                      "throughput_ci95_samples_per_s", "gpu_util_percent_mean"]
    assert rec.series == {"eval": [1], "epoch": [1], "train_time_s": [None], "samples_seen": [None],
                          "top1": [0.5]}


def test_a_run_without_an_xbench_status_is_failed_with_why():
    rec = record_from_wandb("n", {"run_id": "cfg"}, {"status": "running"})
    assert rec.run_id == "cfg" and rec.status == "failed"
    assert rec.reason == "W&B run n has no xbench status (it did not finish publishing)"
    rec = record_from_wandb("n", None, {"reason": "killed"})
    assert rec.run_id == "n" and rec.status == "failed" and rec.reason == "killed"
