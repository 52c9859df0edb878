"""Imported once, by a sweep's template process (launch/template.py's preload), never by the runner: the
libraries a point's rank imports, so that a point forked from the template starts warm.

What the template may do here is bounded by what a fork keeps safe: import, and nothing else: no torch op
(OpenMP's pool would start), no device (CUDA, once initialised, is unusable in a forked child), no thread,
no JAX (its threads). `FACTS` says what the template holds after the imports; launch/template.py reads it
in a forked probe (the child inherits the module) and keeps the template only when it is clean.

Stop signals (rank.STOP_SIGNALS) sent to the sweep's process group must not end the template while a
point forked from it runs: the runner would lose that point's exit status, and the point's partial
figures with it. The template holds them (`_HELD`); a point resets them to the default first thing
(template.adopt) and, if one arrived between the fork and that reset, dies by it as a spawned process
still starting would.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time

_T0 = time.perf_counter()

from xbench.env_vars import restored  # noqa: E402

# The imports write variables as they load (torch._dynamo: TORCHINDUCTOR_CACHE_DIR); a point takes the
# runner's environment (template.adopt), and no import of xbench writes one (tests/test_pure_checks.py).
with restored():
    import torch  # noqa: E402

    import xbench.bench.training  # noqa: E402,F401
    import xbench.bench.windows  # noqa: E402,F401

    # (a point's entry, launch/inline._fresh_rank, runs through it)
    import xbench.launch.preamble  # noqa: E402,F401
    import xbench.models.decoder  # noqa: E402,F401 (the registry's builders, imported by every build)
    import xbench.models.text  # noqa: E402,F401
    import xbench.models.vision  # noqa: E402,F401
    import xbench.parallel.base  # noqa: E402,F401

    # (the default runtime; the others import theirs in the point)
    import xbench.runtimes.eager  # noqa: E402,F401
    from xbench.launch import child  # noqa: E402
    from xbench.rank import STOP_SIGNALS  # noqa: E402

    with contextlib.suppress(ImportError):  # the model zoo's vision models; absent in a minimal install
        import torchvision  # noqa: F401

_HELD: list[int] = []  # stop signals received since this process was forked (or started)


def _leave_at_once() -> None:
    """The template's exit, once its runner has gone (multiprocessing's forkserver ends by SystemExit): no
    interpreter teardown. Tearing down what it imported took 1-2 s, and it holds the runner's stdout and
    stderr (its points write there), so whoever reads the runner's output to its end waited that long after
    the runner had exited. Its points never run this: a forked process leaves by os._exit."""
    if os.getpid() == FACTS["pid"]:
        child.exit_now(0)


def _hold(signum, frame) -> None:
    _HELD.append(signum)


# Only in the runner's template (template.TEMPLATE_ENV, set while it starts): imported anywhere else (a
# runner, a test), holding the stop signals would swallow that process's SIGTERM (a sweep went on past a
# stop).
TEMPLATE = os.environ.get("XBENCH_TEMPLATE_OF") == str(os.getppid())
if TEMPLATE:
    for _sig in STOP_SIGNALS:
        signal.signal(_sig, _hold)
    os.register_at_fork(after_in_child=_HELD.clear)  # the template's are not the point's


def _native_threads() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return None


FACTS = {
    "pid": os.getpid(),
    "import_s": round(time.perf_counter() - _T0, 3),
    "python_threads": threading.active_count(),
    "native_threads": _native_threads(),  # numpy's OpenBLAS pool: shut down at fork by its own atfork handler
    "cuda_initialized": bool(torch.cuda.is_initialized()),
    "imported": sorted(m for m in ("jax", "torch_xla", "torchax") if m in sys.modules),
}
sys.stdout.flush()
sys.stderr.flush()  # nothing buffered here is written again by every point


def facts() -> dict:
    """The template's facts, read in a process forked from it (`forked`: the module came from the
    template)."""
    return {**FACTS, "forked": os.getpid() != FACTS["pid"], "parent_pid": os.getppid(),
            "template_leaves_at_once": LEAVES_AT_ONCE}


# The template's environment: what differs from it in a rank the elastic agent forked from here is what the
# agent set for that rank (template.adopt_rank).
START_ENV = dict(os.environ)

LEAVES_AT_ONCE = TEMPLATE
if LEAVES_AT_ONCE:
    atexit.register(_leave_at_once)
