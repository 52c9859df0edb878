"""Report at scale: write 10,000 FAKE run records into a temporary store (load testing only; the
records say FAKE DATA), then time loading them and building every table. Goal: under 10 s here.

    python scripts/bench_report.py [N] [--plots]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from xbench.analysis.frame import load
from xbench.report.fake import write_fake_store
from xbench.report.rows import Context
from xbench.report.tables import build_tables


def main() -> None:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), 10_000))
    with tempfile.TemporaryDirectory(prefix="xbench-bench-report-") as tmp:
        store = Path(tmp) / "results"
        t0 = time.perf_counter()
        write_fake_store(store, n)
        t_write = time.perf_counter() - t0
        size_mib = sum(p.stat().st_size for p in store.glob("*/record.json")) / 2**20
        t0, c0 = time.perf_counter(), time.process_time()
        loaded = load([store], progress=False)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        tables, skipped = build_tables(loaded.frame, Context.with_baseline("platform=gpu_k80"))
        t_tables = time.perf_counter() - t0
        cpu = time.process_time() - c0  # this process's CPU seconds: what the wall time is on an idle core
        print(f"bench_report: {n} FAKE records ({size_mib:.0f} MiB) written in {t_write:.1f} s")
        print(f"bench_report: load {t_load:.2f} s + tables {t_tables:.2f} s = {t_load + t_tables:.2f} s "
              f"wall ({cpu:.2f} s CPU; goal < 10 s); {len(loaded.frame)} rows, {len(tables)} tables "
              f"({', '.join(f'{t.name}:{len(t.frame)}' for t in tables)}); not drawn: {sorted(skipped)}")
        if "--plots" in sys.argv:
            from xbench.report.plots import build_plots

            t0 = time.perf_counter()
            made, _ = build_plots(loaded.frame, Context(), Path(tmp) / "plots")
            print(f"bench_report: {len(made)} plots in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
