"""optim: the optimizer and its learning-rate schedule (xbench/training/optim.py, schedule.py). LARS and LAMB
are the large-batch optimizers of MLPerf's ResNet-50 and BERT recipes."""

from __future__ import annotations

from dataclasses import dataclass, field

from xbench.config.knobs import BIG, knob

SCHEDULES = ("constant", "step", "cosine", "poly")
SCALING_RULES = ("none", "linear", "sqrt")


@dataclass
class ScheduleConfig:
    """Learning rate over training (train_to_target; xbench/training/schedule.py). Lengths in epochs
    (fractions allowed); the learning rate is a multiple of optim.lr (after the linear scaling rule)."""

    name: str = knob("constant", choices=SCHEDULES)
    warmup_epochs: float = knob(0.0, ge=0, le=1e6)  # linear warm-up from warmup_start_factor x lr to lr
    warmup_start_factor: float = knob(0.0, ge=0, le=1)
    # step: multiply by `gamma` at each
    milestones_epochs: list[float] = knob(ge=0, le=1e6, factory=list)
    gamma: float = knob(0.1, gt=0, lt=1)  # step: the factor at each milestone
    # cosine/poly: the decay's length after warm-up; None: to goal.max_epochs
    decay_epochs: float | None = knob(None, gt=0, le=1e6)
    power: float = knob(1.0, gt=0, le=1000)  # poly: (1 - progress) ** power
    end_factor: float = knob(0.0, ge=0, lt=1)  # cosine/poly: where the decay ends, as a multiple of lr
    # cosine/poly: where the decay ends, absolute (MLPerf's LARS: 0.0001); wins over end_factor
    end_lr: float | None = knob(None, ge=0, le=1e6)


@dataclass
class OptimConfig:
    """The optimizer and its recipe."""

    name: str = "sgd"  # sgd | adamw | lars | lamb
    lr: float = knob(0.01, gt=0, le=1e6)  # at `lr_reference_batch` when that is set (the linear scaling rule)
    # The linear scaling rule: lr is given for this global batch and scaled by global batch / this;
    # null: none.
    lr_reference_batch: int | None = knob(None, ge=1, le=BIG)
    # The global batch the recipe was tuned at, and how lr and warm-up follow another one (none | linear |
    # sqrt; xbench/training/schedule.py); a run > 4x away from it is warned about. Null: not a tuned recipe.
    tuned_global_batch: int | None = knob(None, ge=1, le=BIG)
    scaling_rule: str = knob("none", choices=SCALING_RULES)
    momentum: float = knob(0.9, ge=0, lt=1)  # sgd, lars
    nesterov: bool = False  # sgd, lars
    weight_decay: float = knob(0.0, ge=0, le=1e6)
    no_decay_norm_bias: bool = False  # no weight decay (and no LARS/LAMB trust ratio) on norms and biases
    betas: list[float] = knob(ge=0, lt=1, factory=lambda: [0.9, 0.999])  # adamw, lamb
    eps: float = knob(1e-8, ge=0, le=1)  # adamw, lamb, lars (denominator of the trust ratio)
    trust_coefficient: float = knob(0.001, gt=0, le=1e6)  # lars: eta of the layer-wise trust ratio
    label_smoothing: float = knob(0.0, ge=0, lt=1)  # classification loss
    # micro-batches per optimizer step (gradient accumulation); each is data.batch_size
    accumulate_steps: int = knob(1, ge=1, le=1000000)
    # clip the gradients' global L2 norm to this before each update; null: none
    grad_clip_norm: float | None = knob(None, gt=0, le=1e6)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
