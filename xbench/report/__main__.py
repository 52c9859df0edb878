"""`python -m xbench.report [STORE ...] [--out DIR] [--filter key=value ...] [--baseline QUERY]
[--format html,md,csv] [--wandb]`: tables and plots from stored run records. Never imports torch."""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

from xbench.extras import missing
from xbench.report.beside import Beside
from xbench.tools import StatusLine, leave, prog

FORMATS = ("html", "md", "csv")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog("xbench.report"),
        description="Comparison tables and plots from xbench run records (no torch needed).",
        epilog="Example: python -m xbench.report results --filter experiment=cpu_vs_gpu "
               "--baseline 'platform=cpu&threads=1' --out report/cpu_vs_gpu")
    p.add_argument("stores", nargs="*", default=["results"],
                   help="folders holding run folders (default: results)")
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
    p.add_argument("--currency", default=None, metavar="CUR",
                   help="show money in this currency (default: USD when any record is priced in USD); "
                        "records priced in another are converted with the dated rate table shown in the "
                        "report")
    p.add_argument("--fx", action="append", default=[], metavar="CUR=RATE",
                   help="USD per unit of CUR, replacing the rate table's (e.g. --fx EUR=1.09)")
    p.add_argument("--pool", default="", metavar="KEY[,KEY]",
                   help="let normalised bars pool configurations over these keys (median of them), e.g. "
                        "global_batch_size; by default batch size, precision and strategy stay apart")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes that draw the plots (default: 2, or 1 on a 1-core machine; never more "
                        "than there are plots)")
    p.add_argument("--svg", action="store_true",
                   help="also write each plot as SVG (for papers; the HTML draws its own charts)")
    p.add_argument("--browser-check", action="store_true",
                   help="open report.html in headless Chromium: every chart draws, nothing overflows the "
                        "page, a header click sorts, a hover shows a value, no request leaves the page; "
                        "writes screenshot.png and browser_check.json beside it")
    p.add_argument("--no-progress", action="store_true", help="no progress bar while loading")
    return p


def _words(text: str) -> list[str]:
    """A comma-separated option's words."""
    return [w.strip() for w in text.split(",") if w.strip()]


def _out_problem(args) -> str | None:
    out = Path(args.out)
    if out.exists() and not out.is_dir():  # /dev/null, a file: mkdir would raise FileExistsError
        return (f"--out {args.out}: not a folder (it is a file or a device); give a folder to write the "
                "report in")
    return None


def _jobs_problem(args) -> str | None:
    return f"--jobs {args.jobs}: give 1 or more processes" if args.jobs < 1 else None


def _format_problem(args) -> str | None:
    args.formats = _words(args.format)
    bad = [f for f in args.formats if f not in FORMATS]
    return f"--format {','.join(bad)} is unknown; allowed: {', '.join(FORMATS)}" if bad else None


def _fx_problem(args) -> str | None:
    try:
        args.fx_rates = {k.strip().upper(): float(v) for k, v in (f.split("=", 1) for f in args.fx)}
    except ValueError:
        return f"--fx takes CUR=RATE (USD per unit of CUR), e.g. --fx EUR=1.09; got {args.fx}"
    return None


def _pool_problem(args) -> str | None:
    from xbench.report.rows import POOLABLE

    args.pool_keys = tuple(_words(args.pool))
    unknown = [k for k in args.pool_keys if k not in POOLABLE]
    return (f"--pool {','.join(unknown)}: not a key a bar may pool over; allowed: {', '.join(POOLABLE)}"
            if unknown else None)


# Checked in turn, each setting what it parses on the arguments: the first problem is argparse's error.
CHECKS = (_out_problem, _jobs_problem, _format_problem, _fx_problem, _pool_problem)


