"""One rank's whole benchmark, built in order: threads -> seed -> runtime/device -> precision -> model
-> parallel wrap -> optimizer -> step -> data -> warm-up -> timed windows -> this rank's figures.

Nothing here knows which runtime, precision or strategy it runs: those are policies passed in by
name and resolved through their registries, so there is one loop for every variant.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass, field, replace

import psutil
import torch

from xbench import models, parallel, runtimes
from xbench.bench import loop
from xbench.bench.memory import peak_host_rss_gib
from xbench.bench.step import make_optimizer
from xbench.bench.utilisation import UtilisationSampler
from xbench.config import XBenchConfig
from xbench.data import feed, loaders
from xbench.data.synthetic import synthetic_pool
from xbench.metrics.energy import EnergyMeter
from xbench.metrics.stats import summarize
from xbench.models.flops import flops_per_sample
from xbench.models.spec import InputSpec
from xbench.platforms.detect import HostFacts, device_type
from xbench.precision import resolve

INPUT_BOUND_FRACTION = 0.1  # waiting for data more than this share of the window earns a warning

Diverged = loop.Diverged  # defined beside StopRequested (torch-free), kept here for callers


@dataclass
class RankContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


@dataclass
class RankResult:
    rank: int
    measurements: dict
    series: dict
    warnings: list[str] = field(default_factory=list)


def set_threads(bench) -> dict:
    """Apply the configured thread counts and return the values actually in force."""
    if bench.threads is not None:
        torch.set_num_threads(bench.threads)
    if bench.interop_threads is not None:
        # Only settable before any inter-op work; the value in force is what gets recorded.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(bench.interop_threads)
    return {"threads_intra": torch.get_num_threads(), "threads_interop": torch.get_num_interop_threads()}


def threads_not_applied(bench, in_force: dict) -> list[str]:
    """Warnings for thread counts asked for but not in force (inter-op threads are set once per process)."""
    out = []
    for key, asked in (("threads_intra", bench.threads), ("threads_interop", bench.interop_threads)):
        if asked is not None and in_force[key] != asked:
            out.append(f"{key}: asked {asked}, in force {in_force[key]} (torch allows setting inter-op "
                       "threads once per process: run each value in a fresh process)")
    return out


def _inject_fault(step_fn, fault, rank: int):
    """Wrap the step to fail on purpose at one step (fault drill and tests); never on by default."""
    counter = [0]

    def faulty(inputs, targets):
        n = counter[0]
        counter[0] += 1
        if n == fault.at_step and (fault.rank is None or fault.rank == rank):
            if fault.kind == "exception":
                raise RuntimeError(f"injected fault at step {n} (fault.kind=exception)")
            if fault.kind == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            if fault.kind == "nan_loss":
                return step_fn(inputs * float("nan"), targets)
            if fault.kind == "hang":  # a stuck step (hung collective, dead device): only a signal ends it
                while True:
                    time.sleep(3600)
        return step_fn(inputs, targets)

    return faulty


def check_finite(losses: list[float], first_step: int, phase: str) -> None:
    for i, v in enumerate(losses):
        if not math.isfinite(v):
            raise Diverged(first_step + i, v, phase)


def input_format(x: torch.Tensor, precision, channels_last: bool) -> torch.Tensor:
    """Model-side input format, applied once on the device: floating inputs in the parameter dtype
    (token ids stay integers), NHWC for channels_last."""
    if precision.param_dtype != torch.float32 and x.is_floating_point():
        x = x.to(precision.param_dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


@dataclass
class Workload:
    """What one rank trains, built in order; shared by the throughput worker and train-to-target."""

    runtime: object
    precision: object
    spec: InputSpec
    entry: object  # models.ModelEntry
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    flops: dict  # per sample: forward, train
    params_count: int


def build_workload(cfg: XBenchConfig, facts: HostFacts, local_rank: int = 0) -> Workload:
    """runtime/device -> precision -> model (on the device, in the parameter dtype and memory format,
    wrapped by the parallel strategy) -> optimizer. FLOPs are measured on the meta device first."""
    runtime = runtimes.create(cfg.runtime, device_type(cfg.platform.device, cfg.runtime.name, facts), local_rank)
    precision = resolve(cfg.precision.name, runtime.device.type)
    spec = InputSpec.from_data(cfg.data)
    entry = models.get(cfg.model.name)
    flops = flops_per_sample(cfg.model.name, spec, dict(cfg.model.options))
    model = models.build(cfg.model.name, spec, dict(cfg.model.options))
    params_count = sum(p.numel() for p in model.parameters())
    memory_format = torch.channels_last if cfg.model.channels_last else torch.contiguous_format
    model = model.to(device=runtime.device, dtype=precision.param_dtype, memory_format=memory_format)
    model = parallel.wrap(cfg.parallel, model, runtime.device)
    model.train()
    optimizer = parallel.wrap_optimizer(cfg.parallel, make_optimizer(cfg.optim, model.parameters()))
    return Workload(runtime, precision, spec, entry, model, optimizer, flops, params_count)


def make_step(w: Workload, cfg: XBenchConfig, rank: int = 0):
    """The runtime's step over the workload (after any checkpoint was loaded), with a fault if asked."""
    step = w.runtime.prepare(w.model, w.optimizer, w.entry.task, w.precision)
    return _inject_fault(step, cfg.fault, rank) if cfg.fault.kind else step


