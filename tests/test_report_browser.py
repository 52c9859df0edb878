"""The HTML report in a real browser: headless Chromium opens the report of 200 generated records (FAKE,
xbench.report.fake) and of the fixture store; every image loads, nothing is wider than the page (wide tables
scroll inside their box), and a screenshot lands in the report's folder (slow: the report's CLI and Chromium).
The fast test opens a one-screen page with what the check must catch (an image that does not load, an element
wider than the page) and what it must let pass (a wide table scrolling in its box). `make test` installs
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
    assert len(check["images"]) >= 10 and all(i["loaded"] and i["natural"][0] > 0 for i in check["images"])
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
<img alt="plot" src="plot.png"><img alt="gone" src="missing.png">
<div class="scroll"><table><tr>{cells}</tr></table></div>
<div id="wide" style="width:{2 * WIDTH}px">too wide</div></body></html>""")
    result = check(page)
    assert not result.ok
    images = {i["alt"]: i for i in result.measured["images"]}
    assert images["plot"]["loaded"] and images["plot"]["natural"] == [40, 30] and not images["gone"]["loaded"]
    assert "image 'gone' did not load" in result.reason and "elements overflow the page: div#wide" in result.reason
    assert "plot" not in result.reason and "table" not in result.reason  # the table scrolls inside its box
    assert result.measured["tables"] == result.measured["tables_scrolling"] == 1
    assert result.measured["scroll_width"] >= 2 * WIDTH and f"px wide in a {WIDTH} px window" in result.reason
    written = json.loads(result.path.read_text())
    assert written["ok"] is False and written["problems"] == result.reason.split("; ")
    assert _png_size(result.screenshot)[0] == WIDTH
    assert not (tmp_path / ".browser_check.html").exists()  # the probe's copy is removed; the report stays as it was
    assert "<script" not in page.read_text()
