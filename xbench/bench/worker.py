"""One rank's build, in order: threads -> seed -> strategy -> runtime/device -> precision -> model
-> parallel wrap -> optimizer -> step -> data -> the loop's hooks.

Nothing here knows which runtime, precision, strategy or mode it serves: those are policies resolved
once through their registries, and the rank's facts (rank, world, devices, threads) arrive in its
RankContext. What a loop then does with the hooks is the rank wing's other modules: bench/windows.py
(throughput's timed windows) and bench/training.py (epochs to a target).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from xbench import faults, models, parallel, runtimes
from xbench.bench import loop
from xbench.bench.figures import samples_per_step
from xbench.bench.flops import flops_per_sample
from xbench.bench.meters.contention import ContentionMeter
from xbench.bench.meters.energy import EnergyMeter
from xbench.bench.meters.memory import MemoryMeter
from xbench.bench.meters.utilisation import UtilisationMeter
from xbench.config import BenchConfig
from xbench.data import feed, loaders
from xbench.data.spec import InputSpec
from xbench.data.synthetic import synthetic_pool
from xbench.plan import Plan
from xbench.precision import resolve
from xbench.rank import Diverged, RankContext, StopFlag
from xbench.training.optim import make_optimizer
from xbench.training.schedule import base_lr
from xbench.training.step import StepOptions


def set_threads(intra: int | None, interop: int | None) -> dict:
    """Apply the rank's thread counts and return the values actually in force."""
    if intra is not None:
        torch.set_num_threads(intra)
    if interop is not None:
        # Only settable before any inter-op work; the value in force is what gets recorded.
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(interop)
    return {"threads_intra": torch.get_num_threads(), "threads_interop": torch.get_num_interop_threads()}


def threads_not_applied(intra: int | None, interop: int | None, in_force: dict) -> list[str]:
    """Warnings for thread counts asked for but not in force (inter-op threads are set once per process)."""
    out = []
    for key, asked in (("threads_intra", intra), ("threads_interop", interop)):
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
            if fault.kind == "signal" and fault.phase is None:
                faults.send(fault)
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
    strategy: parallel.base.Strategy
    spec: InputSpec
    entry: object  # models.ModelEntry
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    count_flops: Callable[[], dict]
    params_count: int

    @functools.cached_property
    def flops(self) -> dict:
        """Per sample: forward, train (model FLOPs), train_hardware (with recomputation, if any). Counted on
        the meta device when the record first asks (after the timed windows): 0.2-0.5 s of start-up before."""
        return self.count_flops()


# xla_mp's replicas on TPU v2/v3 and PJRT CPU are threads of one process: each seeded the one global RNG,
# then they drew their initial weights from it in turn, so replica 0's weights varied from run to run.
_BUILD_LOCK = threading.Lock()


def _build_model(plan: Plan, on_meta: bool) -> torch.nn.Module:
    """The model, seeded: on the meta device (nothing allocated) when the strategy shards before it allocates
    (FSDP) and the model can initialise itself afterwards (`init_parameters`), else whole on the CPU."""
    m = plan.model
    if on_meta:
        with torch.device("meta"):
            model = models.build(m.name, plan.spec, dict(m.options))
        if callable(getattr(model, "init_parameters", None)):
            return model
    torch.manual_seed(plan.bench.seed)
    return models.build(m.name, plan.spec, dict(m.options))


