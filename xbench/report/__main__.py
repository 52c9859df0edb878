"""`python -m xbench.report [STORE ...] [--out DIR] [--filter key=value ...] [--baseline QUERY]
[--format html,md,csv] [--wandb]`: tables and plots from stored run records. Never imports torch."""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

FORMATS = ("html", "md", "csv")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m xbench.report",
        description="Comparison tables and plots from xbench run records (no torch needed).",
        epilog="Example: python -m xbench.report results --filter experiment=cpu_vs_gpu "
               "--baseline 'platform=cpu&threads=1' --out report/cpu_vs_gpu")
    p.add_argument("stores", nargs="*", default=["results"], help="folders holding run folders (default: results)")
    p.add_argument("--out", default="report", help="output folder (default: report)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE[,VALUE]",
                   help="keep runs whose column matches one of the values (repeat to AND; e.g. "
                        "experiment=cpu_vs_gpu, status=ok, platform=cpu,k80)")
    p.add_argument("--baseline", metavar="QUERY",
                   help="the runs every time and cost is normalised to, e.g. platform=k80 or "
                        "'platform=cpu&threads=1'")
    p.add_argument("--format", default="html,md,csv", help="comma-separated subset of html,md,csv")
    p.add_argument("--title", default=None, help="report title (default: from the filters)")
    p.add_argument("--wandb", action="store_true",
                   help="publish a W&B Report of these runs (needs credentials; else writes its definition)")
    p.add_argument("--wandb-project", default="xbench")
    p.add_argument("--wandb-entity", default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress bar while loading")
    args = p.parse_args(argv)
    args.formats = [f.strip() for f in args.format.split(",") if f.strip()]
    bad = [f for f in args.formats if f not in FORMATS]
    if bad:
        p.error(f"--format {','.join(bad)} is unknown; allowed: {', '.join(FORMATS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from xbench.analysis.frame import apply_filters, load
    from xbench.report.rows import Context
    from xbench.report.tables import build_tables

    t0 = time.perf_counter()
    try:
        loaded = load(args.stores, progress=not args.no_progress)
        df = apply_filters(loaded.frame, args.filter)
        ctx = Context.with_baseline(args.baseline)
    except (FileNotFoundError, ValueError) as e:
        print(f"xbench.report: {e}", file=sys.stderr)
        return 2
    for s in loaded.skipped:
        print(f"xbench.report: WARNING {s}", file=sys.stderr)
    t_load = time.perf_counter() - t0
    try:  # a query the frame cannot answer (a typo'd key, an ambiguous baseline) is the user's to fix
        tables, skipped_tables = build_tables(df, ctx)
    except ValueError as e:
        print(f"xbench.report: {e}", file=sys.stderr)
        return 2
    t_tables = time.perf_counter() - t0 - t_load

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots, skipped_plots = {}, {}
    if "html" in args.formats or "md" in args.formats:
        from xbench.report.plots import build_plots

        plots, skipped_plots = build_plots(df, ctx, out / "plots")
    from xbench.report import render

    status_counts = ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items()) if len(df) else "none"
    title = args.title or "xbench report" + (f": {'; '.join(args.filter)}" if args.filter else "")
    meta = [f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} from {', '.join(map(str, args.stores))}",
            f"{len(df)} runs shown ({status_counts}) of {len(loaded.frame)} records loaded"
            + (f"; {len(loaded.skipped)} unreadable record files skipped" if loaded.skipped else ""),
            f"Filters: {'; '.join(args.filter) or 'none'}. Baseline: {args.baseline or 'none'}."]
    rep = render.Report(title, meta, tables, skipped_tables, plots, skipped_plots, loaded.skipped)
    written = []
    if "html" in args.formats:
        written.append(render.write_html(rep, out / "report.html"))
    if "md" in args.formats:
        written.append(render.write_markdown(rep, out / "report.md"))
    if "csv" in args.formats:
        written += render.write_csvs(tables, df, out)
    if args.wandb:
        from xbench.report.wandb_report import publish_or_save

        written.append(publish_or_save(df, args, out))
    print(f"xbench.report: {len(df)} runs -> {len(tables)} tables, {len(plots)} plots in {out}/ "
          f"(load {t_load:.2f} s, tables {t_tables:.2f} s, total {time.perf_counter() - t0:.2f} s)")
    for name, why in {**skipped_tables, **skipped_plots}.items():
        print(f"  not drawn: {name}: {why}")
    for p in written:
        if p is not None:
            print(f"  wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
