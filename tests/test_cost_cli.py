"""`python -m xbench.cost`'s answers end to end, in this process: the table of the ok records (only the
columns some row has), each refusal with its exit status (no store, an unreadable baseline, an unknown or
ambiguous price component, a price that is not a number) and a run with nothing ok said as such."""

from __future__ import annotations

import pytest

from xbench.cost import load_platform, main
from xbench.records.record import RunRecord
from xbench.records.store import write_record


def _store(tmp_path, runs):
    for rid, tp, status in runs:
        config = {"bench": {"mode": "throughput"}, "platform": load_platform("aws_p3_2xlarge")}
        rec = RunRecord(run_id=rid, config=config)
        rec.measurements = {"throughput_samples_per_s": tp, "window_s_total": 1.0}
        rec.finish(status, None if status == "ok" else "x")
        write_record(tmp_path, rec)
    return str(tmp_path)


def test_the_table_has_the_ok_records_and_the_columns_some_row_has(tmp_path, capsys):
    store = _store(tmp_path, [("a", 3600.0, "ok"), ("b", 7200.0, "ok"), ("c", 1.0, "failed")])
    assert main([store, "--platform", "aws_p3_2xlarge", "--price", "3.6"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("priced as aws_p3_2xlarge (") and ", as of " in out[0]
    assert out[1].split("\t") == ["run_id", "throughput_samples_per_s", "usd_per_hour",
                                  "usd_per_million_samples", "window_cost_usd"]
    # the window of 1 s is billed as the platform's 60 s minimum: USD 0.06
    assert out[2:] == ["a\t3600\t3.6\t0.277778\t0.06", "b\t7200\t3.6\t0.138889\t0.06"]


@pytest.mark.parametrize("args,status,said", [
    (["--store-missing"], 2, "xbench.cost: "),
    (["--baseline", "nope"], 2, "xbench.cost: --baseline 'nope': "),
    (["--price", "gpu=2"], 2, "xbench.cost: --price 'gpu=2': platform 'aws_p3_2xlarge' has components"),
    (["--price", "two"], 2, "xbench.cost: --price 'two': 'two' is not a number"),
])
def test_each_refusal_is_one_line_and_status_2(tmp_path, capsys, args, status, said):
    store = _store(tmp_path / "s", [("a", 3600.0, "ok")])
    if args == ["--store-missing"]:
        store, args = str(tmp_path / "none"), []
    try:
        got = main([store, "--platform", "aws_p3_2xlarge", *args])
    except SystemExit as e:  # the --price refusals leave through argparse's way out
        got, err = 2, str(e)
    else:
        err = capsys.readouterr().err
    assert got == status and err.startswith(said), err


def test_no_ok_record_is_said_with_status_1(tmp_path, capsys):
    store = _store(tmp_path, [("c", 1.0, "failed")])
    assert main([store, "--platform", "aws_p3_2xlarge"]) == 1
    assert capsys.readouterr().err == f"xbench.cost: no ok records under {store}\n"
