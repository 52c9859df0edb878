"""Report at scale: write N FAKE run records (default 10,000; load testing only, the records say FAKE DATA)
into a temporary store, then time the whole report over them as `python -m xbench.report` makes it:
loading, tables and findings, plots, and the files (HTML, markdown, CSV). Goal: under 5 s for 10,000 records on
a quiet 2-core machine, and 100,000 records within memory (the peak RSS is printed: this process's and the largest
plot process's; records are laid out as they are read, never all held as records).

    python scripts/bench_report.py [N] [--plots] [--svg] [--jobs J] [--keep DIR]

Without --plots only loading and the tables are timed (the figure of the first goal); --keep DIR leaves the
report there to look at.
"""

from __future__ import annotations

import argparse
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
    p.add_argument("n", nargs="?", type=int, default=10_000)
    p.add_argument("--plots", action="store_true")
    p.add_argument("--svg", action="store_true")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--keep", default=None)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="xbench-bench-report-") as tmp:
        store = Path(tmp) / "results"
        t0 = time.perf_counter()
        write_fake_store(store, a.n)
        t_write = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in store.glob("*/record.json")) / 2**20
        print(f"bench_report: {a.n} FAKE records ({size_mib:.0f} MiB) written in {t_write:.1f} s")
        out = Path(a.keep or Path(tmp) / "report")
        argv = [str(store), "--out", str(out), "--baseline", BASELINE, "--no-progress"]
        argv += ([] if a.plots else ["--format", "csv"]) + (["--svg"] if a.svg else [])
        argv += ["--jobs", str(a.jobs)] if a.jobs else []
        args = parse_args(argv)
        t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
        loaded = load(args.stores, progress=False)
        rc = write_report(args, loaded, loaded.frame, _context(args), t0)
        wall, cpu, kids = time.perf_counter() - t0, time.process_time() - c0, _children_cpu() - k0
        # CPU seconds do not depend on what else the machine runs; wall seconds do (a shared 2-core VM).
        print(f"bench_report: the whole report ({'HTML, markdown, plots, CSV' if a.plots else 'tables, CSV'}) of "
              f"{a.n} records in {wall:.2f} s wall (goal < 5 s); CPU {cpu:.2f} s in this process + {kids:.2f} s "
              f"in the plot processes; peak RSS {_rss_mib(resource.RUSAGE_SELF):.0f} MiB (plot processes "
              f"{_rss_mib(resource.RUSAGE_CHILDREN):.0f} MiB); load average {_load()}; exit {rc}")


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
