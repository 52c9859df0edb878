"""One tidy row a record (analysis/frame.flatten): a run that stopped early still says how big it was meant to
be (devices and global batch from its config), a measured figure never replaces a config column, measured
figures come before derived ones, and the warnings are joined and counted."""

from __future__ import annotations

from xbench.analysis.frame import flatten
from xbench.records.record import RunRecord


def _rec(config: dict, measurements: dict, derived: dict | None = None, warnings=None) -> RunRecord:
    r = RunRecord(run_id="r", experiment=None, config=config, measurements=measurements)
    r.derived, r.warnings = derived or {}, warnings or []
    return r


def test_a_run_that_stopped_early_says_how_big_it_was_meant_to_be():
    row = flatten(_rec({"data": {"batch_size": 8}, "parallel": {"world_size": 3}}, {"devices": None}))
    assert row["devices"] == 3 and row["global_batch_size"] == 24
    row = flatten(_rec({"data": {"batch_size": "8"}}, {}))  # not a number: no global batch made up
    assert row["devices"] == 1 and row.get("global_batch_size") is None
    row = flatten(_rec({"data": {"batch_size": 8}, "parallel": {"world_size": 3}},
                       {"devices": 2, "global_batch_size": 10}))
    assert row["devices"] == 2 and row["global_batch_size"] == 10


def test_measured_figures_come_first_and_never_replace_a_config_column():
    row = flatten(_rec({"model": {"name": "mlp"}}, {"model": "other", "x": 1, "y": [1, 2]}, {"x": 2, "z": 3},
                       warnings=["a", "b"]))
    assert row["model"] == "mlp" and row["x"] == 1 and row["z"] == 3 and "y" not in row
    assert row["warnings"] == "a; b" and row["n_warnings"] == 2 and row["noisy"] is False
    assert list(row).index("x") < list(row).index("z") < list(row).index("devices")


def test_the_curve_is_the_goal_metrics_points_with_their_time_and_epoch():
    """The goal's metric first, else a known one, else an older key; the first time and epoch series there
    are; a point without a value left out; no metric series: no curve."""
    r = _rec({}, {"goal_metric": "my_metric"})
    r.series = {"my_metric": [0.1, None, 0.3], "elapsed_s": [1, 2, 3], "time_s": [9, 9, 9],
                "epochs": [1, 2, 3]}
    assert flatten(r)["curve"] == [{"metric": 0.1, "time_s": 1, "epoch": 1},
                                   {"metric": 0.3, "time_s": 3, "epoch": 3}]
    r = _rec({}, {})
    r.series = {"eval_accuracy": [0.5], "top1": "not a list"}
    assert flatten(r)["curve"] == [{"metric": 0.5, "time_s": None, "epoch": None}]
    r.series = {"loss_curve": [1.0]}
    assert flatten(r)["curve"] is None


def test_ci_columns_come_from_the_samples_and_a_bound_at_zero_is_dropped():
    from xbench.metrics.stats import ci95

    low, high = "throughput_ci95_low_samples_per_s", "throughput_ci95_high_samples_per_s"
    assert low not in flatten(_rec({}, {"throughput_ci95_samples_per_s": [0.0, 9.0]}))
    row = flatten(_rec({}, {"throughput_ci95_samples_per_s": [4.0, 9.0]}))
    assert (row[low], row[high]) == (4.0, 9.0) and "throughput_log_n" not in row
    w, p = [90.0, 100.0, 110.0, 105.0], [100.0, 120.0, 110.0]
    row = flatten(_rec({}, {"throughput_ci95_samples_per_s": [4.0, 9.0],
                            "throughput_samples_per_s_windows": w, "throughput_samples_per_s_processes": p}))
    assert [row[low], row[high]] == list(ci95(w)) and row["throughput_log_n"] == 3  # over the processes
    assert row["throughput_process_ci95_low_samples_per_s"] == ci95(p)[0]
    row = flatten(_rec({}, {"throughput_samples_per_s_windows": w,
                            "throughput_samples_per_s_processes": [99.0]}))
    assert row["throughput_log_n"] == 4  # one process: over the windows


def test_rows_in_another_currency_are_converted_copies():
    from xbench.analysis.currency import in_currency

    rows = [{"price_currency": "EUR", "price_as_of": "2025", "eur_per_million_samples": 2.0,
             "samples_per_s_per_eur_per_hour": 10.0, "train_cost_eur": "n/a"},
            {"price_currency": "USD", "usd_per_million_samples": 1.0}, {"throughput": 5}]
    out, used = in_currency(rows, "USD", {"EUR": 1.5})
    assert out[0] == {"price_currency": "EUR", "price_as_of": "2025", "usd_per_million_samples": 3.0,
                      "samples_per_s_per_usd_per_hour": 10.0 / 1.5, "fx_rate": 1.5,
                      "fx_date": "as given (--fx)"}
    assert out[1:] == rows[1:] and out[1] is rows[1] and [u.rate for u in used] == [1.5]
    assert in_currency(rows, None) == (rows, [])
