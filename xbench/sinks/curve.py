"""Figures as they are measured, from rank 0 to W&B: rank 0 appends each point as one JSON line to a file in
the run folder (flushed at once): `curve.jsonl` (train to target: each evaluation) or `windows.jsonl`
(throughput: each timed window once it has closed). The process that owns the W&B run tails that file and logs
each point. Rank 0 may run in a launched process (torchrun ranks, the XLA process, a fresh process per
repeat), so a file is the simplest channel that works for every launcher; a killed run leaves its points
behind too.

Rank 0 writes a line only after the clock has stopped (the evaluation pause, the end of a window). A writer
that passes `wait_s` then waits (at most that long) until the tail acknowledges the line (`<file>.ack`: the
byte offset logged so far), so the W&B call is over before its next timed window starts.

Both sides are best-effort: the record, not the feed, is the result. A feed that cannot be written (disk
full, a read-only store, a planted link, which is refused and never followed: records/safe_io.py) stops
with one line on stderr naming the file, and the run goes on; a point the logger fails on, a line too long
to be a point or an unreadable file is counted and skipped, never fatal.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from xbench.records import safe_io
from xbench.records.run_files import (  # noqa: F401 (rank 0's side, re-exported for the tail's users)
    CURVE_FILE,
    MAX_LINE_BYTES,
    WINDOWS_FILE,
    CurveWriter,
    _acked,
    _say,
)

MAX_READ_BYTES = 16 << 20  # what one read of the tail takes in at most


class CurveTail(threading.Thread):
    """The reader's side: calls `on_point(point)` for every complete line, in order, until `stop()` (which
    reads what is left first). A malformed line is skipped (and counted), never fatal."""

    def __init__(self, path: Path, on_point, interval_s: float = 0.2, ack: bool = False):
        super().__init__(name="xbench-curve-tail", daemon=True)
        self.path, self.on_point, self.interval_s, self.ack = Path(path), on_point, interval_s, ack
        self._done = threading.Event()
        self._offset, self._partial = 0, ""
        self.points, self.bad_lines, self.failed_points = 0, 0, 0
        self.problem: str | None = None  # the first failure (reading, logging, acknowledging), said once

    def _note(self, what: str, e: Exception) -> None:
        if self.problem is None:
            self.problem = f"{what}: {type(e).__name__}: {e}"
            _say(
                f"xbench: the live feed from {self.path}: {self.problem}; the run goes on and its record "
                "keeps every figure"
            )

    def _chunk(self) -> str:
        """What was appended since the last read: a regular file only (a planted FIFO would block), never
        more than MAX_READ_BYTES at once."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return ""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"{self.path} is not a regular file")
            data = os.pread(fd, MAX_READ_BYTES, self._offset)
        finally:
            os.close(fd)
        self._offset += len(data)
        return data.decode("utf-8", errors="replace")

    def _read(self) -> None:
        try:
            chunk = self._chunk()
        except OSError as e:
            self._note("reading", e)
            return
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for the next read
        if len(self._partial) > MAX_LINE_BYTES:  # no point is that long: drop it
            self._partial, self.bad_lines = "", self.bad_lines + 1
        for line in filter(None, lines):
            try:
                point = safe_io.load_json(line, MAX_LINE_BYTES)
            except ValueError:
                self.bad_lines += 1
                continue
            try:
                self.on_point(point)
            except Exception as e:  # the logger's trouble (W&B's disk full) never ends the run
                self.failed_points += 1
                self._note("logging a point", e)
            self.points += 1
        if self.ack and lines:  # every whole line so far is handled: say how far (atomically)
            try:
                safe_io.atomic_write(
                    Path(f"{self.path}.ack"), str(self._offset - len(self._partial.encode())), fsync=False
                )  # a progress mark for the writer, not a result
            except OSError as e:
                self._note("acknowledging", e)

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self._read()

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()
        self._read()
