"""The report at scale (issue [R4 6/7]): what keeps 100,000 records within memory. Timings are make bench's
(scripts/bench_report.py), not a test's: a shared machine's seconds say nothing."""

from __future__ import annotations

import gc
import json
import os
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
    """From PARALLEL_MIN_RECORDS files a forked process reads too, both taking chunks of CHUNK_RECORDS files in
    turn (this one after the caller's `meanwhile`, called once, here): the frame, its column order and the
    skipped messages are those of one process (unreadable files in several chunks, a copy across them),
    whichever process read which chunk (the caller's work short or long)."""
    import time

    store = write_fake_store(tmp_path / "store", 8)
    (store / "fake-000001" / "record.json").write_text('{"run_id": ')
    (store / "fake-000006" / "record.json").write_text("[]")
    (store / "zz-copy").mkdir()
    (store / "zz-copy" / "record.json").write_text((store / "fake-000002" / "record.json").read_text())
    one = frame.load([store], progress=False)
    monkeypatch.setattr(frame, "PARALLEL_MIN_RECORDS", 2)
    monkeypatch.setattr(frame, "CHUNK_RECORDS", 2)
    for pause_s in (0.0, 0.3):
        calls = []
        two = frame.load([store], progress=False,
                         meanwhile=lambda p=pause_s, c=calls: (c.append(os.getpid()), time.sleep(p)))
        assert calls == [os.getpid()]
        assert two.frame.equals(one.frame) and list(two.frame.columns) == list(one.frame.columns)
        assert two.skipped == one.skipped and len(one.skipped) == 3  # 2 unreadable, the copy
    assert len(one.frame) == 6 and frame._TAKEN is None


def test_the_callers_error_while_loading_is_raised_and_no_reader_is_left(tmp_path, monkeypatch):
    """A `meanwhile` that fails (an import error) stops the load with its error; the forked reader is
    ended."""
    import multiprocessing as mp

    store = write_fake_store(tmp_path / "store", 6)
    monkeypatch.setattr(frame, "PARALLEL_MIN_RECORDS", 2)

    def fails():
        raise ImportError("no module named matplotlib")

    with pytest.raises(ImportError, match="matplotlib"):
        frame.load([store], progress=False, meanwhile=fails)
    assert not mp.active_children() and frame._TAKEN is None


def _pixels(fig):
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def _ink(image, level: int):
    """The pixels darkened below `level` in any colour channel."""
    return (image[..., :3] < level).any(axis=-1)


