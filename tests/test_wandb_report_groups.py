"""The W&B Report's bars are the HTML report's table rows: real runs of two models at three batch sizes, logged to
W&B offline, group in W&B (by the `comparison` key each run logged, read back from its run files) exactly as the
HTML report's throughput table groups them, with the same medians; the definition names the same groups; and
with every run on one device it has no panel against the device count.

The cross-check is independent of the code under test: the groups and medians W&B would draw are computed here
from what each offline W&B run holds (its config key and summary throughput), the table's from the report's
throughput.csv."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from tests.conftest import FAST
from tests.test_report import read_csv
from xbench.analysis.frame import load
from xbench.records.wandb_files import read_offline_run
from xbench.report.wandb_report import BAR_GROUP, GROUPBY, definition

pytestmark = pytest.mark.slow

WANDB = [a for a in FAST if not a.startswith("logger=")] + ["logger=wandb", "logger.progress=false",
                                                             "logger.wandb.mode=offline"]
# The mix that once made one bar of 282 to 11,898 samples/s: cnn_small at batch 16 (twice: a median of two),
# 32 and 64, and an MLP on digits.
RUNS = [("data.batch_size=16",), ("data.batch_size=16",), ("data.batch_size=32",), ("data.batch_size=64",),
        ("model=mlp", "data=digits", "data.batch_size=32")]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import xbench

    root = tmp_path_factory.mktemp("wandb_groups") / "results"
    for args in RUNS:
        rec = xbench.run([*WANDB, *args, f"store.root={root}"])
        assert rec.status == "ok", (args, rec.reason)
    return root


def test_wandb_bars_are_the_html_reports_throughput_rows(store, tmp_path):
    from xbench.report.__main__ import main

    runs = [read_offline_run(f) for f in sorted(store.glob("*/wandb/offline-run-*/run-*.wandb"))]
    assert len(runs) == len(RUNS)
    # What W&B groups by: each run's logged key; its bar is the median of the runs' summary throughput.
    by_key = defaultdict(list)
    for r in runs:
        by_key[r["config"][BAR_GROUP]].append(r)
    wandb_bars = sorted((len(rs), statistics.median(r["summary"]["throughput_samples_per_s"] for r in rs))
                        for rs in by_key.values())

    assert main([str(store), "--out", str(tmp_path), "--format", "csv", "--no-progress"]) == 0
    table = read_csv(tmp_path / "tables" / "throughput.csv")
    html_rows = sorted((int(row["runs"]), float(row["throughput median [samples/s]"])) for row in table)
    assert len(wandb_bars) == len(html_rows) == 4, f"W&B draws {len(wandb_bars)} bars, the table has {len(html_rows)} rows"
    assert [n for n, _ in wandb_bars] == [n for n, _ in html_rows] == [1, 1, 1, 2]
    assert [tp for _, tp in wandb_bars] == pytest.approx([tp for _, tp in html_rows], rel=1e-9)

    # Each bar is one model at one batch: the table row of that model and batch holds the bar's median.
    for key, rs in by_key.items():
        [(model, batch)] = {(r["config"]["model"]["name"], r["config"]["data"]["batch_size"]) for r in rs}
        [row] = [row for row in table if row["model"] == model and int(float(row["batch/device"])) == batch]
        median = statistics.median(r["summary"]["throughput_samples_per_s"] for r in rs)
        assert float(row["throughput median [samples/s]"]) == pytest.approx(median, rel=1e-9), key
        assert f" / {model} / " in key and f" / {batch}/device / " in key, key

    # The definition: runs and bars grouped by that key, its groups the logged ones, its text saying so.
    defn = definition(load([store], progress=False).frame, [], "xbench", None, "groups")
    assert defn["runset"]["groupby"] == GROUPBY == [f"config.{BAR_GROUP}"] and defn["bar_groupby"] == BAR_GROUP
    assert {g[BAR_GROUP]: g["runs"] for g in defn["groups"]} == Counter(r["config"][BAR_GROUP] for r in runs)
    assert "4 groups" in defn["description"] and "batch_size_per_device" in defn["description"]
    assert "platform x runtime x precision x strategy" not in defn["description"]
    # Every run used one device: nothing to draw against the device count (the HTML report has no scaling table).
    assert not (tmp_path / "tables" / "scaling.csv").exists()
    assert [p["title"] for p in defn["panels"] if p["x"] == "devices"] == []
    assert any(p["y"] == "throughput_samples_per_s" and p["kind"] == "bar" for p in defn["panels"])
