"""The report: tables and plots from a small fixture store written here, the CLI without torch, and
the report of a real sweep. Fixture figures are FAKE (xbench.report.fake) and chosen so that every
expected number below can be checked by hand."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, cli_env, run_cli
from xbench.analysis.frame import apply_filters, load, parse_query
from xbench.analysis.scaling import efficiency_by_devices
from xbench.records.store import write_record
from xbench.report.fake import fake_llm_records, fake_record
from xbench.report.rows import Context
from xbench.report.tables import TABLES, build_tables

# A curve as xbench/bench/target.py writes it: the goal metric's name, training time, epoch.
CURVE = {"top1": [0.5, 0.7, 0.8], "train_time_s": [30.0, 60.0, 100.0], "epoch": [1, 2, 3]}
TARGET = {"goal_metric": "top1", "goal_target": 0.75, "target_reached": True, "target_status": "reached",
          "epochs_to_target": 3}


GPU_FIGURES = {"energy_j_per_sample": 0.12, "peak_device_allocated_gib": 1.9}


def _search(trials: list[tuple[int, float | None]], limit: int) -> dict:
    """A find_max_batch record's measurements (xbench/modes/batch_search.py): (batch, samples/s or None
    for a trial that ran out of memory)."""
    fits = [b for b, tp in trials if tp is not None]
    fails = [b for b, tp in trials if tp is None]
    return {"max_batch_size_per_device": max(fits), "min_failing_batch_size_per_device": min(fails, default=None),
            "batch_search_limit": limit, "batch_search_limit_reached": not fails, "batch_search_s": 12.0,
            "batch_search_trials": [{"batch_size": b, "fits": tp is not None, "throughput_samples_per_s": tp,
                                     "timed_steps": 20 if tp is not None else None,  # a window's samples/s
                                     "host_rss_gib": b / 16, "device_peak_allocated_gib": None} for b, tp in trials]}


def write_fixture_store(root) -> Path:
    root = Path(root)
    R = fake_record
    recs = [
        # Batch sweep on two priced platforms and two runtimes; gpu bs32 repeated (median 6900).
        R("b-cpu-e16", throughput=1000, platform="cpu", usd_per_hour=0.5, peak_tflops_fp32=1.0, batch_size=16, experiment="fx_batch"),
        R("b-cpu-e32", throughput=1600, platform="cpu", usd_per_hour=0.5, peak_tflops_fp32=1.0, batch_size=32, experiment="fx_batch"),
        R("b-cpu-x16", throughput=1200, platform="cpu", usd_per_hour=0.5, runtime="xla", batch_size=16, experiment="fx_batch",
          measurements={"compile_time_s": 20.0, "compiles_warmup": 2, "compiles_timed": 0}),
        R("b-cpu-x32", throughput=2000, platform="cpu", usd_per_hour=0.5, runtime="xla", batch_size=32, experiment="fx_batch",
          measurements={"compile_time_s": 22.0, "compiles_warmup": 2, "compiles_timed": 1},
          warnings=["recompiled 1 time(s) after warm-up"]),
        R("b-gpu-e16", throughput=4000, platform="gpu", usd_per_hour=2.0, batch_size=16, experiment="fx_batch"),
        R("b-gpu-e32a", throughput=7000, platform="gpu", usd_per_hour=2.0, batch_size=32, experiment="fx_batch"),
        R("b-gpu-e32b", throughput=6800, platform="gpu", usd_per_hour=2.0, batch_size=32, experiment="fx_batch"),
        R("b-spot-e32", throughput=1600, platform="cpu", usd_per_hour=0.2, pricing_model="spot", batch_size=32,
          experiment="fx_batch"),
        # CPU threads against a GPU baseline.
        R("t-cpu-1", throughput=300, platform="cpu_4", usd_per_hour=0.4, threads=1, experiment="fx_threads"),
        R("t-cpu-2", throughput=550, platform="cpu_4", usd_per_hour=0.4, threads=2, experiment="fx_threads"),
        R("t-cpu-4", throughput=800, platform="cpu_4", usd_per_hour=0.4, threads=4, experiment="fx_threads"),
        R("t-k80", throughput=2400, platform="k80", usd_per_hour=0.9, threads=2, experiment="fx_threads"),
        # Scaling: single 1 device, DDP and DataParallel at 2 and 4.
        R("s-1", throughput=1000, model="cnn_small", platform="gpu4", devices=1, experiment="fx_scaling"),
        R("s-ddp2", throughput=1900, model="cnn_small", platform="gpu4", parallel="ddp", devices=2, experiment="fx_scaling"),
        R("s-ddp4", throughput=3600, model="cnn_small", platform="gpu4", parallel="ddp", devices=4, experiment="fx_scaling"),
        R("s-dp2", throughput=1200, model="cnn_small", platform="gpu4", parallel="dataparallel", devices=2, experiment="fx_scaling"),
        R("s-dp4", throughput=1300, model="cnn_small", platform="gpu4", parallel="dataparallel", devices=4, experiment="fx_scaling"),
        # Train to target with a curve.
        R("g-cpu", throughput=500, model="resnet18", platform="cpu", usd_per_hour=0.5, mode="train_to_target",
          experiment="fx_target", series=CURVE, projection_epochs=90,
          measurements={**TARGET, "train_time_to_target_s": 100.0, "wall_time_to_target_s": 110.0}),
        R("g-gpu", throughput=3000, model="resnet18", platform="gpu", usd_per_hour=2.0, mode="train_to_target",
          experiment="fx_target", series={**CURVE, "train_time_s": [5.0, 10.0, 20.0]},
          measurements={**TARGET, "train_time_to_target_s": 20.0, "wall_time_to_target_s": 24.0}),
        # The same work trained for 3 epochs on two machines: did the hardware change the final accuracy?
        R("q-cpu", throughput=500, model="resnet18", platform="cpu", mode="train_to_target", experiment="fx_quality",
          measurements={"goal_metric": "top1", "epochs_done": 3, "metric_final": 0.801, "target_status": "fixed_epochs"}),
        R("q-gpu", throughput=3000, model="resnet18", platform="gpu", mode="train_to_target", experiment="fx_quality",
          measurements={"goal_metric": "top1", "epochs_done": 3, "metric_final": 0.797, "target_status": "fixed_epochs"}),
        # Batch searches: eager fails at 64 (largest 32), XLA reaches the limit of 64 without failing.
        R("m-eager", throughput=None, model="bert", mode="find_max_batch", batch_size=16, experiment="fx_max_batch",
          measurements=_search([(16, 100.0), (32, 120.0), (64, None)], 64)),
        R("m-xla", throughput=None, model="bert", runtime="xla", mode="find_max_batch", batch_size=16,
          experiment="fx_max_batch", measurements=_search([(16, 90.0), (32, 150.0), (64, 160.0)], 64)),
        # Runs that did not finish ok, and a noisy one.
        R("f-config", status="failed", reason="config: tf32 needs a CUDA GPU", platform="cpu", experiment="fx_fail"),
        R("f-oom", status="oom", reason="OutOfMemoryError: CUDA out of memory", platform="gpu", batch_size=4096,
          experiment="fx_fail"),
        R("f-int", status="interrupted", reason="SIGTERM during timed", platform="cpu", batch_size=64,
          experiment="fx_fail"),
        R("f-noisy", throughput=900, platform="cpu", batch_size=8, experiment="fx_fail",
          measurements={"noisy": True, "step_time_cv": 0.2},
          warnings=["noisy: spread above bench.noisy_cv=0.05 (see throughput_cv / step_time_cv)"]),
        # A study's run under a published figure's conditions (the published table and plot): real ImageNet, as
        # the 2,796 images/s were measured (studies.yaml's compare: a synthetic run is never set beside it).
        R("p-tpu", throughput=2500, model="resnet50", data="imagenet", platform="tpu_v2_8", devices=8,
          batch_size=128, experiment="tpu_vs_gpu"),
        # Two rounds of one configuration, each steady on its own, 26% apart from each other.
        R("r-round0", throughput=1000, platform="cpu", batch_size=16, experiment="fx_rounds"),
        R("r-round1", throughput=1300, platform="cpu", batch_size=16, experiment="fx_rounds"),
        # One platform priced in USD, one in EUR (2018 prices): one currency in the report, converted.
        R("m-usd", throughput=2000, platform="gce_p100", usd_per_hour=1.46, batch_size=32, experiment="fx_money"),
        R("m-eur", throughput=1800, platform="leadergpu_p100", usd_per_hour=4.8, currency="EUR",
          price_as_of="2018-03-01", batch_size=32, experiment="fx_money"),
        # Per-GPU utilisation: DataParallel's one rank drives 4 GPUs (GPU 0 busy), DDP's 4 ranks one each.
        R("u-1", throughput=1000, model="bilstm", platform="k80x4", devices=1, experiment="fx_util",
          measurements={"gpu_util_percent_mean": {"0": 97.0}, **GPU_FIGURES}),
        R("u-dp4", throughput=1400, model="bilstm", platform="k80x4", parallel="dataparallel", devices=4,
          experiment="fx_util", measurements={"gpu_util_percent_mean": {"0": 96.0, "1": 31.0, "2": 30.0, "3": 29.0},
                                              **GPU_FIGURES, "peak_device_allocated_gib": 3.1}),
        R("u-ddp4", throughput=3700, model="bilstm", platform="k80x4", parallel="ddp", devices=4,
          experiment="fx_util", measurements={"gpu_util_percent_mean": {"0": 94.0}, **GPU_FIGURES},
          ranks=[{"rank": i, "gpu_util_percent_mean": {str(i): v}} for i, v in enumerate((94.0, 93.0, 95.0, 92.0))]),
        # LLM pretraining: DDP vs FSDP2 and xla_spmd vs xla_fsdp at one global batch, Llama 3.1 8B on 8 x 80 GiB.
        *fake_llm_records("fx_llm"),
    ]
    for r in recs:
        write_record(root, r)
    bad = root / "corrupt-run" / "record.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"run_id": "corrupt-run", "status": ')  # a truncated file
    return root


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory) -> Path:
    return write_fixture_store(tmp_path_factory.mktemp("fixture") / "results")


def _tables(store, filters=(), baseline=None):
    df = apply_filters(load([store], progress=False).frame, list(filters))
    made, skipped = build_tables(df, Context(baseline=parse_query(baseline) if baseline else None,
                                             baseline_text=baseline))
    return {t.name: t.frame for t in made}, skipped


def read_csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _row(frame, **match):
    sel = frame
    for k, v in match.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"expected one row for {match}, got {len(sel)}:\n{frame}"
    return sel.iloc[0]


def test_scaling_efficiency_is_throughput_over_n_times_one_device():
    e = efficiency_by_devices({1: 1000.0, 2: 1900.0, 4: 3600.0})
    assert e[4]["efficiency"] == pytest.approx(0.9) and e[2]["speedup"] == pytest.approx(1.9)
    assert e[4]["ideal_samples_per_s"] == pytest.approx(4000.0)
    # Without a 1-device run the smallest count is the reference.
    e = efficiency_by_devices({2: 2000.0, 8: 6000.0})
    assert e[8]["efficiency"] == pytest.approx(0.75) and e[8]["reference_devices"] == 2
    with pytest.raises(ValueError, match="reference device count 1"):
        efficiency_by_devices({2: 1.0, 4: 2.0}, reference=1)


def test_corrupt_record_is_skipped_with_a_warning_naming_it(fixture_store):
    loaded = load([fixture_store], progress=False)
    assert len(loaded.frame) == 35 + len(fake_llm_records())
    [msg] = loaded.skipped
    assert "corrupt-run/record.json" in msg


def test_throughput_table_has_median_spread_and_units(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_batch"])
    tp = t["throughput"]
    gpu32 = _row(tp, platform="gpu", **{"global batch": 32})
    assert gpu32["throughput median [samples/s]"] == 6900
    assert (gpu32["spread low [samples/s]"], gpu32["spread high [samples/s]"]) == (6800, 7000)
    assert gpu32["runs"] == 2 and gpu32["spread"] == "2 runs min-max"
    cpu16 = _row(tp, platform="cpu", runtime="eager", pricing="on_demand", **{"global batch": 16})
    assert cpu16["throughput median [samples/s]"] == 1000
    assert cpu16["spread low [samples/s]"] == pytest.approx(16 / (0.016 * 1.02))  # p90 step time
    xla32 = _row(tp, platform="cpu", runtime="xla", **{"global batch": 32})
    assert "recompiled 1 time(s) after warm-up" in xla32["warnings"]
    for col in ("throughput median [samples/s]", "step time median [s]", "per device [samples/s]"):
        assert col in tp.columns


def test_cost_table_numbers(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_batch"])
    c = t["cost"]
    spot = _row(c, pricing="spot")
    assert spot["throughput per price [samples/s per USD/hour]"] == pytest.approx(1600 / 0.2)
    assert spot["cost [USD per 1M samples]"] == pytest.approx(0.2 / 3600 / 1600 * 1e6)
    assert spot["price [USD/hour]"] == pytest.approx(0.2)
    gpu16 = _row(c, platform="gpu", **{"global batch": 16})
    assert gpu16["throughput per price [samples/s per USD/hour]"] == pytest.approx(2000)


def test_scaling_table_efficiency_and_dataparallel(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_scaling"])
    s = t["scaling"]
    assert _row(s, parallel="ddp", devices=4)["scaling efficiency [%]"] == pytest.approx(90.0)
    assert _row(s, parallel="dataparallel", devices=4)["scaling efficiency [%]"] == pytest.approx(32.5)
    assert _row(s, parallel="ddp", devices=1)["throughput [samples/s]"] == 1000  # the single-device reference
    assert _row(s, parallel="ddp", devices=2)["speed-up [x]"] == pytest.approx(1.9)


def test_baseline_normalised_time_and_cost(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_threads"], baseline="platform=k80")
    b = t["baseline"]
    one = _row(b, platform="cpu_4", threads=1)
    assert one["time relative to baseline [x]"] == pytest.approx(2400 / 300)
    assert one["cost relative to baseline [x]"] == pytest.approx((0.4 / 300) / (0.9 / 2400))
    assert _row(b, platform="k80")["time relative to baseline [x]"] == pytest.approx(1.0)
    assert _row(b, platform="k80")["baseline"] == "<- baseline"
    assert one["compared on"] == "time per sample"


def test_to_target_only_when_present(fixture_store):
    t, skipped = _tables(fixture_store, ["experiment=fx_target"])
    g = t["to_target"]
    assert _row(g, platform="gpu")["training time to target [s]"] == 20.0
    assert _row(g, platform="gpu")["wall time to target [s]"] == 24.0
    cpu = _row(g, platform="cpu")
    rec = json.loads((fixture_store / "g-cpu" / "record.json").read_text())
    assert rec["derived"]["train_cost_to_target_usd"] > 0  # billed by metrics.derived from 100 s at $0.5/h
    assert cpu["training cost to target [USD]"] == pytest.approx(rec["derived"]["train_cost_to_target_usd"])
    assert cpu["epochs to target"] == 3 and cpu["target"] == 0.75 and cpu["target status"] == "reached"
    t, skipped = _tables(fixture_store, ["experiment=fx_batch"])
    assert "to_target" not in t and "train_time_to_target_s" in skipped["to_target"]


def test_baseline_uses_time_to_target_when_both_have_it(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_target"], baseline="platform=gpu")
    cpu = _row(t["baseline"], platform="cpu")
    assert cpu["time relative to baseline [x]"] == pytest.approx(100.0 / 20.0)
    assert cpu["compared on"] == "training to target"


def test_failed_runs_and_noisy_are_shown_not_dropped(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_fail"])
    tp = t["throughput"]
    assert set(tp["status"]) == {"1 failed", "1 oom", "1 interrupted", "ok"}
    reasons = " ".join(tp["reason"].fillna(""))
    assert "tf32 needs a CUDA GPU" in reasons and "CUDA out of memory" in reasons
    assert _row(tp, status="ok")["noisy"] == "NOISY"
    runs = t["runs"]
    assert len(runs) == 4 and "SIGTERM during timed" in set(runs["reason"])


def test_repeated_runs_that_disagree_are_noisy_across_runs(fixture_store):
    tp = _tables(fixture_store, ["experiment=fx_rounds"])[0]["throughput"]
    [row] = tp.to_dict("records")
    assert row["runs"] == 2 and row["throughput median [samples/s]"] == pytest.approx(1150)
    assert row["CV [%]"] == pytest.approx(100 * statistics.stdev([1000, 1300]) / 1150)  # 18.4% > 5%
    assert row["noisy"] == "NOISY (across runs)"
    # Two repeated runs within 3% of each other (CV 2%) stay clean.
    gpu = _tables(fixture_store, ["experiment=fx_batch", "platform=gpu", "batch_size_per_device=32"])[0]["throughput"]
    assert gpu["runs"].tolist() == [2] and ("noisy" not in gpu or gpu["noisy"].isna().all())  # no value: no column


def test_cost_figures_in_another_currency_are_shown_in_it(tmp_path):
    """A platform priced in EUR (hetzner, leadergpu): its cost-to-target figures are named *_eur, and
    the table, the plot and the console summary find them (they looked for *_usd only)."""
    from xbench.report.plots import build_plots
    from xbench.sinks.console import summary

    rec = fake_record("eur", throughput=500, platform="hetzner", usd_per_hour=0.5, currency="EUR",
                      mode="train_to_target", experiment="fx_eur", series=CURVE,
                      measurements={**TARGET, "train_time_to_target_s": 100.0, "wall_time_to_target_s": 110.0})
    assert rec.derived["train_cost_to_target_eur"] > 0 and "train_cost_to_target_usd" not in rec.derived
    write_record(tmp_path, rec)
    t, _ = _tables(tmp_path)
    [row] = t["to_target"].to_dict("records")
    assert row["training cost to target [EUR]"] == pytest.approx(rec.derived["train_cost_to_target_eur"])
    df = load([tmp_path], progress=False).frame
    made, skipped = build_plots(df, Context(), tmp_path / "plots")
    assert "cost_to_target" in made, skipped.get("cost_to_target")
    text = summary(rec, tmp_path / "record.json")
    assert "EUR per 1M samples" in text and "cost to target train / wall" in text and "USD" not in text


def test_overhead_and_efficiency_tables(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_batch", "platform=cpu", "pricing_model=on_demand"])
    o = t["overhead"]
    x32 = _row(o, runtime="xla", **{"global batch": 32})
    assert x32["compile time [s]"] == 22.0 and x32["recompilations after warm-up"] == 1
    e = _row(t["efficiency"], runtime="eager", **{"global batch": 32})
    assert e["achieved [TFLOP/s]"] == pytest.approx(1600 * 3e6 / 1e12)
    assert e["MFU [%]"] == pytest.approx(1600 * 3e6 / 1e12 / 1.0 * 100)


def test_every_numeric_header_carries_a_unit(fixture_store):
    t, _ = _tables(fixture_store, baseline="platform=k80")
    assert set(t) == set(TABLES), f"every table is drawn from the whole fixture, missing: {set(TABLES) - set(t)}"
    unitless_ok = {"runs", "devices", "global batch", "batch/device", "threads", "epochs to target", "target",
                   "epochs trained", "lowest final", "highest final", "final metric",
                   "warm-up steps", "compilations in warm-up", "recompilations after warm-up",
                   "throughput CV", "step time CV"}
    for name, frame in t.items():
        for col in frame.columns:
            if frame[col].dtype.kind == "f" and col not in unitless_ok:
                assert "[" in col and col.endswith("]"), f"table {name}: column {col!r} has no unit"


def test_unknown_filter_key_is_a_clear_error(fixture_store):
    df = load([fixture_store], progress=False).frame
    with pytest.raises(ValueError, match="unknown column 'platfrom'.*platform"):
        apply_filters(df, ["platfrom=cpu"])


# Blocks `import torch` (and torch_xla) for the whole process, then runs the report's CLI.
NO_TORCH = """
import sys, runpy
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'torch_xla', 'torchvision'):
            raise ImportError('torch is blocked: the report must not import it')
