"""The report at scale (issue [R4 6/7]): what keeps 100,000 records within memory. Timings are make bench's
(scripts/bench_report.py), not a test's: a shared machine's seconds say nothing."""

from __future__ import annotations

import gc
import json
import weakref

import pytest

from xbench.analysis import frame
from xbench.report.fake import write_fake_store


def test_load_lets_each_record_go_once_its_row_is_made(tmp_path, monkeypatch):
    """frame.load lays out each record as it is read and keeps only its row: when the 5th record is laid out,
    the 1st is gone. Before, every record was read into a list first (100,000 records held at once)."""
    store = write_fake_store(tmp_path / "store", 6)
    alive: list[weakref.ref] = []
    seen_alive: list[int] = []
    real = frame.flatten

    def flatten(rec):
        alive.append(weakref.ref(rec))
        gc.collect()
        seen_alive.append(sum(r() is not None for r in alive))
        return real(rec)

    monkeypatch.setattr(frame, "flatten", flatten)
    loaded = frame.load([store], progress=False)
    assert len(loaded.frame) == 6 and loaded.skipped == []
    assert max(seen_alive) <= 2, seen_alive  # the one being laid out (and at most the one before): was 1, 2, ... 6


def test_streamed_load_keeps_the_messages_of_copies_and_refusals(tmp_path):
    """The same skipped messages as reading every record first: a copied run folder counted once and named, a
    record whose numbers are not numbers refused by name, an unreadable file named."""
    store = write_fake_store(tmp_path / "store", 3)
    (store / "copy").mkdir()
    (store / "copy" / "record.json").write_text((store / "fake-000001" / "record.json").read_text())
    bad = json.loads((store / "fake-000002" / "record.json").read_text())
    bad["measurements"]["step_time_s_median"] = "fast"
    (store / "fake-000002" / "record.json").write_text(json.dumps(bad))
    (store / "torn").mkdir()
    (store / "torn" / "record.json").write_text('{"run_id": ')
    records, skipped = frame.read([store])
    expected = frame.to_frame(records, skipped)
    loaded = frame.load([store], progress=False)
    assert loaded.skipped == skipped and len(skipped) == 3
    assert list(loaded.frame["run_id"]) == list(expected["run_id"]) == ["fake-000001", "fake-000000"]  # by first sight: copy/ sorts first
    assert "refusing record" in skipped[-1] and "step_time_s_median='fast'" in skipped[-1]


def test_two_process_load_gives_the_same_frame_and_messages(tmp_path, monkeypatch):
    """From PARALLEL_MIN_RECORDS files a forked process reads the second half: the frame, its column order and
    the skipped messages are those of one process (unreadable files in both halves, a copy across them)."""
    store = write_fake_store(tmp_path / "store", 8)
    (store / "fake-000001" / "record.json").write_text('{"run_id": ')
    (store / "fake-000006" / "record.json").write_text("[]")
    (store / "zz-copy").mkdir()
    (store / "zz-copy" / "record.json").write_text((store / "fake-000002" / "record.json").read_text())
    one = frame.load([store], progress=False)
    monkeypatch.setattr(frame, "PARALLEL_MIN_RECORDS", 2)
    two = frame.load([store], progress=False)
    assert two.frame.equals(one.frame) and list(two.frame.columns) == list(one.frame.columns)
    assert two.skipped == one.skipped and len(one.skipped) == 3  # 2 unreadable, the copy (in both halves)
    assert len(one.frame) == 6


def _pixels(fig):
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_fast_text_draws_the_same_pixels_as_matplotlib():
    """plots.fast_text (Agg's per-glyph loop with the per-string work done once, each text laid out and measured
    once): the same pixels as matplotlib's own methods for plain, rotated, bold, small, mathtext and unantialiased
    text, drawn once and again (from the caches), and matplotlib's methods back afterwards."""
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.backends import backend_agg

    from xbench.report import layout, plots

    if not matplotlib.__version__.startswith("3.11."):
        pytest.skip(f"plots.fast_text stands in for matplotlib 3.11's text drawing; this is {matplotlib.__version__}")
    assert plots._FT2FONT_API  # matplotlib 3.11's methods are there to stand in for
    with plt.rc_context(layout.STYLE):
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.barh(["gpu_k80 · eager · 4 dev", "cpu · compile · batch 64"], [3.5, 1.25])
        ax.set_title("Throughput (median, higher is better)", fontweight="bold")
        ax.set_xlabel(r"samples/s $\frac{a}{b}\sqrt{x}$")
        ax.text(0.2, 0.5, "rotated 37°, ÄÖ €", rotation=37, fontsize=7)
        ax.text(0.6, 0.2, "not antialiased", antialiased=False)
        before = _pixels(fig)
        with plots.fast_text():
            assert backend_agg.RendererAgg._draw_text_glyphs_and_boxes is plots._glyphs_drawn_fast
            fast, again = _pixels(fig), _pixels(fig)
            assert plots._LAYOUTS and plots._METRICS  # the second drawing read them
        plt.close(fig)
    assert backend_agg.RendererAgg._draw_text_glyphs_and_boxes is plots._AGG_GLYPHS
    assert backend_agg.RendererAgg.draw_text is plots._AGG_TEXT
    plots._LAYOUTS.clear()
    plots._METRICS.clear()
    assert (before == fast).all() and (before == again).all() and (before != 255).any()