def build_workload(plan: Plan, ctx: RankContext) -> Workload:
    """strategy -> runtime/device -> precision -> model (on the device, in the parameter dtype and memory
    format, wrapped by the strategy; FSDP: built on the meta device, sharded, then allocated and initialised)
    -> optimizer. FLOPs are measured on the meta device when the record asks for them (Workload.flops)."""
    spec, m, optim = plan.spec, plan.model, plan.optim
    strategy = parallel.create(plan.parallel, ctx)
    runtime = runtimes.create(plan.runtime, plan.device_type, ctx.local_rank)
    precision = runtime.adapt_precision(resolve(plan.precision, runtime.device.type))
    entry = models.get(m.name)
    options = dict(m.options)

    def flops() -> dict:
        return flops_per_sample(m.name, spec, options, recompute_blocks=strategy.recompute_blocks)
    with _BUILD_LOCK:  # seed -> weights in one go: replicas that are threads of one process share the RNG
        model = _build_model(plan, strategy.builds_on_meta)
    on_meta = any(p.is_meta for p in model.parameters())
    params_count = sum(p.numel() for p in model.parameters())
    memory_format = torch.channels_last if m.channels_last else torch.contiguous_format
    model = model.to(**({} if on_meta else {"device": runtime.device}), dtype=precision.param_dtype,
                     memory_format=memory_format)
    model = strategy.wrap(model, runtime.device)
    if on_meta:  # sharded on the meta device: now allocate this rank's part, seeded as the whole build was
        with _BUILD_LOCK:
            torch.manual_seed(plan.bench.seed)
            strategy.materialise(model, runtime.device)
    model.train()
    # The linear scaling rule (optim.lr_reference_batch) reads the global batch of one optimizer step.
    global_batch = plan.data.batch_size * ctx.devices * optim.accumulate_steps
    traced = plan.runtime.name == "compile" and plan.runtime.target == "step"  # dynamo skips fused kernels
    optimizer = strategy.wrap_optimizer(
        make_optimizer(optim, model, base_lr(optim, global_batch), traced=traced)
    )
    return Workload(runtime, precision, strategy, spec, entry, model, optimizer, flops, params_count)


def make_step(w: Workload, plan: Plan, rank: int = 0):
    """The runtime's step over the workload (after any checkpoint was loaded), with the plan's fault if one is
    asked, returning the loss the way the runtime keeps it (Runtime.keep_loss); its options: plan.optim's."""
    step = w.runtime.prepare(w.model, w.optimizer, w.entry.task, w.precision, StepOptions.of(plan.optim))
    return w.runtime.keep_loss(_inject_fault(step, plan.fault, rank) if plan.fault.kind else step)


def setup_rank(bench: BenchConfig, ctx: RankContext) -> tuple[dict, str, list[str]]:
    """The first thing both loops do on a rank (prepare_rank here, bench/training.TargetTraining): threads ->
    seed. (threads in force, ATen's CPU kernels in force, warnings for what is not as asked.)"""
    threads = set_threads(ctx.threads, bench.interop_threads)
    torch.manual_seed(bench.seed)
    warnings: list[str] = threads_not_applied(ctx.threads, bench.interop_threads, threads)
    cpu_capability = torch.backends.cpu.get_cpu_capability()
    asked = bench.cpu_capability
    if asked and asked.upper() != cpu_capability:
        warnings.append(
            f"bench.cpu_capability={asked}, but ATen runs {cpu_capability} kernels (this CPU lacks "
            f"{asked}, or the process was not started with ATEN_CPU_CAPABILITY)"
        )
    return threads, cpu_capability, warnings


@dataclass
class PreparedRank:
    """Everything built before the first step: what the loop runs (`hooks`) and what the record needs."""

    work: Workload
    hooks: loop.Hooks
    threads: dict  # thread counts in force
    warnings: list[str]
    data_info: dict
    batch_size: int  # per device
    cpu_capability: str = ""  # ATen's CPU kernels in force (DEFAULT, AVX2, AVX512, ...)
    accumulate: int = 1  # micro-batches of `batch_size` per device in one step (gradient accumulation)
    # this run's ranks on this host (RankContext.local_world_size), each with `threads`
    ranks_on_host: int = 1

    @property
    def devices_per_rank(self) -> int:
        return self.work.strategy.devices_per_rank

    @property
    def samples_per_step(self) -> int:
        """Samples one step of this rank trains: its batch per device over every device it drives (and over
        the step's micro-batches when gradients are accumulated)."""
        return samples_per_step(self.batch_size, self.devices_per_rank, self.accumulate)


