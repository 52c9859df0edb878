"""Where a steady step's time goes, for every runtime: host (Python, dispatch, autograd bookkeeping,
tracing, launches) against device (the kernels). Measured after the timed windows, never inside them, by
a meter (`BreakdownMeter`, on bench/meters/profiler.py) whose window is the profiled steps: the profiler
starts at its window's start and is stopped on every path out of it (an error, a divergence, a stop).

- XLA: the runtime's own clocks: host = tracing the step + the sync that cuts and launches its graph
  (medians), device = PJRT's `ExecuteTime` per execution.
- CUDA (eager, compile, accelerate): `torch.profiler` over a few steps (`cuda_split`): device = the
  time the GPU was busy with kernels, memcpys and memsets (the union of their intervals, so kernels
  overlapping on several streams count once; the busiest GPU where the rank drives several), never
  the ops that launched them nor the `record_function` ranges drawn on the GPU timeline
  (gpu_user_annotation), which span the same kernels again; host = the CPU time of the ops, less the
  time blocked waiting for the device (`SYNC_WAITS`), which is `sync_wait_s_per_step` on its own.
- CPU (eager, compile, accelerate): the device is the host, so the split is by op (`cpu_compute_us`):
  device = the time inside compute kernels, the self time of every op with a kernel of its own whether or
  not it calls others (aten::addmm's own time is its GEMM, its aten::copy_ child the bias: self times
  partition the time, so nested kernels count once), and the self time of an inductor graph's body (its
  fused C++ loops record no ops); host = the steady step (from the timed windows, unprofiled) minus that:
  Python, dispatch, autograd's bookkeeping, decompositions with no kernel of their own (aten::linear),
  metadata-only ops (views, `as_strided`). The profiler's own per-op cost lands partly in the ops' self
  time, so the host share is if anything understated.

Phases (`phases`): the same profiled steps split into forward, backward and optimizer, by what torch's
own annotations say, without touching the step: backward = autograd's `evaluate_function` events (on
the calling thread for CPU tensors, on autograd's device threads for CUDA), optimizer = the optimizer's
`Optimizer.step#...` and `Optimizer.zero_grad#...` ranges, forward = the step's span up to its last backward
region less the backward and optimizer ranges in it (the model and the loss, their Python too), other =
the rest of the step's span (after the last backward: the loss's detach, Python between the calls),
per `ProfilerStep#N`. A backward region runs from a backward op to the last one with no other top-level
op starting between (autograd's own time between nodes is backward's; a micro-batch's forward splits two
regions under gradient accumulation). On a CPU these are wall times (the device is the host); on CUDA
`*_s_per_step` is the GPU time of the kernels each phase's ops launched (their device_time_total) and
`*_host_s_per_step` the phase's CPU span. Not split where the step is one graph: XLA (forward, backward and
optimizer are fused into the graph one sync runs), or a step whose backward shows no autograd events (a CUDA
graph replay): `phases_unavailable` says which.

Profiled steps: `bench.breakdown_steps`, at most one per 10 timed steps of a window (every rank runs
the same count: the window's count is agreed), at least one; 0 turns this off.
"""

from __future__ import annotations

from xbench.bench.meters.profiler import ProfilerMeter, profiled_window

# Ops that move no data through arithmetic: their self time is dispatch, not compute.
NO_COMPUTE = frozenset(
    {
        "aten::as_strided",
        "aten::view",
        "aten::_unsafe_view",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "detach",
        "aten::detach",
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::t",
        "aten::transpose",
        "aten::expand",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::permute",
        "aten::alias",
        "aten::select",
        "aten::slice",
        "aten::lift_fresh",
        "aten::numpy_T",
        "aten::result_type",
        "aten::is_nonzero",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::to",
        "aten::_to_copy",
        "aten::set_",
        "aten::contiguous",
        "aten::expand_as",
        "aten::flatten",
        "aten::view_as",
        "aten::unbind",
        "aten::split",
        "aten::chunk",
        "aten::narrow",
        "aten::zero_",
        "aten::size",
        "aten::stride",
        "aten::is_same_size",
    }
)


# Dispatch keys under which an op has a kernel of its own on a CPU. An op registered only as a
# CompositeImplicitAutograd decomposition (aten::linear, aten::cross_entropy_loss) has none: its self time is
# dispatch, its work is in the ops it calls.
KERNEL_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "QuantizedCPU",
               "SparseCPU", "SparseCsrCPU", "MkldnnCPU")

# Ranges whose self time is compute kernels that record no ops: an inductor graph's body (its fused C++ loops;
# extern kernels such as aten::mm are ops of their own), and those loops where
# TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1 records them.
KERNEL_RANGES = ("## Call CompiledFxGraph ", "cpp_fused_")


