"""Comparisons that are right by construction: a baseline is one configuration, normalised figures keep batch
size apart unless pooled on request, money is in one currency (converted with the dated rate table, never
dropped), per-GPU utilisation is shown, and the findings say what the runs answer with their uncertainty.
Records are FAKE (xbench.report.fake) with figures chosen so each expected number can be checked by hand."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from tests.test_report import _row, _tables, write_fixture_store
from xbench.analysis.currency import USD_PER, rate
from xbench.analysis.frame import apply_filters, load, parse_query
from xbench.records.store import write_record
from xbench.report import layout
from xbench.report.__main__ import main as report_main
from xbench.report.fake import fake_record
from xbench.report.plots import PLOTS
from xbench.report.rows import Context, prepare
from xbench.report.tables import findings_of


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory):
    return write_fixture_store(tmp_path_factory.mktemp("compare") / "results")


def _rows(store, filters=(), **ctx):
    df = apply_filters(load([store], progress=False).frame, list(filters))
    c = Context.with_baseline(ctx.pop("baseline", None), **ctx)
    return prepare(df, c), c


def _bars(fig) -> dict[str, float]:
    """{y tick label: bar width} of every horizontal bar chart in a figure (its drawn values)."""
    out = {}
    for ax in fig.axes:
        labels = {round(t.get_position()[1]): t.get_text() for t in layout.bar_labels(ax)}
        for p in ax.patches:
            y = round(p.get_y() + p.get_height() / 2)
            if y in labels:
                out[f"{ax.get_title(loc='left')} | {labels[y]}"] = p.get_width()
    return out


def _store(tmp_path, recs):
    for r in recs:
        write_record(tmp_path, r)
    return tmp_path


def test_a_baseline_matching_a_ddp_and_a_single_run_is_refused_and_one_configuration_is_exactly_1(tmp_path, capsys):
    """Averaging a DDP run and a single run at the same global batch into one baseline made the baseline's own
    rows read 6.296x: now the query is refused naming both, and a query for one configuration gives 1.0. The
    CLI's refusal is its `main` in this process (its exit status and stderr; test_report.py runs it without
    torch in a fresh one)."""
    R = fake_record
    store = _store(tmp_path, [
        R("g1", throughput=1000, platform="gpu", batch_size=16),
        R("g2", throughput=1500, platform="gpu", parallel="ddp", devices=2, batch_size=8),
        R("c1", throughput=500, platform="cpu", batch_size=16)])
    with pytest.raises(ValueError, match=r"ambiguous.*global batch 16.*parallel=ddp.*parallel=single"):
        _tables(store, baseline="platform=gpu")
    # The CLI refuses it before drawing anything: exit 2, the candidates named, no report written.
    returncode = report_main([str(store), "--out", str(tmp_path / "report"), "--baseline", "platform=gpu",
                              "--no-progress"])
    stderr = capsys.readouterr().err
    assert returncode == 2 and "is ambiguous" in stderr and "parallel=ddp" in stderr, stderr[-2000:]
    assert not (tmp_path / "report" / "report.html").exists()
    b = _tables(store, baseline="platform=gpu&parallel=single")[0]["baseline"]
    base = _row(b, baseline="<- baseline")
    assert base["platform"] == "gpu" and base["time relative to baseline [x]"] == 1.0
    assert _row(b, platform="cpu")["time relative to baseline [x]"] == pytest.approx(2.0)
    assert _row(b, parallel="ddp")["time relative to baseline [x]"] == pytest.approx(1000 / 1500)


def _compile_store(tmp_path):
    """Compiled vs eager at two batch sizes: 1.51x faster at batch 8, 0.15x at batch 16 (a recompile storm)."""
    R = fake_record
    return _store(tmp_path, [
        R("e8", throughput=1000, runtime="eager", batch_size=8), R("e16", throughput=2000, runtime="eager", batch_size=16),
        R("c8", throughput=1510, runtime="compile", batch_size=8), R("c16", throughput=300, runtime="compile", batch_size=16)])


def test_normalised_bars_keep_batch_sizes_apart_unless_pooled(tmp_path):
    store = _compile_store(tmp_path)
    rows, ctx = _rows(store, baseline="runtime=eager")
    bars = _bars(PLOTS["normalised"](rows, ctx))
    got = {k.split(" | ")[1]: v for k, v in bars.items()}
    assert got["compile / batch 8"] == pytest.approx(1000 / 1510)  # time relative to eager at the same batch
    assert got["compile / batch 16"] == pytest.approx(2000 / 300)
    assert got["eager / batch 8 (baseline)"] == 1.0 and len(got) == 4
    # Findings keep them apart too: one speed-up per batch size, never one merged figure.
    found, _ = findings_of(rows, ctx)
    [speed] = [f.text for f in found if f.question == "compile speed-up"]
    assert "1.51x (mlp on synthetic_mnist, batch 8)" in speed and "0.15x (mlp on synthetic_mnist, batch 16)" in speed
    # Asked to pool batch sizes: one compile bar, the median of the two ratios, and the figure says so.
    rows, ctx = _rows(store, baseline="runtime=eager", pool=("global_batch_size", "batch_size_per_device"))
    fig = PLOTS["normalised"](rows, ctx)
    got = {k.split(" | ")[1]: v for k, v in _bars(fig).items()}
    assert got["compile"] == pytest.approx((1000 / 1510 + 2000 / 300) / 2)
    assert any("Pooled within a bar: batch/device, global batch" in t.get_text() for t in fig.texts)


def test_money_in_another_currency_is_converted_with_the_dated_rate_never_dropped(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_money"])
    eur = _row(t["cost"], platform="leadergpu_p100")
    r = USD_PER["EUR"][2018]  # the price is dated 2018-03-01: the 2018 average applies
    assert r == 1.1810
    assert eur["price [USD/hour]"] == pytest.approx(4.8 * r)
    assert eur["cost [USD per 1M samples]"] == pytest.approx(4.8 * r / 3600 / 1800 * 1e6)
    assert eur["throughput per price [samples/s per USD/hour]"] == pytest.approx(1800 / (4.8 * r))
    assert eur["priced in"] == "EUR" and _row(t["cost"], platform="gce_p100")["priced in"] == "USD"
    [fx] = t["exchange_rates"].to_dict("records")
    assert (fx["from"], fx["to"], fx["rate [to per from]"], fx["rate date"]) == ("EUR", "USD", r, "2018")
    assert "European Central Bank" in fx["source"] and fx["platforms"] == "leadergpu_p100"
    # Both providers are drawn in the price plots.
    rows, ctx = _rows(fixture_store, ["experiment=fx_money"])
    labels = " ".join(_bars(PLOTS["cost_per_million"](rows, ctx)))
    assert "leadergpu_p100" in labels and "gce_p100" in labels
    # --fx replaces the table's rate; --currency shows every figure in EUR.
    rows, ctx = _rows(fixture_store, ["experiment=fx_money"], fx={"EUR": 1.10})
    [leader] = [r for r in rows if r["platform"] == "leadergpu_p100"]
    assert leader["usd_per_hour"] == pytest.approx(4.8 * 1.10) and ctx.rates[0].date == "as given (--fx)"
    t = _tables_ctx(fixture_store, ["experiment=fx_money"], currency="EUR")
    usd = _row(t["cost"], platform="gce_p100")
    assert usd["price [EUR/hour]"] == pytest.approx(1.46 / max(USD_PER["EUR"].items())[1])
    assert rate("EUR", "USD", "2021-06-01").rate == USD_PER["EUR"][2021]
    with pytest.raises(ValueError, match="no exchange rate for CHF; give one with --fx CHF="):
        rate("CHF", "USD")


def _tables_ctx(store, filters, **ctx):
    from xbench.report.tables import build_tables

    df = apply_filters(load([store], progress=False).frame, list(filters))
    made, _ = build_tables(df, Context(**ctx))
    return {x.name: x.frame for x in made}


def test_per_gpu_utilisation_shows_dataparallel_under_use(fixture_store):
    t, _ = _tables(fixture_store, ["experiment=fx_util"])
    u = t["utilisation"]
    dp, ddp = _row(u, parallel="dataparallel"), _row(u, parallel="ddp")
    assert dp["GPU utilisation per device [%]"] == "0:96 1:31 2:30 3:29"
    assert (dp["least busy GPU [%]"], dp["busiest GPU [%]"]) == (29.0, 96.0)
    assert ddp["GPU utilisation per device [%]"] == "0:94 1:93 2:95 3:92"  # from every rank, not rank 0's only
    rows, ctx = _rows(fixture_store, ["experiment=fx_util"])
    bars = {k.split(" | ")[1]: v for k, v in _bars(PLOTS["gpu_utilisation"](rows, ctx)).items()}
    assert bars["GPU 1 · dataparallel / batch 128 / 4 dev"] == 31.0 and bars["GPU 3 · ddp / batch 128 / 4 dev"] == 92.0


def test_findings_answer_with_figures_and_say_within_noise(fixture_store, tmp_path):
    rows, ctx = _rows(fixture_store, ["experiment=fx_batch"])
    found, _ = findings_of(rows, ctx)
    text = {f.question: f.text for f in found}
    # gpu at batch 32: median 6900 of 6800 and 7000; the runner-up (gpu, batch 16: 4000, p10-p90 3922-4082).
    assert text["fastest"].startswith("Fastest: gpu / eager / on_demand / batch 32 at 6,900 samples/s "
                                      "(6,800-7,000; 2 runs), 1.73x the throughput of the runner-up")
    assert "cheapest per sample" in text and "USD" in text["cheapest per sample"]
    assert "xla vs eager" in text["xla speed-up"] and "1.20x (mlp on synthetic_mnist, batch 16)" in text["xla speed-up"]
    scaling = [f.text for f in findings_of(*_rows(fixture_store, ["experiment=fx_scaling"]))[0]
               if f.question == "scaling efficiency"]
    assert "ddp 90% at 4 devices (3.60x" in scaling[0] and "dataparallel 32% at 4 devices" in scaling[0]
    # Two configurations whose intervals overlap: within noise, not a winner.
    R = fake_record
    store = _store(tmp_path, [R("a", throughput=1000, platform="a", measurements={
        "throughput_ci95_samples_per_s": [950, 1050]}), R("b", throughput=990, platform="b", measurements={
            "throughput_ci95_samples_per_s": [940, 1040]})])
    [fastest] = [f.text for f in findings_of(*_rows(store))[0] if f.question == "fastest"]
    assert "within noise of b (990 samples/s; the intervals overlap)" in fastest


def test_one_record_and_empty_filters_still_make_a_report(tmp_path):
    store = _store(tmp_path / "s", [fake_record("only", throughput=123.0, usd_per_hour=1.0)])
    rows, ctx = _rows(store)
    found, _ = findings_of(rows, ctx)
    assert any("nothing else to compare it with" in f.text for f in found)
    for name in ("throughput", "cost_per_million"):
        fig = PLOTS[name](rows, ctx)
        assert layout.text_problems(fig) == []
    empty = prepare(load([store], progress=False).frame.iloc[:0], Context())
    assert findings_of(empty, Context())[0] == []


def test_pool_keys_are_checked(fixture_store, capsys):
    from xbench.report.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args([str(fixture_store), "--pool", "platform"])
    assert "not a key a bar may pool over" in capsys.readouterr().err
    assert parse_query("a=1") == {"a": ["1"]}


def test_normalised_bars_keep_precision_and_strategy_apart_and_say_so(tmp_path):
    """Same work and global batch, two precisions and two strategies: four bars against the one baseline
    configuration, never one merged bar; the note says each bar is one configuration."""
    R = fake_record
    store = _store(tmp_path, [
        R("base", throughput=1000, batch_size=32),
        R("bf16", throughput=1600, precision="bf16", batch_size=32),
        R("dp", throughput=1250, parallel="dataparallel", devices=2, batch_size=16),
        R("dp-bf16", throughput=2000, precision="bf16", parallel="dataparallel", devices=2, batch_size=16)])
    rows, ctx = _rows(store, baseline="precision=fp32&parallel=single")
    fig = PLOTS["normalised"](rows, ctx)
    got = {k.split(" | ")[1]: v for k, v in _bars(fig).items()}
    assert len(got) == 4, got
    by_throughput = sorted(got.values())
    assert by_throughput == pytest.approx([1000 / 2000, 1000 / 1600, 1000 / 1250, 1.0])
    assert any("(baseline)" in k for k, v in got.items() if v == 1.0)
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    assert "Pooled within" not in note and "one configuration" in note
    # The findings name each configuration too (the fastest: bf16 with DataParallel, 2,000 samples/s).
    found, _ = findings_of(rows, ctx)
    [fastest] = [f.text for f in found if f.question == "fastest"]
    assert "bf16 / dataparallel" in fastest and "2,000 samples/s" in fastest


def test_published_figures_are_drawn_beside_the_measured_ones(fixture_store):
    """The TPU run of the fixture (tpu_v2_8, 8 devices x 128 = global batch 1024, 2,500 samples/s) sits under the
    conditions of the study's published TPU figure (2,796 images/s, 2018-04-26): the table and the plot show both,
    and the published figure is never a run (not in any median)."""
    t, _ = _tables(fixture_store, ["experiment=tpu_vs_gpu"])
    pub = t["published"]
    tpu = _row(pub, **{"published [unit]": 2796})
    assert tpu["measured here [unit]"] == 2500.0 and tpu["unit"] == "images/s" and tpu["date"] == "2018-04-26"
    assert "platform=tpu_v2_8, global_batch_size=1024, data=imagenet; 1 runs" in tpu["measured as"]
    gpu = _row(pub, **{"published [unit]": 2839})  # no 4 x V100 run here: blank, not a guess
    assert gpu["measured here [unit]"] != gpu["measured here [unit]"]
    assert _row(t["throughput"], platform="tpu_v2_8")["throughput median [samples/s]"] == 2500.0
    rows, ctx = _rows(fixture_store, ["experiment=tpu_vs_gpu"])
    with plt.rc_context(layout.STYLE):  # as the report draws it
        fig = PLOTS["published"](rows, ctx)
    bars = {k.split(" | ")[1]: v for k, v in _bars(fig).items()}
    assert bars["tpu_throughput: 2018-04-26"] == 2796 and bars["tpu_throughput: here, 1 run"] == 2500.0
    assert {k.split(" | ")[0] for k in _bars(fig)} == {"tpu_vs_gpu [images/s]"}
    assert layout.text_problems(fig) == []


@pytest.mark.parametrize("threads", [False, True])
def test_a_work_with_two_facets_is_drawn_whole_or_named_as_left_out(tmp_path, threads):
    """The normalised plot draws time and cost for each work: with three works and room for four facets, two
    works are drawn with both, the third is named as not drawn (a capped figure once dropped works silently)."""
    R = fake_record
    recs = []
    for model in ("mlp", "cnn_small", "resnet18"):
        for platform, tp in (("a", 1000), ("b", 1500)):
            recs.append(R(f"{model}-{platform}", throughput=tp, model=model, platform=platform, usd_per_hour=1.0,
                          threads=(1 if platform == "a" else 2) if threads else None))
    rows, ctx = _rows(_store(tmp_path, recs), baseline="platform=a")
    fig = PLOTS["normalised"](rows, ctx)
    titles = [ax.get_title(loc="left") or ax.get_title() for ax in fig.axes if ax.get_title(loc="left") or ax.get_title()]
    drawn = {m for m in ("mlp", "cnn_small", "resnet18") if any(t.startswith(m + " ") for t in titles)}
    assert len(drawn) == 2 and len(titles) == 4, titles
    [missing] = {"mlp", "cnn_small", "resnet18"} - drawn
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    assert "1 more works not drawn" in note and missing in note


def test_findings_name_a_configuration_as_its_bar_does(tmp_path):
    """One label rule for findings and bars (analysis/workload.configuration_label): "1 thread", never
    "1 threads"; the findings differ from a bar only in spelling out "devices"."""
    from xbench.analysis.workload import configuration_label
    from xbench.report.rows import bar_label

    R = fake_record
    store = _store(tmp_path, [R("one", throughput=1000, threads=1), R("two", throughput=1500, threads=2)])
    [fastest] = [f.text for f in findings_of(*_rows(store))[0] if f.question == "fastest"]
    assert fastest.startswith("Fastest: 2 threads at 1,500 samples/s") and "1 thread " in fastest + " "
    keys = {"threads": 1, "devices": 2.0, "cpu_capability": None, "global_batch_size": 64}
    names = ["threads", "devices", "cpu_capability", "global_batch_size"]
    assert bar_label(keys, names) == "1 thread / 2 dev / best CPU kernels / batch 64"
    assert configuration_label(keys, names, "-") == "1 thread / 2 devices / best CPU kernels / batch 64"
