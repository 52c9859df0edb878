"""Meters: what is measured beside the timed windows, as one protocol.

A meter is a context manager: entered at the first timed window's edge, it brackets each window with
`window()` (outside the window's clock: loop.timed_window syncs and starts timing inside it) and
exits on every path out of the windows (their end, Diverged, an OOM, StopRequested, any exception),
so a thread it started never outlives the windows. `figures` holds its record fields once it has
exited normally; `discard()` drops the last window from them (a stalled window measured again).
Nothing runs inside a step: a meter reads counters at the edges, or samples from its own thread.

    with contextlib.ExitStack() as stack:
        for m in meters:
            stack.enter_context(m)
        with window(meters):
            loop.timed_window(...)
    figures = collect(meters)

The meters: `contention` (other processes' CPU and GPU use), `utilisation` (CPU counters at the
edges, NVML sampled on GPUs), `memory` (peaks reset at the first window's edge, read at the end), `energy`
(NVML's or RAPL's counter per window). GPU handles come from `nvml.handles` (CUDA ordinal -> NVML device) in
every one of them.

`profiler` (torch.profiler) is the same protocol over a window of its own: the untimed steps run after
the timed windows (`profiled_window`), so profiling never slows a measured step: its `window_start`
starts the profiler, `window_end` stops it on every path, `close` returns what the profile says. The
host/device breakdown (bench/meters/breakdown.BreakdownMeter) and bench.profile=torch's trace
(bench/profile.py) are its two users.
"""

from __future__ import annotations

import contextlib


class Meter:
    """The protocol's shape (subclasses override what they measure; every hook is cheap at an edge)."""

    figures: dict

    def __init__(self) -> None:
        self.figures = {}

    def open(self) -> None:
        """At the first window's edge."""

    def window_start(self) -> None:
        """Just before a timed window."""

    def window_end(self) -> None:
        """Just after a timed window, however it ended."""

    def discard(self) -> None:
        """Forget the last window (it is measured again)."""

    def close(self) -> dict:
        """After the last window, on every path: stop what runs, return the figures."""
        return {}

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.figures = self.close()
        except Exception:
            if exc_type is None:
                raise
            # the run is already failing: its own error is the one the record must say
        return False

    @contextlib.contextmanager
    def window(self):
        self.window_start()
        try:
            yield self
        except BaseException:
            with contextlib.suppress(Exception):  # never hide the window's own error behind a meter's
                self.window_end()
            raise
        self.window_end()


@contextlib.contextmanager
def window(meters: list[Meter]):
    """Every meter's `window()` around one timed window (entered in order, exited in reverse)."""
    with contextlib.ExitStack() as stack:
        for m in meters:
            stack.enter_context(m.window())
        yield


def collect(meters: list[Meter]) -> dict:
    """The exited meters' figures, in one dict."""
    return {k: v for m in meters for k, v in m.figures.items()}