def parse_args(argv=None) -> argparse.Namespace:
    p = _parser()
    args = p.parse_args(argv)
    for check in CHECKS:
        if said := check(args):
            p.error(said)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # The report extra (pandas; matplotlib for the plots of html/md): one line, not a traceback.
    plots = ["matplotlib"] if {"html", "md"} & set(args.formats) else []
    absent = missing("python -m xbench.report", "pandas", *plots)
    if absent:
        print(f"xbench.report: {absent}", file=sys.stderr)
        return 2
    from xbench.analysis.frame import apply_filters, load

    t0 = time.perf_counter()
    try:
        loaded = load(args.stores, progress=not args.no_progress, meanwhile=lambda: imports(args))
        from xbench.report.rows import Context

        df = apply_filters(loaded.frame, args.filter, empty_ok=False)
        ctx = Context.with_baseline(args.baseline, currency=args.currency, fx=args.fx_rates,
                                    pool=args.pool_keys)
    except (FileNotFoundError, ValueError) as e:
        print(f"xbench.report: {e}", file=sys.stderr)
        return 2
    for s in loaded.skipped:
        print(f"xbench.report: WARNING {s}", file=sys.stderr)
    # `xbench.report /`: a folder that holds no run folder is a mistake, not a report
    if not len(loaded.frame):
        print(f"xbench.report: no run records under {', '.join(map(str, args.stores))} (a store holds run "
              "folders <store>/<run id>/record.json; give the runs' store.root, e.g. results)",
              file=sys.stderr)
        return 2
    return write_report(args, loaded, df, ctx, t0)


def imports(args) -> None:
    """The libraries the report goes on to use (pandas and the tables; matplotlib and the plots for html or
    md), imported while a second process reads the records (load's `meanwhile`): ~0.7 s of a report's
    start that the reading shares rather than waits for."""
    import xbench.report.render
    import xbench.report.tables  # noqa: F401  (pandas with them)

    if {"html", "md"} & set(args.formats):
        import xbench.report.plots  # noqa: F401


BESIDE_MIN_RUNS = 2000  # from this many runs tidy_runs.csv is made in a process of its own (a fork: ~0.1 s)
STAGES_MIN_RUNS = 200  # from this many runs the stages are shown as they begin (the loading bar's threshold)


def stages(args, runs: int) -> StatusLine:
    """The report's stages on one stderr line, each shown as it begins (`xbench.report: writing the CSV
    tables`), rewritten by the next and erased before the summary, an error's message or the browser check's
    lines: over thousands of runs the report works for seconds after its loading bar (minutes on a busy
    machine). Off with --no-progress or under STAGES_MIN_RUNS runs."""
    return StatusLine("xbench.report: ", not args.no_progress and runs >= STAGES_MIN_RUNS)


def _lap(times: dict, name: str, t0: float) -> None:
    """The seconds the stage `name` took: since `t0`, less the stages before it."""
    times[name] = time.perf_counter() - t0 - sum(times.values())


def _tables_and_findings(args, df, ctx, out: Path):
    """(the plots being drawn or None, the context with the baseline's normalised rows, the tables, the ones
    skipped, the findings, their note). ValueError: a query the frame cannot answer (a typo'd key, an
    ambiguous baseline, an unknown currency); the plots being drawn are cancelled then."""
    from xbench.report.rows import prepare, with_normalised
    from xbench.report.tables import build_tables, findings_of

    job = None
    try:
        rows = prepare(df, ctx)
        ctx = with_normalised(rows, ctx)  # once, for the baseline table, the normalised plot and the findings
        if "html" in args.formats or "md" in args.formats:  # drawn in other processes meanwhile (--jobs)
            from xbench.report.plots import PlotJob

            job = PlotJob(rows, ctx, out / "plots", jobs=args.jobs, svg=args.svg)
        tables, skipped_tables = build_tables(df, ctx, rows=rows)
        found, found_note = findings_of(rows, ctx)
    except ValueError:
        if job is not None:
            job.cancel()
        raise
    return job, ctx, tables, skipped_tables, found, found_note


def _meta(args, loaded, df) -> list[str]:
    """The report's header lines: when and from what, the runs shown of those loaded, the query."""
    status_counts = (", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items()) if len(df)
                     else "none")
    notes = (f"; {len(loaded.skipped)} notes on record files (unreadable, refused, copied or misnamed; named "
             "above)") if loaded.skipped else ""
    stores = ", ".join(map(str, args.stores))
    pooled = ", ".join(args.pool_keys) or "nothing (batch size, precision and strategy kept apart)"
    return [f"Generated {_dt.datetime.now().isoformat(timespec='seconds')} from {stores}",
            f"{len(df)} runs shown ({status_counts}) of {len(loaded.frame)} records loaded{notes}",
            f"Filters: {'; '.join(args.filter) or 'none'}. Baseline: {args.baseline or 'none'}. "
            f"Pooled: {pooled}."]


