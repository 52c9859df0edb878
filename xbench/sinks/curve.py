"""The evaluation curve as it happens: rank 0 appends each point as one JSON line to `curve.jsonl` in the run
folder (flushed at once), and the process that owns the W&B run tails that file and logs each point. Rank 0
may run in a launched process (torchrun ranks, the XLA process), so a file is the simplest channel that works
for every launcher; a killed run leaves its curve behind too.

Rank 0 writes a line only after the training segment's clock has stopped (the evaluation pause); the tail's
W&B call is made in another process, never inside a rank's timed segment.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

CURVE_FILE = "curve.jsonl"


class CurveWriter:
    """Rank 0's side: one JSON object a line, flushed after each (the reader sees whole lines)."""

    def __init__(self, path: Path, points: list[dict] = ()):
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 (kept open for the run)
        for point in points:  # a resumed run starts with the checkpoint's curve
            self.write(point)

    def write(self, point: dict) -> None:
        self.f.write(json.dumps(point) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


class CurveTail(threading.Thread):
    """The reader's side: calls `on_point(point)` for every complete line, in order, until `stop()` (which
    reads what is left first). A malformed line is skipped (and counted), never fatal."""

    def __init__(self, path: Path, on_point, interval_s: float = 0.2):
        super().__init__(name="xbench-curve-tail", daemon=True)
        self.path, self.on_point, self.interval_s = Path(path), on_point, interval_s
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

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self._read()

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()
        self._read()
