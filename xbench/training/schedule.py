"""Learning rate over training: linear warm-up, then constant, step, cosine or polynomial decay, and the
rule that scales a recipe to another global batch. Pure Python (no torch): compat checks a schedule before
any work, and the MLPerf log and the record read its hyperparameters.

The learning rate at a step is `base_lr x factor(epoch)`, with `epoch = step / steps_per_epoch` (fractional).
`base_lr` is optim.lr scaled to the run's global batch B:
- `optim.lr_reference_batch` set (lr given per that batch): lr x B / reference (the linear rule);
- else `optim.tuned_global_batch` B0 (the batch the recipe's lr and warm-up were tuned at) with
  `optim.scaling_rule`: `linear` lr x B/B0, warm-up unchanged (Goyal et al. 2017); `sqrt` lr x sqrt(B/B0)
  and warm-up epochs x sqrt(B/B0) (the square-root rule large-batch LARS/LAMB recipes start from); `none`
  as given.
A run more than FAR_FROM_TUNED x away from B0 (either way) is warned about, with the rule's numbers (lr,
warm-up, and the epoch budget goal.max_epochs would scale to: scaled_max_epochs; reported, not applied)
(`lr_batch_warning` in the hyperparameters, printed when the schedule is built; metrics/gates.py puts it on
the record): a scaled recipe is a starting point, not a tuned one. The rate is set on every parameter group
as a Python float before each step (XLA turns such scalars into device data, not graph constants: a
changing rate does not recompile the step).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from types import SimpleNamespace

from xbench.config.optim import SCALING_RULES, SCHEDULES  # the choices, beside their fields

FAR_FROM_TUNED = 4.0  # a global batch this many times the tuned one (or 1/this) is warned about


def batch_ratio(optim, global_batch: int) -> float | None:
    """B / B0 (the run's global batch over the recipe's tuned one); None for a recipe that names none."""
    tuned = getattr(optim, "tuned_global_batch", None)
    return global_batch / tuned if tuned else None


def _rule(optim) -> str:
    return getattr(optim, "scaling_rule", "none") or "none"


def base_lr(optim, global_batch: int) -> float:
    """optim.lr scaled to the global batch (module doc): per lr_reference_batch, else by scaling_rule."""
    ref = optim.lr_reference_batch
    if ref:
        return optim.lr * global_batch / ref
    r, rule = batch_ratio(optim, global_batch), _rule(optim)
    if r is None or rule == "none":
        return optim.lr
    return optim.lr * (r if rule == "linear" else math.sqrt(r))


def warmup_epochs(optim, global_batch: int) -> float:
    """The warm-up's length at this global batch: x sqrt(B/B0) under the sqrt rule, else as configured."""
    w, r = optim.schedule.warmup_epochs, batch_ratio(optim, global_batch)
    return (
        w * math.sqrt(r) if r is not None and _rule(optim) == "sqrt" and not optim.lr_reference_batch else w
    )


def scaled_schedule(optim, global_batch: int):
    """optim.schedule with the warm-up of this global batch (the same object when unchanged)."""
    s, w = optim.schedule, warmup_epochs(optim, global_batch)
    if w == s.warmup_epochs:
        return s
    if dataclasses.is_dataclass(s):
        return dataclasses.replace(s, warmup_epochs=w)
    return SimpleNamespace(**{**{k: s[k] for k in s}, "warmup_epochs": w})  # a DictConfig or mapping


def scaled_max_epochs(optim, global_batch: int, max_epochs: float) -> float:
    """The epoch budget the rule implies at this global batch: the warm-up's growth added, so the decay after
    it keeps its tuned length (the sqrt rule); as configured under the linear rule (Goyal et al. train the
    same epochs at every batch). Only reported: the run keeps goal.max_epochs."""
    return max_epochs + warmup_epochs(optim, global_batch) - optim.schedule.warmup_epochs


