"""Pure-Python parts: statistics, aggregation across ranks, derived figures, records and the store."""

from __future__ import annotations

import json
import math
import os
import statistics
import threading

import pytest

from xbench.metrics.aggregate import aggregate
from xbench.metrics.cost import price_per_hour
from xbench.metrics.derived import derive
from xbench.metrics.stats import olympic_mean, percentile, summarize, t95
from xbench.records.record import RunRecord
from xbench.records.store import load_records, new_run_id, read_record, write_record


def test_summarize_against_hand_computed_values():
    xs = [10.0, 12.0, 11.0, 13.0, 9.0]
    s = summarize(xs)
    assert s["median"] == 11.0 and s["mean"] == 11.0
    assert s["std"] == pytest.approx(1.5811388, rel=1e-6)  # sample std: sqrt(10/4)
    assert s["cv"] == pytest.approx(1.5811388 / 11.0, rel=1e-6)
    assert s["olympic_mean"] == 11.0  # drop 9 and 13
    # 95% CI of the geometric mean: t(0.975, df=4) = 2.776 on the logs, mapped back.
    logs = [math.log(x) for x in xs]
    half = 2.7764451 * statistics.stdev(logs) / math.sqrt(5)
    assert s["ci95_low"] == pytest.approx(math.exp(statistics.fmean(logs) - half), rel=1e-4)
    assert s["ci95_high"] == pytest.approx(math.exp(statistics.fmean(logs) + half), rel=1e-4)
    assert 0 < s["ci95_low"] < 11 < s["ci95_high"] and s["ci_note"] is None
    assert s["p10"] == pytest.approx(9.4) and s["p90"] == pytest.approx(12.6)


def test_percentile_and_olympic_edges():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert olympic_mean([1.0, 100.0]) == 50.5
    assert olympic_mean([1.0, 2.0, 3.0, 1000.0]) == 2.5
    assert t95(1) == pytest.approx(12.7062, abs=1e-4) and t95(11) == pytest.approx(2.2010, abs=1e-4)
    assert t95(500) == pytest.approx(1.9647, abs=1e-4) and t95(1.5) == pytest.approx(6.0167, abs=1e-4)  # Welch df


def test_t_quantile_takes_few_incomplete_betas(monkeypatch):
    """The report asks for a t quantile per Welch df (thousands at 10,000 records): bisection took ~85 incomplete
    betas each (3 s of the report); Newton inside its bracket takes a handful, to the same double."""
    from xbench.metrics import stats

    calls = []
    real = stats._ibeta
    monkeypatch.setattr(stats, "_ibeta", lambda *a: calls.append(a) or real(*a))
    stats._t_quantile.cache_clear()
    dfs = (0.3, 1, 1.5, 2.7, 9.3, 45, 5000)
    got = [t95(df) for df in dfs]
    assert len(calls) <= 12 * len(dfs)  # was ~85 each
    stats._t_quantile.cache_clear()
    for df, t in zip(dfs, got):  # each t is where P(|T| > t) = 0.05
        assert real(df / 2, 0.5, df / (df + t * t)) == pytest.approx(0.05, rel=1e-12)


def _rank(rank, windows, batch=32, steps=10):
    return {"rank": rank, "device": "cpu", "window_s": windows, "samples_per_window": batch * steps,
            "samples_per_step": batch, "devices_per_rank": 1, "data_wait_s": 0.0,
            "peak_host_rss_gib": 1.0 + rank, "step_time_cv": 0.01}


def test_global_throughput_sums_ranks_over_the_common_window():
    # rank 1 is slower: the common window is the slowest rank's (ranks finish together).
    m = aggregate([_rank(0, [1.0, 2.0]), _rank(1, [1.25, 2.0])])
    assert m["throughput_samples_per_s_windows"] == [640 / 1.25, 640 / 2.0]
    assert m["throughput_samples_per_s"] == statistics.median([512.0, 320.0])
    assert (m["world_size"], m["devices"], m["global_batch_size"]) == (2, 2, 64)
    assert m["window_s_total"] == 3.25 and m["peak_host_rss_gib"] == 2.0
    assert m["samples_per_window"] == 640  # the run's, not rank 0's 320
    assert m["noisy"] is True  # 512 vs 320 samples/s across windows


