"""The HTML report checked in a real browser: headless Chromium opens it, and a script measures what a
reader would see: every image loaded (decoded, with a size), every chart drawn, nothing wider than the page (a
wide table scrolls inside its box; the page itself never scrolls sideways), and the page's height; then it
uses the page: a header click sorts its table, the filter keeps the matching rows, hovering a bar shows its
value, a legend click hides its series. No request may leave the page: Chromium's net log, the page's resource
list and its content-policy refusals are all read. A full-page screenshot goes beside the report
(`screenshot.png`), the measurements to `browser_check.json`.

The checking script runs in a copy of the report (`.browser_check.html`, removed after). Chromium is Debian's
`chromium` package (`apt-get install -y chromium`; `make test` installs it when it can).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH = 1280  # a laptop's browser window, in CSS pixels
MAX_SHOT_H = 16000  # Chromium's screenshots stop being reliable beyond ~16k px

# Runs after every image has loaded; writes its findings into the page for --dump-dom to read. Then it uses
# the page as a reader would: clicks a numeric column's header (are the rows in its order now?), types a
# row's label into that table's filter, hovers a chart's first bar or point (does the tooltip show its
# value?), clicks the first legend entry (is that series hidden?); and lists every resource the page loaded.
PROBE = """<script>
const violations = [];
document.addEventListener('securitypolicyviolation',
  e => violations.push(e.blockedURI + ' (' + e.violatedDirective + ')'));
