"""The HTML report checked in a real browser: headless Chromium opens it, and a script measures what a
reader would see: every image loaded (decoded, with a size), nothing wider than the page (a wide table
scrolls inside its box; the page itself never scrolls sideways), and the page's height. A full-page
screenshot goes beside the report (`screenshot.png`), the measurements to `browser_check.json`.

The report itself stays script-free: the checking script runs in a copy (`.browser_check.html`, removed
after). Chromium is Debian's `chromium` package (`apt-get install -y chromium`; `make test` installs it
when it can).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH = 1280  # a laptop's browser window, in CSS pixels
MAX_SHOT_H = 16000  # Chromium's screenshots stop being reliable beyond ~16k px

# Runs after every image has loaded; writes its findings into the page for --dump-dom to read.
PROBE = """<script>
window.addEventListener('load', () => {
  const W = document.documentElement.clientWidth;
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
    natural: [i.naturalWidth, i.naturalHeight], shown: Math.round(i.getBoundingClientRect().width)}));
  const overflow = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.parentElement && el.parentElement.closest('.scroll')) continue;  // a scroll box clips its own
    const r = el.getBoundingClientRect();
    if (r.width && (r.right > W + 1 || r.left < -1)) overflow.push(el.tagName.toLowerCase() +
      (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : '') + ' ' + Math.round(r.left) + '..' +
      Math.round(r.right));
  }
  const scrolled = [...document.querySelectorAll('.scroll')].filter(b => b.scrollWidth > b.clientWidth + 1).length;
  const out = {width: W, scroll_width: document.documentElement.scrollWidth,
               height: document.documentElement.scrollHeight, images, overflow: overflow.slice(0, 40),
               overflow_count: overflow.length, tables: document.querySelectorAll('table').length,
               tables_scrolling: scrolled, findings: document.querySelectorAll('.findings li').length};
  const pre = document.createElement('pre'); pre.id = 'xbench-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
RESULT = re.compile(r'<pre id="xbench-check">(.*?)</pre>', re.S)


def find_browser() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


@dataclass
class Check:
    ok: bool
    reason: str = ""  # why not ok (no browser, an image that did not load, what overflows)
    measured: dict = field(default_factory=dict)
    screenshot: Path | None = None
    path: Path | None = None  # browser_check.json

    def summary(self) -> str:
        m = self.measured
        if not m:
            return self.reason
        loaded = sum(i["loaded"] for i in m["images"])
        return (f"{'ok' if self.ok else 'FAILED: ' + self.reason}; {loaded}/{len(m['images'])} images loaded, "
                f"page {m['scroll_width']} px wide in a {m['width']} px window, {m['height']} px tall, "
                f"{m['tables']} tables ({m['tables_scrolling']} scroll inside their box); screenshot {self.screenshot}")


def _run(browser: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
             "--allow-file-access-from-files", f"--window-size={WIDTH},900"]
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        flags.append("--no-sandbox")
    with tempfile.TemporaryDirectory(prefix="xbench-chromium-") as profile:
        return subprocess.run([browser, *flags, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                              timeout=timeout)


def check(report: str | Path, timeout: float = 120.0) -> Check:
    """Open `report` (report.html) in headless Chromium; measure; screenshot beside it."""
    report = Path(report).resolve()
    browser = find_browser()
    if browser is None:
        return Check(False, "no Chromium on this machine (apt-get install -y chromium, as root)")
    probe = report.with_name(".browser_check.html")
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>", 1))
    try:
        p = _run(browser, ["--virtual-time-budget=15000", "--dump-dom", probe.as_uri()], timeout)
    finally:
        probe.unlink(missing_ok=True)
    m = RESULT.search(p.stdout)
    if p.returncode != 0 or m is None:
        return Check(False, f"Chromium did not report (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    measured = json.loads(html.unescape(m.group(1)))
    shot = report.with_name("screenshot.png")
    height = min(MAX_SHOT_H, measured["height"])
    _run(browser, [f"--window-size={WIDTH},{height}", f"--screenshot={shot}", report.as_uri()], timeout)
    bad = [f"image {i['alt']!r} did not load" for i in measured["images"] if not i["loaded"]]
    if measured["scroll_width"] > measured["width"] + 1:
        bad.append(f"the page is {measured['scroll_width']} px wide in a {measured['width']} px window")
    if measured["overflow_count"]:
        bad.append(f"{measured['overflow_count']} elements overflow the page: {', '.join(measured['overflow'][:5])}")
    if not shot.is_file():
        bad.append("no screenshot was written")
    path = report.with_name("browser_check.json")
    path.write_text(json.dumps({**measured, "ok": not bad, "problems": bad, "screenshot": shot.name,
                                "browser": browser}, indent=1))
    return Check(not bad, "; ".join(bad), measured, shot if shot.is_file() else None, path)
