"""Quality parity: do two configs train the same? Compare loss trajectories step by step (pure Python).

Tolerance is relative (|a - b| / max(|a|, |b|, 1e-12)) and set by the looser precision of the two:
reduction order differs between eager, inductor and XLA kernels, so fp32 runs agree closely but not bit for
bit and drift slowly; bf16 has an 8-bit significand (2-3 significant decimal digits).
"""

from __future__ import annotations

PARITY_RTOL = {"fp32": 1e-3, "tf32": 1e-2, "amp_fp16": 2e-2, "amp_bf16": 5e-2, "bf16": 5e-2}


def tolerance(precision_a: str, precision_b: str) -> float:
    return max(PARITY_RTOL.get(precision_a, 5e-2), PARITY_RTOL.get(precision_b, 5e-2))


def compare_losses(a: list[float], b: list[float], steps: int, rtol: float) -> dict:
    """Compare the first `steps` losses of two runs; both must have that many."""
    if len(a) < steps or len(b) < steps:
        raise ValueError(f"parity needs {steps} losses from each run, got {len(a)} and {len(b)}")
    rel = [abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a[:steps], b[:steps])]
    worst = max(range(steps), key=rel.__getitem__)
    return {
        "parity_passed": rel[worst] <= rtol,
        "parity_steps": steps,
        "parity_tolerance_rel": rtol,
        "parity_max_rel_dev": rel[worst],
        "parity_max_abs_dev": max(abs(x - y) for x, y in zip(a[:steps], b[:steps])),
        "parity_worst_step": worst,
    }
