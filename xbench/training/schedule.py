"""Learning rate over training: linear warm-up, then constant, step, cosine or polynomial decay, and the
linear scaling rule by global batch. Pure Python (no torch): compat checks a schedule before any work, and
the MLPerf log and the record read its hyperparameters.

The learning rate at a step is `base_lr x factor(epoch)`, with `epoch = step / steps_per_epoch` (fractional)
and `base_lr = optim.lr x global_batch / optim.lr_reference_batch` when the scaling rule is on. It is set on
every parameter group as a Python float before each step (XLA turns such scalars into device data, not
graph constants: a changing rate does not recompile the step).
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "step", "cosine", "poly")


def base_lr(optim, global_batch: int) -> float:
    """optim.lr, scaled linearly by global batch / optim.lr_reference_batch when that is set."""
    ref = optim.lr_reference_batch
    return optim.lr * global_batch / ref if ref else optim.lr


def decay_epochs(schedule, max_epochs: float) -> float:
    """Length of the cosine/poly decay after warm-up: as configured, else the rest of the run."""
    if schedule.decay_epochs is not None:
        return schedule.decay_epochs
    return max_epochs - schedule.warmup_epochs


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
    if s.name == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    elif s.name == "poly":
        shape = (1.0 - progress) ** s.power
    else:
        raise ValueError(f"optim.schedule.name={s.name!r} is unknown; allowed: {', '.join(SCHEDULES)}")
    return end + (1.0 - end) * shape


def end_factor(schedule, base: float) -> float:
    """Where a decay ends, as a multiple of the base rate: schedule.end_lr / base when an absolute end rate is
    given (MLPerf's LARS recipe fixes it at 0.0001), else schedule.end_factor."""
    return schedule.end_lr / base if schedule.end_lr is not None else schedule.end_factor


class Schedule:
    """lr(step) for one run: the optimizer's base rate (scaled by global batch) times the schedule's factor."""

    def __init__(self, optim, global_batch: int, steps_per_epoch: int, max_epochs: float):
        self.optim, self.schedule = optim, optim.schedule
        self.base = base_lr(optim, global_batch)
        self.end_factor = end_factor(self.schedule, self.base)
        self.steps_per_epoch, self.max_epochs = steps_per_epoch, max_epochs

    def lr(self, step: int) -> float:
        return self.base * factor(self.schedule, step / self.steps_per_epoch, self.max_epochs, self.end_factor)

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
    s, out = optim.schedule, []
    if s.name not in SCHEDULES:
        return [f"optim.schedule.name={s.name!r} is unknown; allowed: {', '.join(SCHEDULES)}"]
    if s.warmup_epochs < 0:
        out.append(f"optim.schedule.warmup_epochs must be >= 0, got {s.warmup_epochs}")
    elif s.warmup_epochs >= max_epochs:
        out.append(f"optim.schedule.warmup_epochs={s.warmup_epochs:g} is not shorter than the run "
                   f"(goal.max_epochs={max_epochs:g}): the run would end before reaching optim.lr")
    if not 0 <= s.warmup_start_factor <= 1:
        out.append(f"optim.schedule.warmup_start_factor must be in [0, 1], got {s.warmup_start_factor}")
    if s.name == "step":
        ms = list(s.milestones_epochs)
        if not ms:
            out.append("optim.schedule.name=step needs optim.schedule.milestones_epochs (e.g. [30, 60, 80])")
        if any(b <= a for a, b in zip(ms, ms[1:])):
            out.append(f"optim.schedule.milestones_epochs={ms} must increase")
        if ms and (ms[0] <= s.warmup_epochs or ms[-1] >= max_epochs):
            out.append(f"optim.schedule.milestones_epochs={ms} must lie after the warm-up "
                       f"({s.warmup_epochs:g} epochs) and before goal.max_epochs={max_epochs:g}")
        if not 0 < s.gamma < 1:
            out.append(f"optim.schedule.gamma must be in (0, 1), got {s.gamma}")
    if s.name in ("cosine", "poly"):
        length = decay_epochs(s, max_epochs)
        if length <= 0:
            out.append(f"optim.schedule.decay_epochs={s.decay_epochs} must be > 0")
        elif s.warmup_epochs + length > max_epochs + 1e-9:
            out.append(f"optim.schedule: warm-up {s.warmup_epochs:g} + decay {length:g} epochs do not fit "
                       f"goal.max_epochs={max_epochs:g} (the run would stop before the decay ends)")
        if not 0 <= s.end_factor < 1:
            out.append(f"optim.schedule.end_factor must be in [0, 1), got {s.end_factor}")
        if s.end_lr is not None and not 0 <= s.end_lr < optim.lr:
            out.append(f"optim.schedule.end_lr={s.end_lr} must be >= 0 and below optim.lr={optim.lr}")
        if s.name == "poly" and s.power <= 0:
            out.append(f"optim.schedule.power must be > 0, got {s.power}")
    if optim.lr_reference_batch is not None and optim.lr_reference_batch < 1:
        out.append(f"optim.lr_reference_batch must be >= 1 or null, got {optim.lr_reference_batch}")
    return out


def hyperparameters(optim, global_batch: int, steps_per_epoch: int, max_epochs: float) -> dict:
    """The schedule as plain figures (for the record and, under MLPerf's keys, the MLPerf log)."""
    s = optim.schedule
    out = {"lr_base": base_lr(optim, global_batch), "lr_schedule": s.name, "lr_warmup_epochs": s.warmup_epochs,
           "lr_warmup_steps": round(s.warmup_epochs * steps_per_epoch)}
    if s.name == "step":
        out.update(lr_milestones_epochs=list(s.milestones_epochs), lr_gamma=s.gamma)
    if s.name in ("cosine", "poly"):
        length = decay_epochs(s, max_epochs)
        out.update(lr_decay_epochs=length, lr_decay_steps=round(length * steps_per_epoch),
                   lr_end=s.end_lr if s.end_lr is not None else out["lr_base"] * s.end_factor)
        if s.name == "poly":
            out["lr_poly_power"] = s.power
    return out
