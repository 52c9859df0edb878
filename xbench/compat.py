"""Can this config run here? One pure function, called before any device work.

`check(cfg, facts)` returns human-readable reasons (empty list: good to go). Each reason says what
was asked, what is wrong and what is allowed, so that the failed record and the console explain
themselves. Add a rule as one function decorated with `@rule`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from xbench import models, parallel, runtimes
from xbench.config import XBenchConfig
from xbench.data import loaders
from xbench.metrics import cost
from xbench.platforms.detect import HostFacts, device_type
from xbench.precision import PRECISIONS

RULES: list[Callable[[XBenchConfig, HostFacts], list[str]]] = []

MODALITIES = ("image", "tokens", "features")
BENCH_MODES = ("throughput", "train_to_target", "find_max_batch")
GOAL_METRICS = {"top1": "classify", "accuracy": "classify", "top5": "classify", "perplexity": "lm/mlm"}
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
def process_repeats_fit(cfg, facts):
    """Whole-process repeats re-run a throughput measurement; the launcher must start the processes."""
    n = cfg.bench.process_repeats
    if n < 1:
        return [f"bench.process_repeats must be a positive whole number (1: one process, no repeat), got {n}"]
    if n == 1:
        return []
    if cfg.bench.mode != "throughput":
        return [f"bench.process_repeats={n} applies to bench.mode=throughput only, not {cfg.bench.mode!r} "
                "(use bench.process_repeats=1 with train_to_target and find_max_batch)"]
    from xbench.launch.torchrun import under_torchrun

    if under_torchrun():
        return [f"bench.process_repeats={n} needs xbench to start the ranks (python -m xbench parallel=... "
                "without the torchrun command): processes torchrun started cannot be started again"]
    return []


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
    src = cfg.data.source
    if cfg.data.ngrams < 1:
        return [f"data.ngrams must be >= 1 (1: words only, 2: words and bigrams), got {cfg.data.ngrams}"]
    if src == "synthetic":
        return []
    if src not in loaders.SOURCES:
        return [f"data.source={src!r} is not available; allowed: {', '.join(loaders.names())}"]
    out = loaders.missing_reasons(src, cfg.data.path)
    if cfg.data.modality not in loaders.SOURCES[src].modality.split("|"):
        out.append(f"data.source={src} gives {loaders.SOURCES[src].modality} data, "
                   f"but data.modality={cfg.data.modality}")
    try:
        task = models.get(cfg.model.name).task
    except KeyError:
        task = None  # reported by model_fits_data
    if task and task != loaders.SOURCES[src].task:
        out.append(f"model {cfg.model.name!r} trains on {task} targets, but data.source={src} gives "
                   f"{loaders.SOURCES[src].task} targets")
    if not 0 < cfg.data.eval_fraction < 1:
        out.append(f"data.eval_fraction must be between 0 and 1 (exclusive), got {cfg.data.eval_fraction}")
    if cfg.data.num_workers < 0:
        out.append(f"data.num_workers must be >= 0, got {cfg.data.num_workers}")
    return out


@rule
def goal_is_valid(cfg, facts):
    """train_to_target needs real data, a target, a metric the model's task has, and one device."""
    g, out = cfg.goal, []
    if cfg.resume and cfg.bench.mode != "train_to_target":
        out.append(f"resume={cfg.resume!r} applies to bench.mode=train_to_target runs only")
    if cfg.bench.mode != "train_to_target":
        return out
    if g.metric not in GOAL_METRICS:
        out.append(f"goal.metric={g.metric!r} is unknown; allowed: {', '.join(GOAL_METRICS)}")
    else:
        try:
            task = models.get(cfg.model.name).task
        except KeyError:
            task = None
        if task and task not in GOAL_METRICS[g.metric].split("/"):
            out.append(f"goal.metric={g.metric} needs a {GOAL_METRICS[g.metric]} model; {cfg.model.name!r} is {task}")
    if g.target is None:
        out.append("bench.mode=train_to_target needs goal.target (e.g. goal.target=0.95 for 95% top-1)")
    elif g.metric in ("top1", "accuracy", "top5") and not 0 < g.target <= 1:
        out.append(f"goal.target={g.target} for {g.metric} must be a fraction in (0, 1] (0.95, not 95)")
    if cfg.data.source == "synthetic":
        out.append("bench.mode=train_to_target needs a real data set (e.g. data=digits); synthetic data has "
                   "no accuracy to reach")
    if cfg.parallel.name != "single":
        out.append(f"bench.mode=train_to_target runs on one device for now (parallel=single), not {cfg.parallel.name!r}")
    for label, v, low in (("goal.max_epochs", g.max_epochs, 1), ("goal.eval_every_steps", g.eval_every_steps, 0),
                          ("goal.checkpoint_every_evals", g.checkpoint_every_evals, 0)):
        if v < low:
            out.append(f"{label} must be >= {low}, got {v}")
    if g.max_time_s is not None and g.max_time_s <= 0:
        out.append(f"goal.max_time_s must be > 0 or null, got {g.max_time_s}")
    return out


