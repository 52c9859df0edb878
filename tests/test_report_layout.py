"""Layouts that hold at 200 runs: every plot of a report over 200 generated records (FAKE, xbench.report.fake:
eight platforms two of them in EUR, three works, strategies, device counts, train-to-target curves) fits the
size caps, caps its legend and bars, and has no text that overlaps other text or leaves the figure, checked
from matplotlib's own layout boxes (layout.text_problems). Timing goals are in `make bench`
(scripts/bench_report.py), not here."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pytest

from xbench.analysis.frame import load
from xbench.report import layout
from xbench.report.fake import write_fake_store
from xbench.report.plots import PLOTS, NoData
from xbench.report.rows import Context, prepare


@pytest.fixture(scope="module")
def rows200(tmp_path_factory):
    store = write_fake_store(tmp_path_factory.mktemp("scale") / "results", 200, seed=3)
    df = load([store], progress=False).frame
    # The baseline: the first ok single-device eager run's platform and pricing (one configuration per batch).
    first = df[(df.status == "ok") & (df.parallel == "single") & (df.runtime == "eager")].iloc[0]
    ctx = Context.with_baseline(f"platform={first.platform}&runtime=eager&parallel=single&"
                                f"pricing_model={first.pricing_model}")
    return prepare(df, ctx), ctx


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_every_plot_of_200_records_fits_and_no_text_overlaps(rows200):
    rows, ctx = rows200
    drawn, problems = [], {}
    with plt.rc_context(layout.STYLE):
        for name, fn in PLOTS.items():
            try:
                fig = fn(rows, ctx)
            except NoData:
                continue
            drawn.append(name)
            w, h = fig.get_size_inches()
            assert w <= layout.FIG_MAX_W and h <= layout.FIG_MAX_H, f"{name}: {w:.1f} x {h:.1f} in"
            legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
            for lg in legends:  # capped: LEGEND_MAX labels, one "N more (grey)" entry and the reference lines
                assert len(lg.get_texts()) <= layout.LEGEND_MAX + 3, f"{name}: {len(lg.get_texts())} legend entries"
            for ax in fig.axes:
                assert len(ax.patches) <= layout.MAX_BARS, f"{name}: {len(ax.patches)} bars in one facet"
            problems[name] = layout.text_problems(fig)
            note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
            if name != "published":  # each figure says what a bar, line or point holds (pooled or not)
                assert re.search(r"Each (bar|line|point): |Pooled within a ", note), f"{name}: {note[:200]}"
            plt.close(fig)
    # The fixture has what every plot but the studies' published figures needs.
    assert set(PLOTS) - set(drawn) <= {"published"}, set(PLOTS) - set(drawn)
    assert not any(problems.values()), {k: v[:3] for k, v in problems.items() if v}


def test_summarised_facets_name_what_they_left_out(rows200):
    rows, ctx = rows200
    with plt.rc_context(layout.STYLE):
        fig = PLOTS["throughput"](rows, ctx)
    ticks = [t.get_text() for ax in fig.axes for t in layout.bar_labels(ax)]
    gaps = [t for t in ticks if "more (in the tables)" in t]
    assert gaps, "200 records over 3 works: more configurations than a facet draws"
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    assert "bars left out (the best and the worst of each work are drawn" in note
    assert "Each bar: one configuration" in note and "Error bars:" in note
    plt.close(fig)


def test_text_problems_finds_overlap_and_overflow():
    fig = plt.figure(figsize=(3, 2))
    fig.text(0.1, 0.5, "overlapping text here")
    fig.text(0.12, 0.5, "and here too")
    fig.text(0.95, 0.1, "sticks out of the figure")
    found = layout.text_problems(fig)
    assert any("overlaps" in p for p in found) and any("outside the figure" in p for p in found)
    plt.close(fig)


def test_every_table_of_200_records_says_what_a_row_pooled(rows200):
    from xbench.report.tables import build_tables

    rows, ctx = rows200
    made, skipped = build_tables(None, ctx, rows=rows)
    assert {t.name for t in made} >= {"throughput", "cost", "to_target", "scaling", "baseline", "utilisation",
                                      "exchange_rates", "runs"}, skipped
    for t in made:
        assert re.match(r"(Each row: |Pooled within a |Nothing: )", t.pooled), (t.name, t.pooled)


def test_throughput_vs_batch_colours_the_lines_over_several_batch_sizes(rows200):
    """Capped to LEGEND_MAX colours, the coloured lines are those that span batch sizes: never a single point in
    colour while a line over several batch sizes is grey."""
    rows, ctx = rows200
    with plt.rc_context(layout.STYLE):
        fig = PLOTS["throughput_vs_batch"](rows, ctx)
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata())]
    grey = [ln for ln in lines if ln.get_color() == layout.GREY]
    coloured = [ln for ln in lines if ln.get_color() != layout.GREY and ln.get_linewidth() == 1.4]  # not error bars
    assert coloured and grey
    longest: dict = {}  # a label keeps its colour in every facet: its longest line anywhere
    for ln in coloured:
        c = str(ln.get_color())
        longest[c] = max(longest.get(c, 0), len(ln.get_xdata()))
    if any(len(ln.get_xdata()) > 1 for ln in grey):
        assert min(longest.values()) > 1, longest
    plt.close(fig)
