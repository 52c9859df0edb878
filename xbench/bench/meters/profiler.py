"""The profiler meter: torch.profiler over one untimed window of steps run after the timed ones.

Its window is the profiled window (`profiled_window`), never a timed one: `window_start` starts the
profiler, each step ends with `step()` (one `ProfilerStep#N` span per step, which the breakdown's phases
and TensorBoard's profiler plugin read as the step boundaries), `window_end` stops it, and `close`
returns `figures_of(prof)` once every step of the window ran. On every path out (an exception, a
divergence, a stop) the profiler is stopped in `window_end` and no figures are taken from a partial
window. A profiler that cannot start (another one is active: torch would let a second one start and stop the
first) leaves the steps to run unprofiled, so every rank still runs the same steps, and `close` returns
`refused`.

Users: the host/device breakdown (bench/meters/breakdown.BreakdownMeter) and bench.profile=torch's trace
(bench/profile.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

from xbench.bench.meters import Meter

# What kineto writes to the process's stderr from C++ around a profiler's start and stop: torch >= 2.14 logs
# `USDT:... profiler_start/stop` (and `STAGE:` lines) whatever KINETO_LOG_LEVEL says, and a CUDA build on a
# host without a GPU logs its failed device probe. None of it is the user's business; anything else is kept.
KINETO_NOISE = re.compile(
    r"^(?:(?:USDT|STAGE|INFO):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] "
    r"|ERROR:\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ DeviceProperties\.cpp:\d+\] gpuGetDeviceCount)"
)


@contextlib.contextmanager
def kineto_quieted():
    """File descriptor 2 through a temporary file while the profiler starts, steps or stops; on the way out
    what was written there goes back to stderr, less kineto's noise (KINETO_NOISE). The native library writes
    to the descriptor, not to Python's sys.stderr, so only swapping the descriptor can keep it off the
    console."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 (a closed stderr): nothing to keep clean
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not KINETO_NOISE.match(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class ProfilerMeter(Meter):
    """torch.profiler over the profiled window (the module doc says when); subclasses read it in
    `figures_of`."""

    def __init__(self, cuda: bool, steps: int, refused: dict | None = None, **options):
        super().__init__()
        self.cuda, self.steps, self.refused, self.options = cuda, steps, dict(refused or {}), options
        self._prof = None  # the running profiler, between window_start and window_end
        self._ready = None  # the profiler once its trace is complete
        self._stepped = 0
        self._started = False

    def figures_of(self, prof) -> dict:
        """The figures of a complete profiled window (subclasses say what they read)."""
        return {}

    def window_start(self) -> None:
        import warnings

        os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # a CUDA build on a CPU host logs a GPU probe failure
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        # another one runs: ours would stop it (torch does not refuse)
        if torch._C._autograd._profiler_enabled():
            return

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        try:
            # no profiler warm-up step: the timed windows already warmed the step
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
                prof = profile(activities=activities, on_trace_ready=self._trace_ready, **self.options,
                               schedule=schedule(wait=0, warmup=0, active=self.steps, repeat=1))
                with kineto_quieted():
                    prof.__enter__()
        except RuntimeError:  # a profiler already active: leave it alone, run the steps unprofiled
            return
        self._prof, self._started = prof, True

    def _trace_ready(self, prof) -> None:
        self._ready = prof

    def step(self) -> None:
        """After each step of the window (its last one synced)."""
        self._stepped += 1
        if self._prof is not None:
            with kineto_quieted():  # the last step of the schedule stops the profiler
                self._prof.step()

    def window_end(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            with kineto_quieted():
                prof.__exit__(None, None, None)

    def close(self) -> dict:
        self.window_end()  # never left running, whatever happened inside the window
        if not self._started:
            return self.refused if self.steps > 0 else {}
        if self._ready is None or self._stepped < self.steps:
            return {}  # a partial window: its run is failing, and says why
        return self.figures_of(self._ready)


def profiled_window(hooks, meter: ProfilerMeter) -> dict:
    """Run `meter.steps` steps of `hooks` (bench/loop.Hooks) as the meter's one window, entered and exited on
    every path; the last step ends with a sync, so its device work is inside its span. The meter's figures."""
    with meter:
        if meter.steps > 0:
            hooks.sync()
            with meter.window():
                for i in range(meter.steps):
                    hooks.step(*hooks.next_batch())
                    if i == meter.steps - 1:
                        hooks.sync()
                    meter.step()
    return meter.figures
