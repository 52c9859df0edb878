"""fault: deliberate faults, for the fault drill and the tests (xbench/faults.py). Off by default."""

from __future__ import annotations

from dataclasses import dataclass

from xbench.config.knobs import BIG, knob

FAULT_KINDS = (None, "exception", "nan_loss", "sigterm", "hang", "signal")


@dataclass
class FaultConfig:
    kind: str | None = knob(None, choices=FAULT_KINDS)
    at_step: int = knob(0, ge=0, le=BIG)  # counted over all steps (warm-up then timed)
    rank: int | None = knob(None, ge=0, le=1000000)  # only this rank (None: every rank)
    # kind=signal: which stop signal, and where (null: at at_step; else a phase, see xbench/faults.py)
    signal: str = "SIGTERM"
    phase: str | None = None
