"""Typed schemas for every config group, one module per group, each field with its allowed values beside it.

Each group (`conf/<group>/*.yaml`) is validated against its dataclass: a misspelled key fails at compose time
with Hydra's own message, and `OmegaConf.to_object` in runner.py turns the composed tree into an
`XBenchConfig` (root.py). A numeric field declares its range and a closed-choice string its choices with
`knob(...)` (knobs.py), read by the one validator `range_problems`; a rule that compares two fields is
compat's (or a plugin's `rules`). Checks that judge the whole run receive the whole config; a runtime,
strategy or loader built for the run receives its own typed section.

Units: `batch_size` is per device; times end in `_s`; prices say per what (`per: machine|chip|vcpu`).
"""

from xbench.config.bench import BenchConfig
from xbench.config.data import DataConfig
from xbench.config.fault import FaultConfig
from xbench.config.goal import GoalConfig
from xbench.config.knobs import BIG, Knob, choices_of, knob
from xbench.config.logger import LoggerConfig, WandbConfig
from xbench.config.model import ModelConfig
from xbench.config.optim import OptimConfig, ScheduleConfig
from xbench.config.parallel import DDP_OPTIONS, ParallelConfig
from xbench.config.platform import PlatformConfig, PriceConfig
from xbench.config.precision import PrecisionConfig
from xbench.config.root import (
    XBenchConfig,
    config_dir,
    knob_problems,
    name_problems,
    range_problems,
    register_configs,
    register_model_choices,
)
from xbench.config.runtime import RuntimeConfig
from xbench.config.store import StoreConfig

__all__ = [
    "BIG",
    "DDP_OPTIONS",
    "BenchConfig",
    "DataConfig",
    "FaultConfig",
    "GoalConfig",
    "Knob",
    "LoggerConfig",
    "ModelConfig",
    "OptimConfig",
    "ParallelConfig",
    "PlatformConfig",
    "PrecisionConfig",
    "PriceConfig",
    "RuntimeConfig",
    "ScheduleConfig",
    "StoreConfig",
    "WandbConfig",
    "XBenchConfig",
    "choices_of",
    "config_dir",
    "knob",
    "knob_problems",
    "name_problems",
    "range_problems",
    "register_configs",
    "register_model_choices",
]
