"""Helpers for work that goes on in a fresh spawned process (xla launcher, whole-process repeats).

The parent waits on the child's future and passes a stop on to it; the child draws its own progress
bar (callbacks cannot be pickled) and turns a stop signal (rank.STOP_SIGNALS) into a stop after the
step. Errors, interruptions and divergence come back as the same exceptions (pickled).

Children die with their parent: a launched process watches its parent and exits at once when it is
gone (SIGKILL, a second signal's os._exit, a crash), so it never outlives it holding a device or the
caller's pipes; and once its work is done, a stop signal ends it at once (nothing is left to save).
"""

from __future__ import annotations

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

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)  # nobody is left to take the result

    threading.Thread(target=watch, name="xbench-parent-watch", daemon=True).start()


class _ChildFlag(StopFlag):
    """A launched process's stop flag; `busy` is False once its work returned."""

    busy: bool = True


def stop_on_signals() -> StopFlag:
    """Stop signals in a launched process: while it works, stop after the step and hand back what was
    measured (the parent decides about a second signal: it kills its children); once the work is done,
    exit at once. The process also dies with its parent, and its console is redacted like the parent's."""
    flag = _ChildFlag()

    def handle(signum, frame):
        if not flag.busy:
            os._exit(128 + signum)
        flag.requested, flag.reason = True, flag.reason or signal.Signals(signum).name

    for sig in STOP_SIGNALS:
        signal.signal(sig, handle)
    die_with_parent()
    if not isinstance(sys.stderr, RedactingStream):
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    return flag


@contextmanager
def reason_on_stop(flag: StopFlag):
    """A stop in the launched process carries its signal's name back to the parent's record; when the
    work has returned (or raised), further stop signals end the process at once."""
    try:
        yield
    except StopRequested as e:
        e.partial["stop_reason"] = flag.reason
        raise
    finally:
        flag.busy = False


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
            raise RuntimeError(f"{what} died without a result (killed, or a crash in native code); "
                               "see the console output above") from e


def in_fresh_process(fn, args: tuple, stop, what: str):
    """fn(*args) in a freshly spawned interpreter (a one-worker pool), waited for as `wait` does."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        return wait(pool.submit(fn, *args), stop, what)


