"""Typed schemas for every config group, and the one ConfigStore table that binds them.

Each group (`conf/<group>/*.yaml`) is validated against its dataclass here: a misspelled key fails at
compose time with Hydra's own message, and `OmegaConf.to_object` in `__main__` turns the composed tree
into an `XBenchConfig`. Code below `__main__` receives only its own typed section.

Units: `batch_size` is per device; times end in `_s`; prices say per what (`per: machine|chip|vcpu`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class ModelConfig:
    name: str = MISSING  # registry key in xbench.models (e.g. cnn_small, resnet50)
    # Builder keyword arguments (width, depth, lstm_impl, ...); checked against the builder's signature.
    options: dict[str, Any] = field(default_factory=dict)
    channels_last: bool = False  # CNNs only: NHWC memory format


@dataclass
class DataConfig:
    name: str = MISSING  # what it imitates or reads, e.g. synthetic_cifar10, digits, cifar10
    source: str = "synthetic"  # synthetic | a loader name in xbench.data.loaders
    modality: str = "image"  # image | tokens | features
    batch_size: int = 64  # per device
    # image modality
    image_size: int = 32
    channels: int = 3
    # token modality
    seq_len: int = 128
    vocab_size: int = 30522
    # features modality (e.g. digits: 64 pixels as a flat vector)
    num_features: int = 64
    num_classes: int = 10
    # synthetic: how many distinct batches live on the device (cycled through)
    synthetic_batches: int = 4
    # real data
    path: str | None = None
    num_workers: int = 0
    pin_memory: bool = False
    augment: bool = False
    eval_fraction: float = 0.1  # share of the data held out for evaluation when the set has no split
    dataset_size: int | None = None  # samples per epoch, for projections (None = unknown)


@dataclass
class PriceConfig:
    """One component of what a platform costs, e.g. the accelerator and its host VM."""

    name: str = "machine"
    amount: float = 0.0  # in `currency`, per `unit` of time, per `per`
    currency: str = "USD"
    unit: str = "hour"  # second | minute | hour | month
    per: str = "machine"  # machine | chip | vcpu
    count: int = 1  # how many `per` units are billed (chips, vCPUs)


@dataclass
class PlatformConfig:
    name: str = MISSING
    device: str = "auto"  # auto | cpu | cuda | xla (TPU or XLA on CPU/GPU)
    device_count: int | None = None  # devices the workload may use; None = all that are seen
    accelerator: str | None = None  # expected accelerator model substring (e.g. "H200", "TPU v3")
    cpu_vcpus: int | None = None  # vCPUs of the instance, for per-vCPU prices
    peak_tflops: dict[str, float] = field(default_factory=dict)  # per device, by dtype: fp32, tf32, bf16, fp16
    memory_gib: float | None = None  # per device
    pricing_model: str = "on_demand"  # on_demand | spot | reserved_1y | reserved_3y | monthly
    billing: str = "second"  # granularity: second | minute | hour | month
    minimum_charge_s: float = 0.0
    price: list[PriceConfig] = field(default_factory=list)
    price_source: str | None = None  # URL of the price page
    price_as_of: str | None = None  # date the price was read, YYYY-MM-DD


@dataclass
class RuntimeConfig:
    name: str = MISSING  # eager | compile | xla | xla_compile | accelerate
    # torch.compile
    backend: str = "inductor"
    mode: str | None = None  # default | reduce-overhead | max-autotune
    fullgraph: bool = False
    dynamic: bool | None = None


@dataclass
class ParallelConfig:
    name: str = MISSING  # single | ddp | dataparallel | xla_spmd | xla_mp | accelerate
    world_size: int = 1  # processes (ddp, xla_mp) or devices (dataparallel, xla_spmd)
    backend: str = "auto"  # auto | gloo | nccl
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # host:port for multi-node torchrun
    timeout_s: float = 120.0  # collective timeout: a dead or hung rank ends the job within this


@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | tf32 | amp_fp16 | amp_bf16 | bf16


@dataclass
class WandbConfig:
    mode: str = "auto"  # auto (online with credentials, else offline) | online | offline | disabled
    project: str = "xbench"
    entity: str | None = None
    group: str | None = None  # default: the experiment name, else model-data
    tags: list[str] = field(default_factory=list)
    init_timeout_s: float = 30.0  # online with no network: fall back to offline after this
    dir: str | None = None  # where W&B writes its run files (default: the run folder)


@dataclass
class LoggerConfig:
    name: str = MISSING  # wandb | none
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True  # console progress bar


@dataclass
class OptimConfig:
    name: str = "sgd"  # sgd | adamw
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0


@dataclass
class BenchConfig:
    """The measurement policy (see xbench/bench/loop.py for the rules)."""

    mode: str = "throughput"  # throughput | train_to_target | find_max_batch
    warmup_min_steps: int = 3
    warmup_max_steps: int = 50
    warmup_stable_steps: int = 3  # compile counters flat and step times within tolerance over this many steps
    warmup_cv_tol: float = 0.15
    steps: int = 30  # timed steps per window
    repeats: int = 1  # timed windows; median and spread over them
    noisy_cv: float = 0.05  # a coefficient of variation above this flags the result noisy
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    interop_threads: int | None = None
    # find_max_batch: doubling stops at this per-device batch; bisection stops within this relative gap
    max_batch_limit: int = 65536
    max_batch_rtol: float = 0.05
    # After SIGINT/SIGTERM, a step that has not returned within this many seconds (a hung step) is
    # abandoned: the record is written as interrupted and the process exits.
    stop_grace_s: float = 30.0


@dataclass
class StoreConfig:
    root: str = "results"  # one folder per run below this
    run_name: str | None = None  # optional readable prefix of the run id


@dataclass
class FaultConfig:
    """Deliberate faults, for the fault drill and the tests. Off by default."""

    kind: str | None = None  # exception | nan_loss | sigterm | hang
    at_step: int = 0  # counted over all steps (warm-up then timed)
    rank: int | None = None  # only this rank (None: every rank)


@dataclass
class XBenchConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    experiment: str | None = None  # set by +experiment presets; groups runs in W&B and reports
    tags: list[str] = field(default_factory=list)


def register_configs() -> None:
    """Bind the root schema in Hydra's ConfigStore (idempotent).

    `conf/config.yaml` lists `xbench_schema` first in its defaults, so every group's YAML is merged
    into a typed node: unknown keys and wrong types fail at compose time.
    """
    ConfigStore.instance().store(name="xbench_schema", node=XBenchConfig)
