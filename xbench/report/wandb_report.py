"""A W&B Report comparing the selected runs, grouped as the HTML report's tables group them (one bar per
configuration: analysis/workload.py CONFIGURATION), through W&B's reports API (`wandb-workspaces`, imported
lazily: the rest of the report never needs it).

The report is first a plain JSON definition (title, runset filter, grouping, panels). With
credentials it is published at once; without (or when publishing fails) the definition is written to
`wandb_report.json` in the output folder and the command to publish it later is printed:
    python -m xbench.report.wandb_report publish report/wandb_report.json
xbench's W&B runs carry the config tree with the run_id in it (their names say what ran), so the filter
selects them by `Config('run_id')`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from xbench.analysis.frame import parse_query
from xbench.analysis.rows import Rows, currency, groups
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.workload import CONFIGURATION
from xbench.metrics import goals
from xbench.sinks.wandb import comparison
from xbench.wandb_env import has_credentials

# Tidy column -> the W&B config key xbench logs it under.
CONFIG_PATHS = {"model": "model.name", "data": "data.name", "platform": "platform.name",
                "runtime": "runtime.name", "precision": "precision.name", "parallel": "parallel.name",
                "batch_size_per_device": "data.batch_size", "pricing_model": "platform.pricing_model",
                "experiment": "experiment"}
MAX_NAMED_RUNS = 200  # above this, select by the config filters only
# A run's W&B group in the report, its bars' too: the config key sinks/wandb.py logs, the run's configuration
# (`comparison`: model, data and shape, platform, runtime, precision, strategy, batch, devices, threads, ...).
BAR_GROUP = "comparison"
GROUPBY = [f"config.{BAR_GROUP}"]
# Panels against the device count: drawn only when some workload was run at two or more counts.
SCALING_X = "devices"

# A panel is in the report only when some record has its figure, so every panel has data: sinks/wandb.py
# puts each record's scalar figures in its W&B summary under the same names as the tidy frame's columns; the
# windows and the evaluation curve are its history. {cur}/{CUR}: a panel per currency. (kind, title, y, x)
SCATTER_PANELS = [
    ("scatter", "Throughput vs global batch size [samples/s]", "throughput_samples_per_s",
     "global_batch_size"),
    ("scatter", "Throughput vs devices [samples/s] (DataParallel vs DDP: group by parallel)",
     "throughput_samples_per_s", SCALING_X),
    ("scatter", "Throughput per device vs devices [samples/s] (flat is linear scaling)",
     "throughput_per_device_samples_per_s", SCALING_X),
]
_BARS = """
throughput_samples_per_s            | Throughput [samples/s]
samples_per_s_per_{cur}_per_hour    | Throughput per price [samples/s per {CUR}/hour]
{cur}_per_million_samples           | Cost [{CUR} per 1M samples]
train_time_to_target_s              | Training time to target [s]
train_cost_to_target_{cur}          | Training cost to target [{CUR}]
epochs_to_target                    | Epochs to target
max_batch_size_per_device           | Largest batch per device that fits [samples]
mfu                                 | Model FLOP utilisation (MFU)
gpu_util_percent_avg_devices        | GPU utilisation, mean over GPUs [%]
gpu_util_percent_min_device         | Least busy GPU [%] (DataParallel leaves replicas idle)
energy_j_per_sample                 | Energy per sample [J]
peak_device_allocated_gib           | Peak device memory [GiB]
step_time_s_median                  | Steady step time [s]
first_step_s                        | First step [s]
compile_time_s                      | Compile time [s]
"""  # y | title: a bar per configuration
SUMMARY_PANELS = SCATTER_PANELS + [
    ("bar", title.strip(), y.strip(), None)
    for y, title in (line.split("|") for line in _BARS.strip().splitlines())
]
HISTORY_PANELS = [  # (title, y, x): lines over each run's history
    ("Throughput per timed window [samples/s], logged as each closed", "window_throughput_samples_per_s",
     "window"),
    ("Loss per step", "loss", "step"),
]


def _currencies(df: pd.DataFrame) -> list[str]:
    """Every currency some record's cost figures are in (W&B keeps each record's own: a panel per
    currency)."""
    found = sorted({c.split("_")[-3] for c in df.columns if c.startswith("samples_per_s_per_") and
                    c.endswith("_per_hour") and df[c].notna().any()})
    return found or [currency(df) or "usd"]


def _present(df: pd.DataFrame, col: str) -> bool:
    return col in df.columns and df[col].notna().any()


def _summary_panels(df: pd.DataFrame) -> list[dict]:
    """SUMMARY_PANELS whose figures some record has (a panel per currency where the figure is money; the
    panels over devices only where some workload scales)."""
    out = []
    scales = bool(scaling_rows(Rows.of(df)))  # the HTML report's scaling table has a row
    for kind, title, y, x in (p for p in SUMMARY_PANELS if p[3] != SCALING_X or scales):
        for cur in (_currencies(df) if "{cur}" in y else [None]):
            ycol = y.format(cur=cur) if cur else y
            if _present(df, ycol) and (x is None or _present(df, x)):
                out.append({"kind": kind, "title": title.format(CUR=(cur or "").upper()), "y": ycol, "x": x,
                            "source": "summary"})
    return out


def _history_panels(df: pd.DataFrame) -> list[dict]:
    """Lines over the runs' histories: each evaluation as it happened (sinks/wandb.py log_point), the timed
    windows of throughput runs, each batch a batch search tried (records/batch_trials.py)."""
    metrics = sorted({m for m in df.get("goal_metric", pd.Series(dtype=object)).dropna().unique()})
    curve_x = [("train_time_s", "training time [s]"), ("epoch", "epoch")]
    out = [{"kind": "line", "title": f"Evaluation {goals.label(m)} vs {label}", "y": m, "x": x,
            "source": "history"} for m in metrics for x, label in curve_x]
    modes = set(df.get("bench_mode", pd.Series(dtype=object)).dropna())
    if "throughput" in modes:
        out += [{"kind": "line", "title": t, "y": y, "x": x, "source": "history"}
                for t, y, x in HISTORY_PANELS]
    if "find_max_batch" in modes:
        title = "Batch search: samples/s over each trial's timed window, per batch per device tried"
        out.append({"kind": "line", "title": title, "y": "trial_throughput_samples_per_s",
                    "x": "trial_batch_size", "source": "history"})
    return out


def panels(df: pd.DataFrame) -> list[dict]:
    """The report's panels, each with the keys it reads (`y`, `x`) and where they live (`source`)."""
    return _summary_panels(df) + _history_panels(df)


