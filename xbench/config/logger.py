"""logger: where a run is published besides its record (conf/logger/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from xbench.config.knobs import knob


@dataclass
class WandbConfig:
    # auto: online with credentials, else offline
    mode: str = knob("auto", choices=("auto", "online", "offline", "disabled"))
    project: str = "xbench"
    entity: str | None = None
    group: str | None = None  # default: the experiment name, else model-data
    tags: list[str] = field(default_factory=list)
    # online with no network: fall back to offline after this
    init_timeout_s: float = knob(30.0, gt=0, le=3600)
    dir: str | None = None  # where W&B writes its run files (default: the run folder)


@dataclass
class LoggerConfig:
    name: str = knob(MISSING, choices=("wandb", "none"))
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True  # console progress bar
