"""The root schema (`XBenchConfig`), the checks every setting shares, and the ConfigStore binding."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore

from xbench.config import knobs, model, store
from xbench.config.bench import BenchConfig
from xbench.config.data import DataConfig
from xbench.config.fault import FaultConfig
from xbench.config.goal import GoalConfig
from xbench.config.logger import LoggerConfig
from xbench.config.model import ModelConfig
from xbench.config.optim import OptimConfig
from xbench.config.parallel import ParallelConfig
from xbench.config.platform import PlatformConfig
from xbench.config.precision import PrecisionConfig
from xbench.config.runtime import RuntimeConfig
from xbench.config.store import StoreConfig


@dataclass
class XBenchConfig:
    # what trains, and to what end
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    goal: GoalConfig = field(default_factory=GoalConfig)
    experiment: str | None = None  # set by +experiment presets; groups runs in W&B and reports
    tags: list[str] = field(default_factory=list)
    # where and how it runs
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    # A --multirun sweep of more points than this is refused before any point is composed (the count and
    # this key are named); raise it to run a bigger one.
    sweep_max_points: int = knobs.knob(1000, ge=1, le=10000000)
    # how it is measured, kept and told
    bench: BenchConfig = field(default_factory=BenchConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    resume: str | None = None  # run id (under store.root) or run folder of a train_to_target run to continue
    # run id or folder of a stored record: time and cost are normalised against it
    baseline: str | None = None


def _plain(cfg) -> dict:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return dict(cfg)


def range_problems(cfg) -> list[str]:
    """Every value of a config outside its field's knob (range or choices, declared beside the field), and the
    sizes in model.options. `cfg`: a DictConfig, an XBenchConfig or a plain mapping, whole or in part. compat
    asks this before any device work (a `failed` record listing them all)."""
    plain = _plain(cfg)
    return knobs.problems(XBenchConfig, plain) + model.option_problems(
        (plain.get("model") or {}).get("options")
    )


def name_problems(cfg) -> list[str]:
    """What must be refused before a record can be written (store.name_problems)."""
    return store.name_problems(_plain(cfg))


def knob_problems(cfg) -> list[str]:
    """range_problems and name_problems together."""
    plain = _plain(cfg)
    return range_problems(plain) + store.name_problems(plain)


def config_dir() -> str:
    """conf/ inside the installed package (wheel), else the checkout's top-level conf/ (editable)."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "conf"
    return str(packaged if packaged.is_dir() else package.parent / "conf")


def register_configs() -> None:
    """Bind the root schema in Hydra's ConfigStore (idempotent).

    `conf/config.yaml` lists `xbench_schema` first in its defaults, so every group's YAML is merged
    into a typed node: unknown keys and wrong types fail at compose time. Stored once per process: storing
    converts the whole schema again (~0.1 s), and Hydra copies the stored node on every load.
    """
    cs = ConfigStore.instance()
    if "xbench_schema.yaml" not in cs.repo:
        cs.store(name="xbench_schema", node=XBenchConfig)


def register_model_choices(overrides: list[str]) -> None:
    """`model=<family>/<name>` (the open zoo: torchvision/, timm/, hf/; docs/models_and_data.md) selects
    a model no YAML describes: store `{name: <family>/<name>}` as that option of the model group, so one
    override replaces the whole model section (the previous model's options too). Whether the family
    and the name exist is compat's to say, with close matches, before any device work."""
    for override in overrides:
        key, eq, value = override.lstrip("+~").partition("=")
        if key != "model" or not eq:
            continue
        for choice in re.split(r"[,()]", value):  # a sweep: a,b or choice(a,b)
            choice = choice.strip().strip("'\"")
            family, slash, name = choice.partition("/")
            if slash and family and name and not (Path(config_dir()) / "model" / f"{choice}.yaml").exists():
                ConfigStore.instance().store(group=f"model/{family}", name=name, node={"name": choice})
