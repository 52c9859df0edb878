"""The report says what a study said: the projected whole training with its basis, the cost to each target
labelled, no winner where figures tie or overlap, the minimum charge marked where it set a cost, contended runs
kept out of the findings, every work drawn (next pages) and the report check failing when one is not, labels
that keep the keys that tell bars apart, only the shape fields that apply, one line per target and identical
curves visible, and one machine priced two ways re-priced as one set of runs. Records are FAKE
(xbench.report.fake) with figures chosen so each expected number can be checked by hand; the real derive()
computes their costs."""

from __future__ import annotations

import json

import pytest

from tests.test_report_compare import _bars, _rows, _store
from xbench import studies
from xbench.analysis.frame import load
from xbench.metrics import targets
from xbench.report import layout
from xbench.report.fake import fake_record
from xbench.report.plots import PLOTS, PlotJob
from xbench.report.tables import TABLES, findings_of

R = fake_record


def _texts(fig) -> str:
    return " ".join(t.get_text().replace("\n", " ") for t in fig.texts)


def test_projection_table_and_finding_state_the_basis(tmp_path):
    """3M sequences' worth: 60,000 samples x 50 epochs at 500 samples/s is 6,000 s = 1.667 h, billed at $0.5/h."""
    store = _store(tmp_path, [R("a", throughput=500, platform="tpu", usd_per_hour=0.5, projection_epochs=50),
                              R("b", throughput=250, platform="gpu", usd_per_hour=0.5, projection_epochs=50)])
    rows, ctx = _rows(store)
    t = TABLES["projection"](rows, ctx).frame
    a = t[t["platform"] == "tpu"].iloc[0]
    assert a["projected training [h]"] == pytest.approx(6000 / 3600) and a["training [epochs]"] == 50
    assert a["projected training cost [USD]"] == pytest.approx(0.5 * 6000 / 3600)
    assert a["projection's basis"] == ("3,000,000 samples (50 epochs of 60,000) at the measured 500 samples/s, "
                                       "priced at USD 0.5/h for the whole machine")
    found = [f.text for f in findings_of(rows, ctx)[0] if f.question == "shortest projected whole training"]
    assert found and found[0].startswith("Shortest projected whole training: tpu at 6,000 s")


def _to_target(run_id, platform, times, usd_per_hour=3.6, **kw):
    """A train-to-target run that met 0.9 and 0.95 after `times` seconds of training (the real per-target figures)."""
    reached = {t: {"epoch": i + 1, "step": 10, "samples_seen": 100, "train_time_s": s, "wall_s": s + 5, "top1": t}
               for i, (t, s) in enumerate(zip((0.9, 0.95), times))}
    m = {**targets.figures(reached, "top1"), "goal_targets": [0.9, 0.95], "target_reached": True,
         "goal_metric": "top1", "goal_target": 0.95, "train_time_to_target_s": times[-1],
         "wall_time_to_target_s": times[-1] + 5}
    return R(run_id, throughput=100, platform=platform, usd_per_hour=usd_per_hour, mode="train_to_target",
             measurements=m, series={"top1": [0.5, 0.9, 0.95], "train_time_s": [1.0, times[0], times[1]],
                                     "epoch": [1, 2, 3]}, **kw)


def test_cost_to_target_draws_each_target_labelled_and_marks_the_minimum_charge(tmp_path):
    """$3.6/h is $0.001/s: 100 s and 300 s cost $0.1 and $0.3; a 60 s minimum makes the 10 s and 20 s run $0.06
    for both targets, and that is said on the bar, in the table and in the finding (a tie, no winner)."""
    store = _store(tmp_path, [_to_target("slow", "gpu", (100.0, 300.0)),
                              _to_target("fast", "tpu", (10.0, 20.0), minimum_charge_s=60),
                              _to_target("fast2", "tpu2", (12.0, 24.0), minimum_charge_s=60)])
    rows, ctx = _rows(store)
    fig = PLOTS["cost_to_target"](rows, ctx)
    bars = _bars(fig)
    by_target = {t: {k.split(" | ")[1]: v for k, v in bars.items() if k.startswith(f"to top1 {t} (target")}
                 for t in ("0.9", "0.95")}
    assert by_target["0.9"]["gpu"] == pytest.approx(0.1) and by_target["0.95"]["gpu"] == pytest.approx(0.3)
    assert by_target["0.9"]["tpu (minimum charge)"] == pytest.approx(0.06)
    assert by_target["0.95"]["tpu2 (minimum charge)"] == pytest.approx(0.06)
    assert {k.split(" | ")[0].split(":")[0] for k in bars} == {"to top1 0.9 (target 1 of 2)",
                                                              "to top1 0.95 (target 2 of 2)"}
    assert "60 s), so the cost is that minimum" in _texts(fig)
    table = TABLES["to_target"](rows, ctx).frame
    marked = table[table["platform"] == "tpu"]["costs set by the minimum charge"].tolist()
    assert marked == ["training cost to target, wall cost to target (60 s minimum)"] * 2
    [cheapest] = [f.text for f in findings_of(rows, ctx)[0] if f.question == "cheapest to the target"]
    assert "no winner: tpu and tpu2 tie at USD 0.06" in cheapest and "60 s minimum charge set the cost of each" in cheapest
    assert "1.00x" not in cheapest