def _near(mask, reach: int = 1):
    """`mask` grown by `reach` pixels in each direction (a square neighbourhood)."""
    grown = mask.copy()
    h, w = mask.shape
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            grown[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] |= \
                mask[max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return grown


def _same_within_two_pixels(before, fast) -> None:
    """Every dark pixel of one image has ink within two pixels in the other (the texts drawn at the same
    places, sizes and angles; matplotlib 3.11 places each glyph at 1/64 pixel, <= 3.10 (agg_text) each glyph
    and the string at whole pixels: up to 1.5 pixels apart, and a stroke half a pixel apart is two grey
    columns in one and a dark one in the other), and about as much ink in all (the same glyphs)."""
    assert before.shape == fast.shape and _ink(before, 128).any()
    for one, other in ((before, fast), (fast, before)):
        assert not (_ink(one, 128) & ~_near(_ink(other, 230), 2)).any()
    darkness = [int((255 - image[..., :3].min(axis=-1)).sum()) for image in (before, fast)]
    assert abs(darkness[0] - darkness[1]) <= 0.05 * darkness[0]


def test_fast_text_draws_the_text_matplotlib_draws():
    """agg_text.fast (one bitmap per string, shaped once and kept): plain, rotated, bold, small, mathtext and
    unantialiased text where matplotlib 3.11's own methods draw it, within two pixels (3.11 places each
    glyph at 1/64 pixel, matplotlib <= 3.10 and agg_text at whole pixels), the same drawn again from the
    kept bitmaps, and matplotlib's methods back afterwards. Cross-check: the same comparison catches one
    text moved by four pixels."""
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.backends import backend_agg

    from xbench.report import agg_text, layout

    if not matplotlib.__version__.startswith("3.11."):
        pytest.skip(f"agg_text stands in for matplotlib 3.11's text drawing; this is {matplotlib.__version__}")
    assert agg_text.FAST  # matplotlib 3.11's methods are there to stand in for
    with plt.rc_context(layout.STYLE):
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.barh(["gpu_k80 · eager · 4 dev", "cpu · compile · batch 64"], [3.5, 1.25])
        ax.set_title("Throughput (median, higher is better)", fontweight="bold")
        ax.set_xlabel(r"samples/s $\frac{a}{b}\sqrt{x}$")
        ax.set_ylabel("configuration\n\nsecond line")  # rotated 90, with an empty line
        ax.text(0.2, 0.5, "rotated 37°, ÄÖ €", rotation=37, fontsize=7)
        ax.text(0.6, 0.2, "not antialiased", antialiased=False)
        before = _pixels(fig)
        with agg_text.fast():
            assert backend_agg.RendererAgg.draw_text is agg_text.draw_text
            fast = _pixels(fig)
            kept = len(agg_text._SHAPED)
            again = _pixels(fig)
            assert kept and len(agg_text._SHAPED) == kept  # the second drawing shaped nothing new
        x, y = ax.transData.transform((0.2, 0.5))  # the rotated text 4 pixels to the right
        ax.texts[0].set_position(ax.transData.inverted().transform((x + 4, y)))
        moved = _pixels(fig)
        plt.close(fig)
    assert backend_agg.RendererAgg.draw_text is agg_text._AGG_TEXT
    assert backend_agg.RendererAgg.get_text_width_height_descent is agg_text._AGG_MEASURE
    agg_text.clear()
    _same_within_two_pixels(before, fast)
    assert (fast == again).all()
    with pytest.raises(AssertionError):
        _same_within_two_pixels(before, moved)


def test_report_plot_drawn_with_fast_text_matches_matplotlib(tmp_path):
    """A report figure of 300 FAKE records (long labels, facets, footer, a legend): the same text within
    two pixels, and the same size."""
    import matplotlib.pyplot as plt

    from xbench.report import agg_text, layout, plots
    from xbench.report.rows import Context, prepare

    loaded = frame.load([write_fake_store(tmp_path / "store", 300)], progress=False)
    rows = prepare(loaded.frame, Context())
    for name in ("throughput", "throughput_vs_batch", "llm_memory"):  # bars, lines, legends
        with plt.rc_context(layout.STYLE):
            fig = plots.PLOTS[name](rows, Context())
            before = _pixels(fig)
            with agg_text.fast():
                fast = _pixels(fig)
            plt.close(fig)
        agg_text.clear()
        _same_within_two_pixels(before, fast)


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
    """scripts/bench_report.py (make bench): a line per size with wall and CPU seconds of `python -m
    xbench.report` (its start included), the goal at 10,000, and the peak RSS against the machine's memory.
    Small sizes and tables only: the figures are make bench's."""
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
        assert re.search(r"records: [\d.]+ s wall, CPU [\d.]+ s \(python -m xbench.report and its plot", ln), ln
        assert re.search(r"peak RSS [\d.]+ GiB of \d+ GiB", ln) and ln.endswith("exit 0"), ln
    # the report's own line before each: the command ran, over the records written
    assert out.stdout.count("xbench.report: 40 runs -> ") == 1 and "xbench.report: 60 runs -> " in out.stdout


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


def _pid_and(value):
    return os.getpid(), value if isinstance(value, int) else type(value).__name__


def _fails(message: str):
    raise ValueError(message)


def test_beside_runs_in_a_forked_process_with_its_arguments_unpickled_and_raises_its_error():
    """report.beside.Beside (tidy_runs.csv's text made while the tables are built): the function runs in
    another process, its arguments reach it by the fork (a lock cannot be pickled), its result comes back,
    its error is raised at result(), cancel() leaves no process; fork=False runs it here, at result()."""
    import multiprocessing as mp
    import threading

    from xbench.report.beside import Beside

    unpicklable = threading.Lock()
    pid, got = Beside(_pid_and, unpicklable).result()
    assert pid != os.getpid() and got == "lock"
    with pytest.raises(ValueError, match="no such column"):
        Beside(_fails, "no such column").result()
    job = Beside(_pid_and, 1)
    job.cancel()
    assert job.pool is None and not mp.active_children()
    here = Beside(_pid_and, 2, fork=False)
    assert here.pool is None and here.result() == (os.getpid(), 2)


def test_plot_processes_and_the_caller_share_the_plots_and_give_them_in_order(tmp_path):
    """PlotJob with 2 processes: they take the plots in turn and the caller takes the ones left at result()
    (nobody idles while one draws); the plots come back in PLOTS' order with the same files and reasons as one
    process drawing them all."""
    from xbench.report import plots
    from xbench.report.rows import Context, prepare

    rows = prepare(frame.load([write_fake_store(tmp_path / "store", 60)], progress=False).frame, Context())
    one = plots.PlotJob(rows, Context(), tmp_path / "one", jobs=1).result()
    two = plots.PlotJob(rows, Context(), tmp_path / "two", jobs=2).result()
    assert list(two[0]) == list(one[0]) and two[1] == one[1] and len(one[0]) > 5
    for name in one[0]:
        chart = tmp_path / "one" / f"{name}.chart.json"
        if chart.exists():
            assert (tmp_path / "two" / chart.name).read_bytes() == chart.read_bytes(), name
    assert plots._JOB == ()