def prepare_rank(plan: Plan, ctx: RankContext, batch_size: int | None = None, on_step=None,
                 stop: StopFlag | None = None) -> PreparedRank:
    """threads -> seed -> workload -> step -> data -> the loop's hooks, at `batch_size` per device
    (default `data.batch_size`). Also used as is by scripts/bench_overhead.py, so the harness it
    measures is exactly this one."""
    data, bench = plan.data, plan.bench
    threads, cpu_capability, warnings = setup_rank(bench, ctx)
    batch_size = batch_size or data.batch_size

    work = build_workload(plan, ctx)
    runtime, precision, spec, entry, strategy = (
        work.runtime,
        work.precision,
        work.spec,
        work.entry,
        work.strategy,
    )
    step = make_step(work, plan, ctx.rank)
    accumulate = plan.optim.accumulate_steps
    per_rank = samples_per_step(batch_size, strategy.devices_per_rank, accumulate)

    def prepare_inputs(x):
        return input_format(x, precision, plan.model.channels_last)

    data_info = {}
    if data.source == "synthetic":
        # Each rank gets its own data (seed + rank), as a data-parallel sampler would give it.
        pool = synthetic_pool(spec, per_rank, entry.task, data.synthetic_batches, runtime.device,
                              bench.seed + ctx.rank)
        pool = [strategy.place_batch(prepare_inputs(x), y) for x, y in pool]
        cursor = [0]
        n_pool = len(pool)

        def next_batch():
            i = cursor[0]
            cursor[0] = i + 1
            return pool[i % n_pool]
    else:
        # Real files: a per-rank shard through a DataLoader; the loop measures the wait (data_wait_s).
        splits = loaders.build(data, entry.task)
        info = splits.info or {}
        data_info = {
            name: info[k]
            for k, name in (
                ("train", "data_train_samples"),
                ("eval", "data_eval_samples"),
                ("vocab", "data_vocab_size"),
            )
            if k in info
        }
        reader, readers, read_batch = strategy.feed_share(per_rank)  # multi-host SPMD: this host's share only
        train_loader = feed.make_loader(splits.train, data, reader, readers, bench.seed,
                                        splits.collate, batch_size=read_batch, device=runtime.device)
        if runtime.drives_xla:  # MpDeviceLoader: background transfer; SPMD: each device gets only its shard
            fetch = runtime.device_feed(train_loader, prepare_inputs, strategy.feed_sharding())
        else:
            fetch = feed.device_feed(train_loader, runtime.device, prepare_inputs)  # CUDA: one batch ahead
        data_info.update(
            data_pinned=bool(train_loader.pin_memory),
            data_prefetch=getattr(fetch, "prefetch", False),
            data_feed=getattr(fetch, "feed", None),
        )

        def next_batch():
            return strategy.place_batch(*fetch())

    hooks = loop.Hooks(
        step=step,
        next_batch=next_batch,
        sync=strategy.sync(runtime.sync),
        compile_count=runtime.compile_count,
        read_losses=runtime.read_losses,
        make_timer=loop.CudaEventTimer if runtime.device.type == "cuda" else None,
        on_step=on_step,
        stop=stop or StopFlag(),
        agree=strategy.agree(runtime.device),
        watch=loop.LossWatch(bench.diverge_loss_factor),  # loop.py rule 9: finite blow-ups
    )
    # Memory peaks start at the first timed window (bench/meters/memory.py), not here: warm-up's
    # cuDNN autotuning workspaces and compile-time buffers are not the steady step's.
    return PreparedRank(work, hooks, threads, warnings, data_info, batch_size, cpu_capability, accumulate,
                        ctx.local_world_size)


def rank_gpus(p: PreparedRank) -> list[int]:
    """The GPUs this rank drives: all of them under DataParallel, else its own; none off CUDA."""
    dev = p.work.runtime.device
    return device_gpus(dev.type, dev.index or 0, p.devices_per_rank)


def device_gpus(device_type: str, index: int, devices_per_rank: int) -> list[int]:
    """The CUDA ordinals a rank on device `index` driving `devices_per_rank` devices uses (all of them
    under DataParallel, else its own; none off CUDA): the one rule, before the build and after it."""
    if device_type != "cuda":
        return []
    return list(range(devices_per_rank)) if devices_per_rank > 1 else [index]


def rank_meters(
    bench: BenchConfig, p: PreparedRank, dev: str | None = None, before: dict | None = None
) -> list:
    """The meters beside the timed windows (bench/meters/), in the order they are entered: memory after the
    others have started (their own buffers are not the step's), energy last, so its readings sit closest
    to each window's edges. `before`: the contention probe's figures."""
    dev = dev or p.work.runtime.device.type
    gpus = rank_gpus(p)
    return [ContentionMeter(p.threads.get("threads_intra") or 1, dev, gpus, before,
                            ranks_on_host=p.ranks_on_host),
            UtilisationMeter(p.work.runtime.device.type, bench.util_interval_s, gpus),
            MemoryMeter(gpus),
            EnergyMeter(p.work.runtime.device.type, gpus)]