def definition(df: pd.DataFrame, filters: list[str], project: str, entity: str | None, title: str) -> dict:
    clauses = []
    for f in filters:
        for key, values in parse_query(f).items():
            if key in CONFIG_PATHS:
                vals = ", ".join(repr(v) for v in values)
                clauses.append(f"Config('{CONFIG_PATHS[key]}') in [{vals}]")
    names = sorted(df["run_id"].astype(str)) if len(df) <= MAX_NAMED_RUNS else []
    # The bars W&B will draw: the HTML report's groups, named by the key each run logged (sinks/wandb.py).
    bars = [{BAR_GROUP: comparison(keys), "runs": len(sub)} for keys, sub in groups(Rows.of(df))]
    if names:
        clauses.append("Config('run_id') in [" + ", ".join(repr(n) for n in names) + "]")
    return {
        "title": title[:128],
        "description": f"{len(df)} xbench runs in {len(bars)} groups, one per configuration as the HTML "
                       f"report's tables group them ({', '.join(CONFIGURATION)}). Filters: "
                       f"{'; '.join(filters) or 'none'}. Costs are in each record's own currency (a panel "
                       "per currency); batch axes are the global batch.",
        "project": project,
        "entity": entity,
        "runset": {"name": "xbench runs", "filters": " and ".join(clauses), "groupby": GROUPBY},
        "bar_groupby": BAR_GROUP,
        "groups": bars,
        "panels": panels(df),
    }


def build(defn: dict):
    """The wandb-workspaces Report object for a definition (no network until .save())."""
    import wandb_workspaces.reports.v2 as wr

    panels = []
    for p in defn["panels"]:
        if p["kind"] == "bar":
            panels.append(wr.BarPlot(title=p["title"], metrics=[wr.SummaryMetric(p["y"])],
                                     groupby=wr.Config(defn.get("bar_groupby", BAR_GROUP)),
                                     groupby_aggfunc="median", groupby_rangefunc="minmax"))
        elif p["kind"] == "scatter":
            panels.append(wr.ScatterPlot(title=p["title"], x=wr.SummaryMetric(p["x"]),
                                         y=wr.SummaryMetric(p["y"])))
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
        print(f"W&B: could not publish ({type(e).__name__}: {e}); definition in {path}; retry "
              f"with:\n  {later}", file=sys.stderr)
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