@dataclass
class PreparedRank:
    """Everything built before the first step: what the loop runs (`hooks`) and what the record needs."""

    work: Workload
    hooks: loop.Hooks
    threads: dict  # thread counts in force
    warnings: list[str]
    data_info: dict
    devices_per_rank: int


def prepare_rank(cfg: XBenchConfig, facts: HostFacts, ctx: RankContext, on_step=None,
                 stop: loop.StopFlag | None = None) -> PreparedRank:
    """threads -> seed -> workload -> step -> data -> the loop's hooks. Also used as is by
    scripts/bench_overhead.py, so the harness it measures is exactly this one."""
    threads = set_threads(cfg.bench)
    torch.manual_seed(cfg.bench.seed)
    warnings: list[str] = threads_not_applied(cfg.bench, threads)

    work = build_workload(cfg, facts, ctx.local_rank)
    runtime, precision, spec, entry = work.runtime, work.precision, work.spec, work.entry
    step = make_step(work, cfg, ctx.rank)

    devices_per_rank = parallel.devices_per_rank(cfg.parallel)  # DataParallel: one process, N GPUs

    def prepare_inputs(x):
        return input_format(x, precision, cfg.model.channels_last)

    data_info = {}
    if cfg.data.source == "synthetic":
        # Each rank gets its own data (seed + rank), as a data-parallel sampler would give it.
        pool = synthetic_pool(spec, cfg.data.batch_size * devices_per_rank, entry.task,
                              cfg.data.synthetic_batches, runtime.device, cfg.bench.seed + ctx.rank)
        pool = [parallel.place_batch(cfg.parallel, prepare_inputs(x), y) for x, y in pool]
        cursor = [0]
        n_pool = len(pool)

        def next_batch():
            i = cursor[0]
            cursor[0] = i + 1
            return pool[i % n_pool]
    else:
        # Real files: a per-rank shard through a DataLoader; the loop measures the wait (data_wait_s).
        splits = loaders.build(cfg.data, entry.task)
        info = splits.info or {}
        data_info = {name: info[k] for k, name in (("train", "data_train_samples"), ("eval", "data_eval_samples"),
                                                    ("vocab", "data_vocab_size")) if k in info}
        # A rank driving several devices (DataParallel, SPMD) takes batch_size per device in one batch.
        rank_data = replace(cfg.data, batch_size=cfg.data.batch_size * devices_per_rank)
        train_loader = feed.make_loader(splits.train, rank_data, ctx.rank, ctx.world_size, cfg.bench.seed,
                                        splits.collate)
        fetch = feed.device_feed(train_loader, runtime.device, prepare_inputs)

        def next_batch():
            return parallel.place_batch(cfg.parallel, *fetch())

    hooks = loop.Hooks(
        step=step, next_batch=next_batch, sync=parallel.sync(cfg.parallel, runtime.sync), compile_count=runtime.compile_count,
        read_losses=runtime.read_losses,
        make_timer=loop.CudaEventTimer if runtime.device.type == "cuda" else None,
        on_step=on_step, stop=stop or loop.StopFlag(), agree=parallel.agree(cfg.parallel, runtime.device),
    )
    if runtime.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(runtime.device)
    return PreparedRank(work, hooks, threads, warnings, data_info, devices_per_rank)


def rank_gpus(p: PreparedRank) -> list[int]:
    """The GPUs this rank drives: all of them under DataParallel, else its own; none off CUDA."""
    dev = p.work.runtime.device
    if dev.type != "cuda":
        return []
    return list(range(p.devices_per_rank)) if p.devices_per_rank > 1 else [dev.index or 0]


def utilisation_sampler(cfg: XBenchConfig, p: PreparedRank) -> UtilisationSampler:
    """The sampler that runs beside the timed windows."""
    return UtilisationSampler(p.work.runtime.device.type, cfg.bench.util_interval_s, rank_gpus(p))