def kernel_ops() -> frozenset[str]:
    """Names (the profiler's: no overload) of the dispatcher's ops with a CPU kernel of their own, less
    NO_COMPUTE; read at each call (~10 ms), so ops registered since (torch.library) count. Out= overloads say
    nothing of the op's own (aten::linear.out has a kernel, the aten::linear a model calls none)."""
    import torch

    names: set[str] = set()
    for key in KERNEL_KEYS:
        for reg in torch._C._dispatch_get_registrations_for_dispatch_key(key):
            name, _, overload = reg.partition(".")
            if overload != "out" and not overload.endswith("_out"):
                names.add(name)
    return frozenset(names - NO_COMPUTE)


def cpu_compute_us(events) -> float:
    """Time inside compute kernels on a CPU, from torch.profiler's FunctionEvents: the self time of every op
    with a kernel of its own, whether or not it has child events (a parent's self time excludes its children,
    so nothing counts twice), and of KERNEL_RANGES. Autograd's nodes, the optimizer's ranges, decompositions,
    metadata ops and Python are the host's."""
    ops = kernel_ops()
    return sum(e.self_cpu_time_total for e in events if e.name in ops or e.name.startswith(KERNEL_RANGES))


# Host calls that block until the device catches up: their time is waiting, not host work. Their whole
# span counts (a `.item()`'s _local_scalar_dense holds its copy and its stream synchronisation).
SYNC_WAITS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                        "aten::_local_scalar_dense"})


def _busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _inside_wait(e) -> bool:
    p = e.cpu_parent
    while p is not None:
        if p.name in SYNC_WAITS:
            return True
        p = p.cpu_parent
    return False


def cuda_split(events, steps: int) -> dict:
    """Host, device and sync-wait time per step from torch.profiler's FunctionEvents (`prof.events()`).

    Device events (device_type CUDA) are kernels, memcpys, memsets and the GPU side of user
    annotations; the annotations are left out (`is_user_annotation`, or a name a CPU-side annotation
    has). CPU events' self times partition each thread's profiled time, so their sum is the host's time;
    the spans of `SYNC_WAITS` (outermost only) are taken out of it and reported apart."""
    from torch.autograd import DeviceType

    cpu = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    annotations = {e.name for e in cpu if getattr(e, "is_user_annotation", False)}
    busy: dict[int, list] = {}
    for e in events:
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False) \
                and e.name not in annotations:
            busy.setdefault(e.device_index, []).append((e.time_range.start, e.time_range.end))
    device_us = max((_busy_us(v) for v in busy.values()), default=0.0)
    host_us = sum(e.self_cpu_time_total for e in cpu)
    wait_us = sum(e.cpu_time_total for e in cpu if e.name in SYNC_WAITS and not _inside_wait(e))
    return {
        "host_s_per_step": max(0.0, host_us - wait_us) / steps / 1e6,
        "device_s_per_step": device_us / steps / 1e6,
        "sync_wait_s_per_step": wait_us / steps / 1e6,
    }


BACKWARD = "autograd::engine::evaluate_function:"
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")
STEP = "ProfilerStep"


def _outermost(e, prefix) -> bool:
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith(prefix):
            return False
        p = p.cpu_parent
    return True


def phases(events, cuda: bool) -> dict:
    """Forward, backward, optimizer and other time per step from torch.profiler's FunctionEvents of steps
    profiled one `ProfilerStep` each (see the module doc); {"phases_unavailable": why} when the events
    cannot be split."""
    steps = [e for e in events if e.name.startswith(STEP) and e.cpu_children]
    if not steps:
        return {"phases_unavailable": "no ProfilerStep spans in the profile"}
    cpu = [
        e for e in events if not e.name.startswith(STEP) and not e.is_async and e.device_type.name == "CPU"
    ]
    bwd = [e for e in cpu if e.name.startswith(BACKWARD) and _outermost(e, BACKWARD)]
    opt = [
        e
        for e in cpu
        if e.name.startswith(OPTIMIZER) and _outermost(e, OPTIMIZER[0]) and _outermost(e, OPTIMIZER[1])
    ]
    if not bwd:
        return {
            "phases_unavailable": "the profiled step shows no autograd backward ops (the step runs as one "
            "graph: a CUDA graph replay or a fully compiled step)"
        }

    def device_us(evs) -> float:
        return sum(getattr(e, "device_time_total", 0.0) for e in evs)

    host = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "other": 0.0}
    dev = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for st in steps:
        a, b = st.time_range.start, st.time_range.end
        s_bwd = sorted((e for e in bwd if a <= e.time_range.start <= b), key=lambda e: e.time_range.start)
        s_opt = [e for e in opt if a <= e.time_range.start <= b]
        marked = {id(e) for e in s_bwd + s_opt}
        others = [e for e in st.cpu_children if id(e) not in marked]
        # Backward regions: runs of backward ops with no other top-level op starting between them (the
        # engine's time between its nodes is backward's; a micro-batch's forward between two backwards splits
        # them).
        regions: list[list[float]] = []
        for e in s_bwd:
            t0, t1 = e.time_range.start, e.time_range.end
            if regions and not any(regions[-1][1] <= o.time_range.start < t0 for o in others):
                regions[-1][1] = max(regions[-1][1], t1)
            else:
                regions.append([t0, t1])
        if not regions:
            continue
        last = regions[-1][0]
        bwd_us = sum(t1 - t0 for t0, t1 in regions)
        opt_us = sum(e.time_range.elapsed_us() for e in s_opt)
        # forward: the step up to its last backward, less the backwards and optimizer ranges before it
        fwd_us = max(0.0, (last - a) - sum(t1 - t0 for t0, t1 in regions[:-1])
                     - sum(e.time_range.elapsed_us() for e in s_opt if e.time_range.start < last))
        for k, v in (("forward", fwd_us), ("backward", bwd_us), ("optimizer", opt_us)):
            host[k] += v
        host["other"] += max(0.0, st.time_range.elapsed_us() - fwd_us - bwd_us - opt_us)
        for k, v in (("forward", [e for e in others if e.time_range.start < last]), ("backward", s_bwd),
                     ("optimizer", s_opt)):
            dev[k] += device_us(v)
    n = len(steps)
    if not cuda:
        return {f"{k}_s_per_step": v / n / 1e6 for k, v in host.items()} | {
            "phases_source": "torch.profiler per ProfilerStep: autograd evaluate_function regions "
            "(backward), Optimizer.step/zero_grad (optimizer), the step up to its last backward less those "
            "(forward); wall"
        }
    return {
        **{f"{k}_s_per_step": v / n / 1e6 for k, v in dev.items()},
        **{f"{k}_host_s_per_step": v / n / 1e6 for k, v in host.items()},
        "phases_source": "torch.profiler per ProfilerStep: GPU time of the kernels each phase's ops launched "
        "(*_s_per_step), the phase's CPU span (*_host_s_per_step)",
    }