def _documents(args, rep, out: Path) -> list:
    """report.html and report.md, as --format asks."""
    from xbench.report import render

    writers = {"html": (render.write_html, "report.html"), "md": (render.write_markdown, "report.md")}
    return [write(rep, out / name) for f, (write, name) in writers.items() if f in args.formats]


def _after(args, df, out: Path) -> list:
    """The W&B report (--wandb) and the browser check of report.html (--browser-check): what they wrote."""
    written = []
    if args.wandb:
        from xbench.report.wandb_report import publish_or_save

        written.append(publish_or_save(df, args, out))
    if args.browser_check and "html" in args.formats:
        from xbench.report.browser import check

        result = check(out / "report.html")
        print(f"xbench.report: browser check: {result.summary()}",
              file=sys.stderr if not result.ok else sys.stdout)
        written += [result.screenshot, result.path]
    return written


def _said(df, tables, plots, skipped: dict, written: list, out: Path, times: dict, t0: float) -> None:
    """What was made, how long each stage took, what was not drawn and why, and each file written."""
    timing = ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
    print(f"xbench.report: {len(df)} runs -> {len(tables)} tables, {len(plots)} plots in {out}/ "
          f"({timing}; total {time.perf_counter() - t0:.2f} s)")
    for name, why in skipped.items():
        print(f"  not drawn: {name}: {why}")
    for p in (p for p in written if p is not None):
        print(f"  wrote {p}")


def write_report(args, loaded, df, ctx, t0: float) -> int:
    """Tables, findings, plots and the files, from the loaded frame (`loaded.skipped`: unreadable records)."""
    line = stages(args, len(df))
    try:
        return _write_report(args, loaded, df, ctx, t0, line)
    finally:
        line.close()


def _write_report(args, loaded, df, ctx, t0: float, line: StatusLine) -> int:
    from xbench.report import render

    times = {"load": time.perf_counter() - t0}
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"xbench.report: --out {out}: cannot create the folder ({e.strerror or e}); give a writable "
              "folder", file=sys.stderr)
        return 2
    beside = ""
    if {"html", "md"} & set(args.formats) and args.jobs > 1:
        beside = f"; the plots are drawn beside them ({args.jobs} processes)"
    line.show(f"{len(df):,} runs read in {times['load']:.1f} s; building the tables and findings{beside}")
    # tidy_runs.csv's text made meanwhile on the other core (most of the CSVs' time; it needs only the frame)
    tidy = Beside(render.tidy_csv, df, fork=len(df) >= BESIDE_MIN_RUNS) if "csv" in args.formats else None
    try:
        job, ctx, tables, skipped_tables, found, found_note = _tables_and_findings(args, df, ctx, out)
    except ValueError as e:
        if tidy is not None:
            tidy.cancel()
        line.close()  # the message on a line of its own
        print(f"xbench.report: {e}", file=sys.stderr)
        return 2
    _lap(times, "tables", t0)
    written = []
    if tidy is not None:
        line.show(f"writing the CSV tables ({len(tables) + 1} files)")
        written = render.write_csvs(tables, tidy.result(), out)
    _lap(times, "csv", t0)
    if job is not None:
        line.show("waiting for the plots" if job.jobs > 1 else "drawing the plots")
    plots, skipped_plots = job.result() if job is not None else ({}, {})
    _lap(times, "plots (waited)", t0)
    title = args.title or "xbench report" + (f": {'; '.join(args.filter)}" if args.filter else "")
    rep = render.Report(title, _meta(args, loaded, df), tables, skipped_tables, plots, skipped_plots,
                        loaded.skipped, findings=found, findings_note=found_note, rates=ctx.rates)
    documents = [f"report.{f}" for f in ("html", "md") if f in args.formats]
    if documents:
        line.show(f"writing {' and '.join(documents)}")
    written += _documents(args, rep, out)
    _lap(times, "html/md", t0)
    line.close()  # before the lines of the browser check and W&B
    written += _after(args, df, out)
    _said(df, tables, plots, {**skipped_tables, **skipped_plots}, written, out, times, t0)
    return 0


if __name__ == "__main__":  # out without tearing down the rows and frame of every run (0.2-0.5 s at 10,000)
    leave(main())
