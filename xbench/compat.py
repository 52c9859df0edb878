"""Can this config run here? `check(cfg, facts)`, called before any device work.

`check(cfg, facts)` returns human-readable reasons (empty list: good to go). Besides the host's `facts` it
reads the environment (PJRT_DEVICE, the launcher's variables), the installed packages' versions and the file
system (data paths, platform files); it writes no environment variable and imports no torch_xla
(tests/test_import_env.py, tests/test_pure_checks.py: under simulated torchrun, srun and TPU hosts), so a simulated
host's check does not depend on what ran before it. Each reason says what
was asked, what is wrong and what is allowed, so that the failed record and the console explain
themselves. Every reason is collected, never only the first.

Where the rules live: the plugins own theirs (a runtime's `rules` classmethod in runtimes/, a
strategy's in parallel/, a mode's in modes/), and `plugin_rules` below asks the ones the config names;
the packages a runtime or strategy needs come from its registry line and are checked from the host's
facts first (its module may import them). What concerns no single plugin (numbers, names, model and
data, the platform and its price, precision, threads) is one `@rule` function here.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from collections.abc import Callable
from pathlib import Path

from xbench import extras, models, modes, parallel, runtimes, studies
from xbench.bench import faults
from xbench.config import DDP_OPTIONS, ParallelConfig, XBenchConfig, range_problems
from xbench.data import loaders
from xbench.data.spec import InputSpec
from xbench.env_vars import launched_rank
from xbench.launch.isolation import ISOLATION
from xbench.metrics import cost
from xbench.platforms import sku
from xbench.platforms.detect import HostFacts, device_type
from xbench.precision import PRECISIONS
from xbench.training import optim

RULES: list[Callable[[XBenchConfig, HostFacts], list[str]]] = []

MODALITIES = ("image", "tokens", "features")
FAULT_KINDS = (None, "exception", "nan_loss", "sigterm", "hang", "signal")
WANDB_MODES = ("auto", "online", "offline", "disabled")
LOGGERS = ("wandb", "none")


def rule(fn):
    RULES.append(fn)
    return fn


def check(cfg: XBenchConfig, facts: HostFacts) -> list[str]:
    reasons: list[str] = []
    for fn in RULES:
        if fn is not knobs_in_range:
            reasons += fn(cfg, facts)
    # The generic range check adds only what no rule of its own said: one reason per bad value.
    named = {_key_of(r) for r in reasons}
    return reasons + [r for r in knobs_in_range(cfg, facts) if _key_of(r) not in named]


def _key_of(reason: str) -> str:
    """The config key a reason starts with ('parallel.bucket_cap_mb must be ...' -> 'parallel.bucket_cap_mb')."""
    return re.match(r"[\w.\[\]]*", reason).group(0)


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
            out.append(f"{label} must be >= 1 or null (the free physical cores / torch's default), got {value}")
    if cfg.bench.warmup_min_steps > cfg.bench.warmup_max_steps:
        out.append(f"bench.warmup_min_steps ({cfg.bench.warmup_min_steps}) exceeds bench.warmup_max_steps "
                   f"({cfg.bench.warmup_max_steps})")
    if cfg.optim.lr <= 0:
        out.append(f"optim.lr must be > 0, got {cfg.optim.lr}")
    if cfg.bench.stop_grace_s <= 0:
        out.append(f"bench.stop_grace_s must be > 0, got {cfg.bench.stop_grace_s}")
    return out


@rule
def knobs_in_range(cfg, facts):
    """Every number of the config within its range, the range in the message (config.RANGES)."""
    return range_problems(cfg)


@rule
def measurement_policy(cfg, facts):
    """Window sizing, stall handling, the contention probe and isolation (bench/loop.py rules 7-8)."""
    b, out = cfg.bench, []
    if b.isolation not in ISOLATION:
        out.append(f"bench.isolation={b.isolation!r} is unknown; allowed: {', '.join(ISOLATION)}")
    for label, value in (("bench.min_window_s", b.min_window_s), ("bench.stall_remeasure", b.stall_remeasure),
                         ("bench.contention_probe_s", b.contention_probe_s)):
        if value < 0:
            out.append(f"{label} must be >= 0, got {value}")
    if b.stall_factor <= 1:
        out.append(f"bench.stall_factor must be > 1 (a step over this x the median is an outlier), got {b.stall_factor}")
    if not 0 < b.stall_fraction <= 1:
        out.append(f"bench.stall_fraction must be in (0, 1], got {b.stall_fraction}")
    return out


@rule
def process_repeats_fit(cfg, facts):
    """Whole-process repeats re-run a throughput measurement; xbench must be free to start the processes."""
    n = cfg.bench.process_repeats
    if n < 1:
        return [f"bench.process_repeats must be a positive whole number (1: one process, no repeat), got {n}"]
    if n == 1:
        return []
    if cfg.bench.mode != "throughput":
        return [f"bench.process_repeats={n} applies to bench.mode=throughput only, not {cfg.bench.mode!r} "
                "(use bench.process_repeats=1 with train_to_target and find_max_batch)"]
    if launched_rank():  # a read: compat sets no variable (launch/torchrun.launch gives a srun task torch's while its rank runs)
        return [f"bench.process_repeats={n} needs xbench to start the ranks (python -m xbench parallel=... "
                "without the torchrun command): processes torchrun started cannot be started again"]
    return []


@rule
def known_names(cfg, facts):
    out = []
    if cfg.bench.mode not in modes.MODES:
        out.append(f"bench.mode={cfg.bench.mode!r} is not available; allowed: {', '.join(modes.MODES)}")
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
    out += faults.problems(cfg.fault)
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
    absent = extras.missing(f"model {entry.name!r}", *entry.packages)
    if absent:
        return [absent]
    out = []
    options = entry.option_names()  # None for a zoo model: its probe checks them
    unknown = sorted(set(cfg.model.options) - set(options or ()))
    if options is not None and unknown:
        out.append(f"model {entry.name!r} has no option(s) {', '.join(unknown)}; "
                   f"its options: {', '.join(options) or 'none'}")
    if cfg.data.modality not in entry.modalities:
        out.append(f"model {entry.name!r} takes {'/'.join(entry.modalities)} data, "
                   f"but data {cfg.data.name!r} is {cfg.data.modality}")
    elif entry.probe is not None:  # a zoo model: built once on the meta device for this data
        out += entry.probe(InputSpec.from_data(cfg.data), dict(cfg.model.options))
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
def optimizer_is_valid(cfg, facts):
    """The optimizer's own options (training/optim.py): e.g. LARS/LAMB options on an optimizer that has none."""
    return optim.rules(cfg.optim)


