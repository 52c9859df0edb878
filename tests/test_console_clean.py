"""On the torch the default environment runs (the newest PyPI serves), a run's console carries xbench's own lines
only: torch >= 2.14's profiler prints `USDT: ... profiler_start/stop` from C++ on every profiled window, a CUDA build
on a GPU-less host logs its failed device probe, and DDP on torch >= 2.15 warns once per rank that
`broadcast_buffers` is deprecated. Each test reads a real run's console (stdout and stderr), unfiltered."""

from __future__ import annotations

import re

import pytest

from tests.conftest import FAST, records, run_cli

pytestmark = pytest.mark.slow

# Lines no run of xbench should show a user: native loggers' formats, Python warnings, tracebacks.
FOREIGN = re.compile(r"^(?:[A-Z]+:\d{4}-\d\d-\d\d |[IWEF]\d{4} \d\d:\d\d:\d\d|Traceback )|Warning:|warnings\.warn")


def _foreign(p) -> list[str]:
    return [line for line in (p.stdout + p.stderr).splitlines() if FOREIGN.search(line)]


def test_a_profiled_run_prints_nothing_of_the_profilers(store):
    # the breakdown profiles a window after the timed ones on every throughput run: the USDT lines' source
    p = run_cli(*FAST, "model=mlp", "data=synthetic_mnist", "logger.progress=true", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    [record] = records(store)
    assert record["measurements"]["device_s_per_step"] > 0  # the profiler did run (the breakdown's figure)
    assert _foreign(p) == []


def test_ddp_over_two_ranks_prints_no_deprecation(store):
    p = run_cli(*FAST, "model=mlp", "data=synthetic_mnist", "parallel=ddp", "parallel.world_size=2", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    assert _foreign(p) == []


def test_the_filter_keeps_what_is_not_kinetos(capfd):
    """The stderr filter around the profiler drops kineto's lines and gives everything else back, in order."""
    import os

    from xbench.bench.meters.profiler import kineto_quieted

    with kineto_quieted():
        os.write(2, b"USDT:2026-12-02 07:28:50 15226:15226 SyncActivityProfilerHandler.cpp:39] profiler_start\n")
        os.write(2, b"a line of the user's own\n")
        os.write(2, b"ERROR:2026-12-02 07:29:48 15938:15938 DeviceProperties.cpp:56] gpuGetDeviceCount failed\n")
        os.write(2, b"ERROR: something that matters\n")
    assert capfd.readouterr().err == "a line of the user's own\nERROR: something that matters\n"
