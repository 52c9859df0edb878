"""Deliberate faults for the fault drill and the tests (never on by default; torch-free).

`fault.kind=signal` sends `fault.signal` (a stop signal: SIGTERM, SIGHUP, SIGUSR1, ...) to this process,
either at step `fault.at_step` of the measurement (`fault.phase=null`, see bench/worker._inject_fault) or when
the run reaches `fault.phase`: a real signal, delivered by the kernel, at a point a test can name.
"""

from __future__ import annotations

import os
import signal

from xbench.rank import STOP_SIGNALS

# Where a run can be when a signal arrives, after the steps (the steps are fault.at_step's business).
PHASES = ("start-up", "self_check", "derive", "sinks", "end")
SIGNAL_NAMES = tuple(signal.Signals(s).name for s in STOP_SIGNALS)


def send(fault) -> None:
    os.kill(os.getpid(), getattr(signal, fault.signal))


def at_phase(fault, phase: str) -> None:
    """The run has reached `phase`: send the fault's signal if this is the phase it names."""
    if fault.kind == "signal" and fault.phase == phase:
        send(fault)


def problems(fault) -> list[str]:
    out = []
    if fault.signal not in SIGNAL_NAMES:
        out.append(f"fault.signal={fault.signal!r} is not a stop signal; allowed: {', '.join(SIGNAL_NAMES)}")
    if fault.phase is not None and fault.phase not in PHASES:
        out.append(
            f"fault.phase={fault.phase!r} is unknown; allowed: null (at fault.at_step), {', '.join(PHASES)}"
        )
    return out
