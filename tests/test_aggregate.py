"""The ranks' measurements combined into the run's (metrics/aggregate.py), by hand-checkable figures:
windows as long as the slowest rank's, throughput over them, energy summed under NVML and read once under
RAPL, a stall or contention on any rank the run's, noise from the windows' spread or else the steps', and
whole-process repeats merged per rank."""

from __future__ import annotations

import pytest

from xbench.metrics.aggregate import aggregate, merge_processes


def _rank(i: int, windows: list[float], **kw) -> dict:
    return {"rank": i, "pid": 10 + i, "window_s": windows, "samples_per_window": 100, "samples_per_step": 10,
            "data_wait_s": 0.5, **kw}


def test_windows_energy_and_flags_of_two_ranks():
    m = aggregate([_rank(0, [1.0, 2.0], energy_j=3.0, energy_source="nvml", contended=False,
                         step_time_cv=0.9),
                   _rank(1, [2.0, 1.0, 9.0], energy_j=5.0, contended=True)])
    assert m["window_s"] == [2.0, 2.0] and m["window_s_total"] == 4.0 and m["samples_per_window"] == 200
    assert m["throughput_samples_per_s"] == 100.0 and m["throughput_cv"] == 0.0 and not m["noisy"]
    assert m["energy_j"] == 8.0 and m["energy_j_per_sample"] == pytest.approx(8.0 / 400)
    assert m["contended"] is True and "stalled" not in m and m["data_wait_fraction"] == 0.125
    assert m["world_size"] == 2 and m["devices"] == 2 and m["global_batch_size"] == 20
    assert m["rank_pids"] == [10, 11]
    assert "rank" not in m and "pid" not in m


def test_rapl_energy_is_one_reading_and_a_missing_one_leaves_the_first_ranks():
    m = aggregate([_rank(0, [1.0], energy_j=3.0, energy_source="rapl"), _rank(1, [1.0], energy_j=5.0)])
    assert m["energy_j"] == 5.0 and m["energy_j_per_sample"] == 5.0 / 200
    m = aggregate([_rank(0, [1.0], energy_j=3.0), _rank(1, [1.0])])
    assert m["energy_j"] == 3.0 and "energy_j_per_sample" not in m


def test_one_window_is_noisy_by_its_steps_and_zero_time_has_no_wait_fraction():
    assert aggregate([_rank(0, [1.0], step_time_cv=0.06)])["noisy"] is True
    assert aggregate([_rank(0, [1.0], step_time_cv=0.06)], noisy_cv=0.1)["noisy"] is False
    assert aggregate([_rank(0, [1.0])])["noisy"] is False


def test_process_repeats_merge_per_rank():
    a = [_rank(0, [1.0], energy_j=1.0, stalled=True, peak_host_rss_gib=2.0), _rank(1, [1.5])]
    b = [_rank(0, [2.0, 3.0], energy_j=2.0, peak_host_rss_gib=1.0), _rank(1, [2.5], stalled=False)]
    r0, r1 = merge_processes([a, b])
    assert r0["window_s"] == [1.0, 2.0, 3.0] and r0["repeats"] == 3 and r0["data_wait_s"] == 1.0
    assert r0["energy_j"] == 3.0 and r0["stalled"] is True and r0["peak_host_rss_gib"] == 2.0
    assert r1["window_s"] == [1.5, 2.5] and r1["stalled"] is False and "energy_j" not in r1
    with pytest.raises(ValueError, match="different numbers of ranks"):
        merge_processes([a, a[:1]])
