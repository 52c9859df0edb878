"""Work on the other core meanwhile: a function run in a forked process while the caller goes on (the report
makes tidy_runs.csv's text this way while it builds the tables). Its own module, not the report's __main__:
a function defined in a script run as __main__ cannot be named to a pool's worker."""

from __future__ import annotations

import os

_BESIDE: tuple = ()  # (function, arguments) of the Beside job being started: its forked process inherits it


def _run_beside():
    import gc

    gc.freeze()  # what it inherited is never garbage here: collections neither walk it nor copy its pages
    fn, args = _BESIDE
    return fn(*args)


class Beside:
    """`fn(*args)` in a forked process from now on, its result (or its error) at result(); in this process
    at result() where `fork` is False (small work: a fork costs more), there is no fork or one core. The
    arguments reach it by the fork, never pickled (a frame of 10,000 runs); its result comes back pickled."""

    def __init__(self, fn, *args, fork: bool = True):
        global _BESIDE
        self.fn, self.args, self.pool = fn, args, None
        if fork and hasattr(os, "fork") and (os.cpu_count() or 1) > 1:
            import multiprocessing as mp

            _BESIDE = (fn, args)
            try:
                self.pool = mp.get_context("fork").Pool(1)
            finally:
                _BESIDE = ()
            self.pending = self.pool.apply_async(_run_beside)

    def result(self):
        if self.pool is None:
            return self.fn(*self.args)
        try:
            return self.pending.get()
        finally:
            self.cancel()

    def cancel(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None
