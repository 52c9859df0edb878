"""Helpers for work that goes on in a fresh spawned process (xla launcher, whole-process repeats).

The parent waits on the child's future and passes a stop on to it; the child draws its own progress
bar (callbacks cannot be pickled) and turns SIGINT/SIGTERM into a stop after the step. Errors,
interruptions and divergence come back as the same exceptions (pickled).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context

from xbench.rank import StopFlag, StopRequested


def stop_on_signals() -> StopFlag:
    """SIGINT/SIGTERM in a launched process: stop after the step and hand back what was measured."""
    flag = StopFlag()

    def handle(signum, frame):
        flag.requested, flag.reason = True, signal.Signals(signum).name

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)
    return flag


@contextmanager
def reason_on_stop(flag: StopFlag):
    """A stop in the launched process carries its signal's name back to the parent's record."""
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
            raise RuntimeError(f"{what} died without a result (killed, or a crash in native code); "
                               "see the console output above") from e


def in_fresh_process(fn, args: tuple, stop, what: str):
    """fn(*args) in a freshly spawned interpreter (a one-worker pool), waited for as `wait` does."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return wait(pool.submit(fn, *args), stop, what)


@contextmanager
def environ(env: dict[str, str]):
    """`env` in this process's environment while processes are started (they inherit it at exec, before
    they import torch); restored afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