def test_report_plot_drawn_with_fast_text_is_pixel_identical(tmp_path):
    """A report figure of 300 FAKE records (long labels, facets, footer): same pixels either way."""
    import matplotlib.pyplot as plt

    from xbench.report import layout, plots
    from xbench.report.rows import Context, prepare

    loaded = frame.load([write_fake_store(tmp_path / "store", 300)], progress=False)
    rows = prepare(loaded.frame, Context())
    with plt.rc_context(layout.STYLE):
        fig = plots.PLOTS["throughput"](rows, Context())
        before = _pixels(fig)
        with plots.fast_text():
            fast = _pixels(fig)
        plt.close(fig)
    assert before.shape == fast.shape and (before == fast).all()


def test_a_report_without_plots_never_imports_matplotlib(tmp_path):
    """`--format csv` (tables only) leaves matplotlib unimported (~0.35 s of a report's start): report/llm.py's
    plot imports layout only when it draws. Before, the tables' import of llm brought in pyplot."""
    import subprocess
    import sys

    store = write_fake_store(tmp_path / "store", 120)
    code = ("import sys; from xbench.report.__main__ import main; "
            f"rc = main([{str(store)!r}, '--out', {str(tmp_path / 'out')!r}, '--format', 'csv', '--no-progress']); "
            "print('rc', rc, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "rc 0 False", out.stdout + out.stderr


def test_bench_report_prints_one_line_per_size_with_wall_cpu_and_memory():
    """scripts/bench_report.py (make bench): a line per size with wall and CPU seconds, the goal at 10,000, and
    the peak RSS against the machine's memory. Small sizes and tables only: the figures are make bench's."""
    import pathlib
    import re
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "bench_report.py"
    out = subprocess.run([sys.executable, str(script), "40", "60"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if " records: " in ln]
    assert [ln.split(" records:")[0] for ln in lines] == ["bench_report: 40", "bench_report: 60"], out.stdout
    for ln in lines:
        assert re.search(r"records: [\d.]+ s wall, CPU [\d.]+ s \([\d.]+ s this process \+ [\d.]+ s", ln), ln
        assert re.search(r"peak RSS [\d.]+ GiB of \d+ GiB", ln) and ln.endswith("exit 0"), ln


def test_plot_job_keeps_the_rows_out_of_the_cyclic_gc_while_it_draws(tmp_path, monkeypatch):
    """PlotJob freezes what is alive when it starts (the rows: a dict per run) until its result or cancel: full
    collections no longer walk them while the figures are drawn (1.4 -> 0.7 s of GC for the 17 figures of 10,000
    runs in one process), nor copy their pages in the forked plot processes; a freeze it did not make stays."""
    from xbench.report import plots
    from xbench.report.rows import Context, prepare

    rows = prepare(frame.load([write_fake_store(tmp_path / "store", 60)], progress=False).frame, Context())
    monkeypatch.setattr(plots, "PLOTS", {"throughput": plots.PLOTS["throughput"]})  # one figure is enough here
    assert gc.get_freeze_count() == 0
    job = plots.PlotJob(rows, Context(), tmp_path / "plots", jobs=1)
    assert gc.get_freeze_count() >= len(rows)
    made, _ = job.result()
    assert made and gc.get_freeze_count() == 0
    plots.PlotJob(rows, Context(), tmp_path / "plots2", jobs=2).cancel()
    assert gc.get_freeze_count() == 0
    gc.freeze()  # someone else's
    try:
        frozen = gc.get_freeze_count()
        plots.PlotJob(rows, Context(), tmp_path / "plots3", jobs=1).result()
        assert gc.get_freeze_count() > frozen // 2  # still frozen (less what was freed meanwhile)
    finally:
        gc.unfreeze()
