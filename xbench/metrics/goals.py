"""The goal metrics of train_to_target, declared once: one `Goal` line per metric in GOALS.

Each line says which model tasks can be scored on the metric, which way is better, what guessing scores
(the stuck-at-chance check), what a target may be, how the metric comes from an evaluation's summed counts,
which MLPerf benchmark's log it is written as, and how a table or axis names it. Every user reads it:
the config check (`modes/target.goal_rules`: allowed names, model task, target range, target order), the
rank's scoring and its reached test (`bench/epochs.py`, `bench/training.py`), loop.py rule 9
(`bench/loop.chance_level`), the MLPerf log (`bench/mlperf_log.py`), the frame's curve (`analysis/frame.py`)
and the report (to_target table, accuracy plots). A new metric is one line here; a new way of scoring (not
top-k over samples, not over tokens) also needs its branch in `bench/epochs.score`. Pure Python, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


def fraction(hits: float, count: float, loss_sum: float) -> float:
    """An accuracy: the scored targets hit, as a fraction (0.95, not 95)."""
    return hits / count


def mean_loss(hits: float, count: float, loss_sum: float) -> float:
    """Log-perplexity: the mean held-out cross-entropy in nats."""
    return loss_sum / count


def exp_mean_loss(hits: float, count: float, loss_sum: float) -> float:
    """Perplexity: e to the mean held-out cross-entropy."""
    return math.exp(loss_sum / count)


@dataclass(frozen=True)
class Goal:
    name: str  # goal.metric's value, the measurement `goal_metric`, the curve's series key
    display: str  # how a table, an axis or a title names it
    higher_is_better: bool
    tasks: tuple[str, ...]  # the model tasks (models registry's `task`) that can be scored on it
    target_low: float  # a target t must satisfy target_low < t <= target_high
    target_high: float
    target_hint: str  # what a target is, for the refusal: "goal target 95 for top1 must be <hint>"
    mlperf: str  # the MLPerf benchmark whose log this run's mlperf.log follows (bench/mlperf_log.py)
    value: Callable[[float, float, float], float] = fraction  # from an evaluation's [hits, count, loss sum]
    top_k: int | None = None  # an accuracy over samples: a hit when the label is among the k best guesses
    per_token: bool = False  # scored over tokens (masked or next-token) rather than samples
    unit: str = ""  # "" for a fraction or a ratio

    @property
    def label(self) -> str:
        """The display name with its unit: 'top-1 accuracy', 'log-perplexity [nats]'."""
        return f"{self.display} [{self.unit}]" if self.unit else self.display

    @property
    def is_accuracy(self) -> bool:
        return self.value is fraction

    def chance(self, num_classes: int | None) -> float | None:
        """What guessing scores over `num_classes` classes (top-k: k/num_classes); None where guessing has no
        level (a loss) or the classes are unknown."""
        if not self.is_accuracy or not num_classes or num_classes <= 0:
            return None
        return min(1.0, (self.top_k or 1) / num_classes)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def target_problem(self, target: float) -> str | None:
        if self.target_low < target <= self.target_high:
            return None
        return f"goal target {target:g} for {self.name} must be {self.target_hint}"

    def best(self, values):
        """The best of `values` (None when there is none)."""
        return (max if self.higher_is_better else min)(values, default=None)


_FRACTION = {"target_low": 0.0, "target_high": 1.0, "target_hint": "a fraction in (0, 1] (0.95, not 95)"}
_LM = {"higher_is_better": False, "tasks": ("lm", "mlm"), "per_token": True, "mlperf": "gpt3",
       "target_high": math.inf}

GOALS: dict[str, Goal] = {g.name: g for g in (
    Goal("top1", "top-1 accuracy", True, ("classify",), top_k=1, mlperf="resnet", **_FRACTION),
    Goal("accuracy", "accuracy (top-1)", True, ("classify",), top_k=1, mlperf="resnet", **_FRACTION),
    Goal("top5", "top-5 accuracy", True, ("classify",), top_k=5, mlperf="resnet", **_FRACTION),
    Goal("mlm_accuracy", "masked-token accuracy", True, ("mlm",), top_k=1, per_token=True, mlperf="bert",
         **_FRACTION),
    Goal("perplexity", "perplexity", value=exp_mean_loss, target_low=1.0,
         target_hint="a perplexity above 1 (e to a mean cross-entropy)", **_LM),
    Goal("log_perplexity", "log-perplexity", value=mean_loss, unit="nats", target_low=0.0,
         target_hint="a mean cross-entropy in nats above 0 (MLPerf Llama 3.1 8B: 3.3)", **_LM),
)}


def get(name: str) -> Goal:
    """The metric's line; a KeyError naming the allowed ones."""
    try:
        return GOALS[name]
    except KeyError:
        raise KeyError(f"goal metric {name!r} is unknown; allowed: {', '.join(GOALS)}") from None


def higher_is_better(name) -> bool:
    """The direction of a stored `goal_metric`; a name the table lacks (an older record's `eval_accuracy`) is
    taken as an accuracy."""
    g = GOALS.get(name) if isinstance(name, str) else None
    return g.higher_is_better if g else True


def label(name) -> str | None:
    """A stored `goal_metric` as tables and axes name it: its display name, the name itself when the table has
    no line for it (a record from another version), None for none."""
    if not isinstance(name, str) or not name:
        return None
    return GOALS[name].label if name in GOALS else name