@rule
def ddp_options_need_ddp(cfg, facts):
    """DistributedDataParallel's options (parallel.bucket_cap_mb, ...) changed under another strategy: nothing
    would read them, and the record would say they were used."""
    if cfg.parallel.name == "ddp":
        return []
    default = ParallelConfig()
    return [f"parallel.{k}={getattr(cfg.parallel, k)} is a DistributedDataParallel option: it applies to "
            f"parallel=ddp, not parallel={cfg.parallel.name}" for k in DDP_OPTIONS
            if getattr(cfg.parallel, k) != getattr(default, k)]


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
def platform_is_here(cfg, facts):
    p, out = cfg.platform, []
    if p.device not in ("auto", "cpu", "cuda", "xla"):
        return [f"platform.device={p.device!r} is unknown; allowed: auto, cpu, cuda, xla"]
    if p.device == "cuda" and not facts.cuda_count:
        out.append(f"platform {p.name!r} declares CUDA GPUs but none is visible here "
                   f"(torch {facts.torch_version}); use platform=local or platform=cpu")
    if p.accelerator:  # a SKU: name, memory and SMs of a GPU, the reported type of a TPU (platforms/sku.py)
        seen = facts.cuda_devices
        if sku.is_tpu(p):
            if not facts.tpu_chips:
                out.append(f"platform {p.name!r} expects {p.accelerator} chips, but this machine has no TPU "
                           f"(no /dev/accel* or /dev/vfio/*; accelerators seen: {', '.join(seen) or 'none, CPU only'}); "
                           "use platform=local to describe it")
            out += sku.tpu_mismatches(p, facts)
        else:
            out += sku.gpu_mismatches(p, facts)
    if p.device_count is not None and p.device == "cuda" and p.device_count > facts.cuda_count:
        out.append(f"platform {p.name!r} declares {p.device_count} GPUs, {facts.cuda_count} are visible")
    hint = studies.run_here_hint(cfg.experiment) if out else None
    if hint:  # a study preset refused here: say what runs here instead
        out[-1] += f"; {hint}"
    return out