def test_memory_peaks_are_the_fullest_rank_not_rank_0():
    """RankResults as two DDP ranks report them: rank 1 holds more (its GPU also took the other job's
    bucket). Before: the run's peak_device_* was rank 0's alone (1.5 GiB), the larger rank's lost."""
    from xbench.metrics.aggregate import merge_processes
    from xbench.rank import RankResult

    ranks = [RankResult(i, {**_rank(i, [1.0, 1.0]), "peak_device_allocated_gib": a, "peak_device_reserved_gib": r}, {})
             for i, (a, r) in enumerate([(1.5, 2.0), (3.25, 4.0)])]
    m = aggregate([r.measurements for r in ranks])
    assert (m["peak_device_allocated_gib"], m["peak_device_reserved_gib"], m["peak_host_rss_gib"]) == (3.25, 4.0, 2.0)
    assert m["peak_device_allocated_gib_per_rank"] == [1.5, 3.25] and m["peak_host_rss_gib_per_rank"] == [1.0, 2.0]
    assert "peak_device_used_gib" not in m  # no rank reported it (XLA's)
    one = aggregate([ranks[0].measurements])
    assert one["peak_device_allocated_gib"] == 1.5 and "peak_device_allocated_gib_per_rank" not in one
    # whole-process repeats: a rank's peak is its fullest process's
    later = [{**r.measurements, "peak_device_allocated_gib": 5.0 - r.rank} for r in ranks]
    merged = merge_processes([[r.measurements for r in ranks], later])
    assert [x["peak_device_allocated_gib"] for x in merged] == [5.0, 4.0]
    assert aggregate(merged)["peak_device_allocated_gib_per_rank"] == [5.0, 4.0]


def test_single_rank_noisy_from_step_times():
    r = _rank(0, [1.0])
    r["step_time_cv"] = 0.2
    assert aggregate([r], noisy_cv=0.05)["noisy"] is True
    assert aggregate([r], noisy_cv=0.5)["noisy"] is False


def test_derived_cost_and_mfu():
    m = {"throughput_samples_per_s": 1000.0, "devices": 4, "flops_per_sample_train": 24.3e9,
         "compute_dtype": "bf16", "window_s_total": 36.0}
    cfg = {"platform": {"peak_tflops": {"bf16": 100.0},
                        "price": [{"amount": 6.5, "unit": "hour", "count": 1},
                                  {"amount": 0.19, "unit": "hour", "count": 1}]},
           "data": {"dataset_size": 1_281_167}}
    d = derive(m, cfg)
    assert d["throughput_per_device_samples_per_s"] == 250.0
    assert d["achieved_tflops"] == pytest.approx(24.3)
    assert d["mfu"] == pytest.approx(24.3 / 400)
    assert d["usd_per_hour"] == pytest.approx(6.69)
    assert d["samples_per_s_per_usd_per_hour"] == pytest.approx(1000 / 6.69)
    assert d["usd_per_million_samples"] == pytest.approx(6.69 / 3600 / 1000 * 1e6)
    assert d["window_cost_usd"] == pytest.approx(6.69 * 36 / 3600)
    assert d["projected_epoch_s"] == pytest.approx(1281.167)


def test_price_units_and_no_price():
    assert price_per_hour({"price": [{"amount": 0.02, "unit": "minute"}]}) == pytest.approx(1.2)
    assert price_per_hour({"price": [{"amount": 730.0, "unit": "month"}]}) == pytest.approx(1.0)
    assert price_per_hour({"price": [{"amount": 0.01, "unit": "hour", "per": "vcpu", "count": 64}]}) == pytest.approx(0.64)
    assert price_per_hour({}) is None
    with pytest.raises(ValueError, match="unit"):
        price_per_hour({"price": [{"amount": 1, "unit": "fortnight"}]})


def test_record_round_trip_and_validation(tmp_path):
    rec = RunRecord(run_id=new_run_id("t"), config={"bench": {"mode": "throughput"}})
    rec.measurements = {"throughput_samples_per_s": 1.5, "loss_last": float("nan")}
    rec.finish("ok")
    path = write_record(tmp_path, rec)
    back = read_record(path)
    assert back.status == "ok" and back.measurements["throughput_samples_per_s"] == 1.5
    assert back.measurements["loss_last"] is None  # NaN is stored as null: strict JSON for every reader
    bad = RunRecord(run_id="x")
    bad.status = "failed"
    assert any("needs a reason" in p for p in bad.problems())
    with pytest.raises(ValueError, match="unknown status"):
        rec.finish("great")


def test_store_skips_corrupt_records_with_a_warning(tmp_path):
    good = RunRecord(run_id="a", config={})
    good.finish("failed", "boom")
    write_record(tmp_path, good)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "record.json").write_text('{"run_id": "b", "status": ')
    with pytest.warns(UserWarning, match="b/record.json"):
        recs = load_records(tmp_path)
    assert [r.run_id for r in recs] == ["a"]


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_atomic_write_never_exposes_a_partial_record(tmp_path):
    """A reader polling while a writer rewrites a large record only ever sees complete JSON."""
    rec = RunRecord(run_id="big", config={"blob": "x" * 2_000_000})
    rec.finish("failed", "r")
    write_record(tmp_path, rec)
    stop, bad = threading.Event(), []

    def reader():
        while not stop.is_set():
            try:
                json.loads((tmp_path / "big" / "record.json").read_text())
            except json.JSONDecodeError as e:
                bad.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for _ in range(20):
        write_record(tmp_path, rec)
    stop.set()
    t.join()
    assert not bad
    assert not [p for p in os.listdir(tmp_path / "big") if p.endswith(".tmp")]


def test_run_ids_are_unique():
    assert len({new_run_id() for _ in range(1000)}) == 1000