def batch_warning(optim, global_batch: int, max_epochs: float | None = None) -> str | None:
    """The warning for a run far from the batch its recipe was tuned at, with the rule's numbers (lr, warm-up
    and, given, the epoch budget); else None."""
    r = batch_ratio(optim, global_batch)
    if r is None or 1 / FAR_FROM_TUNED <= r <= FAR_FROM_TUNED:
        return None
    rule = "lr_reference_batch (linear)" if optim.lr_reference_batch else _rule(optim)
    budget = ""
    if max_epochs:
        budget = (
            f", epoch budget goal.max_epochs={max_epochs:g} (tuned at global batch "
            f"{optim.tuned_global_batch}, this batch {global_batch}) would scale to "
            f"{scaled_max_epochs(optim, global_batch, max_epochs):.3g} epochs (kept as set)"
        )
    return (f"global batch {global_batch} is {r:.3g}x the batch this recipe was tuned at "
            f"(optim.tuned_global_batch={optim.tuned_global_batch}); scaling rule {rule}: lr {optim.lr:g} -> "
            f"{base_lr(optim, global_batch):.4g}, warm-up {optim.schedule.warmup_epochs:g} -> "
            f"{warmup_epochs(optim, global_batch):.3g} epochs{budget}. Untested so far from the tuned batch: "
            "the target may not be reached; retune optim.lr, optim.schedule.warmup_epochs and "
            "goal.max_epochs for this batch")


def decay_epochs(schedule, max_epochs: float) -> float:
    """Length of the cosine/poly decay after warm-up: as configured, else the rest of the run."""
    if schedule.decay_epochs is not None:
        return schedule.decay_epochs
    return max_epochs - schedule.warmup_epochs


# A decay's shape at `progress` (0 to 1 over its length after warm-up): 1 at its start, 0 at its end.
DECAYS = {
    "cosine": lambda s, progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
    "poly": lambda s, progress: (1.0 - progress) ** s.power,
}


def factor(schedule, epoch: float, max_epochs: float, end_factor: float | None = None) -> float:
    """Multiple of the base learning rate at `epoch` (fractional); `end_factor`: where a decay ends (default
    schedule.end_factor)."""
    s, warm = schedule, schedule.warmup_epochs
    end = s.end_factor if end_factor is None else end_factor
    if warm > 0 and epoch < warm:
        return s.warmup_start_factor + (1.0 - s.warmup_start_factor) * epoch / warm
    if s.name == "constant":
        return 1.0
    if s.name == "step":
        return s.gamma ** sum(1 for m in s.milestones_epochs if epoch >= m)
    length = decay_epochs(s, max_epochs)
    progress = min(1.0, max(0.0, (epoch - warm) / length)) if length > 0 else 1.0
    if s.name not in DECAYS:
        raise ValueError(f"optim.schedule.name={s.name!r} is unknown; allowed: {', '.join(SCHEDULES)}")
    return end + (1.0 - end) * DECAYS[s.name](s, progress)


def end_factor(schedule, base: float) -> float:
    """Where a decay ends, as a multiple of the base rate: schedule.end_lr / base when an absolute end rate is
    given (MLPerf's LARS recipe fixes it at 0.0001), else schedule.end_factor."""
    return schedule.end_lr / base if schedule.end_lr is not None else schedule.end_factor


class Schedule:
    """lr(step) for one run: the optimizer's base rate (scaled by global batch) times the schedule's
    factor."""

    def __init__(self, optim, global_batch: int, steps_per_epoch: int, max_epochs: float):
        self.optim, self.schedule = optim, scaled_schedule(optim, global_batch)
        self.base = base_lr(optim, global_batch)
        self.warning = batch_warning(optim, global_batch, max_epochs)
        if self.warning:  # on the console now; the record carries it too (hyperparameters, metrics/gates.py)
            print(f"xbench: warning: {self.warning}", file=sys.stderr, flush=True)
        self.end_factor = end_factor(self.schedule, self.base)
        self.steps_per_epoch, self.max_epochs = steps_per_epoch, max_epochs

    def lr(self, step: int) -> float:
        return self.base * factor(
            self.schedule, step / self.steps_per_epoch, self.max_epochs, self.end_factor
        )

    def apply(self, optimizer, step: int) -> float:
        """Set the rate of `step` on every parameter group (a group may carry its own `lr_scale`)."""
        lr = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        return lr

    @property
    def constant(self) -> bool:
        return self.schedule.name == "constant" and not self.schedule.warmup_epochs


