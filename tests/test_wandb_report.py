"""W&B as the shared store of comparisons, from real runs of every mode (throughput at two batch sizes, DDP over
two ranks, train to target, find_max_batch) logged to W&B offline and read back from its run files:
- the W&B Report's every panel reads keys those runs' summaries or histories hold, bars group by the configuration
  each run logged, batch axes are the global batch, cost to target is the training-time cost;
- `python -m xbench.report` draws the same tables from the offline W&B runs (and through a `wandb.Api`-shaped
  object) as from the store's record files."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import FAST, records
from tests.test_report import read_csv
from xbench.analysis import wandb_source
from xbench.analysis.frame import load
from xbench.records.wandb_files import read_offline_run
from xbench.report.wandb_report import GROUPBY, build, definition

pytestmark = pytest.mark.slow

WANDB = [a for a in FAST if not a.startswith("logger=")] + ["logger=wandb", "logger.progress=false"]
PRICED = "platform=local_as_gce_n1_standard_2"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store holding a real run of every mode, each with its offline W&B run: five runs through the Python
    API in this process (the CLI's runner and W&B sink; the DDP ranks are fresh processes either way)."""
    import xbench

    root = tmp_path_factory.mktemp("wandb_modes") / "results"
    # 3 windows: a CI (none from fewer samples, metrics/stats.py)
    runs = [(*WANDB, PRICED, "data.batch_size=16", "bench.repeats=3"),
            (*WANDB, PRICED, "data.batch_size=32", "bench.repeats=3"),
            (*WANDB, PRICED, "parallel=ddp", "parallel.world_size=2", "data.batch_size=16", "bench.repeats=3"),
            ("+experiment=digits_to_target", "platform=gce_n1_standard_8", "logger=wandb", "logger.progress=false"),
            (*WANDB, PRICED, "bench.mode=find_max_batch", "bench.max_batch_limit=64", "data.batch_size=16")]
    for args in runs:
        rec = xbench.run([*args, "logger.wandb.mode=offline", f"store.root={root}"])
        assert rec.status == "ok", (args, rec.reason)
    return root


@pytest.fixture(scope="module")
def logged(store):
    """{run_id: what W&B holds for it} (config, summary, history), read back from the offline run files."""
    runs = [read_offline_run(f) for f in sorted(store.glob("*/wandb/offline-run-*/run-*.wandb"))]
    assert len(runs) == 5
    return {r["config"]["run_id"]: r for r in runs}


def test_every_panel_of_the_wandb_report_reads_keys_the_runs_have(store, logged):
    df = load([store], progress=False).frame
    assert set(df["bench_mode"]) == {"throughput", "train_to_target", "find_max_batch"}
    defn = definition(df, [], "xbench", None, "every mode")
    summary_keys = {k for r in logged.values() for k in r["summary"]}
    history_keys = {k for r in logged.values() for h in r["history"] for k in h}
    for p in defn["panels"]:
        where = summary_keys if p["source"] == "summary" else history_keys
        assert p["y"] in where, f"panel {p['title']!r}: no run has {p['y']}"
        assert p["x"] is None or p["x"] in where, f"panel {p['title']!r}: no run has {p['x']}"
    ys = {p["y"] for p in defn["panels"]}
    # Study figures: training-time cost to target (not wall), time and epochs to it, the largest batch,
    # windows as logged, the curve; throughput against the global batch and the device count.
    assert {"train_cost_to_target_usd", "train_time_to_target_s", "epochs_to_target", "max_batch_size_per_device",
            "window_throughput_samples_per_s", "top1", "usd_per_million_samples"} <= ys
    assert "cost_to_target_usd" not in ys and "time_to_target_s" not in ys
    xs = {p["x"] for p in defn["panels"] if p["kind"] == "scatter"}
    assert xs == {"global_batch_size", "devices"}
    # Grouping: the runset and the bars by the `comparison` config key each run logged (its configuration, as the
    # HTML report's tables group runs: tests/test_wandb_report_groups.py); the definition names those groups.
    assert defn["runset"]["groupby"] == GROUPBY == ["config.comparison"]
    assert {g["comparison"]: g["runs"] for g in defn["groups"]} == \
        dict(Counter(r["config"]["comparison"] for r in logged.values()))
    # Every mode's run carries its record as an artifact; the evaluations were logged as they happened.
    [target] = [r for r in records(store) if r["config"]["bench"]["mode"] == "train_to_target"]
    for name, r in logged.items():  # the train-to-target run also wrote mlperf.log: it goes with the record
        want = ["mlperf.log", "record.json"] if name == target["run_id"] else ["record.json"]
        assert [a["paths"] for a in r["artifacts"] if a["type"] == "run-record"] == [want], name
        assert r["summary"]["status"] == "ok" and "n_warnings" in r["summary"], name
    evals = [h for h in logged[target["run_id"]]["history"] if "top1" in h]
    assert len(evals) == target["measurements"]["evals"] == target["artifacts"]["wandb_points_logged_live"] >= 1
    report = build({**defn, "entity": "someone"})  # wandb-workspaces objects, no network
    assert len(report.blocks[2].panels) == len(defn["panels"])


