"""Helpers for work that goes on in a fresh spawned process (xla launcher, whole-process repeats).

The parent waits on the child's future and passes a stop on to it; the child draws its own progress
bar (callbacks cannot be pickled) and turns a stop signal (rank.STOP_SIGNALS) into a stop after the
step. Errors, interruptions and divergence come back as the same exceptions (pickled).

Children die with their parent: a launched process watches its parent and exits at once when it is
gone (SIGKILL, a second signal's os._exit, a crash), so it never outlives it holding a device or the
caller's pipes; and once its work is done, a stop signal ends it HANDBACK_S later (time to hand back the
work's result: nothing else is left to save).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context

from xbench.rank import STOP_SIGNALS, StopFlag, StopRequested
from xbench.records.redact import RedactingStream
from xbench.tools import exit_now

PARENT_POLL_S = 0.2


_WATCHING: list[int] = []  # the parent pid this process already watches


def die_with_parent(parent: int | None = None, poll_s: float = PARENT_POLL_S) -> None:
    """Exit at once when the parent process is gone (a daemon thread polls the parent's pid). `parent`:
    the pid the parent passed (a pool initializer), so that a parent that died while this process was
    still starting is noticed too; else the current parent."""
    parent = parent or os.getppid()
    if parent in _WATCHING:
        return
    _WATCHING.append(parent)
    alive = lambda: os.getppid() == parent  # noqa: E731
    if os.getppid() != parent:  # forked by a sweep's template (launch/template.py): the runner is further up
        import psutil

        try:
            proc = psutil.Process(parent)
            alive = lambda: proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE  # noqa: E731
        except psutil.Error:
            os._exit(1)

    def watch():
        while alive():
            time.sleep(poll_s)
        os._exit(1)  # nobody is left to take the result

    threading.Thread(target=watch, name="xbench-parent-watch", daemon=True).start()


class _ChildFlag(StopFlag):
    """A launched process's stop flag, shared by every rank the process runs (ranks that are threads of
    it: torch_xla.launch's replicas). It is busy until its works have returned: from its creation until
    the first work ends, and while any section in `working` (a work: `reason_on_stop`) is still running."""

    def __init__(self):
        self.entered = self.left = 0

    @property
    def busy(self) -> bool:
        return self.left == 0 or self.entered > self.left


_LOCK = threading.Lock()
_FLAG: list[tuple[int, _ChildFlag]] = []  # (pid, flag): this process's, installed once by its main thread
_GRACE_S: list[float] = []  # bench.stop_grace_s, where the launcher passed it (exit_within)


HANDBACK_S = 2.0  # after a stop signal, how long an idle process has left to hand back its last result


def _exit_after(seconds: float, code: int) -> None:
    timer = threading.Timer(seconds, os._exit, (code,))
    timer.daemon = True
    timer.start()


def exit_within(grace_s: float | None) -> None:
    """After the first stop signal, this process exits at the latest `grace_s` later, whatever it is doing (a
    step that hangs, a collective whose peer has gone, a result nobody collects): the launcher's shutdown
    then never waits longer than the run's grace (torch's elastic agent would wait 30 s)."""
    _GRACE_S[:] = [grace_s] if grace_s and grace_s > 0 else []


def stop_on_signals() -> StopFlag:
    """This process's stop flag. Stop signals in a launched process: while it works, stop after the step
    and hand back what was measured (the parent decides about a second signal: it kills its children);
    once the work is done, exit HANDBACK_S later (a result still being handed back gets there). The process
    also dies with its parent, and its console is redacted like the parent's.

    Called by launch/preamble.process_stop, the one place a launcher installs it. Installed once per process,
    by its main thread: Python runs signal handlers only there, and `signal.signal` raises ValueError in any
    other thread. Every later call, from any thread, returns the same flag, so ranks that are threads of one
    process (torch_xla.launch's replicas on PJRT CPU and TPU v2/v3) share it. A process forked from one that
    installed it inherits the handlers and the flag (fork keeps both); it adopts them as its own (and watches
    its own parent)."""
    with _LOCK:
        if _FLAG and _FLAG[0][0] == os.getpid():
            return _FLAG[0][1]
        if _FLAG:  # forked from the process that installed it: handlers and flag came along
            flag = _FLAG[0][1]
            flag.entered = flag.left = 0  # the parent's works are not this process's
            _FLAG[0] = (os.getpid(), flag)
            die_with_parent()
            return flag
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                f"the stop flag was first asked for in thread {threading.current_thread().name!r}: signal "
                "handlers can only be installed by the main thread, so a launcher that runs ranks in "
                "threads must call launch.preamble.process_stop() in the main thread before starting them")
        flag = _ChildFlag()

        def handle(signum, frame):
            if not flag.busy:
                # Its works are done; what may be left is handing their result back (a pool's answer onto its
                # pipe, a rank's return value, a gather): milliseconds, and the process then ends on its own.
                # Ended at once there, a finished run lost its figures ("died without a result").
                _exit_after(HANDBACK_S, 128 + signum)
                return
            if not flag.requested and _GRACE_S:
                _exit_after(_GRACE_S[0], 128 + signum)
            flag.requested, flag.reason = True, flag.reason or signal.Signals(signum).name

        for sig in STOP_SIGNALS:
            signal.signal(sig, handle)
        _FLAG.append((os.getpid(), flag))
    die_with_parent()
    if not isinstance(sys.stderr, RedactingStream):
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    return flag


@contextmanager
def working(flag: StopFlag):
    """While the process still works for its caller (its work, or leaving what the work measured): a stop
    signal stops it after the step (and starts the grace). When every such section has ended, a stop
    signal ends the process HANDBACK_S later."""
    counted = isinstance(flag, _ChildFlag)
    if counted:
        with _LOCK:
            flag.entered += 1
    try:
        yield
    finally:
        if counted:
            with _LOCK:
                flag.left += 1


@contextmanager
def reason_on_stop(flag: StopFlag):
    """The work of a launched process (`working`): its stop carries the signal's name back to the parent's
    record."""
    with working(flag):
        try:
            yield
        except StopRequested as e:
            e.partial["stop_reason"] = flag.reason
            raise


def wait(future, stop, what: str = "the launched process"):
    """The child's result; a stop asked of this process (SIGTERM to it alone) is passed on to the child."""
    import psutil

    forwarded = False
    while True:
        try:
            return future.result(timeout=0.5)
        except StopRequested as e:
            if stop is not None:
                stop.requested, stop.reason = True, stop.reason or e.partial.pop("stop_reason", None)
            raise
        except FutureTimeout:
            if stop is not None and stop.requested and not forwarded:
                for proc in psutil.Process().children(recursive=True):  # the children stop themselves
                    proc.send_signal(signal.SIGTERM)
                forwarded = True
        except BrokenProcessPool as e:  # killed outright (OOM killer, a second signal, a crash in C++)
            if stop is not None and stop.requested:
                # The stop signal (to the group, or forwarded above) found the child still starting: no
                # handler of its own yet, so the signal's default action ended it. An interruption, not a
                # crash.
                raise StopRequested({"phase": "start-up"}) from e
            raise RuntimeError(f"{what} died without a result (killed, or a crash in native code); "
                               "see the console output above") from e


def _pool_worker(parent: int) -> None:
    """A one-worker pool's process: dies with its parent, and leaves without the interpreter's teardown.

    The worker's result is delivered and multiprocessing's own exit duties are done (Process._bootstrap
    joins threads, runs its finalizers, flushes) before spawn_main's sys.exit; tearing down an interpreter
    that imported torch then took ~2 s, and the parent's `with` waited for it. An atexit handler registered
    first runs last: the handlers the work registered (W&B, torch) run before it. The status is 0: the pool
    reads results from its queue, never a worker's exit status."""
    die_with_parent(parent)
    atexit.register(exit_now)


def in_fresh_process(fn, args: tuple, stop, what: str):
    """fn(*args) in a freshly spawned interpreter (a one-worker pool), waited for as `wait` does."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), initializer=_pool_worker,
                             initargs=(os.getpid(),)) as pool:
        return wait(pool.submit(fn, *args), stop, what)


