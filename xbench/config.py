"""Typed schemas for every config group, the one ConfigStore table that binds them, and the checks every
knob shares (each knob's allowed range: `range_problems`; the store and run names: `name_problems`).

Each group (`conf/<group>/*.yaml`) is validated against its dataclass here: a misspelled key fails at
compose time with Hydra's own message, and `OmegaConf.to_object` in runner.py turns the composed tree
into an `XBenchConfig`. Checks that judge the whole run (compat.py, a plugin's `rules`) receive the whole
config; a runtime, strategy or loader built for the run receives its own typed section.

Units: `batch_size` is per device; times end in `_s`; prices say per what (`per: machine|chip|vcpu`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
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
    vocab_size: int = 30522  # real text: caps the vocabulary built from the training split (words + n-grams)
    ngrams: int = 1  # real text: add word n-grams up to this length as tokens (fastText uses 2)
    # features modality (e.g. digits: 64 pixels as a flat vector)
    num_features: int = 64
    num_classes: int = 10
    # synthetic: how many distinct batches live on the device (cycled through)
    synthetic_batches: int = 4
    # real data
    path: str | None = None  # real data: the folder or file the loader reads (layouts: xbench/data/loaders.py)
    num_workers: int = 0
    pin_memory: bool | None = None  # real data: pin host batches; None: on for CUDA devices (xbench/data/feed.py)
    augment: bool = False
    eval_fraction: float = 0.1  # share of the data held out for evaluation when the set has no split
    dataset_size: int | None = None  # samples per epoch, for projections (None = unknown)


@dataclass
class PriceConfig:
    """One component of what a platform costs (accelerator, host VM, storage, a fee).

    Billing arithmetic lives in xbench/metrics/cost.py; docs/cost_and_targets.md explains the model.
    """

    name: str = "machine"
    amount: float = 0.0  # list price in `currency`, per `unit` of time, per `per`
    currency: str = "USD"
    unit: str = "hour"  # millisecond | second | minute | hour | month (a month is 730 hours)
    per: str = "machine"  # machine | chip | vcpu | gib: what one `amount` buys
    count: int = 1  # how many `per` units are billed (chips, vCPUs)
    kind: str = "usage"  # usage (billed while running) | setup_fee (once) | monthly_fee (each month)
    pricing_model: str | None = None  # on_demand | spot | preemptible | reserved_1y | reserved_3y | monthly; None: the platform's
    billing: str | None = None  # granularity: millisecond | second | minute | hour (rounded up) | month_amortised; None: the platform's
    minimum_charge_s: float | None = None  # billed at least this long per start; None: the platform's
    discount: float = 0.0  # fraction off `amount` (e.g. 0.7 for a spot price 70% below list)
    source: str | None = None  # URL for this component when it differs from the platform's price_source
    as_of: str | None = None  # YYYY-MM-DD for this component when it differs from price_as_of


@dataclass
class PlatformConfig:
    """Hardware and price of one platform; conf/platform/*.yaml. Billing rules: xbench/metrics/cost.py."""

    name: str = MISSING
    device: str = "auto"  # auto | cpu | cuda | xla (TPU or XLA on CPU/GPU)
    device_count: int | None = None  # devices the workload may use; None = all that are seen
    accelerator: str | None = None  # the accelerator's model, a whole word of its device name ("H200", "TPU v3")
    sm_count: int | None = None  # GPU: streaming multiprocessors per device (tells H100 SXM5 132 from PCIe 114)
    accelerator_type: str | None = None  # TPU: the type its runtime reports (v3-8, v5litepod-8)
    cpu_vcpus: int | None = None  # vCPUs of the instance, for per-vCPU prices
    peak_tflops: dict[str, float] = field(default_factory=dict)  # per device, by dtype: fp32, tf32, bf16, fp16
    peak_tflops_source: str | None = None  # which vendor datasheet the peak_tflops figures come from
    memory_gib: float | None = None  # per device; a GPU platform matches a GPU of this memory (platforms/sku.py)
    pricing_model: str = "on_demand"  # on_demand | spot | preemptible | reserved_1y | reserved_3y | monthly
    billing: str = "second"  # default granularity of the components: millisecond | second | minute | hour | month_amortised
    minimum_charge_s: float = 0.0  # default minimum billed time per start (e.g. 60 on AWS/GCE per-second billing)
    price: list[PriceConfig] = field(default_factory=list)
    price_source: str | None = None  # URL of the price page
    price_as_of: str | None = None  # date the price was read, YYYY-MM-DD
    price_confirmed: bool = True  # false: not checked against price_source (the report marks it "unconfirmed")
    provider: str | None = None  # aws | gcp | paperspace | hetzner | leadergpu | ibm | local ...
    instance: str | None = None  # the provider's instance/machine type, e.g. p3.8xlarge, v2-8
    region: str | None = None  # where the price applies
    # Monthly rent and fixed fees are spread over the hours the machine is really used:
    utilisation: float = 1.0  # share of the month a monthly-billed machine runs jobs, in (0, 1]
    commitment_months: float = 1.0  # setup fees are spread over this many months of rent


@dataclass
class RuntimeConfig:
    name: str = MISSING  # eager | compile | xla | xla_compile | accelerate | torchax
    cudnn_benchmark: bool = True  # CUDA: let cuDNN pick the fastest convolution algorithms (fixed shapes)
    # torch.compile (runtime=compile) and the XLA compile path (runtime=xla_compile)
    backend: str = "inductor"  # compile: a torch.compile backend; xla_compile: torch_xla | openxla
    mode: str | None = None  # default | reduce-overhead | max-autotune
    fullgraph: bool = False  # compile: no graph breaks allowed; xla_compile: one graph per step
    dynamic: bool | None = None
    target: str = "model"  # compile: what is compiled, the model or the whole train step


@dataclass
class ParallelConfig:
    name: str = MISSING  # single | ddp | dataparallel | xla_spmd | xla_mp | accelerate | fsdp | xla_fsdp | jax_dp
    world_size: int = 1  # processes (ddp, xla_mp) or devices (dataparallel, xla_spmd)
    backend: str = "auto"  # auto | gloo | nccl
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # host:port for multi-node torchrun
    timeout_s: float = 120.0  # collective timeout: a dead or hung rank ends the job within this
    # DistributedDataParallel's own options (parallel=ddp only; torch's defaults), recorded per rank as ddp_*
    bucket_cap_mb: float = 25.0  # gradients all-reduced in buckets of this many MiB, overlapping backward
    gradient_as_bucket_view: bool = False  # .grad are views into the buckets: no copy, one gradient copy less
    static_graph: bool = False  # the same parameters are used every step: DDP skips its per-step bookkeeping
    broadcast_buffers: bool = True  # rank 0's buffers (BatchNorm statistics) sent to every rank each forward
    find_unused_parameters: bool = False  # walk the graph each step for parameters that got no gradient
    options: dict[str, Any] = field(default_factory=dict)  # a strategy's own knobs (fsdp, xla_fsdp: conf/parallel/*.yaml)


# The ParallelConfig keys that are DistributedDataParallel's keywords (read by parallel=ddp only).
DDP_OPTIONS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "broadcast_buffers", "find_unused_parameters")


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
class ScheduleConfig:
    """Learning rate over training (train_to_target; xbench/training/schedule.py). Lengths in epochs (fractions
    allowed); the learning rate is a multiple of optim.lr (after the linear scaling rule)."""

    name: str = "constant"  # constant | step | cosine | poly
    warmup_epochs: float = 0.0  # linear warm-up from warmup_start_factor x lr to lr
    warmup_start_factor: float = 0.0
    milestones_epochs: list[float] = field(default_factory=list)  # step: multiply by `gamma` at each
    gamma: float = 0.1  # step: the factor at each milestone
    decay_epochs: float | None = None  # cosine/poly: the decay's length after warm-up; None: to goal.max_epochs
    power: float = 1.0  # poly: (1 - progress) ** power
    end_factor: float = 0.0  # cosine/poly: where the decay ends, as a multiple of lr
    end_lr: float | None = None  # cosine/poly: where the decay ends, absolute (MLPerf's LARS: 0.0001); wins


@dataclass
class OptimConfig:
    """The optimizer and its recipe (xbench/training/optim.py). LARS and LAMB are the large-batch optimizers
    of MLPerf's ResNet-50 and BERT recipes."""

    name: str = "sgd"  # sgd | adamw | lars | lamb
    lr: float = 0.01  # at `lr_reference_batch` when that is set (the linear scaling rule), else as given
    # The linear scaling rule: lr is given for this global batch and scaled by global batch / this; null: none.
    lr_reference_batch: int | None = None
    # The global batch the recipe was tuned at, and how lr and warm-up follow another one (none | linear |
    # sqrt; xbench/training/schedule.py); a run > 4x away from it is warned about. Null: not a tuned recipe.
    tuned_global_batch: int | None = None
    scaling_rule: str = "none"
    momentum: float = 0.9  # sgd, lars
    nesterov: bool = False  # sgd, lars
    weight_decay: float = 0.0
    no_decay_norm_bias: bool = False  # no weight decay (and no LARS/LAMB trust ratio) on norms and biases
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # adamw, lamb
    eps: float = 1e-8  # adamw, lamb, lars (denominator of the trust ratio)
    trust_coefficient: float = 0.001  # lars: eta of the layer-wise trust ratio
    label_smoothing: float = 0.0  # classification loss
    accumulate_steps: int = 1  # micro-batches per optimizer step (gradient accumulation); each is data.batch_size
    grad_clip_norm: float | None = None  # clip the gradients' global L2 norm to this before each update; null: none
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)


@dataclass
class BenchConfig:
    """The measurement policy (see xbench/bench/loop.py for the rules)."""

    mode: str = "throughput"  # throughput | train_to_target | find_max_batch
    warmup_min_steps: int = 3
    warmup_max_steps: int = 50
    warmup_stable_steps: int = 3  # compile counters flat and step times within tolerance over this many steps
    warmup_cv_tol: float = 0.15
    # Timed windows are sized by time: at least `min_window_s` at the warm-up's steady step time, never
    # under `steps` (a floor, which wins over the cap) nor over `max_window_steps`; min_window_s=0 gives
    # exactly `steps`.
    steps: int = 10
    min_window_s: float = 2.0
    max_window_steps: int = 20000
    repeats: int = 5  # timed windows; median and spread over them (a 95% CI needs 3 or more)
    # Whole-process repeats: the run (warm-up + `repeats` windows) N times, each in a fresh process;
    # the spread across processes shows run-to-run variance a window repeat cannot see (throughput mode).
    process_repeats: int = 1
    noisy_cv: float = 0.05  # a coefficient of variation above this flags the result noisy
    # Stalls: a step over `stall_factor` x its window's median is an outlier (counted per window); a
    # window whose outliers cost more than `stall_fraction` of it is stalled, flagged, and measured
    # again up to `stall_remeasure` times (0: kept as measured, flagged).
    stall_factor: float = 5.0
    stall_fraction: float = 0.05
    stall_remeasure: int = 1
    # Other processes' CPU/GPU use probed this long before the rank builds (0: no probe; the default
    # thread count then is the physical cores).
    contention_probe_s: float = 0.25
    # Where each run's rank work runs: `process` (a fresh process, forked from the sweep's warm template where
    # that is safe, else spawned: compile caches, start-up, memory peaks and allocator state belong to the run
    # alone), `spawn` (a freshly spawned interpreter, never forked), `shared` (this process), or `auto`
    # (process for the points of a --multirun sweep, shared for a single run).
    isolation: str = "auto"
    # Host (dispatch) vs device time per step, profiled over at most this many steps after the windows
    # (bench/breakdown.py; XLA uses its own clocks); 0: off.
    breakdown_steps: int = 3
    self_check: bool = False  # also measure at half the batch; flag throughput that falls as the batch grows
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (None: the free physical cores, probed at start)
    # ATen's CPU vector kernels (ATEN_CPU_CAPABILITY, read when torch starts, so the run goes to fresh
    # processes): default (no SIMD, the "stock build") | avx2 | avx512; None: the best this CPU has.
    cpu_capability: str | None = None
    interop_threads: int | None = None
    util_interval_s: float = 0.1  # device/CPU utilisation sampling period during timed windows; 0 = off
    # find_max_batch: doubling stops at this per-device batch; bisection stops within this relative gap
    max_batch_limit: int = 65536
    max_batch_rtol: float = 0.05
    max_batch_search_s: float = 3600.0  # find_max_batch: no new trial starts after this long; the fits so far are the result
    # A finite blow-up is a divergence too: a loss above this x the run's first loss ends the run `diverged`
    diverge_loss_factor: float = 1000.0
    # After SIGINT/SIGTERM, a step that has not returned within this many seconds (a hung step) is
    # abandoned: the record is written as interrupted and the process exits.
    stop_grace_s: float = 30.0
    # A profile of `profile_steps` more steps after the timed windows (never inside them; bench/profile.py):
    # torch (torch.profiler: Chrome trace, TensorBoard) | xla (XLA metrics report, HLO dump) | None
    profile: str | None = None
    profile_steps: int = 5
    # A label, not a setting: `-m bench.round=0,1,2 runtime=eager,compile` runs the modes interleaved
    # (Hydra varies the last override fastest), and the report groups the rounds into one row.
    round: int = 0


@dataclass
class GoalConfig:
    """Train to a quality target (bench.mode=train_to_target); see xbench/modes/target.py."""

    # A name in xbench/metrics/goals.py's GOALS (top1, top5, mlm_accuracy, perplexity, log_perplexity, ...): the
    # table says each one's direction, the model tasks it suits and its target range.
    metric: str = "top1"
    # fraction for accuracies (0.95, not 95); perplexity value; log-perplexity in nats (MLPerf Llama: 3.3). None (and no `targets`): train max_epochs
    # epochs and record the final metric and the whole training's time and cost.
    target: float | None = None
    # Several targets in one run, in the order they are reached (e.g. [0.757, 0.764]): epochs, time and cost
    # to each; the run stops at the last. Empty: `target` alone.
    targets: list[float] = field(default_factory=list)
    eval_every_steps: int = 0  # evaluate every N training steps; 0: every `eval_every_epochs` epochs
    eval_every_epochs: int = 1  # with eval_every_steps=0: after every N epochs (and after the last)
    max_epochs: int = 10  # stop (target not reached) after this many epochs
    max_time_s: float | None = None  # stop after this much training time (evaluation excluded); None: no limit
    eval_batch_size: int | None = None  # per device, like data.batch_size; None: data.batch_size
    checkpoint_every_evals: int = 0  # write a resumable checkpoint every N evaluations; 0: only on SIGTERM
    # A throughput run projects the time and cost of a full training of this many epochs over
    # data.dataset_size (derived `projected_training_*`); None: no projection.
    projection_epochs: float | None = None


@dataclass
class StoreConfig:
    root: str = "results"  # one folder per run below this
    run_name: str | None = None  # optional readable prefix of the run id


@dataclass
class FaultConfig:
    """Deliberate faults, for the fault drill and the tests. Off by default."""

    kind: str | None = None  # exception | nan_loss | sigterm | hang | signal
    at_step: int = 0  # counted over all steps (warm-up then timed)
    rank: int | None = None  # only this rank (None: every rank)
    # kind=signal: which stop signal, and where (null: at at_step; else a phase, see xbench/bench/faults.py)
    signal: str = "SIGTERM"
    phase: str | None = None


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
    goal: GoalConfig = field(default_factory=GoalConfig)
    resume: str | None = None  # run id (under store.root) or run folder of a train_to_target run to continue
    baseline: str | None = None  # run id or folder of a stored record: time and cost are normalised against it
    experiment: str | None = None  # set by +experiment presets; groups runs in W&B and reports
    tags: list[str] = field(default_factory=list)
    # A --multirun sweep of more points than this is refused before any point is composed (the count and
    # this key are named); raise it to run a bigger one.
    sweep_max_points: int = 1000


# ---- every knob's range, checked at compose time (knob_problems) ------------------------------------
# "[lo, hi]" closed, "(lo, hi)" open; a number must also be finite (nan and inf are never allowed). An
# optional key may be null. Every int and float of the schema has a line (tests/test_config.py checks it).
_BIG = 2**31 - 1
RANGES: dict[str, str] = {
    "data.batch_size": f"[1, {_BIG}]", "data.image_size": "[1, 65536]", "data.channels": "[1, 4096]",
    "data.seq_len": f"[1, {_BIG}]", "data.vocab_size": f"[2, {_BIG}]", "data.ngrams": "[1, 16]",
    "data.num_features": f"[1, {_BIG}]", "data.num_classes": f"[2, {_BIG}]", "data.synthetic_batches": "[1, 100000]",
    "data.num_workers": "[0, 1024]", "data.eval_fraction": "(0, 1)", "data.dataset_size": f"[1, {2**62}]",
    "platform.device_count": "[1, 1000000]", "platform.sm_count": "[1, 100000]", "platform.cpu_vcpus": "[1, 1000000]",
    "platform.peak_tflops": "(0, 1e9]", "platform.memory_gib": "(0, 1e9]", "platform.minimum_charge_s": "[0, 1e9]",
    "platform.utilisation": "(0, 1]", "platform.commitment_months": "(0, 1200]",
    "platform.price.amount": "[0, 1e12]", "platform.price.count": f"[1, {_BIG}]", "platform.price.minimum_charge_s": "[0, 1e9]",
    "platform.price.discount": "[0, 1)",
    "parallel.world_size": "[1, 1000000]", "parallel.nnodes": "[1, 100000]", "parallel.node_rank": "[0, 100000]",
    "parallel.timeout_s": "(0, 86400]", "parallel.bucket_cap_mb": "(0, 1e6]",
    "logger.wandb.init_timeout_s": "(0, 3600]",
    "optim.lr": "(0, 1e6]", "optim.lr_reference_batch": f"[1, {_BIG}]", "optim.momentum": "[0, 1)",
    "optim.weight_decay": "[0, 1e6]", "optim.betas": "[0, 1)", "optim.eps": "[0, 1]", "optim.trust_coefficient": "(0, 1e6]",
    "optim.label_smoothing": "[0, 1)", "optim.accumulate_steps": "[1, 1000000]", "optim.tuned_global_batch": f"[1, {_BIG}]",
    "optim.grad_clip_norm": "(0, 1e6]",
    "optim.schedule.warmup_epochs": "[0, 1e6]", "optim.schedule.warmup_start_factor": "[0, 1]",
    "optim.schedule.milestones_epochs": "[0, 1e6]", "optim.schedule.gamma": "(0, 1e6]",
    "optim.schedule.decay_epochs": "(0, 1e6]", "optim.schedule.power": "(0, 1e3]", "optim.schedule.end_factor": "[0, 1e6]",
    "optim.schedule.end_lr": "[0, 1e6]",
    "bench.warmup_min_steps": "[0, 1000000]", "bench.warmup_max_steps": "[1, 1000000]",
    "bench.warmup_stable_steps": "[1, 1000000]", "bench.warmup_cv_tol": "(0, 1e6]",
    "bench.steps": "[1, 10000000]", "bench.min_window_s": "[0, 86400]", "bench.max_window_steps": "[1, 100000000]",
    "bench.repeats": "[1, 100000]", "bench.process_repeats": "[1, 10000]", "bench.noisy_cv": "(0, 100]",
    "bench.stall_factor": "(1, 1e6]", "bench.stall_fraction": "(0, 1]", "bench.stall_remeasure": "[0, 1000]",
    "bench.contention_probe_s": "[0, 60]", "bench.breakdown_steps": "[0, 100000]", "bench.seed": f"[0, {2**32 - 1}]",
    "bench.threads": "[1, 65536]", "bench.interop_threads": "[1, 65536]", "bench.util_interval_s": "[0, 60]",
    "bench.max_batch_limit": f"[1, {2**24}]", "bench.max_batch_rtol": "[0, 1)", "bench.max_batch_search_s": "(0, 604800]",
    "bench.diverge_loss_factor": "(1, 1e30]", "bench.stop_grace_s": "(0, 3600]", "bench.profile_steps": "[1, 100000]",
    "bench.round": f"[0, {_BIG}]",
    "goal.target": "[0, 1e30]", "goal.targets": "[0, 1e30]", "goal.eval_every_steps": f"[0, {_BIG}]",
    "goal.eval_every_epochs": "[1, 1000000]", "goal.max_epochs": "[1, 1000000]", "goal.max_time_s": "(0, 1e9]",
    "goal.eval_batch_size": f"[1, {_BIG}]", "goal.checkpoint_every_evals": "[0, 1000000]",
    "goal.projection_epochs": "(0, 1e9]",
    "fault.at_step": f"[0, {_BIG}]", "fault.rank": "[0, 1000000]",
    "sweep_max_points": "[1, 10000000]",
}
_INTERVAL = re.compile(r"([\[(])\s*([^,]+),\s*([^\])]+)([\])])")


def in_range(value: float, interval: str) -> bool:
    """`value` lies in `interval` ("[0, 1)" ...) and is finite."""
    lo_b, lo, hi, hi_b = _INTERVAL.fullmatch(interval).groups()
    lo, hi = float(lo), float(hi)
    if not math.isfinite(value):
        return False
    return (value >= lo if lo_b == "[" else value > lo) and (value <= hi if hi_b == "]" else value < hi)


def _numbers(node, path: str):
    """(path, value) of the numbers at `path` in a plain config: a scalar, a list's elements, a dict's values
    (platform.peak_tflops.bf16), and every element of a list of mappings (platform.price[i].amount)."""
    head, _, rest = path.partition(".")
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from ((f"[{i}]{p}", v) for p, v in _numbers(item, path))
        return
    if not isinstance(node, dict) or head not in node:
        return
    value = node[head]
    if rest:
        yield from ((f".{head}{p}", v) for p, v in _numbers(value, rest))
    elif isinstance(value, (int, float, bool)) or value is None:
        yield f".{head}", value
    elif isinstance(value, list):
        yield from ((f".{head}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, dict):
        yield from ((f".{head}.{k}", v) for k, v in value.items())


# model.options: free-form builder keywords; sizes (`width`, `depth`, `num_heads` ...) are whole numbers >= 1
# A size is named by its last word (hidden_size, num_layers, width): hidden_dropout_prob is a probability.
_SIZE_OPTION = re.compile(r"(^|_)(width|depth|dim|dims|heads|layers|channels|hidden|size|features|blocks|experts)$")


def _plain(cfg) -> dict:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return dict(cfg)


def range_problems(cfg) -> list[str]:
    """Every number of a config outside its range (RANGES), each with the range allowed; sizes in
    model.options; parallel.node_rank below parallel.nnodes. `cfg`: a DictConfig, an XBenchConfig or a
    plain mapping. compat asks this before any device work (a `failed` record listing them all)."""
    plain, out = _plain(cfg), []
    for key, interval in RANGES.items():
        for where, value in _numbers(plain, key):
            shown = where.lstrip(".")
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                out.append(f"{shown}={value!r} is not a number; allowed: {interval}")
            elif not in_range(value, interval):
                out.append(f"{shown}={value!r} is out of range; allowed: {interval}"
                           + (" (a finite number)" if isinstance(value, float) and not math.isfinite(value) else ""))
    for k, v in ((plain.get("model") or {}).get("options") or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v) or v < 0 or (_SIZE_OPTION.search(str(k)) and not (isinstance(v, int) and v >= 1)):
            need = "a whole number >= 1" if _SIZE_OPTION.search(str(k)) else "a finite number >= 0"
            out.append(f"model.options.{k}={v!r} is out of range; allowed: {need}")
    par = plain.get("parallel") or {}
    if isinstance(par.get("node_rank"), int) and isinstance(par.get("nnodes"), int) and par["node_rank"] >= par["nnodes"]:
        out.append(f"parallel.node_rank={par['node_rank']} must be below parallel.nnodes={par['nnodes']}")
    return out


def name_problems(cfg) -> list[str]:
    """What must be refused before a record can be written: an empty store.root, a run name whose run ids
    could not name a folder, resume=''."""
    from xbench.records.names import name_problem

    plain, out = _plain(cfg), []
    store = plain.get("store") or {}
    if not str(store.get("root") or "").strip():
        out.append(f"store.root={store.get('root')!r} names no folder; give the folder the runs go under (default results)")
    name = store.get("run_name")
    if name is not None:
        example = f"{name}-{'0' * 15}-{'0' * 8}"  # the longest run id it would give: <name>-<YYYYmmdd-HHMMSS>-<hex8>
        if why := name_problem(str(name), "store.run_name"):
            out.append(why)
        elif name_problem(example, "store.run_name"):
            out.append(f"store.run_name={name!r} is {len(str(name))} characters; its run ids ({len(example)}) would "
                       f"not name a folder: at most {len(str(name)) - (len(example) - 120)} characters")
    if plain.get("resume") is not None and not str(plain["resume"]).strip():
        out.append("resume='' names no run; give a run id or folder (or leave resume out for a fresh run)")
    return out


def knob_problems(cfg) -> list[str]:
    """range_problems and name_problems together."""
    return range_problems(cfg) + name_problems(cfg)


def config_dir() -> str:
    """conf/ inside the installed package (wheel), else the checkout's top-level conf/ (editable)."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if packaged.is_dir() else here.parent / "conf")


def register_configs() -> None:
    """Bind the root schema in Hydra's ConfigStore (idempotent).

    `conf/config.yaml` lists `xbench_schema` first in its defaults, so every group's YAML is merged
    into a typed node: unknown keys and wrong types fail at compose time. Stored once per process: storing
    converts the whole schema again (~0.1 s), and Hydra copies the stored node on every load.
    """
    store = ConfigStore.instance()
    if "xbench_schema.yaml" not in store.repo:
        store.store(name="xbench_schema", node=XBenchConfig)


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
