"""The HTML report in a real browser: headless Chromium opens the report of 200 generated records (FAKE,
xbench.report.fake) and of the fixture store; every chart is drawn, nothing is wider than the page (wide tables
scroll inside their box), a header click sorts, hovering a bar shows its value, no request leaves the page, and a
screenshot lands in the report's folder (slow: the report's CLI and Chromium). A small page written by
render.write_html is used as a reader would (sort, filter, hover a bar and a point, hide a series), and a
one-screen page holds what the check must catch (an image that does not load, an element wider than the page, a
request to the network) and what it must let pass (a wide table scrolling in its box). `make test` installs
Chromium when it can (Makefile: browser); without it the tests say so and skip."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from tests.test_report import run_report_without_torch, write_fixture_store
from xbench.report.browser import WIDTH, check, find_browser
from xbench.report.fake import write_fake_store

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium here: the browser check needs it "
                                "(`apt-get install -y chromium` as root; `make test` does that when it can)")


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["200 records", "fixture"])
def test_report_opens_in_chromium_every_image_loads_nothing_overflows(which, tmp_path):
    store = tmp_path / "results"
    if which == "200 records":
        write_fake_store(store, 200, seed=5)
        args = []
    else:
        write_fixture_store(store)
        args = ["--baseline", "platform=k80"]
    out = tmp_path / "report"
    p = run_report_without_torch(store, "--out", out, "--no-progress", "--browser-check", *args)
    assert p.returncode == 0, p.stderr[-3000:]
    check = json.loads((out / "browser_check.json").read_text())
    assert check["ok"], check["problems"]
    assert check["charts"] >= 10 and check["charts_drawn"] == check["charts"]  # was: PNGs, no value under the pointer
    assert check["network_requests"] == [] and check["resources"] == [] and check["violations"] == []
    assert check["sort"]["ascending"] and check["hover"]["expected"] in check["hover"]["tooltip"]
    assert check["scroll_width"] <= check["width"] and check["overflow_count"] == 0
    assert check["findings"] >= 3 and check["tables"] >= 8
    w, h = _png_size(out / "screenshot.png")
    assert w == WIDTH and h > 2000
    assert "browser check: ok" in p.stdout


def _png(width: int, height: int) -> bytes:
    """A grey PNG of that size (8-bit greyscale, one filter byte per row)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_the_check_names_a_broken_image_and_an_overflow_and_lets_a_scrolling_table_pass(tmp_path):
    (tmp_path / "plot.png").write_bytes(_png(40, 30))
    cells = "".join(f"<td>{i:06d}</td>" for i in range(400))  # far wider than the window
    page = tmp_path / "report.html"
    page.write_text(f"""<!doctype html><html><head><style>.scroll{{overflow-x:auto}}</style></head><body>
<img alt="plot" src="plot.png"><img alt="gone" src="missing.png"><img alt="remote" src="http://127.0.0.1:9/r.png">
<div class="scroll"><table><tr>{cells}</tr></table></div>
<div id="wide" style="width:{2 * WIDTH}px">too wide</div></body></html>""")
    result = check(page)
    assert not result.ok
    images = {i["alt"]: i for i in result.measured["images"]}
    assert images["plot"]["loaded"] and images["plot"]["natural"] == [40, 30] and not images["gone"]["loaded"]
    assert "image 'gone' did not load" in result.reason and "elements overflow the page: div#wide" in result.reason
    assert "plot" not in result.reason and "table" not in result.reason  # the table scrolls inside its box
    assert result.measured["network_requests"] == ["http://127.0.0.1:9/r.png"]  # Chromium's own net log says so
    assert "the page asked the network for 1 resources: http://127.0.0.1:9/r.png" in result.reason
    assert result.measured["tables"] == result.measured["tables_scrolling"] == 1
    assert result.measured["scroll_width"] >= 2 * WIDTH and f"px wide in a {WIDTH} px window" in result.reason
    written = json.loads(result.path.read_text())
    assert written["ok"] is False and written["problems"] == result.reason.split("; ")
    assert _png_size(result.screenshot)[0] == WIDTH
    assert not (tmp_path / ".browser_check.html").exists()  # the probe's copy is removed; the report stays as it was
    assert "<script" not in page.read_text()


def _small_report(tmp_path):
    """render.write_html over one table and two real figures (bars in two colour groups with a reference line;
    lines), as the CLI writes them."""
    import pandas as pd

    from xbench.report import render
    from xbench.report.layout import Bar, Facet, Line, Panel, hbar_figure, line_figure
    from xbench.report.plots import save
    from xbench.report.rows import Table

    plots = tmp_path / "plots"
    bars = [Bar(f"gpu_{i} / eager / batch {2 ** i}", 100.0 * (i + 1) ** 1.5, 95.0 * (i + 1) ** 1.5,
                105.0 * (i + 1) ** 1.5, hue=("spot", "on_demand")[i % 2]) for i in range(6)]
    hb = hbar_figure([Facet("resnet50 on imagenet", bars)], "Throughput", "throughput [samples/s]",
                     hues={"spot": "tab:orange", "on_demand": "tab:blue"}, ref=(250.0, "target"))
    lines = [Line(f"gpu_{k}", [16, 32, 64, 128], [10.0 * k * x ** 0.8 for x in (16, 32, 64, 128)], rank=k)
             for k in range(1, 4)]
    ln = line_figure([Panel("resnet50 on imagenet", lines, ylabel="throughput [samples/s]")], "Throughput vs batch",
                     "global batch [samples]", log_x=True)
    frame = pd.DataFrame({"model": ["resnet50"] * 6, "data": ["imagenet"] * 6, "platform": [f"gpu_{i}" for i in range(6)],
                          "runtime": ["eager"] * 6, "throughput median [samples/s]": [b.value for b in bars][::-1],
                          "status": ["ok"] * 6})
    rep = render.Report("small", ["meta"], [Table("throughput", "Throughput", frame)], {},
                        {"throughput": save(hb, plots, "throughput"), "throughput_vs_batch": save(ln, plots, "tvb")}, {})
    return render.write_html(rep, tmp_path / "report.html")


@pytest.mark.slow  # two Chromium starts: ~4 s
def test_the_page_sorts_filters_shows_values_on_hover_hides_a_series_and_fetches_nothing(tmp_path):
    """Before: a printout (PNG plots, static tables). Now the probe clicks, types and hovers in Chromium."""
    result = check(_small_report(tmp_path))
    m = result.measured
    assert result.ok, result.reason
    assert m["charts"] == m["charts_drawn"] == 2 and m["images"] == []
    s = m["sort"]  # the rows were written largest first: a click on the figure's header puts them smallest first
    assert s["column"] == "throughput median [samples/s]" and s["order"] == "ascending" and s["same_rows"]
    assert s["before"] == sorted(s["before"], reverse=True) and s["after"] == sorted(s["after"]) and s["after"][0] == 100
    assert m["filter"] == {"table": "tt-throughput", "typed": "gpu_5", "rows": 6, "shown": 1, "first_shown": True,
                           "after_clear": 6}
    h = m["hover"]  # the first bar: its whole label, value, spread and colour group in the tooltip
    assert h["figure"] == "p-throughput" and h["visible"] and h["label"] == "gpu_0 / eager / batch 1"
    assert h["tooltip"].splitlines() == ["gpu_0 / eager / batch 1", "throughput [samples/s]: 100",
                                         "spread: 95 to 105", "group: spot"]
    assert m["legend"] == {"figure": "p-throughput", "key": "spot", "before": [True], "after": [False]}
    assert m["network_requests"] == [] and m["resources"] == [] and m["violations"] == [] and m["errors"] == []