const sleep = ms => new Promise(r => setTimeout(r, ms));
async function until(ok, ms = 3000) {
  for (let t = 0; t < ms && !ok(); t += 25) await sleep(25);
  return ok();
}
const keyOf = td => td.dataset.v !== undefined ? parseFloat(td.dataset.v) : td.textContent.trim();
function sortCheck() {
  for (const table of document.querySelectorAll('.xb-table table')) {
    const rows = [...table.tBodies[0].rows];
    if (rows.length < 3) continue;
    const ths = [...table.tHead.rows[0].cells];
    for (let c = 0; c < ths.length; c++) {
      const before = rows.map(r => r.cells[c]).filter(td => td && td.dataset.v !== undefined).map(keyOf);
      if (before.length < 3 || new Set(before).size < 3 ||
          before.every((v, i) => !i || before[i - 1] <= v)) continue;
      ths[c].click();
      const after = [...table.tBodies[0].rows].map(r => r.cells[c])
        .filter(td => td.dataset.v !== undefined).map(keyOf);
      return {table: table.closest('.xb-table').id, column: ths[c].textContent, rows: rows.length,
              before: before.slice(0, 5), after: after.slice(0, 5), order: ths[c].getAttribute('aria-sort'),
              ascending: after.every((v, i) => !i || after[i - 1] <= v),
              same_rows: after.length === before.length && [...after].sort((x, y) => x - y).join() ===
                         [...before].sort((x, y) => x - y).join()};
    }
  }
  return null;
}
function filterCheck() {
  const box = document.querySelector('.xb-table'); if (!box) return null;
  const rows = [...box.querySelectorAll('tbody tr')], label = rows[0] && rows[0].cells[0].textContent.trim();
  const input = box.querySelector('input.xb-filter'); if (!input || !label) return null;
  input.value = label; input.dispatchEvent(new Event('input'));
  const shown = rows.filter(r => !r.hidden).length;
  const out = {table: box.id, typed: label, rows: rows.length, shown,
               first_shown: rows.find(r => !r.hidden) === rows[0]};
  input.value = ''; input.dispatchEvent(new Event('input'));
  out.after_clear = rows.filter(r => !r.hidden).length;
  return out;
}
async function hoverCheck() {
  const figs = document.querySelectorAll('figure.xb-figure.drawn');
  if (!figs.length || !window.xbenchCharts) return null;
  const fig = figs[0], chart = window.xbenchCharts[fig.id][0];
  const i = chart.data.datasets.findIndex(ds => ds.data.some(v => v !== null));
  const meta = chart.getDatasetMeta(i), j = chart.data.datasets[i].data.findIndex(v => v !== null);
  const move = () => {  // where the bar is now: a chart still settling its size moves it
    const el = meta.data[j], r = chart.canvas.getBoundingClientRect();
    const x = el.base !== undefined && chart.options.indexAxis === 'y' ? (el.base + el.x) / 2 : el.x;
    chart.canvas.dispatchEvent(new MouseEvent('mousemove',
      {clientX: r.left + x, clientY: r.top + el.y, bubbles: true}));
  };
  // Chart.js handles pointer events on its next animation frame; the pointer is moved onto the bar again each
  // look, as a reader's pointer keeps sending moves (one event, sent while the chart settled, could miss it).
  // Up to 8 s of the page's virtual time: the sleeps run ahead of the frames Chromium draws, and on a loaded
  // machine (CI's second pass) 3 s of it passed with no tooltip created at all ('showed None').
  await until(() => {
    const t = document.getElementById('xb-tip');
    if (t && getComputedStyle(t).opacity === '1') return true;
    move();
    return false;
  }, 8000);
  const tip = document.getElementById('xb-tip');
  const b = chart.data.datasets[i].xb[j];
  const out = {figure: fig.id, tooltip: tip ? tip.innerText : null,
               visible: !!tip && getComputedStyle(tip).opacity === '1',
               expected: b && b.text !== undefined ? b.text : null,
               label: b && b.label !== undefined ? b.label : null};
  chart.canvas.dispatchEvent(new MouseEvent('mouseout', {bubbles: true}));
  return out;
}
async function legendCheck() {
  const key = document.querySelector('figure.xb-figure.drawn .xb-key'); if (!key) return null;
  const fig = key.closest('figure'), charts = window.xbenchCharts[fig.id];
  const visible = () => charts.flatMap(c => c.data.datasets.map(
    (ds, i) => ds.xbKey === key.dataset.key ? c.isDatasetVisible(i) : null)).filter(v => v !== null);
  const before = visible(); key.click(); const after = visible(); key.click();
  return {figure: fig.id, key: key.dataset.key, before, after};
}
window.addEventListener('load', async () => {
  const W = document.documentElement.clientWidth;
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
    natural: [i.naturalWidth, i.naturalHeight], shown: Math.round(i.getBoundingClientRect().width)}));
  const overflow = [];
  for (const el of document.body.querySelectorAll('*')) {
    // a scroll box clips its own
    if (el.parentElement && el.parentElement.closest('.scroll')) continue;
    const r = el.getBoundingClientRect();
    if (r.width && (r.right > W + 1 || r.left < -1)) overflow.push(el.tagName.toLowerCase() +
      (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : '') + ' ' +
      Math.round(r.left) + '..' + Math.round(r.right));
  }
  const scrolled = [...document.querySelectorAll('.scroll')]
    .filter(b => b.scrollWidth > b.clientWidth + 1).length;
  const charts = [...document.querySelectorAll('figure.xb-figure')];
  const out = {width: W, scroll_width: document.documentElement.scrollWidth,
               height: document.documentElement.scrollHeight, images, overflow: overflow.slice(0, 40),
               overflow_count: overflow.length, tables: document.querySelectorAll('table').length,
               tables_scrolling: scrolled, findings: document.querySelectorAll('.findings li').length,
               charts: charts.length, charts_drawn: charts.filter(f => f.classList.contains('drawn') &&
                 [...f.querySelectorAll('canvas')].every(c => c.width > 0 && c.height > 0)).length};
  const pre = document.createElement('pre'); pre.id = 'xbench-check';
  const write = () => {
    out.resources = performance.getEntriesByType('resource').map(e => e.name);
    out.violations = violations;
    pre.textContent = JSON.stringify(out);
  };
  out.errors = [];
  out.used = false;  // true once every click and hover below has run
  write();
  document.body.appendChild(pre);  // the measurements stand even if the browser's time runs out below
  for (const [k, f] of [['sort', sortCheck], ['filter', filterCheck], ['hover', hoverCheck],
                        ['legend', legendCheck]]) {
    try { out[k] = await f(); } catch (e) { out.errors.push(k + ': ' + e); }
  }
  out.used = true;
  write();
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
        return (
            f"{'ok' if self.ok else 'FAILED: ' + self.reason}; {loaded}/{len(m['images'])} images loaded, "
            f"{m.get('charts_drawn', 0)}/{m.get('charts', 0)} charts drawn, "
            f"{len(m.get('network_requests') or [])} network requests, "
            f"page {m['scroll_width']} px wide in a {m['width']} px window, {m['height']} px tall, "
            f"{m['tables']} tables ({m['tables_scrolling']} scroll inside their box); "
            f"screenshot {self.screenshot}"
        )


QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-pings",
         "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection"]