@rule
def price_is_valid(cfg, facts):
    return cost.problems(dataclasses.asdict(cfg.platform))


@rule
def data_path_exists(cfg, facts):
    """A path given with synthetic data (real sources are checked, layout and all, by data_source)."""
    p = cfg.data.path
    if cfg.data.source == "synthetic" and p is not None and not Path(p).expanduser().exists():
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
        if "tpu" in p.accelerator.lower():
            if not facts.tpu_chips:
                out.append(f"platform {p.name!r} expects {p.accelerator} chips, but this machine has no TPU "
                           f"(no /dev/accel* or /dev/vfio/*; accelerators seen: {', '.join(seen) or 'none, CPU only'}); "
                           "use platform=local to describe it")
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
    if name == "accelerate" and not facts.accelerate:
        return ["runtime 'accelerate' needs HF Accelerate, which is not installed here (pip install accelerate)"]
    return []


@rule
def runtime_options(cfg, facts):
    """torch.compile / XLA compile options that exist, and devices each runtime can drive."""
    r, out = cfg.runtime, []
    if r.name == "compile":
        from xbench.runtimes.compiled import MODES, TARGETS

        backends = _dynamo_backends()
        if r.backend.startswith("openxla"):
            out.append(f"runtime compile: backend {r.backend!r} runs on XLA devices; use runtime=xla_openxla "
                       "(runtime name xla_compile, backend openxla)")
        elif r.backend not in backends:
            out.append(f"runtime compile: backend {r.backend!r} is unknown to torch.compile; "
                       f"allowed: {', '.join(backends)}")
        if r.mode not in MODES:
            out.append(f"runtime compile: mode {r.mode!r} is unknown; allowed: {', '.join(m for m in MODES if m)}")
        if r.target not in TARGETS:
            out.append(f"runtime compile: target {r.target!r} is unknown; allowed: {', '.join(TARGETS)}")
    if r.name == "xla_compile" and r.backend not in runtimes.XLA_COMPILE_BACKENDS:
        out.append(f"runtime xla_compile: backend {r.backend!r} is unknown; allowed: {', '.join(runtimes.XLA_COMPILE_BACKENDS)}")
    if cfg.platform.device == "xla" and not r.name.startswith("xla"):
        out.append(f"platform {cfg.platform.name!r} is an XLA device, which only runtime=xla or "
                   f"runtime=xla_compile can drive (asked: runtime={r.name})")
    return out  # a TPU platform on a machine without TPU chips: see platform_is_here


def _dynamo_backends() -> list[str]:
    import torch._dynamo

    return sorted(set(torch._dynamo.list_backends(exclude_tags=())) | {"inductor", "eager", "aot_eager"})


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


