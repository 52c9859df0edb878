"""The files a rank writes into its run folder and the record side reads: the checkpoint's name and the live
feeds (rank 0's side of sinks/curve.py: one JSON point a line, written through records/safe_io.py,
best-effort).

Here, below the sinks, so that a rank writes its feed without importing a sink (the contract "A rank never
publishes", pyproject.toml); the tail that hands each point to W&B stays in sinks/curve.py.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from xbench.records import safe_io

CHECKPOINT_FILE = "checkpoint.pt"  # a train-to-target run's resumable state (bench/training.py)
CURVE_FILE = "curve.jsonl"
WINDOWS_FILE = "windows.jsonl"
MAX_LINE_BYTES = 4 << 20  # one point is a few hundred bytes (a window's step times: a few KB)


def _say(text: str) -> None:
    with contextlib.suppress(Exception):
        print(text, file=sys.stderr, flush=True)


def _acked(path: Path) -> int:
    try:
        return int(safe_io.read_limited(f"{path}.ack", 64).decode() or 0)
    except (OSError, ValueError):
        return 0


class CurveWriter:
    """Rank 0's side: one JSON object a line, flushed after each (the reader sees whole lines). `append`: a
    later process adds to the same file (whole-process repeats)."""

    def __init__(self, path: Path, points: list[dict] = (), append: bool = False, wait_s: float = 0.0):
        self.path, self.wait_s = Path(path), wait_s
        self.problem: str | None = None  # why the feed stopped (None: every point so far was written)
        self.f = None
        try:  # never through a planted link; kept open for the run
            self.f = safe_io.open_append(path) if append else safe_io.open_truncate(path)
        except OSError as e:
            self._stop(e)
        for point in points:  # a resumed run starts with the checkpoint's curve
            self.write(point)

    def _stop(self, e: Exception) -> None:
        self.problem = f"{type(e).__name__}: {e}"
        _say(
            f"xbench: the live feed {self.path} stopped ({self.problem}); the run goes on and its record "
            "keeps every figure"
        )
        if self.f is not None:
            with contextlib.suppress(Exception):
                self.f.close()
        self.f = None

    def write(self, point: dict) -> bool:
        """Write one point; with `wait_s`, wait until the tail has logged it. False: it did not in time, or
        the feed has stopped (it never raises: a full disk must not end the run)."""
        if self.f is None:
            return False
        try:
            self.f.write(json.dumps(point, default=str) + "\n")
            self.f.flush()
            end = self.f.tell()
        except (OSError, ValueError) as e:  # ENOSPC, EIO, EFBIG, a store gone read-only
            self._stop(e)
            return False
        if self.wait_s <= 0:
            return True
        deadline = time.monotonic() + self.wait_s
        while _acked(self.path) < end:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def close(self) -> None:
        if self.f is not None:
            with contextlib.suppress(OSError, ValueError):
                self.f.close()
            self.f = None