def run_rank(cfg: XBenchConfig, facts: HostFacts, ctx: RankContext, on_step=None,
             stop: loop.StopFlag | None = None) -> RankResult:
    p = prepare_rank(cfg, facts, ctx, on_step, stop)
    work, hooks, threads, warnings, data_info = p.work, p.hooks, p.threads, p.warnings, p.data_info
    runtime, precision, model = work.runtime, work.precision, work.model
    flops, params_count, devices_per_rank = work.flops, work.params_count, p.devices_per_rank

    b = cfg.bench
    wu = loop.warmup(hooks, b.warmup_min_steps, b.warmup_max_steps, b.warmup_stable_steps, b.warmup_cv_tol)
    check_finite(wu.losses, 0, "warmup")
    startup_to_first_step_s = time.time() - psutil.Process().create_time() - (wu.time_s - wu.first_step_s)
    if not wu.stable:
        warnings.append(f"warm-up did not stabilise within {b.warmup_max_steps} steps (compilations or "
                        f"step times still changing); the timed windows may include them")

    energy = EnergyMeter(runtime.device.type, rank_gpus(p))
    energy.start()
    windows = []
    sampler = utilisation_sampler(cfg, p)
    sampler.start()  # its own thread, at a low rate; started and stopped outside the steps
    try:
        for _ in range(b.repeats):
            w = loop.timed_window(hooks, b.steps)
            check_finite(w.losses, wu.steps + sum(x.steps for x in windows), "timed")
            windows.append(w)
            if w.compiles_during:
                warnings.append(f"{w.compiles_during} compilation(s) during a timed window: not steady state")
    except loop.StopRequested as e:  # interrupted: keep what was measured before the signal
        sampler.stop()
        p = e.partial
        p.update(warmup_steps=wu.steps, warmup_s=wu.time_s, first_step_s=wu.first_step_s,
                 batch_size_per_device=cfg.data.batch_size, windows_completed=len(windows),
                 window_s_completed=[x.wall_s for x in windows])
        samples = cfg.data.batch_size * devices_per_rank * (sum(x.steps for x in windows) + p.get("timed_steps", 0))
        seconds = sum(x.wall_s for x in windows) + p.get("window_s", 0.0)
        if samples and seconds > 0:
            p["throughput_samples_per_s_partial"] = samples / seconds
        raise
    utilisation = sampler.stop()

    energy_figures = energy.stop()
    wait_fraction = sum(w.data_wait_s for w in windows) / sum(w.wall_s for w in windows)
    if wait_fraction > INPUT_BOUND_FRACTION:
        warnings.append(f"input-bound: {wait_fraction:.0%} of the timed window waited for data "
                        f"(data.source={cfg.data.source}, num_workers={cfg.data.num_workers}); "
                        "this measures the loader, not the chip")

    samples_per_step = cfg.data.batch_size * devices_per_rank
    step_times = [t for w in windows for t in w.step_times_s]
    st = summarize(step_times)
    window_s = [w.wall_s for w in windows]
    m = {
        "rank": ctx.rank,
        "device": str(runtime.device),
        "batch_size_per_device": cfg.data.batch_size,
        "devices_per_rank": devices_per_rank,
        "samples_per_step": samples_per_step,
        "params_count": params_count,
        "flops_per_sample_forward": flops["forward"],
        "flops_per_sample_train": flops["train"],
        "compute_dtype": precision.compute_dtype,
        **threads,
        "warmup_steps": wu.steps,
        "warmup_s": wu.time_s,
        "warmup_stable": wu.stable,
        "first_step_s": wu.first_step_s,
        "startup_to_first_step_s": startup_to_first_step_s,
        "compiles_warmup": wu.compiles,
        "compiles_timed": None if windows[0].compiles_during is None else sum(w.compiles_during for w in windows),
        "timed_steps_per_window": b.steps,
        "repeats": b.repeats,
        "window_s": window_s,
        "samples_per_window": samples_per_step * b.steps,
        "step_time_source": windows[0].step_time_source,
        "step_time_s_median": st["median"],
        "step_time_s_mean": st["mean"],
        "step_time_s_p10": st["p10"],
        "step_time_s_p90": st["p90"],
        "step_time_cv": st["cv"],
        "data_wait_s": sum(w.data_wait_s for w in windows),
        "data_source": cfg.data.source,
        **data_info,
        "loss_first": wu.losses[0],
        "loss_last": windows[-1].losses[-1],
        "peak_host_rss_gib": peak_host_rss_gib(),
        **energy_figures,
        **runtime.overhead(),
        **utilisation,
        **parallel.rank_figures(cfg.parallel, model),
    }
    m.update(runtime.memory())

    if "energy_j" in m:
        m["energy_j_per_sample"] = m["energy_j"] / (samples_per_step * b.steps * b.repeats)
    steps_all = list(range(wu.steps + sum(w.steps for w in windows)))
    series = {
        "step": steps_all,
        "phase": ["warmup"] * wu.steps + ["timed"] * (len(steps_all) - wu.steps),
        "loss": wu.losses + [v for w in windows for v in w.losses],
        "step_time_s": wu.step_times_s + step_times,
    }
    return RankResult(ctx.rank, m, series, warnings)
