"""Report at scale: write N FAKE run records (default 10,000; load testing only, the records say FAKE DATA)
into a temporary store, then time the report over them as a user runs it: `python -m xbench.report` in a
process of its own (interpreter start and imports, loading, tables and findings, plots, the files: HTML,
markdown, CSV). Goals: under 5 s for 10,000 records on a quiet 2-core machine, and 100,000 records within
memory (the peak RSS of the largest of the report's processes is printed: records are laid out as they are
read, never all held as records).

    python scripts/bench_report.py [N ...] [--plots] [--svg] [--jobs J] [--keep DIR]

One line per size, e.g. "10,000 records: 5.51 s wall (goal < 5 s: NOT met), CPU 9.40 s ...", after the report's
own line (its stages' seconds). Wall seconds depend on what else the machine runs; CPU seconds (the report's
process and its plot and load processes) do not: on a quiet 2-core machine the wall time is about half the CPU
time when both cores are busy. Give sizes in ascending order: the peak RSS is the largest so far. Without
--plots only loading and the tables are made (--format csv); --keep DIR leaves the (last) report there to look
at.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xbench.report.fake import write_fake_store

BASELINE = "platform=gpu_k80&runtime=eager&parallel=single&pricing_model=on_demand"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("n", nargs="*", type=int, default=[10_000], help="record counts (default: 10000)")
    p.add_argument("--plots", action="store_true")
    p.add_argument("--svg", action="store_true")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--keep", default=None)
    a = p.parse_args()
    for n in a.n:
        print(bench(n, a), flush=True)


def bench(n: int, a: argparse.Namespace) -> str:
    """Write n FAKE records, time the report's command over them; the size's line."""
    with tempfile.TemporaryDirectory(prefix="xbench-bench-report-") as tmp:
        store = Path(tmp) / "results"
        t0 = time.perf_counter()
        write_fake_store(store, n)
        t_write = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in store.glob("*/record.json")) / 2**20
        print(f"bench_report: {n:,} FAKE records ({size_mib:.0f} MiB) written in {t_write:.1f} s", flush=True)
        out = Path(a.keep or Path(tmp) / "report")
        cmd = [sys.executable, "-m", "xbench.report", str(store), "--out", str(out), "--baseline", BASELINE,
               "--no-progress"]
        cmd += ([] if a.plots else ["--format", "csv"]) + (["--svg"] if a.svg else [])
        cmd += ["--jobs", str(a.jobs)] if a.jobs else []
        load0 = _load()
        t0, c0 = time.perf_counter(), _children_cpu()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    said = done.stdout.splitlines()[:1] or done.stderr.strip().splitlines()[-1:]
    print("\n".join(said), flush=True)  # the report's own line: its stages' seconds (or its error)
    what = "HTML, markdown, plots, CSV" if a.plots else "tables, CSV"
    goal = ""
    if n == 10_000:  # the goal is the whole report's; without --plots only a part of it is made
        goal = f" (goal < 5 s: {'met' if wall < 5 else 'NOT met'})" if a.plots else " (goal < 5 s with plots)"
    # CPU seconds do not depend on what else the machine runs; wall seconds do (a shared 2-core VM).
    return (f"bench_report: {n:,} records: {wall:.2f} s wall{goal}, CPU {cpu:.2f} s (python -m xbench.report "
            f"and its plot and load processes, its start included); the whole report ({what}); peak RSS "
            f"{_rss_mib() / 1024:.2f} GiB of {_mem_gib():.0f} GiB (the largest of its processes); load average "
            f"{load0} before, {_load()} after; exit {done.returncode}")


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def _rss_mib() -> float:
    """The peak RSS of the largest process this one waited for (the report's, or one of its own children's,
    which the report waited for), in MiB."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "n/a"


if __name__ == "__main__":
    main()
