"""A W&B Report comparing the selected runs, grouped by platform, through W&B's reports API
(`wandb-workspaces`, imported lazily: the rest of the report never needs it).

The report is first a plain JSON definition (title, runset filter, grouping, panels). With
credentials it is published at once; without (or when publishing fails) the definition is written to
`wandb_report.json` in the output folder and the command to publish it later is printed:
    python -m xbench.report.wandb_report publish report/wandb_report.json
xbench's W&B runs are named by run_id and carry the config tree, so the filter selects them by name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from xbench.analysis.frame import parse_query
from xbench.analysis.rows import currency
from xbench.wandb_env import has_credentials

# Tidy column -> the W&B config key xbench logs it under.
CONFIG_PATHS = {"model": "model.name", "data": "data.name", "platform": "platform.name",
                "runtime": "runtime.name", "precision": "precision.name", "parallel": "parallel.name",
                "batch_size_per_device": "data.batch_size", "pricing_model": "platform.pricing_model",
                "experiment": "experiment"}
MAX_NAMED_RUNS = 200  # above this, select by the config filters only

# (kind, title, y summary metric, x) -- the report's panels, matching the local plots.
PANELS = [
    ("scatter", "Throughput vs batch size per device", "throughput_samples_per_s", "data.batch_size"),
    ("bar", "Throughput [samples/s]", "throughput_samples_per_s", None),
    ("bar", "Throughput per price [samples/s per {CUR}/hour]", "samples_per_s_per_{cur}_per_hour", None),
    ("bar", "Cost [{CUR} per 1M samples]", "{cur}_per_million_samples", None),
    ("bar", "Cost to target [{CUR}]", "cost_to_target_{cur}", None),
    ("bar", "Time to target [s]", "time_to_target_s", None),
    ("bar", "Steady step time [s]", "step_time_s_median", None),
    ("bar", "First step [s]", "first_step_s", None),
    ("scatter", "Throughput vs devices", "throughput_samples_per_s", "parallel.world_size"),
    ("line", "Loss per step", "loss", "Step"),
]


def definition(df: pd.DataFrame, filters: list[str], project: str, entity: str | None, title: str) -> dict:
    cur = currency(df) or "usd"  # cost metrics are named after the records' currency

    clauses = []
    for f in filters:
        for key, values in parse_query(f).items():
            if key in CONFIG_PATHS:
                vals = ", ".join(repr(v) for v in values)
                clauses.append(f"Config('{CONFIG_PATHS[key]}') in [{vals}]")
    names = sorted(df["run_id"].astype(str)) if len(df) <= MAX_NAMED_RUNS else []
    if names:
        clauses.append("Name in [" + ", ".join(repr(n) for n in names) + "]")
    return {
        "title": title[:128],
        "description": f"{len(df)} xbench runs, grouped by platform. Filters: {'; '.join(filters) or 'none'}.",
        "project": project,
        "entity": entity,
        "runset": {"name": "xbench runs", "filters": " and ".join(clauses), "groupby": ["config.platform.name"]},
        "panels": [{"kind": k, "title": t.format(CUR=cur.upper()), "y": y.format(cur=cur), "x": x}
                   for k, t, y, x in PANELS],
    }


def build(defn: dict):
    """The wandb-workspaces Report object for a definition (no network until .save())."""
    import wandb_workspaces.reports.v2 as wr

    def metric(x):
        if x in (None, "Step"):
            return x
        return wr.Config(x) if "." in x else wr.SummaryMetric(x)

    panels = []
    for p in defn["panels"]:
        if p["kind"] == "bar":
            panels.append(wr.BarPlot(title=p["title"], metrics=[wr.SummaryMetric(p["y"])],
                                     groupby=wr.Config("platform.name"), groupby_aggfunc="median",
                                     groupby_rangefunc="minmax"))
        elif p["kind"] == "scatter":
            panels.append(wr.ScatterPlot(title=p["title"], x=metric(p["x"]), y=wr.SummaryMetric(p["y"])))
        else:
            panels.append(wr.LinePlot(title=p["title"], x=p["x"], y=[p["y"]]))
    rs = defn["runset"]
    runset = wr.Runset(entity=defn["entity"] or "", project=defn["project"], name=rs["name"],
                       filters=rs["filters"], groupby=rs["groupby"])
    kwargs = {"entity": defn["entity"]} if defn.get("entity") else {}
    return wr.Report(project=defn["project"], title=defn["title"], description=defn["description"],
                     blocks=[wr.H1(defn["title"]), wr.P(defn["description"]),
                             wr.PanelGrid(runsets=[runset], panels=panels)], **kwargs)


def publish(defn: dict) -> str:
    if not defn.get("entity"):  # the logged-in user's default entity, as `wandb` itself would use
        import wandb

        defn = {**defn, "entity": wandb.Api().default_entity}
    report = build(defn)
    report.save()
    return report.url


def publish_or_save(df: pd.DataFrame, args, out: Path) -> Path:
    title = args.title or ("xbench: " + ("; ".join(args.filter) or "all runs"))
    defn = definition(df, args.filter, args.wandb_project, args.wandb_entity, title)
    path = out / "wandb_report.json"
    path.write_text(json.dumps(defn, indent=1))
    later = f"python -m xbench.report.wandb_report publish {path}"
    if not has_credentials():
        print(f"W&B: no credentials; report definition written to {path}. After `wandb login` and "
              f"`wandb sync` of the runs, publish it with:\n  {later}", file=sys.stderr)
        return path
    try:
        print(f"W&B: published report {publish(defn)}")
    except Exception as e:  # no network, no project yet, API change: the definition is kept
        print(f"W&B: could not publish ({type(e).__name__}: {e}); definition in {path}; retry with:\n  {later}",
              file=sys.stderr)
    return path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "publish":
        print("usage: python -m xbench.report.wandb_report publish DEFINITION.json", file=sys.stderr)
        return 2
    print(publish(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