def profile_steps(configured: int, window_steps: int) -> int:
    return 0 if configured <= 0 else max(1, min(configured, window_steps // 10))


def xla_split(overhead: dict) -> dict:
    """From the XLA runtime's figures (runtimes/xla.py overhead())."""
    trace, sync = overhead.get("xla_trace_s_median"), overhead.get("xla_sync_s_median")
    execs, total = overhead.get("xla_executions"), overhead.get("xla_execute_s_total")
    if trace is None or not execs:
        return {}
    return {
        "host_s_per_step": trace + (sync or 0.0),
        "device_s_per_step": total / execs,
        "breakdown_source": "xla: trace + sync (host), ExecuteTime per execution (device)",
        "phases_unavailable": "xla: forward, backward and optimizer are one graph (fused), executed as one",
    }


class BreakdownMeter(ProfilerMeter):
    """The breakdown as a meter (bench/meters/profiler.py): its window is the profiled one after the timed
    windows; `close` returns the split. XLA runs no profiled steps: its split is read from the runtime's own
    clocks (`overhead`, the rank's figures) at close."""

    def __init__(self, device_type: str, configured: int, window_steps: int, steady_s: float,
                 overhead: dict | None = None):
        xla = device_type == "xla"
        super().__init__(
            device_type == "cuda",
            0 if xla else profile_steps(configured, window_steps),
            {"breakdown_unavailable": "torch.profiler could not start (another profiler is active?)"},
        )
        self.xla, self.on, self.steady_s, self.overhead = xla, configured > 0, steady_s, overhead or {}

    def close(self) -> dict:
        if not self.on:
            return {}
        return xla_split(self.overhead) if self.xla else super().close()

    def figures_of(self, prof) -> dict:
        """Host and device time per step from the profiled steps (see the module doc)."""
        got, steps, cuda = prof.events(), self.steps, self.cuda
        split_of = phases(got, cuda)
        # One ProfilerStep per step marks the steps for `phases`; the split below leaves those spans out, so
        # the host/device figures are what they were without them.
        events = [e for e in got if not e.name.startswith(STEP)]
        if cuda:
            source = (
                "torch.profiler: GPU busy time of kernels/memcpys, union over streams (device), CPU time of "
                "the ops less sync waits (host)"
            )
            return {
                **cuda_split(events, steps),
                "breakdown_source": source,
                "breakdown_steps": steps,
                **split_of,
            }
        device = cpu_compute_us(events) / steps / 1e6
        host = max(0.0, self.steady_s - device)
        source = (
            "torch.profiler: self time of ops with a kernel of their own (device), steady step minus that "
            "(host)"
        )
        return {"host_s_per_step": host, "device_s_per_step": device, "breakdown_source": source,
                "breakdown_steps": steps, **split_of}


def split(
    hooks, device_type: str, overhead: dict, configured: int, window_steps: int, steady_s: float
) -> dict:
    """The breakdown for the record: XLA from its clocks, the rest profiled over a window of its own after the
    timed ones; {} when off."""
    return profiled_window(hooks, BreakdownMeter(device_type, configured, window_steps, steady_s, overhead))
