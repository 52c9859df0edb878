"""Parallel strategies: how the model is replicated and which launcher starts the ranks.

Each strategy names its launcher (inline: this process; torchrun: one process per rank) and wraps
the model for its rank. Data parallel throughout: every rank sees `data.batch_size` samples a step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    launcher: str  # inline | torchrun | xla
    multi_process: bool


STRATEGIES: dict[str, Strategy] = {
    "single": Strategy("single", "inline", False),
}


def get(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown parallel strategy {name!r}; allowed: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def wrap(cfg, model, device):
    """The model as this rank trains it (single: unchanged)."""
    return model
