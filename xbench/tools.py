"""xbench's command-line tools: each one's console script (pyproject.toml's [project.scripts] lists the same,
tests/test_console_scripts.py checks it) and its `python -m` module, the name its --help shows, and the status
line a tool shows while it works. Torch-free and import-free: the analysis side's tools use it too."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from contextlib import suppress
from pathlib import Path

# console script -> the module `python -m` runs (its function in pyproject.toml)
SCRIPTS = {
    "xbench": "xbench",
    "xbench-report": "xbench.report",
    "xbench-studies": "xbench.studies",
    "xbench-cost": "xbench.cost",
    "xbench-parity": "xbench.parity",
}


def prog(module: str) -> str:
    """The tool's name as the user called it: its console script (`xbench-report`), else `python -m
    MODULE`."""
    script = Path(sys.argv[0]).name
    return script if SCRIPTS.get(script) == module else f"python -m {module}"


class StatusLine:
    """One stderr line naming what a tool is doing now (`prefix` + the step), rewritten by the next step and
    erased at close(): a tqdm bar of its description only. xbench's start-up phases (sinks/console.py) and the
    report's stages (report/__main__.py)."""

    def __init__(self, prefix: str, enabled: bool = True):
        self.prefix, self.enabled, self.bar = prefix, enabled, None

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        desc = f"{self.prefix}{text}"
        if self.bar is None:
            self.bar = tqdm(total=None, desc=desc, file=sys.stderr, bar_format="{desc}", leave=False,
                            dynamic_ncols=True)
        else:
            self.bar.set_description_str(desc)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def exit_now(code: int = 0) -> None:
    """Out of this process without the interpreter's teardown, its buffered output flushed first: the one way
    xbench's processes skip tearing down what they built (the CLIs' `leave`, a pool worker, a sweep's
    template)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with suppress(Exception):
            stream.flush()
    os._exit(code)


def leave(code: int | str | None) -> None:
    """SystemExit's meaning of `code` (None 0, a string printed and 1), after a normal exit's duties, then out
    without the teardown (a process that imported torch took 1.5-2.2 s to tear down; the report's rows and
    frame of 10,000 runs 0.2-0.5 s)."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # Python's own order at exit: threading's exit hooks (concurrent.futures wakes its idle workers:
    # inductor's compile pool would otherwise be joined forever), then every non-daemon thread joined, then
    # atexit.
    threading._shutdown()
    atexit._run_exitfuncs()
    exit_now(code or 0)


def take(count, n: int) -> int | None:
    """The next of `n` items for this process, from `count` (a multiprocessing.Value shared with forked
    processes taking the same items: each index is taken once), or None when all are taken."""
    with count.get_lock():
        i = count.value
        if i >= n:
            return None
        count.value = i + 1
    return i
