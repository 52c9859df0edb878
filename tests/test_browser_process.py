"""How the browser check runs Chromium (xbench/report/browser.py `_run`): it returns when Chromium exits or at
its timeout, whatever the processes Chromium started still hold, and leaves none of them behind.

The fake browser is a shell script that does what Chromium's helpers can do (a crash handler or a renderer left
alive with the browser's stdout and stderr inherited), the documented way `subprocess.run(capture_output=True)`
never returns (Python's subprocess docs: communicate() reads until EOF, which a grandchild holding the pipe
delays); the real Chromium is opened by tests/test_report_browser.py."""

from __future__ import annotations

import time
from pathlib import Path

from xbench.report.browser import _run


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (this container's init may reap it later)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _assert_gone(pid: int) -> None:
    """Gone within 5 s (the kill is sent before _run returns; the kernel takes a moment to end it)."""
    for _ in range(50):
        if _gone(pid):
            return
        time.sleep(0.1)
    raise AssertionError(f"Chromium's helper {pid} outlived the check")


def _fake(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "fake-chromium"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return exe


def _pid(path: Path) -> int:
    for _ in range(100):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError("the fake's helper never wrote its pid")


def test_a_helper_holding_the_output_neither_holds_the_check_nor_outlives_it(tmp_path):
    pidfile = tmp_path / "helper.pid"
    exe = _fake(tmp_path, f'sleep 300 & echo $! > {pidfile}\necho "the page"\necho "a warning" >&2\nexit 0')
    t0 = time.monotonic()
    p = _run(str(exe), ["--dump-dom", "file:///x.html"], timeout=60)
    assert time.monotonic() - t0 < 20
    assert p.returncode == 0 and p.stdout == "the page\n" and p.stderr == "a warning\n"
    assert "--dump-dom" in p.args and any(a.startswith("--user-data-dir=") for a in p.args)
    _assert_gone(_pid(pidfile))


def test_a_browser_that_never_exits_is_killed_at_the_timeout_with_its_group(tmp_path):
    pidfile = tmp_path / "helper.pid"
    exe = _fake(tmp_path, f"sleep 300 & echo $! > {pidfile}\necho started\nsleep 300")
    t0 = time.monotonic()
    p = _run(str(exe), [], timeout=1.5)
    assert 1.4 < time.monotonic() - t0 < 20
    assert p.returncode < 0 and p.stdout == "started\n"
    assert p.stderr.endswith("(Chromium had not exited after 1.5 s: killed)")
    _assert_gone(_pid(pidfile))