XLA_CUDA_AMP_LAST = (2, 8)  # torch-xla 2.9 removed XLA:CUDA, its fp16 autocast and GradScaler (pytorch/xla#9608)


def xla_cuda_amp_problem(xla_version: str | None) -> str | None:
    """amp_fp16 on XLA:CUDA is torch_xla.amp.autocast (fp16) with torch_xla.amp.GradScaler, which torch-xla
    provides up to 2.8: the problem with the installed version, or None."""
    if not xla_version:
        return None  # reported by the runtime's own rules (torch-xla missing)
    release = tuple(int(x) for x in xla_version.split("+")[0].split(".")[:2])
    if release <= XLA_CUDA_AMP_LAST:
        return None
    return (f"precision amp_fp16 on XLA:CUDA needs torch_xla.amp.autocast (fp16) and torch_xla.amp.GradScaler, "
            f"which torch-xla provides up to 2.8; torch-xla {xla_version} here removed XLA:CUDA with them "
            "(pytorch/xla#9608). Install torch 2.8 + torch-xla 2.8 + torch_xla_cuda_plugin 2.8, or run XLA "
            "with amp_bf16 on a TPU")


@rule
def precision_fits_device(cfg, facts):
    dev = device_type(cfg.platform.device, cfg.runtime.name, facts)
    name = cfg.precision.name
    if name == "tf32" and dev != "cuda":
        return [f"precision tf32 needs a CUDA GPU (tensor cores); this run is on {dev}. "
                "Use fp32, amp_bf16 or bf16"]
    xla_cuda = dev == "xla" and runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device) == "CUDA"
    if name == "amp_fp16" and xla_cuda:
        problem = xla_cuda_amp_problem(_version("torch-xla"))
        return [problem] if problem else []
    if name == "amp_fp16" and dev != "cuda":
        return [f"precision amp_fp16 (fp16 autocast with a gradient scaler) needs a CUDA GPU; this run is "
                f"on {dev}. Use amp_bf16 or bf16 there"]
    return []


CPU_CAPABILITIES = ("default", "avx2", "avx512")  # ATEN_CPU_CAPABILITY values on x86


@rule
def cpu_capability_fits(cfg, facts):
    """ATen's CPU kernels are chosen when torch starts: xbench must start the processes, on the CPU."""
    cap = cfg.bench.cpu_capability
    if cap is None:
        return []
    if cap not in CPU_CAPABILITIES:
        return [f"bench.cpu_capability={cap!r} is unknown; allowed: null (the best this CPU has), "
                f"{', '.join(CPU_CAPABILITIES)}"]
    dev = device_type(cfg.platform.device, cfg.runtime.name, facts)
    if dev != "cpu":
        return [f"bench.cpu_capability={cap} chooses ATen's CPU kernels; this run trains on {dev}"]
    if launched_rank():  # a read: compat sets no variable (launch/torchrun.launch gives a srun task torch's while its rank runs)
        return [f"bench.cpu_capability={cap} needs xbench to start the processes (torch reads it at start); "
                "run python -m xbench without the torchrun command"]
    return []


@rule
def threads_in_range(cfg, facts):
    t = cfg.bench.threads
    if t is not None and t > 4 * facts.logical_cores:
        return [f"bench.threads={t} is more than 4x this machine's {facts.logical_cores} logical cores"]
    return []


