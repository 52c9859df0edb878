"""Quality parity: do two configs train the same? Compare loss trajectories step by step (pure Python).

Losses are compared at the same optimizer step, counted from each run's first (warm-up and re-measured
windows included: record.series `step`), never by their place in the series: warm-up ends on evidence and
a stalled window is measured again, so on a loaded machine two runs keep different steps.

Tolerance is relative (|a - b| / max(|a|, |b|, 1e-12)) and set by the looser precision of the two:
reduction order differs between eager, inductor and XLA kernels, so fp32 runs agree closely but not bit for
bit and drift slowly; bf16 has an 8-bit significand (2-3 significant decimal digits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PARITY_RTOL = {"fp32": 1e-3, "tf32": 1e-2, "amp_fp16": 2e-2, "amp_bf16": 5e-2, "bf16": 5e-2}


def tolerance(precision_a: str, precision_b: str) -> float:
    return max(PARITY_RTOL.get(precision_a, 5e-2), PARITY_RTOL.get(precision_b, 5e-2))


def by_step(series: dict, name: str = "the run") -> dict[int, float]:
    """{optimizer step: loss} from a record's series (`step` and `loss`, one entry per kept step)."""
    if "loss" not in series or "step" not in series:
        raise ValueError(f"{name} recorded no per-step losses (a throughput run's series `step` and `loss`)")
    return dict(zip(series["step"], series["loss"]))


def common_steps(a: Mapping[int, float], b: Mapping[int, float], steps: int) -> list[int]:
    """The first `steps` optimizer steps both runs recorded; fewer in common: ValueError (nothing to
    conclude)."""
    common = sorted(set(a) & set(b))
    if len(common) < steps:
        raise ValueError(f"parity needs {steps} losses at the same optimizer steps of both runs; they have "
                         f"{len(common)} in common (run a kept {len(a)} steps, run b {len(b)})")
    return common[:steps]


def compare_losses(a: Mapping[int, float] | Sequence[float], b: Mapping[int, float] | Sequence[float],
                   steps: int, rtol: float) -> dict:
    """Compare the losses at the first `steps` optimizer steps both runs recorded ({step: loss}; a plain
    list is steps 0, 1, ...)."""
    a, b = (x if isinstance(x, Mapping) else dict(enumerate(x)) for x in (a, b))
    compared = common_steps(a, b, steps)
    rel = {s: abs(a[s] - b[s]) / max(abs(a[s]), abs(b[s]), 1e-12) for s in compared}
    worst = max(compared, key=rel.__getitem__)
    return {
        "parity_passed": rel[worst] <= rtol,
        "parity_steps_compared": len(compared),
        "parity_step_first": compared[0],
        "parity_step_last": compared[-1],
        "parity_tolerance_rel": rtol,
        "parity_max_rel_dev": rel[worst],
        "parity_max_abs_dev": max(abs(a[s] - b[s]) for s in compared),
        "parity_worst_step": worst,
    }
