"""The findings' sentences for what the study tests leave out: many speed-ups of one runtime summarised as
their median with the lowest and highest named, a strategy measured on one device left out of the scaling
finding, noisy and unfinished runs counted, and the works beyond MAX_WORKS named in the left-out sentence.
Records are FAKE (xbench.report.fake) with figures chosen so each number can be checked by hand."""

from __future__ import annotations

from tests.test_report_compare import _rows, _store
from xbench.analysis.findings import MAX_WORKS
from xbench.report.fake import fake_record as R
from xbench.report.tables import findings_of


def _found(tmp_path, recs) -> tuple[dict[str, str], str]:
    found, left = findings_of(*_rows(_store(tmp_path, recs)))
    return {f.question: f.text for f in found}, left


def test_many_speed_ups_read_as_their_median_with_the_lowest_and_highest(tmp_path):
    """Five batch sizes, compiled 1.1x to 1.5x eager's throughput: more than four are summarised."""
    recs = []
    for bs, ratio in zip((16, 32, 64, 128, 256), (1.3, 1.1, 1.5, 1.2, 1.4)):
        recs += [R(f"e{bs}", throughput=1000.0, batch_size=bs), R(f"c{bs}", throughput=1000.0 * ratio,
                                                                    batch_size=bs, runtime="compile")]
    found, _ = _found(tmp_path, recs)
    assert found["compile speed-up"] == (
        "torch.compile (inductor), runtime compile vs eager (throughput ratio, same workload and placement): "
        "median 1.30x over 5 configurations, from 1.10x (mlp on synthetic_mnist, batch 32) to 1.50x (mlp on "
        "synthetic_mnist, batch 64); 0 within noise.")


def test_few_speed_ups_are_listed_each(tmp_path):
    recs = [R("e", throughput=1000.0), R("x", throughput=2000.0, runtime="xla")]
    found, _ = _found(tmp_path, recs)
    assert found["xla speed-up"] == ("XLA (torch-xla), runtime xla vs eager (throughput ratio, same workload and "
                                     "placement): 2.00x (mlp on synthetic_mnist, batch 32).")


def test_scaling_noise_unfinished_runs_and_works_left_out(tmp_path):
    """DDP on 1, 2 and 4 devices at 900 samples/s a device (the 1-device run is `single`: a strategy measured
    on one device only has no efficiency to state); one noisy run, two that did not finish, and one work
    more than MAX_WORKS."""
    recs = [R(f"d{d}", throughput=900.0 * d, devices=d, parallel="ddp" if d > 1 else "single",
              platform="gpu") for d in (1, 2, 4)]
    recs += [R(f"w{i}", throughput=100.0, model=f"m{i}") for i in range(MAX_WORKS)]
    recs += [R("noisy", throughput=50.0, model="m0", platform="p", measurements={"noisy": True}),
             R("bad", status="failed", reason="x", throughput=None), R("oom", status="oom", reason="y",
                                                                         throughput=None)]
    found, left = _found(tmp_path, recs)
    assert found["scaling efficiency"] == ("Scaling efficiency on gpu (eager, fp32, batch 32/device): ddp 100% "
                                           "at 4 devices (4.00x the 1-device throughput). 100% is linear.")
    assert found["noise"] == ("1 of 10 ok runs flagged themselves noisy (spread above bench.noisy_cv): their "
                              "figures are less certain than their medians look.")
    assert found["runs that did not finish"] == ("2 of 12 runs did not finish ok (1 failed, 1 oom): they stay in "
                                                 "the tables with their reasons, outside every median.")
    assert left == ("1 more works are in the tables (narrow the report with --filter model=... to read their "
                    "findings).")


def test_a_local_machine_under_one_price_is_not_re_priced():
    """Re-pricing needs one machine under two local platforms: under one, or with no currency, the rows come
    back as they are and nothing is said."""
    from xbench.analysis.reprice import one_machine, repriced
    from xbench.analysis.rows import Rows

    rows = Rows([{"run_id": f"r{i}", "status": "ok", "provider": "local", "hostname": "h", "platform": "m",
                  "usd_per_hour": 1.0, "throughput_samples_per_s": 100.0 + i} for i in range(2)])
    assert repriced(rows, "usd") == (rows, []) and repriced(rows, None) == (rows, [])
    assert one_machine(rows) == (rows, [])
    two = Rows([*rows, {**rows[0], "run_id": "r9", "platform": "m2", "usd_per_hour": 0.5}])
    again, said = repriced(two, "usd")
    assert len(again) == 6 and said == [
        "m, m2: one machine priced 2 ways; its cost per sample is its 3 runs re-priced at each price, so the "
        "prices alone differ (its runs under the different names differ only by when they ran)."]
    assert {r["platform"] for r in one_machine(two)[0]} == {"m = m2 (one machine)"}