def test_the_report_reads_the_same_tables_from_offline_wandb_runs(store, tmp_path):
    from xbench.report.__main__ import main  # the report's CLI here (test_report runs it without torch)

    from_store, from_wandb = tmp_path / "store", tmp_path / "wandb"
    for src, out in ((store, from_store), (f"wandb-offline:{store}", from_wandb)):
        assert main([str(src), "--out", str(out), "--format", "csv", "--no-progress"]) == 0, src
    names = sorted(f.name for f in (from_store / "tables").glob("*.csv") if f.name != "tidy_runs.csv")
    assert {"throughput.csv", "cost.csv", "to_target.csv", "scaling.csv", "runs.csv"} <= set(names)
    assert names == sorted(f.name for f in (from_wandb / "tables").glob("*.csv") if f.name != "tidy_runs.csv")
    for name in names:
        a, b = read_csv(from_store / "tables" / name), read_csv(from_wandb / "tables" / name)
        assert len(a) == len(b), name
        for ra, rb in zip(a, b):
            assert ra.keys() == rb.keys(), name
            for k in ra:
                assert _same(ra[k], rb[k]), (name, k, ra[k], rb[k])


def test_offline_runs_are_read_side_by_side_in_order_and_an_unreadable_one_is_named(store, tmp_path):
    import shutil

    shutil.copytree(store, tmp_path / "s")
    bad = tmp_path / "s" / "00-torn" / "wandb" / "offline-run-torn" / "run-torn.wandb"  # sorts first
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00not a transaction log" * 20)
    recs, skipped = wandb_source.offline_records(tmp_path / "s")
    assert [r.run_id for r in recs] == [r["run_id"] for r in records(store)]  # the files' order, every good one
    assert len(skipped) == 1 and str(bad) in skipped[0] and "not a W&B transaction log" in skipped[0], skipped


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == pytest.approx(float(b), rel=1e-9)
    except ValueError:
        return a == b


class FakeApiRun:
    """What `wandb.Api().runs(...)` yields, built from an offline run read back (no network here)."""

    def __init__(self, run: dict):
        self.name, self.id, self.config, self.summary, self._history = run["name"], run["name"], run["config"], \
            run["summary"], run["history"]

    def scan_history(self, keys=None):  # wandb.apis.public.Run.scan_history: every row without keys
        return [h for h in self._history if keys is None or all(k in h for k in keys)]


def test_a_wandb_project_reads_like_its_records(logged, store):
    class Api:
        def runs(self, path, per_page=1000):
            assert path == "team/xbench"
            return [FakeApiRun(r) for r in logged.values()]

    records, skipped = wandb_source.api_records("team/xbench", api=Api())
    assert not skipped and len(records) == 5
    from xbench.analysis.frame import to_frame

    got = to_frame(records).set_index("run_id")
    want = load([store], progress=False).frame.set_index("run_id")
    for col in ("status", "platform", "parallel", "global_batch_size", "devices", "throughput_samples_per_s",
                "usd_per_million_samples", "train_cost_to_target_usd", "max_batch_size_per_device",
                "throughput_ci95_low_samples_per_s"):
        for rid in want.index:
            a, b = want.at[rid, col], got.at[rid, col]
            assert (a != a and b != b) or a == b or a == pytest.approx(b), (rid, col, a, b)
    tgt = next(r for r in records if r.config["bench"]["mode"] == "train_to_target")
    assert len(tgt.series["top1"]) == tgt.measurements["evals"]  # the curve comes back from the history
