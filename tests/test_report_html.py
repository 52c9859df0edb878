"""The HTML report's page, without a browser: a table's configuration is one label column (its keys in the label's
title) and the figures come right after it (before: ten identity columns, the first figure the 10th); numeric cells
carry their value for sorting; each figure's chart data is what layout.py drew (aggregated, capped), written as
JSON that record text cannot break out of; the page inlines its scripts, names no other file and forbids every
request (its content policy). The browser half (sorting, hover, no request) is tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pandas as pd

from xbench.report import render
from xbench.report.interactive import json_block
from xbench.report.layout import MAX_GREY_LINES, Bar, Facet, Line, Panel, hbar_figure, line_figure, plt
from xbench.report.rows import Table

EVIL = '</script><script>alert(1)</script><img src=x onerror=alert(2)>'


class _Cells(HTMLParser):
    """Header texts, and each body row's cells as (attributes, text)."""

    def __init__(self):
        super().__init__()
        self.head, self.rows, self._cell, self._in_head = [], [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr" and not self._in_head:
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = [dict(attrs), ""]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            (self.head.append(self._cell[1]) if tag == "th" else self.rows[-1].append(tuple(self._cell)))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data


def _throughput_table() -> Table:
    frame = pd.DataFrame({
        "model": ["cnn", "cnn", "mlp"], "data": ["cifar", "cifar", "mnist"], "platform": ["cpu_64"] * 3,
        "runtime": ["eager", "compile", "eager"], "precision": ["fp32"] * 3, "batch/device": [32.0, 32.0, 64.0],
        "devices": [1, 1, 4], "runs": [2, 1, 1], "status": ["ok", "ok", "1 failed"],
        "throughput median [samples/s]": [2074.45, 9.5, float("nan")], "step time median [s]": [0.0617, 1.2, None],
        "reason": ["", "", EVIL]})
    return Table("throughput", "Throughput", frame)


def test_a_tables_configuration_is_one_label_with_its_keys_on_hover_and_the_figures_come_first():
    p = _Cells()
    p.feed(render.html_table(_throughput_table()))
    assert p.head == ["configuration", "throughput median [samples/s]", "step time median [s]", "runs", "status", "reason"]
    (label, tp, step, runs, status, reason) = p.rows[0]
    # the label names only the keys that differ between rows; its title names every key of the row
    assert label[1] == "cnn / cifar / eager / 32 per device / 1 dev"
    assert label[0]["title"] == ("model: cnn\ndata: cifar\nplatform: cpu_64\nruntime: eager\nprecision: fp32\n"
                                 "batch/device: 32\ndevices: 1")
    assert tp == ({"data-v": "2074.45"}, "2,074") and step[0]["data-v"] == "0.0617"  # the value sorts, not its text
    assert p.rows[2][0][1] == "mlp / mnist / eager / 64 per device / 4 dev"
    assert p.rows[2][1] == ({}, "")  # a missing figure: no value to sort by (report.js puts blanks last)
    assert p.rows[2][5][1] == EVIL  # record text stays text


def test_a_table_of_fewer_than_three_keys_keeps_its_columns():
    frame = pd.DataFrame({"from": ["EUR"], "to": ["USD"], "rate [to per from]": [1.18], "platform": ["x"]})
    assert render.table_columns(frame) == ([], [], ["from", "to", "rate [to per from]", "platform"])


def test_a_figures_chart_data_is_what_layout_drew_capped_and_json_that_record_text_cannot_end():
    bars = [Bar(f"cfg {i}", 10.0 * (i + 1), 9.0 * (i + 1), 11.0 * (i + 1)) for i in range(3)]
    bars.append(Bar(EVIL, float("nan")))
    fig = hbar_figure([Facet("work", bars, left_out=7, split=2)], "T", "throughput [samples/s]",
                      ref=(1.0, "baseline"))
    spec = fig.xbench_chart
    plt.close(fig)
    facet = spec["facets"][0]
    assert spec["kind"] == "hbar" and spec["ref"] == [1.0, "baseline"] and facet["left_out"] == 7
    assert [(b["label"], b["value"], b["low"], b["text"]) for b in facet["bars"][:2]] == [("cfg 0", 10.0, 9.0, "10"),
                                                                                          ("cfg 1", 20.0, 18.0, "20")]
    assert facet["bars"][3]["value"] is None  # NaN is not JSON
    block = json_block(spec)
    assert "<" not in block and ">" not in block and json.loads(block)["facets"][0]["bars"][3]["label"] == EVIL

    # 60 lines in a panel: the 10 the PNG colours and the 40 grey ones it draws, not one per record
    lines = [Line(f"run {i}", [1, 2, 4], [i, i + 1, i + 2], rank=i) for i in range(60)]
    fig = line_figure([Panel("work", lines, ylabel="samples/s")], "T", "devices", log_x=True)
    spec = fig.xbench_chart
    plt.close(fig)
    drawn = spec["panels"][0]["lines"]
    assert len(drawn) == 10 + MAX_GREY_LINES and sum(not ln["grey"] for ln in drawn) == 10
    assert {ln["label"] for ln in drawn if not ln["grey"]} == {f"run {i}" for i in range(50, 60)}
    assert drawn[0]["points"][0] == [1.0, 50.0, None, None] and spec["log_x"] is True


def test_the_page_inlines_its_scripts_and_forbids_every_request(tmp_path):
    (tmp_path / "plots").mkdir()
    fig = hbar_figure([Facet("work", [Bar(EVIL, 5.0)])], "Throughput", "samples/s")
    from xbench.report.plots import save

    png, svg = save(fig, tmp_path / "plots", "throughput")
    assert (tmp_path / "plots" / "throughput.chart.json").is_file()
    rep = render.Report("t", [], [_throughput_table()], {}, {"throughput": (png, svg)}, {})
    page = render.write_html(rep, tmp_path / "report.html").read_text()
    assert "default-src 'none'" in page and "img-src data:" in page  # the browser refuses any request
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page) and "sourceMappingURL" not in page
    assert page.count("<script") == 3  # Chart.js, report.js, the chart's data block: nothing from a record
    assert "Chart.js v4.6.1" in page and 'href="plots/throughput.png"' in page and "data:image/png" not in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page  # the table's reason cell
