"""Can this config run here? One pure function, called before any device work.

`check(cfg, facts)` returns human-readable reasons (empty list: good to go). Each reason says what
was asked, what is wrong and what is allowed, so that the failed record and the console explain
themselves. Add a rule as one function decorated with `@rule`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xbench import models, parallel, runtimes
from xbench.config import XBenchConfig
from xbench.platforms.detect import HostFacts, device_type
from xbench.precision import PRECISIONS

RULES: list[Callable[[XBenchConfig, HostFacts], list[str]]] = []

MODALITIES = ("image", "tokens", "features")
BENCH_MODES = ("throughput", "find_max_batch")
FAULT_KINDS = (None, "exception", "nan_loss", "sigterm", "hang")
WANDB_MODES = ("auto", "online", "offline", "disabled")
LOGGERS = ("wandb", "none")


def rule(fn):
    RULES.append(fn)
    return fn


def check(cfg: XBenchConfig, facts: HostFacts) -> list[str]:
    reasons: list[str] = []
    for fn in RULES:
        reasons += fn(cfg, facts)
    return reasons


@rule
def positive_numbers(cfg, facts):
    out = []
    for label, value in (("data.batch_size", cfg.data.batch_size), ("bench.steps", cfg.bench.steps),
                         ("bench.repeats", cfg.bench.repeats), ("parallel.world_size", cfg.parallel.world_size),
                         ("bench.warmup_max_steps", cfg.bench.warmup_max_steps),
                         ("bench.warmup_stable_steps", cfg.bench.warmup_stable_steps),
                         ("data.synthetic_batches", cfg.data.synthetic_batches)):
        if value < 1:
            out.append(f"{label} must be a positive whole number, got {value}")
    for label, value in (("bench.threads", cfg.bench.threads), ("bench.interop_threads", cfg.bench.interop_threads)):
        if value is not None and value < 1:
            out.append(f"{label} must be >= 1 or null (torch's default), got {value}")
    if cfg.bench.warmup_min_steps > cfg.bench.warmup_max_steps:
        out.append(f"bench.warmup_min_steps ({cfg.bench.warmup_min_steps}) exceeds bench.warmup_max_steps "
                   f"({cfg.bench.warmup_max_steps})")
    if cfg.optim.lr <= 0:
        out.append(f"optim.lr must be > 0, got {cfg.optim.lr}")
    return out


@rule
def known_names(cfg, facts):
    out = []
    if cfg.bench.mode not in BENCH_MODES:
        out.append(f"bench.mode={cfg.bench.mode!r} is not available; allowed: {', '.join(BENCH_MODES)}")
    if cfg.runtime.name not in runtimes.RUNTIMES:
        out.append(f"runtime {cfg.runtime.name!r} is unknown; allowed: {', '.join(runtimes.RUNTIMES)}")
    if cfg.parallel.name not in parallel.STRATEGIES:
        out.append(f"parallel strategy {cfg.parallel.name!r} is unknown; allowed: {', '.join(parallel.STRATEGIES)}")
    if cfg.precision.name not in PRECISIONS:
        out.append(f"precision {cfg.precision.name!r} is unknown; allowed: {', '.join(PRECISIONS)}")
    if cfg.data.modality not in MODALITIES:
        out.append(f"data.modality={cfg.data.modality!r} is unknown; allowed: {', '.join(MODALITIES)}")
    if cfg.fault.kind not in FAULT_KINDS:
        out.append(f"fault.kind={cfg.fault.kind!r} is unknown; allowed: null, {', '.join(FAULT_KINDS[1:])}")
    if cfg.logger.name not in LOGGERS:
        out.append(f"logger {cfg.logger.name!r} is unknown; allowed: {', '.join(LOGGERS)}")
    if cfg.logger.wandb.mode not in WANDB_MODES:
        out.append(f"logger.wandb.mode={cfg.logger.wandb.mode!r} is unknown; allowed: {', '.join(WANDB_MODES)}")
    return out


@rule
def model_fits_data(cfg, facts):
    try:
        entry = models.get(cfg.model.name)
    except KeyError as e:
        return [str(e.args[0])]
    out = []
    unknown = sorted(set(cfg.model.options) - set(entry.option_names()))
    if unknown:
        out.append(f"model {entry.name!r} has no option(s) {', '.join(unknown)}; "
                   f"its options: {', '.join(entry.option_names()) or 'none'}")
    if cfg.data.modality not in entry.modalities:
        out.append(f"model {entry.name!r} takes {'/'.join(entry.modalities)} data, "
                   f"but data {cfg.data.name!r} is {cfg.data.modality}")
    if cfg.model.channels_last and cfg.data.modality != "image":
        out.append("model.channels_last applies to image models only")
    return out


@rule
def data_source(cfg, facts):
    if cfg.data.source != "synthetic":
        return [f"data.source={cfg.data.source!r} is not available; allowed: synthetic"]
    return []


@rule
def data_path_exists(cfg, facts):
    p = cfg.data.path
    if p is not None and not Path(p).expanduser().exists():
        return [f"data.path={p!r} does not exist (checked from {Path.cwd()}); give an existing file or "
                "folder, or data.path=null for synthetic data"]
    return []


@rule
def batch_search_fits_strategy(cfg, facts):
    out = []
    if cfg.bench.mode == "find_max_batch":
        strategy = parallel.STRATEGIES.get(cfg.parallel.name)
        if strategy is not None and strategy.multi_process:
            out.append(f"bench.mode=find_max_batch runs its trials in one process; parallel "
                       f"{cfg.parallel.name!r} starts several. Search with parallel=single (batch_size is per device)")
        if cfg.bench.max_batch_limit < 1 or cfg.bench.max_batch_rtol < 0:
            out.append("bench.max_batch_limit must be >= 1 and bench.max_batch_rtol >= 0")
    if cfg.bench.stop_grace_s <= 0:
        out.append(f"bench.stop_grace_s must be > 0, got {cfg.bench.stop_grace_s}")
    return out


@rule
def platform_is_here(cfg, facts):
    p, out = cfg.platform, []
    if p.device not in ("auto", "cpu", "cuda", "xla"):
        return [f"platform.device={p.device!r} is unknown; allowed: auto, cpu, cuda, xla"]
    if p.device == "cuda" and not facts.cuda_count:
        out.append(f"platform {p.name!r} declares CUDA GPUs but none is visible here "
                   f"(torch {facts.torch_version}); use platform=local or platform=cpu")
    if p.accelerator:
        seen = facts.cuda_devices
        if p.device == "xla":
            pass  # TPU/XLA devices are checked by the XLA runtime once torch_xla is imported
        elif not any(p.accelerator.lower() in n.lower() for n in seen):
            out.append(f"platform {p.name!r} expects accelerator {p.accelerator!r}, but this machine has "
                       f"{', '.join(seen) or 'no accelerator (CPU only)'}; use platform=local to describe it")
    if p.device_count is not None and p.device == "cuda" and p.device_count > facts.cuda_count:
        out.append(f"platform {p.name!r} declares {p.device_count} GPUs, {facts.cuda_count} are visible")
    return out


@rule
def runtime_available(cfg, facts):
    name = cfg.runtime.name
    if name.startswith("xla") and not facts.torch_xla:
        return [f"runtime {name!r} needs torch-xla, which is not installed here "
                "(pip install torch-xla matching torch; other runtimes work without it)"]
    return []


@rule
def precision_fits_device(cfg, facts):
    dev = device_type(cfg.platform.device, cfg.runtime.name, facts)
    name = cfg.precision.name
    if name == "tf32" and dev != "cuda":
        return [f"precision tf32 needs a CUDA GPU (tensor cores); this run is on {dev}. "
                "Use fp32, amp_bf16 or bf16"]
    if name == "amp_fp16" and dev != "cuda":
        return [f"precision amp_fp16 (fp16 autocast with a gradient scaler) needs a CUDA GPU; this run is "
                f"on {dev}. Use amp_bf16 or bf16 there"]
    return []


@rule
def threads_in_range(cfg, facts):
    t = cfg.bench.threads
    if t is not None and t > 4 * facts.logical_cores:
        return [f"bench.threads={t} is more than 4x this machine's {facts.logical_cores} logical cores"]
    return []
