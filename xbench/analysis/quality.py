"""Did the hardware change the quality of training? The final metric of the same work across machines.

Study 3 checked that the final accuracy was the same on every platform ("hardware must not change
quality"). Here the ok train-to-target runs of one work (xbench/analysis/workload.py: model, data and
their options) with the same goal metric and the same number of epochs trained are compared: the spread
of their final metrics (max - min) against a stated tolerance gives the verdict. Pure Python.
"""

from __future__ import annotations

from xbench.analysis.rows import Rows, groups
from xbench.analysis.workload import CONFIGURATION, WORK

TOLERANCE = 0.01  # absolute, in the metric's unit: one percentage point of accuracy


def quality_parity(rows, tolerance: float = TOLERANCE) -> Rows:
    """One row per (work, metric, epochs trained) seen on two or more configurations."""
    done = Rows(r for r in Rows.of(rows).ok("metric_final") if r.get("bench_mode") == "train_to_target")
    out = Rows()
    for keys, sub in groups(done, (*WORK, "goal_metric", "epochs_done")):
        configs = groups(sub)  # per configuration: repeated runs give their median
        if len(configs) >= 2:
            out.append(_parity(keys, configs, tolerance))
    return out


def _parity(keys: dict, configs: list, tolerance: float) -> dict:
    """One work's final metrics on its configurations (each named by what tells them apart), their spread
    and the verdict."""
    differ = [k for k in CONFIGURATION if len({c.get(k) for c, _ in configs}) > 1]
    finals = {", ".join(f"{k}={c.get(k)}" for k in differ): g.median("metric_final") for c, g in configs}
    spread = max(finals.values()) - min(finals.values())
    return {**keys, "configurations": len(finals), "final_min": min(finals.values()),
            "final_max": max(finals.values()), "spread": spread, "tolerance": tolerance,
            "same_quality": spread <= tolerance,
            "finals": "; ".join(f"{k}: {v:.4g}" for k, v in finals.items())}
