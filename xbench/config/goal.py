"""goal: train to a quality target (bench.mode=train_to_target); see xbench/modes/target.py."""

from __future__ import annotations

from dataclasses import dataclass

from xbench.config.knobs import BIG, knob


@dataclass
class GoalConfig:
    # A name in xbench/metrics/goals.py's GOALS (top1, top5, mlm_accuracy, perplexity, log_perplexity, ...):
    # the table says each one's direction, the model tasks it suits and its target range.
    metric: str = "top1"
    # fraction for accuracies (0.95, not 95); perplexity value; log-perplexity in nats (MLPerf Llama: 3.3).
    # None (and no `targets`): train max_epochs epochs and record the final metric and the whole training's
    # time and cost. The metric's own range is its table's (metrics/goals.py, checked by modes/target.py).
    target: float | None = knob(None, ge=0, le=1e30)
    # Several targets in one run, in the order they are reached (e.g. [0.757, 0.764]): epochs, time and cost
    # to each; the run stops at the last. Empty: `target` alone.
    targets: list[float] = knob(ge=0, le=1e30, factory=list)
    # evaluate every N training steps; 0: every `eval_every_epochs` epochs
    eval_every_steps: int = knob(0, ge=0, le=BIG)
    # with eval_every_steps=0: after every N epochs (and after the last)
    eval_every_epochs: int = knob(1, ge=1, le=1000000)
    max_epochs: int = knob(10, ge=1, le=1000000)  # stop (target not reached) after this many epochs
    # stop after this much training time (evaluation excluded); None: no limit
    max_time_s: float | None = knob(None, gt=0, le=1e9)
    # per device, like data.batch_size; None: data.batch_size
    eval_batch_size: int | None = knob(None, ge=1, le=BIG)
    # write a resumable checkpoint every N evaluations; 0: only on SIGTERM
    checkpoint_every_evals: int = knob(0, ge=0, le=1000000)
    # A throughput run projects the time and cost of a full training of this many epochs over
    # data.dataset_size (derived `projected_training_*`); None: no projection.
    projection_epochs: float | None = knob(None, gt=0, le=1e9)
