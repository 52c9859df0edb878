"""The report's output is inert and its input is checked: record text cannot act in markdown (rendered by a
real CommonMark renderer), CSV (read back by the csv module) or plot text; records whose numbers are not
numbers, an ok run of 0 samples/s, a copied run folder and a folder named unlike its run id are named and
counted once or not at all; a figure of 1e308 is drawn; plot workers are capped; a --filter that matches
nothing says so. Records are FAKE (xbench.report.fake) or written here as the store writes them."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from xbench.analysis.frame import load
from xbench.analysis.rows import Rows
from xbench.records.store import write_record
from xbench.report.__main__ import main
from xbench.report.escape import csv_cell, md
from xbench.report.fake import fake_record
from xbench.report.rows import Context

EVIL_MODEL = "<img src=x onerror=alert(1)>"
EVIL_PLATFORM = '=HYPERLINK("http://x","y")'
EVIL_REASON = "boom | `rm -rf` [click](javascript:alert(1))\n# heading\n<script>alert(2)</script>"


def _store(root: Path) -> Path:
    recs = [fake_record("e-1", throughput=100.0, model=EVIL_MODEL, platform=EVIL_PLATFORM, usd_per_hour=1.0,
                        measurements={"clock_offset_s": -0.25}),
            fake_record("e-2", throughput=150.0, model=EVIL_MODEL, platform="@SUM(A1)", usd_per_hour=2.0),
            fake_record("e-3", status="failed", reason=EVIL_REASON, model=EVIL_MODEL, platform="+cmd|' /C calc'!A0")]
    for r in recs:
        write_record(root, r)
    return root


def test_markdown_from_records_renders_no_html_no_links_and_keeps_its_table_columns(tmp_path):
    from markdown_it import MarkdownIt

    store = _store(tmp_path / "results")
    out = tmp_path / "report"
    assert main([str(store), "--out", str(out), "--format", "md,csv", "--no-progress", "--title", "<b>t</b>"]) == 0
    text = (out / "report.md").read_text()
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)  # raw HTML passes through
    assert "<img src=x" not in html and "<script" not in html and "<b>t</b>" not in html and "href=" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;" in html
    # every row of the runs table has as many cells as its header: the reason's `|` and newline stay in one cell
    runs = text[text.index("## Every run"):].split("\n## ")[0].splitlines()
    cells = [len(line.replace("\\|", "").split("|")) for line in runs if line.startswith("|")]
    assert len(cells) == 5 and len(set(cells)) == 1  # header, rule, three runs
    assert "boom \\| \\`rm -rf\\` [click]\\(javascript:alert(1)) # heading" in text
    assert "| throughput median [samples/s] |" in text  # the units' brackets stay


def test_csv_cells_that_could_be_formulas_are_neutralised_and_negative_numbers_stay_numbers(tmp_path):
    store = _store(tmp_path / "results")
    out = tmp_path / "report"
    assert main([str(store), "--out", str(out), "--format", "csv", "--no-progress"]) == 0
    for f in (out / "tables").glob("*.csv"):
        with open(f, newline="") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    assert not cell.startswith(("=", "+", "@", "\t", "\r")) and not (
                        cell.startswith("-") and not cell.lstrip("-").replace(".", "", 1).isdigit()), (f.name, cell)
    with open(out / "tables" / "tidy_runs.csv", newline="") as fh:
        tidy = {r["run_id"]: r for r in csv.DictReader(fh)}
    assert tidy["e-1"]["platform"] == "'" + EVIL_PLATFORM and tidy["e-1"]["clock_offset_s"] == "-0.25"
    assert tidy["e-3"]["platform"].startswith("'+cmd")
    assert [csv_cell(x) for x in ("-1e-5", "+3", "-x", -2.0)] == ["-1e-5", "+3", "'-x", -2.0]


def test_markdown_escape_covers_html_table_code_links_and_line_breaks():
    assert md("a<b>&c|d`e`[f](g)\nh") == "a&lt;b&gt;&amp;c\\|d\\`e\\`[f]\\(g) h"


def test_plot_text_with_dollars_draws_as_text():
    from xbench.report.layout import Bar, Facet, bar_labels, hbar_figure, plt, text_problems

    fig = hbar_figure([Facet("$\\frac{1}{0", [Bar("cost $5 $x^", 1.0), Bar("b", 2.0)])], "t $", "x $")
    assert text_problems(fig) == []  # drawn (mathtext would fail on the unbalanced formula)
    texts = {t.get_text() for t in bar_labels(fig.axes[0])}
    plt.close(fig)
    assert "cost \\$5 \\$x^" in texts


def _write(root: Path, rec) -> Path:
    return write_record(root, rec)


def test_records_whose_numbers_are_not_numbers_are_refused_and_named(tmp_path):
    root = tmp_path / "results"
    _write(root, fake_record("good", throughput=100.0))
    for rid, where, key, value in (("text-tp", "measurements", "throughput_samples_per_s", "fast"),
                                   ("bool-step", "measurements", "step_time_s_median", True),
                                   ("zero", "measurements", "throughput_samples_per_s", 0)):
        rec = fake_record(rid, throughput=100.0)
        getattr(rec, where)[key] = value  # as a hand-edited or foreign record holds it
        _write(root, rec)
    bad_batch = fake_record("text-batch", throughput=100.0)
    bad_batch.config["data"]["batch_size"] = "32"
    _write(root, bad_batch)
    loaded = load([root], progress=False)
    assert list(loaded.frame["run_id"]) == ["good"]
    said = "\n".join(loaded.skipped)
    assert "text-tp/record.json: figures that must be numbers are not: measurements.throughput_samples_per_s='fast'" in said
    assert "measurements.step_time_s_median=True" in said and "config.data.batch_size='32'" in said
    assert "zero/record.json: an ok run with throughput_samples_per_s=0" in said


def test_one_record_of_1e308_samples_per_s_is_drawn_with_the_others(tmp_path):
    from xbench.report import layout
    from xbench.report.layout import plt
    from xbench.report.plots import PLOTS

    root = tmp_path / "results"
    for i, tp in enumerate((1000.0, 1e308)):
        _write(root, fake_record(f"r{i}", throughput=tp, batch_size=8 * (i + 1), usd_per_hour=1.0))
    rows = Rows.of(load([root], progress=False).frame)
    for name in ("throughput", "cost_per_million", "samples_per_dollar"):
        fig = PLOTS[name](rows, Context())
        assert layout.text_problems(fig) == [], name  # drawn, its value labels inside the figure ("1e+308")
        lo, hi = fig.axes[0].get_xlim()
        plt.close(fig)
        assert 0 <= lo < hi < float("inf"), name


def test_a_copied_run_folder_and_a_renamed_one_are_named_and_counted_once(tmp_path):
    root = tmp_path / "results"
    src = _write(root, fake_record("run-a", throughput=100.0)).parent
    shutil.copytree(src, root / "run-a-copy")
    renamed = _write(root, fake_record("run-b", throughput=200.0)).parent
    renamed.rename(root / "not-run-b")
    loaded = load([root], progress=False)
    assert sorted(loaded.frame["run_id"]) == ["run-a", "run-b"]
    said = "\n".join(loaded.skipped)
    assert f"run id run-a is in 2 records: counted once, from {root / 'run-a' / 'record.json'}" in said
    assert f"left out: {root / 'run-a-copy' / 'record.json'}" in said
    assert f"record {root / 'not-run-b' / 'record.json'} holds run id run-b, not its folder's name" in said


def test_plot_workers_are_capped_by_the_plots_there_are(tmp_path):
    from xbench.report.plots import PLOTS, PlotJob

    _write(tmp_path / "results", fake_record("r", throughput=100.0))
    rows = Rows.of(load([tmp_path / "results"], progress=False).frame)
    job = PlotJob(rows, Context(), tmp_path / "plots", jobs=10_000)
    try:
        assert job.jobs == len(PLOTS) and len(job.pool._pool) == len(PLOTS)
    finally:
        job.cancel()


def test_a_filter_that_matches_nothing_says_so(tmp_path, capsys):
    _write(tmp_path / "results", fake_record("r", throughput=100.0, experiment="mine"))
    code = main([str(tmp_path / "results"), "--out", str(tmp_path / "o"), "--filter", "experiment=theirs",
                 "--format", "csv", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--filter experiment=theirs matches none of the 1 runs (values here: experiment: mine)" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_refused(jobs, capsys):
    with pytest.raises(SystemExit):
        main(["--jobs", jobs])
    assert "--jobs" in capsys.readouterr().err


def test_a_facet_whose_bars_are_all_zero_still_draws():
    """A framework breakdown can read a host time of 0 (the profiled compute exceeding the measured step under load):
    a facet of zeros once divided by its smallest bar (ZeroDivisionError) and took the whole report down."""
    from xbench.report.layout import Bar, Facet, hbar_figure, plt

    fig = hbar_figure([Facet("overhead", [Bar("eager", 0.0), Bar("compile", 0.0)])], "t", "host [s]")
    assert fig is not None
    plt.close(fig)