def test_a_tie_crowns_no_winner_and_contended_runs_are_not_results(tmp_path):
    store = _store(tmp_path, [R("a", throughput=1000.0, platform="a"), R("b", throughput=1001.0, platform="b"),
                              R("c", throughput=5000.0, platform="c",
                                measurements={"contended": True, "other_cpu_cores_during": 1.5})])
    rows, ctx = _rows(store)
    found, _ = findings_of(rows, ctx)
    [fastest] = [f.text for f in found if f.question == "fastest"]
    assert fastest.startswith("Fastest: no winner: b and a tie at 1,001 samples/s") and "x the throughput" not in fastest
    assert " c " not in f" {fastest} " and "5,000" not in " ".join(f.text for f in found if f.work)
    [note] = [f.text for f in found if f.question == "contention"]
    assert note.startswith("1 ok runs were contended") and "up to 1.5 cores" in note


def test_every_work_is_drawn_on_pages_and_the_report_check_fails_when_one_is_not(tmp_path, monkeypatch):
    """Six works normalised against a baseline with threads (study 2's shape: two facets a work, four a figure):
    three pages draw all six, and plots/normalised.json says so; with one page allowed the check names the plot."""
    models = ("mlp", "cnn_small", "resnet18", "bilstm", "fasttext", "vgg_cifar")
    recs = [R(f"{m}-{p}", throughput=tp, model=m, platform=p, usd_per_hour=1.0, threads=th)
            for m in models for p, tp, th in (("a", 1000, 1), ("b", 1500, 2))]
    rows, ctx = _rows(_store(tmp_path / "results", recs), baseline="platform=a")
    study = {"small": {"figures": ["plot:normalised"]}}
    monkeypatch.setattr("xbench.report.plots.PLOTS", {"normalised": PLOTS["normalised"]})  # the plot this is about
    for pages, drawn in ((None, 6), (1, 2)):
        if pages:
            monkeypatch.setattr("xbench.report.plots.MAX_PAGES", pages)
        out = tmp_path / f"report{pages}"
        job = PlotJob(rows, ctx, out / "plots", jobs=1)
        job.result()
        summary = json.loads((out / "plots" / "normalised.json").read_text())
        assert len(summary["works_with_data"]) == 6 and len(summary["works_drawn"]) == drawn
        assert summary["pages"] == ["normalised", "normalised_2", "normalised_3"][:pages or 3]
        assert all((out / "plots" / f"{p}.png").is_file() for p in summary["pages"])
        missing = studies.missing_figures(study, out)
        assert missing == ([] if drawn == 6 else ["plot:normalised (draws 2 of 6 works)"])


def test_bar_labels_keep_the_keys_that_tell_bars_apart():
    a = "local_as_gce_n1_standard_2_committed_1y / reserved_1y / batch 8 / 4/device"
    b = "local_as_gce_n1_standard_2_committed_1y / reserved_1y / batch 16 / 4/device"
    fa, fb = layout.fit_labels([a, b])
    assert len(fa) <= layout.LABEL_CHARS and fa.endswith("batch 8 / 4/device") and fb.endswith("batch 16 / 4/device")
    assert fa.startswith("local") and "_1y / reserved_1y" in fa
    fig = layout.hbar_figure([layout.Facet("w", [layout.Bar(a, 1.0), layout.Bar(b, 2.0)])], "t", "x")
    ticks = [t.get_text() for t in layout.bar_labels(fig.axes[0])]
    assert sorted(ticks) == sorted([fa, fb]) and layout.text_problems(fig) == []
    layout.plt.close(fig)


def test_facet_titles_list_only_the_shape_fields_that_apply(tmp_path):
    image = {"modality": "image", "image_size": 32, "channels": 3, "num_classes": 10, "seq_len": 128,
             "vocab_size": 30522, "num_features": 64}
    store = _store(tmp_path, [R("i", throughput=100, data="synthetic_cifar10", data_config=image),
                              R("t", throughput=100, model="bilstm", data="synthetic_imdb",
                                data_config={**image, "modality": "tokens"})])
    shapes = dict(zip(*(load([store], progress=False).frame[c] for c in ("run_id", "data_shape"))))
    assert shapes == {"i": "channels=3 image_size=32 num_classes=10", "t": "num_classes=10 seq_len=128 vocab_size=30522"}


