"""The HTML report in a real browser: headless Chromium opens the report of 200 generated records (FAKE,
xbench.report.fake) and of the fixture store; every image loads, nothing is wider than the page (wide tables
scroll inside their box), and a screenshot lands in the report's folder. `make test` installs Chromium when
it can (Makefile: browser); without it the test says so and skips."""

from __future__ import annotations

import struct

import pytest

from tests.test_report import run_report_without_torch, write_fixture_store
from xbench.report.browser import WIDTH, find_browser
from xbench.report.fake import write_fake_store

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium here: the browser check needs it "
                                "(`apt-get install -y chromium` as root; `make test` does that when it can)")


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


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
    import json

    check = json.loads((out / "browser_check.json").read_text())
    assert check["ok"], check["problems"]
    assert len(check["images"]) >= 10 and all(i["loaded"] and i["natural"][0] > 0 for i in check["images"])
    assert check["scroll_width"] <= check["width"] and check["overflow_count"] == 0
    assert check["findings"] >= 3 and check["tables"] >= 8
    w, h = _png_size(out / "screenshot.png")
    assert w == WIDTH and h > 2000
    assert "browser check: ok" in p.stdout
