"""Figures as they are measured, from rank 0 to W&B: rank 0 appends each point as one JSON line to a file in the
run folder (flushed at once): `curve.jsonl` (train to target: each evaluation) or `windows.jsonl` (throughput:
each timed window once it has closed). The process that owns the W&B run tails that file and logs each point.
Rank 0 may run in a launched process (torchrun ranks, the XLA process, a fresh process per repeat), so a file
is the simplest channel that works for every launcher; a killed run leaves its points behind too.

Rank 0 writes a line only after the clock has stopped (the evaluation pause, the end of a window). A writer
that passes `wait_s` then waits (at most that long) until the tail acknowledges the line (`<file>.ack`: the
byte offset logged so far), so the W&B call is over before its next timed window starts.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

CURVE_FILE = "curve.jsonl"
WINDOWS_FILE = "windows.jsonl"


def _acked(path: Path) -> int:
    try:
        return int(Path(f"{path}.ack").read_text() or 0)
    except (OSError, ValueError):
        return 0


class CurveWriter:
    """Rank 0's side: one JSON object a line, flushed after each (the reader sees whole lines). `append`: a
    later process adds to the same file (whole-process repeats)."""

    def __init__(self, path: Path, points: list[dict] = (), append: bool = False, wait_s: float = 0.0):
        self.path, self.wait_s = Path(path), wait_s
        self.f = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        for point in points:  # a resumed run starts with the checkpoint's curve
            self.write(point)

    def write(self, point: dict) -> bool:
        """Write one point; with `wait_s`, wait until the tail has logged it. False: it did not in time."""
        self.f.write(json.dumps(point) + "\n")
        self.f.flush()
        if self.wait_s <= 0:
            return True
        end, deadline = self.f.tell(), time.monotonic() + self.wait_s
        while _acked(self.path) < end:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def close(self) -> None:
        self.f.close()


class CurveTail(threading.Thread):
    """The reader's side: calls `on_point(point)` for every complete line, in order, until `stop()` (which
    reads what is left first). A malformed line is skipped (and counted), never fatal."""

    def __init__(self, path: Path, on_point, interval_s: float = 0.2, ack: bool = False):
        super().__init__(name="xbench-curve-tail", daemon=True)
        self.path, self.on_point, self.interval_s, self.ack = Path(path), on_point, interval_s, ack
        self._done = threading.Event()
        self._offset, self._partial = 0, ""
        self.points, self.bad_lines = 0, 0

    def _read(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self._offset)
                chunk = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for the next read
        for line in filter(None, lines):
            try:
                point = json.loads(line)
            except json.JSONDecodeError:
                self.bad_lines += 1
                continue
            self.on_point(point)
            self.points += 1
        if self.ack and lines:  # every whole line so far is logged: say how far (atomically)
            tmp = Path(f"{self.path}.ack.tmp")
            tmp.write_text(str(self._offset - len(self._partial.encode())))
            os.replace(tmp, f"{self.path}.ack")

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self._read()

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()
        self._read()