def rules(optim, max_epochs: float) -> list[str]:
    """Why this schedule cannot run for `max_epochs` epochs (compat, before any work)."""
    s, out = optim.schedule, _scaling_rules(optim)
    if s.name not in SCHEDULES:
        return out  # config's knob says so (each setting's own range too: config/optim.py)
    if s.warmup_epochs >= max_epochs:
        out.append(f"optim.schedule.warmup_epochs={s.warmup_epochs:g} is not shorter than the run "
                   f"(goal.max_epochs={max_epochs:g}): the run would end before reaching optim.lr")
    if s.name == "step":
        ms = list(s.milestones_epochs)
        if not ms:
            out.append("optim.schedule.name=step needs optim.schedule.milestones_epochs (e.g. [30, 60, 80])")
        if any(b <= a for a, b in zip(ms, ms[1:])):
            out.append(f"optim.schedule.milestones_epochs={ms} must increase")
        if ms and (ms[0] <= s.warmup_epochs or ms[-1] >= max_epochs):
            out.append(f"optim.schedule.milestones_epochs={ms} must lie after the warm-up "
                       f"({s.warmup_epochs:g} epochs) and before goal.max_epochs={max_epochs:g}")
    if s.name in ("cosine", "poly"):
        length = decay_epochs(s, max_epochs)
        if length > 0 and s.warmup_epochs + length > max_epochs + 1e-9:
            out.append(f"optim.schedule: warm-up {s.warmup_epochs:g} + decay {length:g} epochs do not fit "
                       f"goal.max_epochs={max_epochs:g} (the run would stop before the decay ends)")
        if s.end_lr is not None and s.end_lr >= optim.lr:
            out.append(f"optim.schedule.end_lr={s.end_lr} must be below optim.lr={optim.lr}")
    return out


def _scaling_rules(optim) -> list[str]:
    rule, tuned, out = _rule(optim), getattr(optim, "tuned_global_batch", None), []
    if rule not in SCALING_RULES:
        return []  # config's knob says so
    if rule != "none" and tuned is None:
        out.append(f"optim.scaling_rule={rule} scales from optim.tuned_global_batch, which is not set")
    if rule == "sqrt" and optim.lr_reference_batch:
        out.append(
            "optim.scaling_rule=sqrt with optim.lr_reference_batch (the linear rule's reference): give "
            "optim.lr at optim.tuned_global_batch and optim.lr_reference_batch=null"
        )
    return out


def hyperparameters(optim, global_batch: int, steps_per_epoch: int, max_epochs: float) -> dict:
    """The schedule as plain figures (for the record and, under MLPerf's keys, the MLPerf log): the rate and
    warm-up at this global batch, and how they were scaled from the recipe's."""
    s = scaled_schedule(optim, global_batch)
    out = {
        "lr_base": base_lr(optim, global_batch),
        "lr_schedule": s.name,
        "lr_warmup_epochs": s.warmup_epochs,
        "lr_warmup_steps": round(s.warmup_epochs * steps_per_epoch),
    }
    r = batch_ratio(optim, global_batch)
    if r is not None:
        out.update(lr_recipe=optim.lr, lr_tuned_global_batch=optim.tuned_global_batch, lr_batch_ratio=r,
                   lr_scaling_rule="linear" if optim.lr_reference_batch else _rule(optim),
                   lr_warmup_epochs_recipe=optim.schedule.warmup_epochs)
        warning = batch_warning(optim, global_batch, max_epochs)
        if warning:
            out["lr_batch_warning"] = warning
    if s.name == "step":
        out.update(lr_milestones_epochs=list(s.milestones_epochs), lr_gamma=s.gamma)
    if s.name in ("cosine", "poly"):
        length = decay_epochs(s, max_epochs)
        out.update(lr_decay_epochs=length, lr_decay_steps=round(length * steps_per_epoch),
                   lr_end=s.end_lr if s.end_lr is not None else out["lr_base"] * s.end_factor)
        if s.name == "poly":
            out["lr_poly_power"] = s.power
    return out
