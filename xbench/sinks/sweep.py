"""A local sweep's end (hydra_plugins/xbench_sweeper): one table of its points, the report command for them,
and one `wandb sync` line for the whole sweep (each point's W&B sink says none while a sweep collects them).

    xbench: sweep: 3 points
      #  status  warnings  figure                              point
      0  ok             0  6,200 samples/s                     data.batch_size=16
      ...
    xbench: report: python -m xbench.report /abs/results
    xbench: W&B offline: upload later with: wandb sync /abs/results/<run>/wandb/offline-run-... ...
"""

from __future__ import annotations

import shlex
from pathlib import Path

from xbench.sinks.console import headline

_POINTS: list[dict] = []  # the points of the sweep this process runs (none: not collecting)
_ACTIVE: list[bool] = []


def begin() -> None:
    """A sweep starts collecting its points (and the W&B sink stops saying its own sync line)."""
    _ACTIVE[:] = [True]
    _POINTS.clear()


def active() -> bool:
    return bool(_ACTIVE)


def note(record) -> None:
    """One point's row, from its finished record (a RunRecord), while a sweep collects them."""
    if not _ACTIVE or record is None:
        return
    rec = record.to_dict()
    point = (rec.get("env") or {}).get("point") or {}
    _POINTS.append({
        "num": point.get("job_num"), "status": rec.get("status"), "figure": headline(rec),
        "warnings": len(rec.get("warnings") or ()), "overrides": point.get("overrides") or [],
        "store": str(Path(str((rec.get("config") or {}).get("store", {}).get("root", "results"))).resolve()),
        "wandb_offline_dir": (rec.get("artifacts") or {}).get("wandb_offline_dir")})


def end_lines(swept: list[str] | None = None) -> list[str]:
    """The table of the points so far, the report command and the single `wandb sync` line; ends the
    collection. `swept`: the keys the sweep varies (a point is shown by its values of them)."""
    rows, _ACTIVE[:] = list(_POINTS), []
    _POINTS.clear()
    if not rows:
        return []

    def shown(r):
        return " ".join(o for o in r["overrides"] if not swept or o.split("=", 1)[0] in swept)

    figure_w = max(len("figure"), *(len(r["figure"]) for r in rows))
    lines = [f"sweep: {len(rows)} point(s) ran",
             f"  {'#':>4}  {'status':<11}  warnings  {'figure':<{figure_w}}  point"]
    lines += [f"  {'' if r['num'] is None else r['num']:>4}  {r['status']:<11}  {r['warnings']:>8}  "
              f"{r['figure']:<{figure_w}}  {shown(r)}".rstrip() for r in rows]
    stores = list(dict.fromkeys(r["store"] for r in rows))
    lines.append("report: python -m xbench.report " + " ".join(shlex.quote(s) for s in stores))
    offline = [r["wandb_offline_dir"] for r in rows if r["wandb_offline_dir"]]
    if offline:
        lines.append(
            "W&B offline: upload later with: wandb sync " + " ".join(shlex.quote(d) for d in offline)
        )
    return lines
