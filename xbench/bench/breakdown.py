"""Where a steady step's time goes, for every runtime: host (Python, dispatch, autograd bookkeeping,
tracing, launches) against device (the kernels). Measured after the timed windows, never inside them.

- XLA: the runtime's own clocks: host = tracing the step + the sync that cuts and launches its graph
  (medians), device = PJRT's `ExecuteTime` per execution.
- CUDA (eager, compile, accelerate): `torch.profiler` over a few steps: device = the kernels' time
  per step, host = the CPU time of the ops that issued them.
- CPU (eager, compile, accelerate): the device is the host, so the split is by op: device = the self
  time of the ops that compute (leaf ops, metadata-only ops such as views and `as_strided` excluded),
  host = the steady step (from the timed windows, unprofiled) minus that. The profiler's own per-op
  cost lands partly in the ops' self time, so the host share is if anything understated.

Profiled steps: `bench.breakdown_steps`, at most one per 10 timed steps of a window (every rank runs
the same count: the window's count is agreed), at least one; 0 turns this off.
"""

from __future__ import annotations

import contextlib
import os

# Leaf ops that move no data through arithmetic: their self time is dispatch, not compute.
NO_COMPUTE = frozenset({
    "aten::as_strided", "aten::view", "aten::_unsafe_view", "aten::resolve_conj", "aten::resolve_neg", "detach",
    "aten::detach", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::t", "aten::transpose",
    "aten::expand", "aten::reshape", "aten::_reshape_alias", "aten::unsqueeze", "aten::squeeze", "aten::permute",
    "aten::alias", "aten::select", "aten::slice", "aten::lift_fresh", "aten::numpy_T", "aten::result_type",
    "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::to", "aten::_to_copy", "aten::set_",
    "aten::contiguous", "aten::expand_as", "aten::flatten", "aten::view_as", "aten::unbind", "aten::split",
    "aten::chunk", "aten::narrow", "aten::zero_", "aten::size", "aten::stride", "aten::is_same_size"})


def profile_steps(configured: int, window_steps: int) -> int:
    return 0 if configured <= 0 else max(1, min(configured, window_steps // 10))


def xla_split(overhead: dict) -> dict:
    """From the XLA runtime's figures (runtimes/xla.py overhead())."""
    trace, sync = overhead.get("xla_trace_s_median"), overhead.get("xla_sync_s_median")
    execs, total = overhead.get("xla_executions"), overhead.get("xla_execute_s_total")
    if trace is None or not execs:
        return {}
    return {"host_s_per_step": trace + (sync or 0.0), "device_s_per_step": total / execs,
            "breakdown_source": "xla: trace + sync (host), ExecuteTime per execution (device)"}


def profiled_split(hooks, device_type: str, steps: int, steady_s: float) -> dict:
    """Host and device time per step from torch.profiler over `steps` steps (see the module doc)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # a CUDA build on a CPU host logs a GPU probe failure
    from torch.profiler import ProfilerActivity, profile

    cuda = device_type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    hooks.sync()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            hooks.step(*hooks.next_batch())
        hooks.sync()
    events = prof.events()
    if cuda:
        device = sum(getattr(e, "self_device_time_total", 0.0) for e in events) / steps / 1e6
        host = sum(e.self_cpu_time_total for e in events) / steps / 1e6
        source = "torch.profiler: CUDA kernels (device), CPU time of the ops (host)"
    else:
        device = sum(e.self_cpu_time_total for e in events
                     if not e.cpu_children and e.name not in NO_COMPUTE) / steps / 1e6
        host = max(0.0, steady_s - device)
        source = "torch.profiler: self time of computing leaf ops (device), steady step minus that (host)"
    return {"host_s_per_step": host, "device_s_per_step": device, "breakdown_source": source,
            "breakdown_steps": steps}


def split(hooks, device_type: str, overhead: dict, configured: int, window_steps: int, steady_s: float) -> dict:
    """The breakdown for the record: XLA from its clocks, the rest profiled; {} when off."""
    if configured <= 0:
        return {}
    if device_type == "xla":
        return xla_split(overhead)
    steps = profile_steps(configured, window_steps)
    with contextlib.suppress(RuntimeError):  # a profiler already active (bench.profile): leave it alone
        return profiled_split(hooks, device_type, steps, steady_s)
    return {"breakdown_unavailable": "torch.profiler could not start (another profiler is active?)"}