def _run(browser: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Chromium with `args`, in a process group of its own, its output in files: it ends at its exit or at
    `timeout` (killed; returncode negative, the timeout said in stderr), and every process it started
    (renderer, GPU, crash handler) is killed with it. subprocess.run's pipes waited for the last of those to
    close them: a helper left alive held the caller forever, timeout or not."""
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
             "--allow-file-access-from-files", f"--window-size={WIDTH},900", *QUIET]
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        flags.append("--no-sandbox")
    cmd = [browser, *flags]
    with tempfile.TemporaryDirectory(prefix="xbench-chromium-") as profile, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        cmd += [f"--user-data-dir={profile}", *args]
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            p.wait(timeout=timeout)
            late = ""
        except subprocess.TimeoutExpired:
            late = f"\n(Chromium had not exited after {timeout:g} s: killed)"
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # the group: Chromium's own processes, left or not
            p.wait()
        out.seek(0)
        err.seek(0)
        said = [f.read().decode("utf-8", "replace") for f in (out, err)]
    return subprocess.CompletedProcess(cmd, p.returncode, said[0], said[1] + late)


def page_requests(net_log: Path) -> list[str] | None:
    """The URLs the page itself asked the network for, from Chromium's net log (--log-net-log): requests whose
    network isolation key is the file:// page's (the browser's own update and account checks have another).
    None: no readable log."""
    try:
        events = json.loads(net_log.read_text())["events"]
    except (OSError, ValueError, KeyError):
        return None
    urls = {e["params"]["url"] for e in events if isinstance(e.get("params"), dict) and "url" in e["params"]
            and str(e["params"].get("network_isolation_key", "")).startswith("file://")}
    return sorted(u for u in urls if not u.startswith(("file:", "data:")))


def _interaction_problems(m: dict) -> list[str]:
    """What the probe's clicks and hovers found wrong (nothing to say where the page has no such part)."""
    bad = [f"the probe failed: {e}" for e in m.get("errors", [])]
    if not m.get("used", True):
        bad.append("the probe's clicks and hovers did not finish in the browser's time")
    if m.get("charts_drawn", 0) < m.get("charts", 0):
        bad.append(f"{m['charts'] - m['charts_drawn']} of {m['charts']} charts were not drawn")
    s = m.get("sort")
    if s and not (s["ascending"] and s["same_rows"] and s["order"] == "ascending"):
        bad.append(f"clicking {s['column']!r} in {s['table']} did not sort its rows ({s['after']})")
    f = m.get("filter")
    if f and not (f["shown"] >= 1 and f["first_shown"] and f["after_clear"] == f["rows"]):
        bad.append(f"the filter of {f['table']} kept {f['shown']} of {f['rows']} rows for {f['typed']!r}")
    h = m.get("hover")
    if h and not (h["visible"] and h["expected"] and h["expected"] in (h["tooltip"] or "")):
        bad.append(
            f"hovering a bar of {h['figure']} showed {h['tooltip']!r}, not its value {h['expected']!r}"
        )
    g = m.get("legend")
    if g and (not g["before"] or g["before"] == g["after"]):
        bad.append(f"clicking the legend entry {g['key']!r} of {g['figure']} did not hide its series")
    return bad


def check(report: str | Path, timeout: float = 120.0) -> Check:
    """Open `report` (report.html) in headless Chromium; measure; use its tables and charts; record every
    request; screenshot beside it."""
    report = Path(report).resolve()
    browser = find_browser()
    if browser is None:
        return Check(False, "no Chromium on this machine (apt-get install -y chromium, as root)")
    probe = report.with_name(".browser_check.html")
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>", 1))
    try:
        with tempfile.TemporaryDirectory(prefix="xbench-netlog-") as d:
            log = Path(d) / "net.json"
            p = _run(
                browser,
                ["--virtual-time-budget=30000", f"--log-net-log={log}", "--dump-dom", probe.as_uri()],
                timeout,
            )
            asked = page_requests(log)
    finally:
        probe.unlink(missing_ok=True)
    m = RESULT.search(p.stdout)
    if p.returncode != 0 or m is None:
        got = "its page came back without the probe's result" if "<body" in p.stdout else "no page came back"
        return Check(
            False, f"Chromium did not report (exit {p.returncode}; {got}): {p.stderr.strip()[-500:]}"
        )
    measured = json.loads(html.unescape(m.group(1)))
    measured["network_requests"] = asked
    shot = report.with_name("screenshot.png")
    height = min(MAX_SHOT_H, measured["height"])
    _run(browser, [f"--window-size={WIDTH},{height}", f"--screenshot={shot}", report.as_uri()], timeout)
    bad = [f"image {i['alt']!r} did not load" for i in measured["images"] if not i["loaded"]]
    if measured["scroll_width"] > measured["width"] + 1:
        bad.append(f"the page is {measured['scroll_width']} px wide in a {measured['width']} px window")
    if measured["overflow_count"]:
        bad.append(
            f"{measured['overflow_count']} elements overflow the page: {', '.join(measured['overflow'][:5])}"
        )
    bad += _interaction_problems(measured)
    left = sorted(
        {*(asked or []), *(u for u in measured["resources"] if not u.startswith(("file:", "data:")))}
    )
    if left:
        bad.append(f"the page asked the network for {len(left)} resources: {', '.join(left[:3])}")
    if measured["violations"]:
        bad.append(f"the page's content policy refused {', '.join(measured['violations'][:3])}")
    if asked is None:
        bad.append("Chromium wrote no readable net log: the page's requests are unknown")
    if not shot.is_file():
        bad.append("no screenshot was written")
    path = report.with_name("browser_check.json")
    path.write_text(json.dumps({**measured, "ok": not bad, "problems": bad, "screenshot": shot.name,
                                "browser": browser}, indent=1))
    return Check(not bad, "; ".join(bad), measured, shot if shot.is_file() else None, path)
