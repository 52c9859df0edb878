"""Several quality targets in one train-to-target run: how each is named in flat figures, and the figures.

A run with `goal.targets: [0.757, 0.764]` records `goal_targets` (the list) and flat figures per target whose
names carry the target with `p` for the decimal point (W&B and the report's frame
take flat scalars; a dot in a key would read as nesting): `target_reached_0p757`, `epochs_to_target_0p757`,
`train_time_to_target_0p757_s`, `wall_time_to_target_0p757_s`, `metric_at_target_0p757`, and derived
`train_cost_to_target_0p757_usd`, `cost_to_target_0p757_usd`. The plain `*_to_target*` figures are those of
the last target (the one the run stops at). Pure Python: the record, W&B, the console and the report share it.
"""

from __future__ import annotations

import re

_LABELLED = re.compile(r"^target_reached_(\d+(?:p\d+)?(?:e-?\d+)?)$")


def label(target: float) -> str:
    """0.757 -> '0p757'; 20.5 -> '20p5'; 1.0 -> '1' (the shortest repr, dot replaced)."""
    return f"{target:g}".replace(".", "p")


def from_label(text: str) -> float:
    return float(text.replace("p", "."))


def targets_in(keys) -> list[float]:
    """The targets whose flat figures appear among `keys` (e.g. a report row's columns), sorted."""
    return sorted({from_label(m.group(1)) for k in keys if (m := _LABELLED.match(k))})


def effective_targets(goal) -> list[float]:
    """goal.targets when given, else [goal.target], else [] (a fixed number of epochs)."""
    if goal.targets:
        return list(goal.targets)
    return [goal.target] if goal.target is not None else []


def figures(reached: dict[float, dict | None], metric: str) -> dict:
    """Flat per-target figures from {target: the curve point where it was first met, or None}."""
    out: dict = {}
    for t, point in reached.items():
        out[f"target_reached_{label(t)}"] = point is not None  # never null: every target has a row
        f = {"epochs_to_target_{t}": "epoch", "steps_to_target_{t}": "step",
             "samples_to_target_{t}": "samples_seen", "train_time_to_target_{t}_s": "train_time_s",
             "wall_time_to_target_{t}_s": "wall_s", "metric_at_target_{t}": metric}
        for key, src in f.items():
            out[key.format(t=label(t))] = point[src] if point else None
    return out


def summary_rows(values: dict) -> list[tuple[float, dict]]:
    """(target, {epochs, train_time_s, wall_s, train_cost, cost}) for every labelled target in `values`."""
    rows = []
    for t in targets_in(values):
        lab = label(t)
        costs = {k: v for k, v in values.items() if k.startswith(f"train_cost_to_target_{lab}_")
                 or k.startswith(f"cost_to_target_{lab}_")}
        rows.append((t, {"epochs": values.get(f"epochs_to_target_{lab}"),
                         "train_time_s": values.get(f"train_time_to_target_{lab}_s"),
                         "wall_s": values.get(f"wall_time_to_target_{lab}_s"), **costs}))
    return rows


def column(key: str, target: float) -> str:
    """The per-target name of a run-level figure: `train_time_to_target_s` -> `train_time_to_target_0p757_s`,
    `epochs_to_target` -> `epochs_to_target_0p757`, `train_cost_to_target_usd` ->
    `train_cost_to_target_0p757_usd`; figures of the whole run (status, final metric) keep their name."""
    lab = label(target)
    for stem in ("train_cost_to_target_", "cost_to_target_"):
        if key.startswith(stem):
            return f"{stem}{lab}_{key[len(stem):]}"
    if key.endswith("_to_target_s"):
        return f"{key[:-2]}_{lab}_s"
    if key.endswith("_to_target"):
        return f"{key}_{lab}"
    return key
