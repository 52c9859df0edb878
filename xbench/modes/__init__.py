"""Modes: what a run measures. Each is a `Mode` object (modes/base.py) that the runner hands the run
to; it builds the rank work, runs it through the one launch path (`xbench.launch.run`) on every rank
of whatever strategy the config names, and turns the ranks' results into the record.

- throughput: warm-up, then timed windows (optionally whole-process repeats, and the self-check at
  half the batch, a step of this mode: `throughput.self_check`);
- train_to_target: epochs over real data to a quality target, with evaluations and checkpoints;
- find_max_batch: the largest batch per device that trains without running out of memory.

Add a mode: a `Mode` subclass in its own module (its compat `rules` beside it) and a line in MODES.
"""

from __future__ import annotations

import importlib

MODES: dict[str, str] = {
    "throughput": "xbench.modes.throughput:Throughput",
    "train_to_target": "xbench.modes.target:TrainToTarget",
    "find_max_batch": "xbench.modes.batch_search:FindMaxBatch",
}


def get(name: str):
    """The mode object of `name`."""
    if name not in MODES:
        raise ValueError(f"bench.mode={name!r} is not available; allowed: {', '.join(MODES)}")
    module, cls = MODES[name].split(":")
    return getattr(importlib.import_module(module), cls)()
