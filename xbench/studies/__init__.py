"""The studies xbench reruns, as data: `studies.yaml` beside this file (no torch, no Hydra needed to read it).

Each entry is one experiment preset: its study, the small command that runs here, the full-scale commands
(each with the platform it runs on and the facts it must compose to), the report commands, and the
published figures. `facts(config)` says what a composed config runs (model, data, batch per device and
global, devices used and billed, precision, runtime, price, ...), from the resolved config alone; the
tests compose every command and compare. `python -m xbench.studies` prints the commands.

    from xbench import studies
    studies.get("tpu_vs_gpu")["full_scale"][0]["command"]
    studies.published_rows("tpu_vs_gpu")     # the published figures as rows
                                             # (value, unit, kind, conditions, source)
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from xbench.metrics import cost

MANIFEST = Path(__file__).with_name("studies.yaml")
PUBLISHED_FIELDS = ("value", "unit", "conditions", "source", "date")
DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
# Cores (PJRT devices) per chip: TPU v2 and v3 have two TensorCores a chip, v4 and newer one (megacore).
CORES_PER_CHIP = {"TPU v2": 2, "TPU v3": 2}
# What `facts` reports; `expect` in studies.yaml may name any of these.
FACTS = ("model", "model_layers", "model_hidden", "model_heads", "lstm_impl", "data", "image_size", "seq_len",
         "augment", "dataset_size", "batch_size_per_device", "global_batch", "devices", "devices_used",
         "devices_billed", "billed_unit", "threads", "precision", "runtime", "pjrt_device", "parallel",
         "platform", "price_per_hour", "currency", "pricing_model", "bench_mode",
         "epochs", "target", "targets", "metric", "optimizer", "lr_schedule", "projection_epochs",
         "cpu_capability")


@functools.lru_cache(maxsize=1)
def _manifest() -> dict:
    import yaml

    # xbench's own file: libyaml's safe loader when built in (the same data, 8x faster: the report reads it)
    return yaml.load(MANIFEST.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def all_studies() -> list[dict]:
    """Every entry of studies.yaml (the five studies, then the presets that are not studies)."""
    return _manifest()["studies"]


def get(study_id: str) -> dict:
    for s in all_studies():
        if s["id"] == study_id:
            return s
    known = ", ".join(s["id"] for s in all_studies())
    raise KeyError(f"no study {study_id!r} in {MANIFEST.name}; known: {known}")


def by_preset(preset: str) -> dict | None:
    return next((s for s in all_studies() if s["preset"] == preset), None)


def commands(study: dict) -> list[str]:
    """Every command the study names: small, full scale, reports."""
    return [*small_commands(study), *(c["command"] for c in study["full_scale"]),
            study["report"]["small"], *full_reports(study)]


def full_reports(study: dict) -> list[str]:
    """The full-scale report commands: `report.full`, then `report.full_also` (another baseline the article
    normalised to, e.g. study 5's one V100 and its 8-V100 VM)."""
    return [study["report"]["full"], *(study["report"].get("full_also") or [])]


def small_entries(study: dict) -> list[dict]:
    """The small command, then the ones that complete it here (`small.also`), each {id, what, command,
    expect}."""
    return [{"id": "small", **study["small"]}, *(study["small"].get("also") or [])]


def small_commands(study: dict) -> list[str]:
    return [e["command"] for e in small_entries(study)]


@dataclass
class Command:
    """`[ENV=value ...] python -m xbench [-m] override ...`, parsed."""

    env: dict[str, str] = field(default_factory=dict)
    module: str = "xbench"
    multirun: bool = False
    overrides: list[str] = field(default_factory=list)


def parse(command: str) -> Command:
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[:2] != ["python", "-m"] or len(words) < 3:
        raise ValueError(f"not a `python -m MODULE ...` command: {command!r}")
    out = Command(env=env, module=words[2])
    for w in words[3:]:
        if w in ("-m", "--multirun"):
            out.multirun = True
        else:
            out.overrides.append(w)
    return out


def cores_per_chip(accelerator: str | None) -> int:
    return CORES_PER_CHIP.get(accelerator or "", 1)


def devices_used(cfg: dict) -> int:
    """Devices the run drives: 1 for `single`, else parallel.world_size (ranks, GPUs or XLA devices)."""
    par = cfg["parallel"]
    return 1 if par["name"] == "single" else int(par["world_size"])


def usage(cfg: dict) -> tuple[int | None, int | None, str]:
    """(used, billed, unit). A CPU instance is billed per vCPU and used by ranks x threads (threads unset:
    the ranks share every core, as the launchers divide them); an accelerator platform by devices (TPU cores,
    GPUs)."""
    p = cfg["platform"]
    if p.get("device") == "cpu":
        vcpus, threads = p.get("cpu_vcpus"), cfg["bench"].get("threads")
        return (devices_used(cfg) * threads if threads else vcpus), vcpus, "vCPU"
    return devices_used(cfg), p.get("device_count"), "device"


def _model_facts(model: dict) -> dict:
    options = model.get("options") or {}
    return {"model": model["name"], "model_layers": options.get("layers"),
            "model_hidden": options.get("hidden"), "model_heads": options.get("heads"),
            "lstm_impl": options.get("lstm_impl")}


def _data_facts(d: dict, devices: int) -> dict:
    """The data's name and shape (an image's size, a sequence's length: for its modality only) and the
    batch."""
    return {"data": d["name"], "image_size": d.get("image_size") if d.get("modality") == "image" else None,
            "seq_len": d.get("seq_len") if d.get("modality") == "tokens" else None,
            "augment": bool(d.get("augment")), "dataset_size": d.get("dataset_size"),
            "batch_size_per_device": d["batch_size"], "global_batch": d["batch_size"] * devices}


def _pjrt_device(cfg: dict, env: dict) -> str | None:
    """Where XLA runs: PJRT TPU for an XLA platform, CPU otherwise, unless PJRT_DEVICE says (None: not
    XLA)."""
    if not cfg["runtime"]["name"].startswith("xla"):
        return None
    return env.get("PJRT_DEVICE") or ("TPU" if cfg["platform"].get("device") == "xla" else "CPU")


def _goal_facts(b: dict, g: dict) -> dict:
    """A train-to-target run's epochs, targets (the last: where the run stops) and metric; None otherwise."""
    if b.get("mode") != "train_to_target":
        return {"epochs": None, "target": None, "targets": None, "metric": None}
    targets = list(g.get("targets") or []) or ([g["target"]] if g.get("target") is not None else [])
    return {"epochs": g.get("max_epochs"), "target": targets[-1] if targets else None,
            "targets": ",".join(f"{t:g}" for t in targets) or None, "metric": g.get("metric")}


def facts(cfg: dict, env: dict | None = None) -> dict:
    """What a resolved config (a plain dict: OmegaConf.to_container(cfg, resolve=True)) runs.

    `env` is the command's environment (PJRT_DEVICE): XLA runs on PJRT TPU for an XLA platform, on CPU
    otherwise, unless PJRT_DEVICE says (as runtimes.default_pjrt_device does on the simulated host).
    """
    p, b, g = cfg["platform"], cfg["bench"], cfg.get("goal") or {}
    used, billed, unit = usage(cfg)
    devices = devices_used(cfg)
    optim = cfg.get("optim") or {}
    return {
        **_model_facts(cfg["model"]),
        **_data_facts(cfg["data"], devices),
        "devices": devices,
        "devices_used": used,
        "devices_billed": billed,
        "billed_unit": unit,
        "threads": b.get("threads"),
        "precision": cfg["precision"]["name"],
        "runtime": cfg["runtime"]["name"],
        "pjrt_device": _pjrt_device(cfg, env or {}),
        "parallel": cfg["parallel"]["name"],
        "platform": p["name"],
        "price_per_hour": cost.price_per_hour(p),
        "currency": cost.currency(p),
        "pricing_model": p.get("pricing_model"),
        "bench_mode": b.get("mode"),
        **_goal_facts(b, g),
        "optimizer": optim.get("name"),
        "lr_schedule": (optim.get("schedule") or {}).get("name"),
        "projection_epochs": g.get("projection_epochs"),
        "cpu_capability": b.get("cpu_capability"),
    }


# difference: points between two set-ups (top-1 0.7 points higher); count: how many of something (256 chips)
KINDS = ("synthetic_throughput", "real_throughput", "training_time", "cost", "ratio", "difference", "count")
CONDITIONS = ("hardware", "batch", "precision", "data")
# Measured columns by kind (the tidy frame's names; a throughput's kind is its data's: see column_kind).
_THROUGHPUT = re.compile(r"^(throughput|step_throughput|max_batch_throughput)(_per_device)?_samples_per_s$")
_COST = re.compile(r"(^|_)cost(_|$)|_per_(usd|eur)_per_hour$|^(usd|eur)_per_million_samples$")
_TIME = re.compile(r"^(train_time|wall_time)_to_target(_\w+)?_s$"
                   r"|^(train_time|wall_s_total|projected_training|projected_epoch)(_s)?$"
                   r"|^epochs_to_target(_\w+)?$")
_RATIO = re.compile(r"^(scaling_efficiency|speedup|efficiency)$")
PRICE_UNIT = re.compile(r"/(hour|minute|month)$")


def column_kind(column: str, where: dict | None = None) -> str | None:
    """The kind of a measured column: a throughput is synthetic or real by the data set `where` pins
    (data=synthetic_* or another); None when that is not pinned or the column is of no kind."""
    if _THROUGHPUT.match(column):
        data = str((where or {}).get("data") or "")
        if not data:
            return None
        return "synthetic_throughput" if data.startswith("synthetic") else "real_throughput"
    if _COST.search(column):
        return "cost"
    if _TIME.match(column):
        return "training_time"
    if _RATIO.match(column):
        return "ratio"
    return None


def article(article_id: str) -> dict:
    arts = _manifest().get("articles") or {}
    if article_id not in arts:
        raise KeyError(f"no article {article_id!r} in {MANIFEST.name}; known: {', '.join(arts)}")
    return arts[article_id]


def _source_text(src) -> str:
    """`Title` (author, date): "quote" for a {article, quote} source; a plain string as it is."""
    if not isinstance(src, dict):
        return src
    a = article(src["article"])
    return f"{a['title']} ({a['author']}, {a['date']}): \u201c{src['quote']}\u201d"


def _conditions_text(cond) -> str:
    if not isinstance(cond, dict):
        return cond
    return "; ".join(f"{k}: {cond[k]}" for k in CONDITIONS if k in cond)


def published_rows(study_id: str | None = None) -> list[dict]:
    """The published figures as rows: study, number, figure id, what, value, unit, kind, conditions (one text:
    hardware; batch; precision; data), source (the article and its sentence), article, quote, url, date, note,
    compare (the spec or None). All studies when `study_id` is None."""
    rows = []
    for s in all_studies():
        if study_id is not None and s["id"] != study_id:
            continue
        for f in s.get("published") or []:
            src = f.get("source")
            art = article(src["article"]) if isinstance(src, dict) else {}
            rows.append({"study": s["id"], "study_number": s.get("study"), "figure": f["id"],
                         "what": f.get("what"), "value": f.get("value"), "unit": f.get("unit"),
                         "kind": f.get("kind"), "conditions": _conditions_text(f.get("conditions")),
                         "source": _source_text(src), "article": art.get("title"),
                         "quote": src.get("quote") if isinstance(src, dict) else None, "url": art.get("url"),
                         "date": f.get("date"), "note": f.get("note"),
                         "compare": f.get("compare"), "why_not": f.get("why_not")})
    return rows


def _kind_problem(f: dict, arts: dict) -> str | None:
    if f.get("kind") and f["kind"] not in KINDS:
        return f"kind {f['kind']!r} is not one of {', '.join(KINDS)}"
    return None


def _conditions_problem(f: dict, arts: dict) -> str | None:
    cond = f.get("conditions")
    if not isinstance(cond, dict) or set(cond) != set(CONDITIONS) or any(not cond[k] for k in cond):
        return f"conditions must give exactly {', '.join(CONDITIONS)} (n/a where none applies), got {cond!r}"
    return None


def _source_problem(f: dict, arts: dict) -> str | None:
    src = f.get("source")
    if not isinstance(src, dict) or src.get("article") not in arts or not src.get("quote"):
        return f"source must be {{article: <one of {', '.join(arts)}>, quote: <the sentence>}}"
    return None


def _date_problem(f: dict, arts: dict) -> str | None:
    if f.get("date") and not DATE.match(str(f["date"])):
        return f"date {f['date']!r} is not YYYY[-MM[-DD]]"
    return None


def _compare_problem(f: dict, arts: dict) -> str | None:
    spec = f.get("compare")
    got = column_kind(spec["column"], spec.get("where")) if spec else f.get("kind")
    if got != f.get("kind"):
        return (f"compare column {spec['column']} (where {spec.get('where')}) is {got or 'of no kind'}, the "
                f"figure is {f.get('kind')}")
    return None


# Each published entry's checks beyond its fields being there, in the order they are said.
PUBLISHED_CHECKS = (_kind_problem, _conditions_problem, _source_problem, _date_problem, _compare_problem)


def published_problems() -> list[str]:
    """Entries lacking value, unit, kind, conditions, source or date; a kind not in KINDS; conditions without
    hardware, batch, precision and data; a source not {article, quote} of a listed article; a date not YYYY,
    YYYY-MM or YYYY-MM-DD; a compare spec whose column is not of the figure's kind."""
    out = []
    arts = _manifest().get("articles") or {}
    for s in all_studies():
        for f in s.get("published") or []:
            label = f"{s['id']}/{f['id']}"
            out += [f"{label}: no {k}" for k in (*PUBLISHED_FIELDS, "kind") if f.get(k) in (None, "")]
            out += [f"{label}: {said}" for check in PUBLISHED_CHECKS if (said := check(f, arts))]
    return out


def missing_figures(study: dict, report_dir: str | Path) -> list[str]:
    """The figure kinds the study's small report must show (`small.figures`: table:<name> or plot:<name>)
    that `report_dir` (a `python -m xbench.report` output) lacks, or draws for fewer works than it has data
    for (plots/<name>.json, which the report writes beside each plot of works)."""
    where = {"table": ("tables", ".csv"), "plot": ("plots", ".png")}
    out = []
    for fig in study["small"].get("figures") or []:
        kind, name = fig.split(":", 1)
        folder, ext = where[kind]
        path = Path(report_dir) / folder / f"{name}{ext}"
        if not path.is_file():
            out.append(fig)
        elif (empty := _not_a_figure(path, kind)) is not None:  # a 0-byte or cut-off file draws nothing
            out.append(f"{fig} ({path} {empty})")
        elif kind == "plot" and (drawn := Path(report_dir) / folder / f"{name}.json").is_file():
            try:
                d = json.loads(drawn.read_text())
                drawn_n, with_data_n = len(set(d["works_drawn"])), len(set(d["works_with_data"]))
            except (ValueError, KeyError, TypeError) as e:  # a damaged sidecar is a missing figure, named
                out.append(f"{fig} ({drawn} is not the report's plot summary: {type(e).__name__}: {e})")
                continue
            if drawn_n < with_data_n:
                out.append(f"{fig} (draws {drawn_n} of {with_data_n} works)")
    return out


BASELINE_COLUMNS = {"time": "time relative to baseline [x]", "cost": "cost relative to baseline [x]"}


def missing_headlines(study: dict, report_dir: str | Path) -> list[str]:
    """The article's headline comparisons (`report.headlines`) the full report in `report_dir` should hold
    and does not: for each headline whose `out` folder is `report_dir`'s name, tables/baseline.csv must mark
    the headline's baseline configuration as the baseline and give a number in the time (or cost) column of
    its row."""
    import csv

    wanted = [h for h in study["report"].get("headlines") or []
              if Path(h["out"]).name == Path(report_dir).name]
    if not wanted:
        return []
    table = Path(report_dir) / "tables" / "baseline.csv"
    if not table.is_file() or (empty := _not_a_figure(table, "table")) is not None:
        why = "is missing" if not table.is_file() else empty
        return [f"{h['figure']}: {h['says']} ({table} {why}: run the report with its --baseline)"
                for h in wanted]
    rows = list(csv.DictReader(table.read_text().splitlines()))
    return [f"{h['figure']}: {h['says']} ({why})" for h in wanted
            if (why := _headline_missing(h, rows, table))]


def _matching(rows: list[dict], keys: dict) -> list[dict]:
    return [r for r in rows if all(str(r.get(k, "")) == str(v) for k, v in keys.items())]


def _headline_missing(h: dict, rows: list[dict], table: Path) -> str | None:
    """Why the baseline table's `rows` do not hold the headline (None: they do): its baseline is not the
    table's, or its row has no number in the headline's column."""
    col = BASELINE_COLUMNS[h["column"]]
    if not any(r.get("baseline") for r in _matching(rows, h["baseline"])):
        return f"the baseline in {table} is not {_pairs(h['baseline'])}"
    if not any(_number(r.get(col)) is not None for r in _matching(rows, h["row"])):
        return f"{table} has no {col!r} for {_pairs(h['row'])}"
    return None


def _number(text) -> float | None:
    try:
        v = float(str(text).replace(",", "").rstrip("x"))
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _not_a_figure(path: Path, kind: str) -> str | None:
    """Why `path` is no drawn figure (empty, not a PNG, a table without a data row), or None."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head:
        return "is empty (0 bytes)"
    if kind == "plot" and not head.startswith(PNG_MAGIC):
        return "is not a PNG image"
    if kind == "table" and len([x for x in head.splitlines() if x.strip()]) < 2:
        return "has no data row"
    return None


def run_here_hint(experiment: str | None) -> str | None:
    """What to run here instead, for a preset refused on this machine (compat appends it)."""
    s = by_preset(experiment) if experiment else None
    if s is None:
        return None
    return f"to run this preset here, small: {s['small']['command']} (docs/studies.md)"


# ---------- the text the preset headers and docs/studies.md carry ----------

def header_lines(study: dict) -> list[str]:
    """The comment block of conf/experiment/<preset>.yaml after `# @package _global_`."""
    title = (f"Study {study['study']} ({study['year']}): {study['title']}." if study.get("study")
             else f"{study['title']}.")
    out = [f"# {title}",
           f"# Axis: {study['axis']}.",
           f"# Small, here ({study['small']['what']}):",
           f"#   {study['small']['command']}",
           *(line for e in study["small"].get("also") or []
             for line in (f"#   and {e['what']}:", f"#     {e['command']}")),
           "# Full scale, one command per machine (XBENCH_DATA=/data for real data sets):"]
    for c in study["full_scale"]:
        pending = f" [pending: {c['pending']['needs']}]" if c.get("pending") else ""
        out += [f"#   {c['what']}{pending}:", f"#     {c['command']}"]
    out += [f"# Report (small): {study['report']['small']}",
            *(f"# Report (full):  {r}" for r in full_reports(study)),
            f"# From xbench/studies/studies.yaml (python -m xbench.studies {study['id']}); docs/studies.md."]
    return out


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _origin(study: dict) -> list[str]:
    """The article the study's published figures come from (the first named), as the section's first line."""
    arts = [a["article"] for a in (f.get("source") for f in study.get("published") or [])
            if isinstance(a, dict)]
    if not arts:
        return []
    a = article(arts[0])
    url = f", {a['url']}" if a.get("url") else ""
    return [f"From {a['author']}, \"{a['title']}\" ({a['date']}{url}).", ""]


def _command_lines(study: dict) -> list[str]:
    """The small command (and its companions), each full-scale command with its platform, the reports."""
    lines = [f"Small, here ({study['small']['what']}):", "", "```", study["small"]["command"], "```", "",
             *(line for e in study["small"].get("also") or []
               for line in (f"and {e['what']}:", "", "```", e["command"], "```", "")),
             "Full scale, one command per machine:", ""]
    for c in study["full_scale"]:
        pending = f" *Pending: {c['pending']['needs']}.*" if c.get("pending") else ""
        lines += [f"- {c['what']} (`{c['platform']}`).{pending}", "", "  ```", f"  {c['command']}", "  ```",
                  ""]
    return lines + ["Reports:", "", "```", study["report"]["small"], *full_reports(study), "```", ""]


def _pairs(keys: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in keys.items())


def _headline_lines(study: dict) -> list[str]:
    """The article's headline comparisons the full reports draw (none: no lines)."""
    headlines = study["report"].get("headlines")
    if not headlines:
        return []
    return ["The full reports draw the article's headline comparisons (`--check-report DIR --full` fails "
            "without them):", "",
            *(f"- {h['says']}: `{h['out']}`, tables/baseline.csv, the {h['column']} of {_pairs(h['row'])} "
              f"against {_pairs(h['baseline'])} (published figure `{h['figure']}`)" for h in headlines), ""]


def _published_lines(study: dict) -> list[str]:
    """The published figures as a table (none: no lines)."""
    if not study.get("published"):
        return []
    return ["Published figures (`xbench.studies.published_rows`; the report draws a measured figure only "
            "beside a published one of the same kind):", "",
            "| figure | value | unit | kind | conditions | source |", "|---|---|---|---|---|---|",
            *(f"| {r['what']} | {r['value']} | {r['unit']} | {r['kind']} | {_cell(r['conditions'])} | "
              f"{_cell(r['source'])} |" for r in published_rows(study["id"])), ""]


def docs_section(study: dict) -> str:
    title = (f"Study {study['study']} ({study['year']}): {study['title']}" if study.get("study")
             else study["title"])
    lines = [f"### {title}", "", *_origin(study), f"Preset `{study['preset']}`. Axis: {study['axis']}.", "",
             *_command_lines(study), *_headline_lines(study), *_published_lines(study)]
    if study.get("not_recovered"):
        lines += ["Not recovered: " + "; ".join(study["not_recovered"]) + ".", ""]
    return "\n".join(lines)