def _missing(what: str, requires: tuple[str, ...], facts: HostFacts) -> list[str]:
    """One line per absent package a runtime or strategy needs, with the `pip install 'xbench[...]'`."""
    return [extras.message(what, pkg) for pkg in requires if not getattr(facts, pkg, False)]


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def xla_pair_problem(torch_version: str, xla_version: str | None) -> str | None:
    """torch-xla runs only on the torch release it was built for (same major.minor): the problem, or None."""
    if not xla_version:
        return None
    release = ".".join(torch_version.split("+")[0].split(".")[:2])
    if release == ".".join(xla_version.split("+")[0].split(".")[:2]):
        return None
    return (f"torch-xla {xla_version} needs torch {'.'.join(xla_version.split('.')[:2])}.x, but torch here is "
            f"{torch_version}: install a matching pair, e.g. pip install 'xbench[xla]' (torch 2.9.0 + "
            "torch-xla 2.9.0), or use a runtime without XLA (eager, compile)")


def xla_elsewhere(cfg, facts) -> str:
    """Where PyTorch reaches XLA on this run's hardware without torch-xla (whose last release, 2.9.0, needs torch
    2.9.0): TorchTPU on a TPU (never run by xbench: docs/runtimes.md), torchax (JAX's XLA) on TPUs, GPUs and CPUs."""
    target = runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device)
    if target == "TPU" or "tpu" in str(cfg.platform.name).lower():
        return ("on a TPU with a newer torch, PyTorch's own path is TorchTPU (pip install torch_tpu; device 'tpu'), "
                "which xbench does not drive (never run here: docs/runtimes.md, TorchTPU), or runtime=torchax "
                "with jax[tpu]")
    if target == "CUDA":
        return "for XLA on NVIDIA GPUs use runtime=torchax (JAX's XLA, jax[cuda13]); torch-xla 2.9 removed XLA:CUDA"
    return "or runtime=torchax (JAX's XLA on this CPU, in xbench's default environment)"


@rule
def plugin_rules(cfg, facts):
    """The rules of the runtime, strategy and mode the config names (unknown names: see known_names)."""
    out, dev = [], device_type(cfg.platform.device, cfg.runtime.name, facts)
    if cfg.runtime.name in runtimes.RUNTIMES:
        missing = _missing(f"runtime {cfg.runtime.name!r}", runtimes.requires(cfg.runtime.name), facts)
        if not missing and "torch_xla" in runtimes.requires(cfg.runtime.name):
            pair = xla_pair_problem(facts.torch_version, _version("torch-xla"))
            missing = [pair] if pair else []
        if missing and "torch_xla" in runtimes.requires(cfg.runtime.name):
            missing = [f"{m}; {xla_elsewhere(cfg, facts)}" for m in missing]
        out += missing or runtimes.rules(cfg.runtime.name)(cfg, facts, dev)
    if cfg.parallel.name in parallel.STRATEGIES:
        missing = _missing(f"parallel={cfg.parallel.name}", parallel.get(cfg.parallel.name).requires, facts)
        out += missing or parallel.strategy_class(cfg.parallel.name).rules(cfg, facts, dev)
    if cfg.bench.mode in modes.MODES:
        out += modes.get(cfg.bench.mode).rules(cfg, facts)
    return out


PROFILERS = ("torch", "xla")


@rule
def profile_fits(cfg, facts):
    """bench.profile: after a throughput run's timed windows, with the profiler of the device's runtime."""
    kind, b = cfg.bench.profile, cfg.bench
    if kind is None:
        return []
    if kind not in PROFILERS:
        return [f"bench.profile={kind!r} is unknown; allowed: null, {', '.join(PROFILERS)}"]
    out = []
    if b.mode != "throughput":
        out.append(f"bench.profile profiles steps after a throughput run's timed windows; bench.mode={b.mode} "
                   "is not supported (use bench.mode=throughput with the same model and data)")
    if b.profile_steps < 1:
        out.append(f"bench.profile_steps must be a positive whole number, got {b.profile_steps}")
    xla = device_type(cfg.platform.device, cfg.runtime.name, facts) == "xla"
    if kind == "xla" and not xla:
        out.append(f"bench.profile=xla needs an XLA runtime (runtime=xla or xla_compile); runtime={cfg.runtime.name} "
                   "takes bench.profile=torch")
    if kind == "torch" and xla:
        out.append("bench.profile=torch sees only the host side of an XLA step; use bench.profile=xla (metrics "
                   "report and HLO dump)")
    return out