sys.meta_path.insert(0, Block())
sys.argv = ['xbench.report'] + sys.argv[1:]
try:
    runpy.run_module('xbench.report', run_name='__main__')
finally:
    assert not any(m.split('.')[0] == 'torch' for m in sys.modules), 'torch got imported'
"""


def run_report_without_torch(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env or cli_env(PYTHONPATH=str(REPO)))


@pytest.mark.slow  # a fresh interpreter without torch (the claim is the process's): ~5 s
def test_cli_without_torch_writes_html_md_csv_and_every_plot(fixture_store, tmp_path):
    out = tmp_path / "report"
    p = run_report_without_torch(fixture_store, "--out", out, "--baseline", "platform=k80", "--no-progress", "--svg")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "corrupt-run/record.json" in p.stderr  # the unreadable record is named
    html = (out / "report.html").read_text()
    assert html.count('<figure id="p-') >= 8 and html.count('class="xb-figure"') >= 8 and "corrupt-run" in html
    assert "src=\"http" not in html and "<script src" not in html and "default-src 'none'" in html  # self-contained
    from xbench.report.plots import PLOTS

    for name in PLOTS:
        for ext in ("png", "svg"):
            f = out / "plots" / f"{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 2000, f"plot {name}.{ext} missing or empty"
    md = (out / "report.md").read_text()
    assert "| throughput median [samples/s] |" in md and "![throughput_vs_batch](plots/throughput_vs_batch.png)" in md
    rows = read_csv(out / "tables" / "throughput.csv")
    assert any(r["throughput median [samples/s]"] == "6900.0" for r in rows)
    tidy = read_csv(out / "tables" / "tidy_runs.csv")
    assert len(tidy) == 35 + len(fake_llm_records())


def test_plot_without_data_is_skipped_with_a_note(fixture_store, tmp_path):
    from xbench.report.plots import build_plots

    df = apply_filters(load([fixture_store], progress=False).frame, ["experiment=fx_fail"])
    made, skipped = build_plots(df, Context(), tmp_path)
    assert "overhead" in made
    assert "two or more global batch sizes" in skipped["throughput_vs_batch"]
    assert "no workload was run at two or more device counts" in skipped["scaling"]
    assert "baseline" in skipped["normalised"] and "price" in skipped["samples_per_dollar"]


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_wandb_without_credentials_writes_the_definition(fixture_store, tmp_path):
    out = tmp_path / "r"
    env = cli_env(PYTHONPATH=str(REPO), HOME=str(tmp_path), NETRC=str(tmp_path / "none"))
    p = run_report_without_torch(fixture_store, "--out", out, "--format", "csv", "--wandb", "--no-progress",
                                 "--filter", "experiment=fx_threads", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    defn = json.loads((out / "wandb_report.json").read_text())
    assert "python -m xbench.report.wandb_report publish" in p.stderr
    assert defn["runset"]["groupby"] == ["config.comparison"]  # each run's configuration (sinks/wandb.py)
    assert "Config('experiment') in ['fx_threads']" in defn["runset"]["filters"]
    assert "'t-k80'" in defn["runset"]["filters"]
    # The definition builds into a real wandb-workspaces Report (no network until save()).
    from xbench.report.wandb_report import build

    rep = build({**defn, "entity": "someone"})
    assert rep.title == defn["title"] and len(rep.blocks[2].panels) == len(defn["panels"])


@pytest.mark.slow
def test_report_of_a_real_interleaved_sweep_has_one_row_per_run_and_groups_rounds(store, tmp_path):
    """`bench.round` first: the two batch sizes run interleaved (8, 16, 8, 16), and the report folds
    the rounds of one configuration into one throughput row with a spread across runs."""
    p = run_cli("-m", *FAST, "bench.round=0,1", "data.batch_size=8,16", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    done = sorted(store.glob("*/record.json"), key=lambda f: f.stat().st_mtime_ns)  # the order runs ended
    order = [(r["config"]["bench"]["round"], r["config"]["data"]["batch_size"])
             for r in (json.loads(f.read_text()) for f in done)]
    assert order == [(0, 8), (0, 16), (1, 8), (1, 16)]
    out = tmp_path / "report"
    from xbench.report.__main__ import main

    # the report's CLI in this process (the torch-free run is tested above)
    assert main([str(store), "--out", str(out), "--no-progress"]) == 0
    runs = read_csv(out / "tables" / "runs.csv")
    assert sorted(int(r["global batch"]) for r in runs) == [8, 8, 16, 16]
    tp = read_csv(out / "tables" / "throughput.csv")
    assert len(tp) == 2 and all(float(r["throughput median [samples/s]"]) > 0 for r in tp)
    assert all(r["runs"] == "2" and r["spread"] == "2 runs min-max" for r in tp), tp
    assert (out / "plots" / "throughput_vs_batch.png").is_file()


def test_max_batch_table_names_the_largest_fit_the_first_failure_and_every_trial(fixture_store):
    t, skipped = _tables(fixture_store, filters=["experiment=fx_max_batch"])
    # a batch search measures no throughput of its own: no empty rows in the measurement tables
    assert {"throughput", "overhead", "efficiency"} <= set(skipped) and len(t["runs"]) == 2
    rows = {r["runtime"]: r for r in t["max_batch"].to_dict("records")}
    eager, xla = rows["eager"], rows["xla"]
    assert eager["largest batch that fits [per device]"] == 32 and eager["smallest that does not [per device]"] == 64
    assert eager["throughput at the largest [samples/s]"] == 120.0 and eager["memory at the largest [GiB]"] == 2.0
    assert eager["each batch tried [batch: samples/s over a timed window]"] == "16: 100, 32: 120, 64: does not fit"
    assert xla["largest batch that fits [per device]"] == 64
    assert xla["smallest that does not [per device]"] == "none up to the limit (64)"
    assert xla["trials [runs]"] == 3 and xla["search time [s]"] == 12.0


def test_quality_parity_compares_final_metrics_of_one_work_across_machines(fixture_store):
    t, _ = _tables(fixture_store, filters=["experiment=fx_quality"])
    [row] = t["quality"].to_dict("records")
    assert row["configurations"] == 2 and row["spread [metric]"] == pytest.approx(0.004)
    assert row["verdict"] == "same quality"  # within one point of accuracy
    assert "platform=cpu: 0.801" in row["final metric per configuration"]


def test_quality_parity_needs_two_configurations_and_takes_each_ones_median():
    from xbench.analysis.quality import quality_parity

    def run(platform, final, epochs=3, mode="train_to_target"):
        return {"status": "ok", "bench_mode": mode, "model": "m", "goal_metric": "accuracy",
                "epochs_done": epochs, "platform": platform, "metric_final": final}

    rows = [run("cpu", 0.80), run("cpu", 0.90), run("cpu", 0.70), run("gpu", 0.95), run("gpu", 0.5, epochs=4),
            run("tpu", 0.1, mode="throughput")]
    [row] = quality_parity(rows, tolerance=0.1)
    assert (row["configurations"], row["final_min"], row["final_max"]) == (2, 0.80, 0.95)
    assert row["spread"] == pytest.approx(0.15) and row["same_quality"] is False and row["epochs_done"] == 3
    assert row["finals"] == "platform=cpu: 0.8; platform=gpu: 0.95"