@rule
def parallel_fits_here(cfg, facts):
    """Strategies that need hardware or settings this config does not give, said before any work."""
    p, out = cfg.parallel, []
    if p.name not in parallel.STRATEGIES:
        return []  # known_names says so
    dev = device_type(cfg.platform.device, cfg.runtime.name, facts)
    if p.name == "dataparallel":
        if dev != "cuda" or facts.cuda_count < max(2, p.world_size):
            out.append(f"parallel=dataparallel measures nn.DataParallel over {max(2, p.world_size)} CUDA GPUs "
                       f"in one process, but this run has {facts.cuda_count if dev == 'cuda' else 0} "
                       f"(device {dev}). Without at least 2 GPUs it would silently run one device under "
                       "another name (nn.DataParallel without CUDA just calls the module), so the "
                       "comparison would be meaningless. Use parallel=single or parallel=ddp here")
        elif p.world_size < 2:
            out.append("parallel=dataparallel needs parallel.world_size >= 2 (GPUs); use parallel=single for one")
    if parallel.get(p.name).launcher == "torchrun":
        if p.backend not in ("auto", "gloo", "nccl"):
            out.append(f"parallel.backend={p.backend!r} is unknown; allowed: auto, gloo, nccl")
        if p.backend == "nccl" and dev != "cuda":
            out.append(f"parallel.backend=nccl needs CUDA GPUs; this run is on {dev}: use auto or gloo")
        if dev == "xla":
            out.append(f"parallel={p.name} runs torch.distributed over CPU/CUDA devices; for XLA devices use "
                       "an XLA strategy (parallel=xla_spmd, or parallel=xla_mp on TPU)")
        if p.timeout_s <= 0:
            out.append(f"parallel.timeout_s must be > 0 (a dead rank would hang the run), got {p.timeout_s}")
        if p.nnodes < 1 or p.world_size % p.nnodes:
            out.append(f"parallel.world_size={p.world_size} must be a multiple of parallel.nnodes={p.nnodes} "
                       "(processes in all = nodes x processes per node)")
        if p.nnodes > 1 and not p.rdzv_endpoint:
            out.append("parallel.nnodes > 1 needs parallel.rdzv_endpoint=host:port of node 0")
        if not 0 <= p.node_rank < max(1, p.nnodes):
            out.append(f"parallel.node_rank={p.node_rank} must be in 0..{p.nnodes - 1}")
        per_node = p.world_size // max(1, p.nnodes)
        if dev == "cuda" and per_node > facts.cuda_count:
            out.append(f"parallel={p.name} with {per_node} processes per node needs {per_node} GPUs, "
                       f"{facts.cuda_count} visible")
    return out


@rule
def xla_parallel_fits_here(cfg, facts):
    """XLA strategies need an XLA runtime; the multi-process recipe needs TPU collectives (not PJRT CPU)."""
    p, out = cfg.parallel, []
    if p.name not in ("xla_spmd", "xla_mp"):
        if p.name == "accelerate" and cfg.runtime.name != "accelerate":
            out.append(f"parallel=accelerate runs Accelerate's prepare/backward in every rank, which is "
                       f"runtime=accelerate (asked: runtime={cfg.runtime.name}); for plain DDP use parallel=ddp")
        return out
    if not cfg.runtime.name.startswith("xla"):
        out.append(f"parallel={p.name} drives XLA devices: use runtime=xla or runtime=xla_compile "
                   f"(asked: runtime={cfg.runtime.name})")
    pjrt = runtimes.default_pjrt_device(facts.tpu_chips)
    if p.name == "xla_mp" and pjrt == "CPU" and p.world_size > 1:
        out.append(f"parallel=xla_mp with {p.world_size} processes needs TPU (or GPU) collectives: on PJRT CPU "
                   "torch-xla's multi-process collectives do not work (torch_xla.launch + xm.all_reduce abort "
                   "after a rendezvous timeout), and this machine has no TPU. Use parallel=xla_spmd for XLA data "
                   "parallelism over CPU devices, or run this on a TPU VM (docs/parallel.md gives the command)")
    return out
