"""Can this config run here? `check(cfg, facts)`, called before any device work.

`check(cfg, facts)` returns human-readable reasons (empty list: good to go). Besides the host's `facts` it
reads the environment (PJRT_DEVICE, the launcher's variables), the installed packages' versions and the file
system (data paths, platform files); it writes no environment variable and imports no torch_xla
(tests/test_import_env.py, tests/test_pure_checks.py: under simulated torchrun, srun and TPU hosts), so a
simulated host's check does not depend on what ran before it. Each reason says what was asked, what is wrong
and what is allowed, so that the failed record and the console explain themselves. Every reason is collected,
never only the first.

Where the rules live: the plugins own theirs (a runtime's `rules` classmethod in runtimes/, a
strategy's in parallel/, a mode's in modes/), and `plugin_rules` below asks the ones the config names;
the packages a runtime or strategy needs come from its registry line and are checked from the host's
facts first (its module may import them). What concerns no single plugin (names, model and data, the
platform and its price, precision, threads) is one `@rule` function here. A single setting's range or
choices is declared once, beside its field (xbench/config, `knob`), and reported by `knobs_in_range`:
the rules here and the plugins' compare settings with each other, the registries and the host, and
never re-check one setting's bound.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable
from pathlib import Path

from xbench import extras, faults, models, modes, parallel, runtimes, studies
from xbench.config import BenchConfig, PlatformConfig, XBenchConfig, choices_of, range_problems
from xbench.config.parallel import STRATEGY_OPTIONS, option_names
from xbench.data import loaders
from xbench.data.spec import InputSpec
from xbench.env_vars import launched_rank
from xbench.metrics import cost
from xbench.platforms import sku
from xbench.platforms.detect import HostFacts, device_type
from xbench.precision import PRECISIONS
from xbench.training import optim

RULES: list[Callable[[XBenchConfig, HostFacts], list[str]]] = []

def rule(fn):
    RULES.append(fn)
    return fn


def check(cfg: XBenchConfig, facts: HostFacts) -> list[str]:
    return [reason for fn in RULES for reason in fn(cfg, facts)]


def _unless_launched(refusal: str) -> list[str]:
    """[refusal] in a rank another launcher started (torchrun, srun), for a setting that needs xbench to
    start the processes; [] otherwise. A read: compat sets no variable (launch/torchrun.launch gives a srun
    task torch's while its rank runs)."""
    return [refusal] if launched_rank() else []


@rule
def knobs_in_range(cfg, facts):
    """Every setting within the range or choices its field declares (xbench/config: `knob` beside the
    field)."""
    return range_problems(cfg)


@rule
def bounds_in_order(cfg, facts):
    """Pairs of settings where one bounds the other."""
    out, b, p = [], cfg.bench, cfg.parallel
    if b.warmup_min_steps > b.warmup_max_steps:
        out.append(f"bench.warmup_min_steps ({b.warmup_min_steps}) exceeds bench.warmup_max_steps "
                   f"({b.warmup_max_steps})")
    if p.node_rank >= p.nnodes >= 1:
        out.append(f"parallel.node_rank={p.node_rank} must be below parallel.nnodes={p.nnodes}")
    return out


@rule
def process_repeats_fit(cfg, facts):
    """Whole-process repeats re-run a throughput measurement; xbench must be free to start the processes."""
    n = cfg.bench.process_repeats
    if n <= 1:
        return []
    if cfg.bench.mode != "throughput":
        return [f"bench.process_repeats={n} applies to bench.mode=throughput only, not {cfg.bench.mode!r} "
                "(use bench.process_repeats=1 with train_to_target and find_max_batch)"]
    return _unless_launched(f"bench.process_repeats={n} needs xbench to start the ranks (python -m xbench "
                            "parallel=... without the torchrun command): processes torchrun started cannot "
                            "be started again")


@rule
def known_names(cfg, facts):
    out = []
    if cfg.bench.mode not in modes.MODES:
        out.append(f"bench.mode={cfg.bench.mode!r} is not available; allowed: {', '.join(modes.MODES)}")
    if cfg.runtime.name not in runtimes.RUNTIMES:
        out.append(f"runtime {cfg.runtime.name!r} is unknown; allowed: {', '.join(runtimes.RUNTIMES)}")
    if cfg.parallel.name not in parallel.STRATEGIES:
        out.append(
            f"parallel strategy {cfg.parallel.name!r} is unknown; allowed: {', '.join(parallel.STRATEGIES)}"
        )
    if cfg.precision.name not in PRECISIONS:
        out.append(f"precision {cfg.precision.name!r} is unknown; allowed: {', '.join(PRECISIONS)}")
    out += faults.problems(cfg.fault)
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
    return out


@rule
def optimizer_is_valid(cfg, facts):
    """The optimizer's own options (training/optim.py): e.g. LARS/LAMB options on an optimizer that has
    none."""
    return optim.rules(cfg.optim)


@rule
def strategy_options_need_their_strategy(cfg, facts):
    """A strategy's options (parallel.bucket_cap_mb for ddp, parallel.reshard_after_forward for fsdp, ...)
    changed under another strategy: nothing would read them, and the record would say they were used."""
    p, out = cfg.parallel, []
    for owner, options in STRATEGY_OPTIONS.items():
        if p.name == owner:
            continue
        default = options()
        out += [
            f"parallel.{k}={getattr(p, k)} is a {OPTION_OWNERS[owner]} option: it applies to "
            f"parallel={owner}, not parallel={p.name}"
            for k in option_names(options)
            if getattr(p, k) != getattr(default, k)
        ]
    return out


OPTION_OWNERS = {"ddp": "DistributedDataParallel", "fsdp": "FSDP", "xla_fsdp": "xla_fsdp"}


@rule
def price_is_valid(cfg, facts):
    return cost.problems(dataclasses.asdict(cfg.platform), numbers=False)  # numbers: the fields' knobs


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
    if p.device not in choices_of(PlatformConfig, "device"):
        return []  # knobs_in_range says so
    if p.device == "cuda" and not facts.cuda_count:
        out.append(f"platform {p.name!r} declares CUDA GPUs but none is visible here "
                   f"(torch {facts.torch_version}); use platform=local or platform=cpu")
    if p.accelerator:  # a SKU: name, memory and SMs of a GPU, the reported type of a TPU (platforms/sku.py)
        seen = facts.cuda_devices
        if sku.is_tpu(p):
            if not facts.tpu_chips:
                out.append(f"platform {p.name!r} expects {p.accelerator} chips, but this machine has no TPU "
                           "(no /dev/accel* or /dev/vfio/*; accelerators seen: "
                           f"{', '.join(seen) or 'none, CPU only'}); use platform=local to describe it")
            out += sku.tpu_mismatches(p, facts)
        else:
            out += sku.gpu_mismatches(p, facts)
    if p.device_count is not None and p.device == "cuda" and p.device_count > facts.cuda_count:
        out.append(f"platform {p.name!r} declares {p.device_count} GPUs, {facts.cuda_count} are visible")
    hint = studies.run_here_hint(cfg.experiment) if out else None
    if hint:  # a study preset refused here: say what runs here instead
        out[-1] += f"; {hint}"
    return out


# torch-xla 2.9 removed XLA:CUDA, its fp16 autocast and GradScaler (pytorch/xla#9608)
XLA_CUDA_AMP_LAST = (2, 8)


def xla_cuda_amp_problem(xla_version: str | None) -> str | None:
    """amp_fp16 on XLA:CUDA is torch_xla.amp.autocast (fp16) with torch_xla.amp.GradScaler, which torch-xla
    provides up to 2.8: the problem with the installed version, or None."""
    if not xla_version:
        return None  # reported by the runtime's own rules (torch-xla missing)
    release = tuple(int(x) for x in xla_version.split("+")[0].split(".")[:2])
    if release <= XLA_CUDA_AMP_LAST:
        return None
    return (
        f"precision amp_fp16 on XLA:CUDA needs torch_xla.amp.autocast (fp16) and torch_xla.amp.GradScaler, "
        f"which torch-xla provides up to 2.8; torch-xla {xla_version} here removed XLA:CUDA with them "
        "(pytorch/xla#9608). Install torch 2.8 + torch-xla 2.8 + torch_xla_cuda_plugin 2.8, or run XLA "
        "with amp_bf16 on a TPU"
    )


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


@rule
def cpu_capability_fits(cfg, facts):
    """ATen's CPU kernels are chosen when torch starts: xbench must start the processes, on the CPU."""
    cap = cfg.bench.cpu_capability
    if cap is None or cap not in choices_of(BenchConfig, "cpu_capability"):
        return []  # an unknown one: knobs_in_range says so
    dev = device_type(cfg.platform.device, cfg.runtime.name, facts)
    if dev != "cpu":
        return [f"bench.cpu_capability={cap} chooses ATen's CPU kernels; this run trains on {dev}"]
    return _unless_launched(f"bench.cpu_capability={cap} needs xbench to start the processes (torch reads "
                            "it at start); run python -m xbench without the torchrun command")


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
    return (
        f"torch-xla {xla_version} needs torch {'.'.join(xla_version.split('.')[:2])}.x, but torch here is "
        f"{torch_version}: install a matching pair, e.g. pip install 'xbench[xla]' (torch 2.9.0 + "
        "torch-xla 2.9.0), or use a runtime without XLA (eager, compile)"
    )


def xla_elsewhere(cfg, facts) -> str:
    """Where PyTorch reaches XLA on this run's hardware without torch-xla (whose last release, 2.9.0, needs
    torch 2.9.0): TorchTPU on a TPU (never run by xbench: docs/runtimes.md), torchax (JAX's XLA) on TPUs, GPUs
    and CPUs."""
    target = runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device)
    if target == "TPU" or "tpu" in str(cfg.platform.name).lower():
        return (
            "on a TPU with a newer torch, PyTorch's own path is TorchTPU (pip install torch_tpu; "
            "device 'tpu'), which xbench does not drive (never run here: docs/runtimes.md, TorchTPU), or "
            "runtime=torchax with jax[tpu]"
        )
    if target == "CUDA":
        return (
            "for XLA on NVIDIA GPUs use runtime=torchax (JAX's XLA, jax[cuda13]); torch-xla 2.9 removed "
            "XLA:CUDA"
        )
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


@rule
def profile_fits(cfg, facts):
    """bench.profile: after a throughput run's timed windows, with the profiler of the device's runtime."""
    kind, b = cfg.bench.profile, cfg.bench
    if kind is None or kind not in choices_of(BenchConfig, "profile"):
        return []  # an unknown one: knobs_in_range says so
    xla = device_type(cfg.platform.device, cfg.runtime.name, facts) == "xla"
    refusals = (  # (refused?, why)
        (b.mode != "throughput",
         f"bench.profile profiles steps after a throughput run's timed windows; bench.mode={b.mode} is not "
         "supported (use bench.mode=throughput with the same model and data)"),
        (kind == "xla" and not xla,
         f"bench.profile=xla needs an XLA runtime (runtime=xla or xla_compile); runtime={cfg.runtime.name} "
         "takes bench.profile=torch"),
        (kind == "torch" and xla,
         "bench.profile=torch sees only the host side of an XLA step; use bench.profile=xla (metrics report "
         "and HLO dump)"),
    )
    return [why for refused, why in refusals if refused]