def test_accuracy_plot_draws_every_target_and_keeps_identical_curves_visible(tmp_path):
    store = _store(tmp_path, [_to_target("x", "gpu", (2.0, 3.0)), _to_target("y", "tpu", (2.0, 3.0))])
    rows, ctx = _rows(store)
    fig = PLOTS["accuracy_vs_time"](rows, ctx)
    ax = fig.axes[0]
    curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 3]
    assert len(curves) == 2 and [list(c.get_ydata()) for c in curves] == [[0.5, 0.9, 0.95]] * 2  # the same curve
    assert len({c.get_linestyle() for c in curves}) == 2 and len({c.get_markersize() for c in curves}) == 2
    targets_drawn = sorted(ln.get_ydata()[0] for ln in ax.get_lines() if len(set(ln.get_ydata())) == 1
                           and len(ln.get_xdata()) == 2)
    assert targets_drawn == [0.9, 0.95]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    layout.plt.close(fig)


def test_one_machine_priced_two_ways_is_re_priced_not_compared_as_two_sets_of_runs(tmp_path):
    """This machine as on-demand ($1/h) and committed ($0.5/h), its runs 1000 and 1200 samples/s at different
    times: each price gets both runs (median 1100), so the bars differ by the price alone (2x exactly), and the
    throughput draws one configuration."""
    kw = {"provider": "local", "hostname": "vm"}
    store = _store(tmp_path, [R("od", throughput=1000.0, platform="local_od", usd_per_hour=1.0, **kw),
                              R("cm", throughput=1200.0, platform="local_cm", usd_per_hour=0.5,
                                pricing_model="reserved_1y", **kw)])
    rows, ctx = _rows(store)
    fig = PLOTS["samples_per_dollar"](rows, ctx)
    bars = {k.split(" | ")[1]: v for k, v in _bars(fig).items()}
    assert bars == {"local_cm": pytest.approx(2200.0), "local_od": pytest.approx(1100.0)}
    assert "local_cm, local_od: one machine priced 2 ways" in _texts(fig)
    fig = PLOTS["throughput"](rows, ctx)
    assert {k.split(" | ")[1] for k in _bars(fig)} == {"all runs"}  # one configuration: the two sets are repeats
    cost = TABLES["cost"](rows, ctx).frame
    assert set(cost["throughput median [samples/s]"]) == {1100.0}
    assert set(cost["priced from"]) == {"the same 2 runs of one machine (vm) priced as local_cm, local_od"}
    found = [f.text for f in findings_of(rows, ctx)[0]]
    assert any(t.startswith("Fastest: the only configuration at 1,100 samples/s (1,000-1,200; 2 runs)") for t in found)
    layout.plt.close("all")


def test_published_table_shows_each_figure_kind_and_why_it_is_not_beside_a_measurement(tmp_path):
    store = _store(tmp_path, [R("s", throughput=2500, model="resnet50", data="synthetic_imagenet", platform="tpu_v2_8",
                                devices=8, batch_size=128, experiment="tpu_vs_gpu")])
    rows, ctx = _rows(store)
    pub = TABLES["published"](rows, ctx).frame.set_index("figure")
    real = pub[pub["kind"] == "real_throughput"]
    assert len(real) >= 2 and real["measured here [unit]"].isna().all()  # 2,796 img/s is real data: not this run
    assert real["why not beside a measurement"].str.startswith("no ok run here has throughput_samples_per_s").all()
    ratio = pub[pub["kind"] == "ratio"]
    assert len(ratio) and ratio["why not beside a measurement"].str.contains("ratio").all()
    assert pub["source"].str.contains("RiseML").all()


def test_costs_that_are_all_minimum_charges_are_not_compared(tmp_path):
    """Two machines whose runs were shorter than their 60 s minimum: the costs are a price list (60 s at $1/h and
    at $2/h), not a result, and no spread is carried to them."""
    store = _store(tmp_path, [_to_target("a", "one", (10.0, 20.0), usd_per_hour=1.0, minimum_charge_s=60),
                              _to_target("b", "two", (5.0, 10.0), usd_per_hour=2.0, minimum_charge_s=60)])
    rows, ctx = _rows(store)
    [cheapest] = [f.text for f in findings_of(rows, ctx)[0] if f.question == "cheapest to the target"]
    assert cheapest.startswith("Cheapest to the target: not compared: every cost here is its platform's 60 s minimum "
                               "charge") and "x cheaper" not in cheapest
