"""Report at scale: write N FAKE run records (default 10,000; load testing only, the records say FAKE DATA)
into a temporary store, then time the whole report over them as `python -m xbench.report` makes it:
loading, tables and findings, plots, and the files (HTML, markdown, CSV). Goals: under 5 s for 10,000 records on
a quiet 2-core machine, and 100,000 records within memory (the peak RSS is printed: this process's and the largest
child process's, plot or load; records are laid out as they are read, never all held as records).

    python scripts/bench_report.py [N ...] [--plots] [--svg] [--jobs J] [--keep DIR]

One line per size, e.g. "10,000 records: 7.57 s wall (goal < 5 s: NOT met), CPU 13.11 s ...". Wall seconds
depend on what else the machine runs; CPU seconds (this process + its plot and load processes) do not: on a quiet
2-core machine the wall time is about half the CPU time when both cores are busy. Give sizes in ascending order: the peak RSS is
the process's peak so far. Without --plots only loading and the tables are timed; --keep DIR leaves the (last)
report there to look at.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from xbench.analysis.frame import load
from xbench.report.__main__ import parse_args, write_report
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
    """Write n FAKE records, time the report over them; the size's line."""
    with tempfile.TemporaryDirectory(prefix="xbench-bench-report-") as tmp:
        store = Path(tmp) / "results"
        t0 = time.perf_counter()
        write_fake_store(store, n)
        t_write = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in store.glob("*/record.json")) / 2**20
        print(f"bench_report: {n:,} FAKE records ({size_mib:.0f} MiB) written in {t_write:.1f} s", flush=True)
        out = Path(a.keep or Path(tmp) / "report")
        argv = [str(store), "--out", str(out), "--baseline", BASELINE, "--no-progress"]
        argv += ([] if a.plots else ["--format", "csv"]) + (["--svg"] if a.svg else [])
        argv += ["--jobs", str(a.jobs)] if a.jobs else []
        args = parse_args(argv)
        load0 = _load()
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        loaded = load(args.stores, progress=False)
        rc = write_report(args, loaded, loaded.frame, _context(args), t0)
        wall, cpu, kids = time.perf_counter() - t0, time.process_time() - c0, _children_cpu() - k0
    what = "HTML, markdown, plots, CSV" if a.plots else "tables, CSV"
    goal = ""
    if n == 10_000:  # the goal is the whole report's; without --plots only a part of it is timed
        goal = f" (goal < 5 s: {'met' if wall < 5 else 'NOT met'})" if a.plots else " (goal < 5 s with plots)"
    rss = max(_rss_mib(resource.RUSAGE_SELF), _rss_mib(resource.RUSAGE_CHILDREN))
    # CPU seconds do not depend on what else the machine runs; wall seconds do (a shared 2-core VM).
    return (f"bench_report: {n:,} records: {wall:.2f} s wall{goal}, CPU {cpu + kids:.2f} s ({cpu:.2f} s this "
            f"process + {kids:.2f} s its plot and load processes); the whole report ({what}); peak RSS "
            f"{rss / 1024:.2f} GiB of {_mem_gib():.0f} GiB (this process {_rss_mib(resource.RUSAGE_SELF):.0f} MiB, "
            f"largest child {_rss_mib(resource.RUSAGE_CHILDREN):.0f} MiB); load average {load0} before, {_load()} "
            f"after; exit {rc}")


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def _rss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "n/a"


def _context(args):
    from xbench.report.rows import Context

    return Context.with_baseline(args.baseline, currency=args.currency, fx=args.fx_rates, pool=args.pool_keys)


if __name__ == "__main__":
    main()
