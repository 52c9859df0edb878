"""torch-xla (lazy tensors through PJRT): the ONLY module in xbench that imports torch_xla.

Timing follows the torch-xla recipe: each step traces its ops into a lazy graph and `torch_xla.sync()`
(inside the step) cuts the graph and launches it asynchronously; `xm.wait_device_ops()` blocks until
the device is idle and is called only at a window's edges (`sync()`). Losses stay device tensors in
the window and are read one by one afterwards (stacking them would trace and compile a new graph).

Figures:
- compile_count: `metrics.metric_data("CompileTime")[0]` (XLA graph compilations; None before the
  first one -> 0), as a delta from this runtime's creation. Expect 2 on a training step: step 0, and
  step 1 when the optimizer state first exists; then 0.
- compile_time_s: the same metric's accumulator (nanoseconds) over the run.
- xla_trace_s_median: host time to trace one step's ops (the step body, before the sync).
- xla_sync_s_median: host time of the sync that cuts the graph and launches it (compilations, which
  happen there, are excluded from the median by the many steps that do not compile).
- xla_execute_s_total: device execution time from the `ExecuteTime` metric.

`runtime=xla_compile`: `torch_xla.compile(step, full_graph=...)` (backend torch_xla) or dynamo's
`openxla` backend on the model (backend openxla); both counted by the same XLA metric.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import threading
import time
import weakref

# PJRT reads PJRT_DEVICE at torch_xla's import: runtimes.xla_module() (the registry's way in) sets it before
# importing this module; imported directly, torch_xla picks its own default (TPU when present, else CPU).
import torch

try:
    import torch_xla
    import torch_xla.backends as xla_backends
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
except ImportError as e:  # compat catches this earlier; this is the message if it is bypassed
    raise ImportError(f"runtime=xla/xla_compile needs torch-xla, which cannot be imported here ({e}); "
                      "install torch-xla matching torch, or use runtime=eager/compile/accelerate") from e

from xbench.data.feed import epoch_cycle
from xbench.precision import XLA_MAT_MUL_PRECISION
from xbench.runtimes import xla_rules
from xbench.runtimes.base import Runtime
from xbench.training.step import make_train_step

perf_counter = time.perf_counter


def init_device() -> torch.device:
    """Create the PJRT client and device (see runtimes.preload_xla for why this can be needed early)."""
    return torch_xla.device()


def _metric(name: str) -> tuple[int, float]:
    """(count, accumulator) of an XLA metric; (0, 0) before it was first recorded."""
    data = met.metric_data(name)
    return (0, 0.0) if data is None else (int(data[0]), float(data[1]))


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def xla_cuda_amp(precision, device, hw: str | None = None, amp=None):
    """amp_fp16 on XLA:CUDA as torch-xla documents it up to 2.8 (its AMP guide, "AMP for XLA:GPU"):
    `torch_xla.amp.autocast(device, dtype=torch.float16)` around the forward pass and
    `torch_xla.amp.GradScaler` scaling the loss (torch's own CUDA scaler does not see XLA tensors). torch-xla
    2.9 removed both with XLA:CUDA (pytorch/xla#9608): compat refuses that pairing before any work, and this
    says so if it is bypassed. Any other precision or device comes back as it is. `hw`/`amp`: the device's
    kind and the torch_xla.amp module (xm.xla_device_hw and the import, unless given)."""
    hw = hw or xm.xla_device_hw(device)
    if precision.name != "amp_fp16" or hw not in ("CUDA", "GPU"):
        return precision
    if amp is None:
        import torch_xla.amp as amp
    if not hasattr(amp, "GradScaler"):
        raise RuntimeError(f"precision amp_fp16 on XLA:{hw} needs torch_xla.amp.GradScaler, which torch-xla "
                           f"{torch_xla.__version__} does not have (removed in 2.9, pytorch/xla#9608): "
                           "install torch-xla 2.8 with its CUDA plugin")
    return dataclasses.replace(precision, autocast_fn=lambda: amp.autocast(device, dtype=torch.float16),
                               scaler=amp.GradScaler())


def set_mat_mul_precision(precision):
    """torch_xla's matmul/conv precision for fp32 operands as `precision.name` needs it
    (XLA_MAT_MUL_PRECISION), set before any graph is traced (it applies when a graph is lowered; torch_xla's
    own default is `default`, one bf16 pass on a TPU even for fp32). -> the policy with the read-back for the
    record (Precision.executed)."""
    want = XLA_MAT_MUL_PRECISION[precision.name]
    if xla_backends.get_mat_mul_precision() != want:
        quiet = logging.getLogger(xla_backends.__name__)
        level = quiet.level
        # "setting it multiple times is not recommended": once per run, on purpose
        quiet.setLevel(logging.ERROR)
        try:
            xla_backends.set_mat_mul_precision(want)
        finally:
            quiet.setLevel(level)
    return dataclasses.replace(precision, read_xla_mat_mul=xla_backends.get_mat_mul_precision)


class XlaRuntime(Runtime):
    name = "xla"
    drives_xla = True

    own_rules = staticmethod(xla_rules.xla)  # askable without this module (runtimes.rules)

    @classmethod
    def rules(cls, cfg, facts, dev):
        return super().rules(cfg, facts, dev) + cls.own_rules(cfg, facts, dev)

    def __init__(self, cfg, device_type: str, local_rank: int = 0):
        super().__init__(cfg, device_type, local_rank)
        self._compile0 = _metric("CompileTime")
        self._exec0 = _metric("ExecuteTime")
        self._trace_s: list[float] = []
        self._sync_s: list[float] = []
        self._wait_devices: list[str] | None = None  # what sync() waits for (known once XLA is up)

    @staticmethod
    def _device(device_type: str, local_rank: int) -> torch.device:
        return torch_xla.device()

    def adapt_precision(self, precision):
        return set_mat_mul_precision(xla_cuda_amp(precision, self.device))

    def _build(self, model, optimizer, task, precision, options=None):
        """The traced step (no sync): what torch_xla.compile or the lazy loop runs."""
        return make_train_step(model, optimizer, task, precision, options=options)

    def prepare(self, model, optimizer, task: str, precision, options=None):
        inner = self._build(model, optimizer, task, precision, options)
        trace, syncs, sync = self._trace_s.append, self._sync_s.append, torch_xla.sync

        def step(inputs, targets):
            t0 = perf_counter()
            loss = inner(inputs, targets)
            t1 = perf_counter()
            sync()  # cut and launch this step's graph (asynchronous)
            trace(t1 - t0)
            syncs(perf_counter() - t1)
            return loss

        return step

    def sync(self) -> None:
        torch_xla.sync()  # pending work traced outside a step (e.g. a data pool cast) runs too
        if self._wait_devices is None:
            self._wait_devices = xm.xla_real_devices([self.device]) if replicas_are_threads() else []
        # A replica thread waits for its own device only: waiting for every device blocked the other
        # replica's launch while this one's all-reduce waited for it (a deadlock, seen on PJRT CPU).
        xm.wait_device_ops(self._wait_devices)

    def cut(self) -> None:
        torch_xla.sync()  # one graph per evaluation batch (compiled once), launched without waiting

    def compile_count(self) -> int:
        return _metric("CompileTime")[0] - self._compile0[0]

    def read_losses(self, losses: list) -> list[float]:
        # One transfer per loss, already materialised by the step's sync: no new graph is traced.
        return [float(x.cpu()) for x in losses]

    def memory(self) -> dict:
        """XLA's allocator figures (TPU, GPU); PJRT's CPU client has none, and the record says so."""
        try:
            info = xm.get_memory_info(self.device)
        except RuntimeError as e:  # XLA:CPU: "UNIMPLEMENTED: GetAllocatorStats is not supported"
            return {
                "device_memory_unavailable": (
                    f"{os.environ.get('PJRT_DEVICE')}: {str(e).splitlines()[0][:160]}"
                )
            }
        out = {"device_memory_used_gib": info["bytes_used"] / 2**30,
               "device_memory_limit_gib": info["bytes_limit"] / 2**30}
        if "peak_bytes_used" in info:
            out["peak_device_used_gib"] = info["peak_bytes_used"] / 2**30
        return out

    def device_feed(self, loader, prepare=None, input_sharding=None) -> DeviceFeed:
        """Real data onto this device through MpDeviceLoader (`input_sharding`: SPMD's split, see
        DeviceFeed)."""
        return DeviceFeed(loader, self.device, prepare, input_sharding)

    def metrics_report(self) -> str:
        """XLA's metrics report (bench.profile=xla): compilations, executions, transfers, per metric."""
        return met.metrics_report()

    def overhead(self) -> dict:
        c, e = _metric("CompileTime"), _metric("ExecuteTime")
        return {
            "compile_time_s": (c[1] - self._compile0[1]) / 1e9,
            "xla_compiles_total": c[0] - self._compile0[0],
            "xla_trace_s_median": _median(self._trace_s),
            "xla_sync_s_median": _median(self._sync_s),
            "xla_execute_s_total": (e[1] - self._exec0[1]) / 1e9,
            "xla_executions": e[0] - self._exec0[0],
            "pjrt_device": os.environ.get("PJRT_DEVICE"),
            # >0: an earlier run in this process (a sweep point) compiled graphs; identical graphs are
            # then served from the in-process cache and this run's compile count/time read low.
            "xla_compiles_before_run": self._compile0[0],
        }


class XlaCompileRuntime(XlaRuntime):
    """XLA with an explicit compile API: torch_xla.compile over the step, or dynamo's openxla backend."""

    name = "xla_compile"
    BACKENDS = xla_rules.BACKENDS
    own_rules = staticmethod(xla_rules.xla_compile)

    def _build(self, model, optimizer, task, precision, options=None):
        c = self.cfg
        if c.backend == "openxla":
            model = torch.compile(model, backend="openxla", fullgraph=c.fullgraph, dynamic=c.dynamic)
            return make_train_step(model, optimizer, task, precision, options=options)
        if c.backend == "torch_xla":
            # torch_xla.compile syncs when the function returns; the outer sync then finds nothing to do.
            return torch_xla.compile(make_train_step(model, optimizer, task, precision, options=options),
                                     full_graph=c.fullgraph, name="xbench_step")
        raise ValueError(
            f"runtime xla_compile: backend {c.backend!r} is unknown; allowed: {', '.join(self.BACKENDS)}"
        )


# ---- data parallelism over XLA devices (called by xbench.parallel.xla_spmd / xla_mp and launch.xla) ----

def enable_spmd() -> int:
    """Switch this process to SPMD (before any XLA tensor exists); returns the devices a mesh can span."""
    import torch_xla.runtime as xr

    xr.use_spmd()
    return xr.global_runtime_device_count()


def data_mesh():
    """A 1-D mesh named `data` over every XLA device (all chips of all hosts on a pod slice)."""
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    n = xr.global_runtime_device_count()
    return xs.Mesh(np.arange(n), (n,), ("data",))


def fsdp_mesh(fsdp: int):
    """A 2-D mesh (data, fsdp) over every XLA device: groups of `fsdp` devices that shard the parameters
    (parallel=xla_fsdp), replicated over the `data` axis; batches split over both axes (BATCH_AXES)."""
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    n = xr.global_runtime_device_count()
    return xs.Mesh(np.arange(n), (n // fsdp, fsdp), ("data", "fsdp"))


BATCH_AXES = {1: "data", 2: ("data", "fsdp")}  # the mesh axes a batch's dim 0 is split over, by mesh rank


def shard_parameters(model, mesh, axis: str = "fsdp") -> int:
    """Annotate each parameter whose dim 0 divides over `axis` as split along it (the rest replicated):
    XLA then keeps 1/n of each on a device and gathers it where the program needs it. -> how many."""
    import torch_xla.distributed.spmd as xs

    size, count = dict(zip(mesh.axis_names, mesh.mesh_shape, strict=True))[axis], 0
    for p in model.parameters():
        if p.dim() >= 1 and p.shape[0] % size == 0:
            xs.mark_sharding(p, mesh, (axis,) + (None,) * (p.dim() - 1))
            count += 1
    return count


class _Resharded(torch.autograd.Function):
    """`t` annotated with a sharding, and its gradient with the same one (torch_xla's MarkShardingFunction,
    with the mesh and spec as strings made once: dynamo cannot trace their formatting, nor mark_sharding)."""

    @staticmethod
    def forward(ctx, t, mesh: str, spec: str):
        ctx.mesh, ctx.spec = mesh, spec
        return torch.ops.xla.aot_mark_sharding(t, mesh, spec)

    @staticmethod
    def backward(ctx, grad):
        return torch.ops.xla.aot_mark_sharding(grad, ctx.mesh, ctx.spec), None, None


def shard_outputs(modules, mesh) -> int:
    """Annotate each module's output (its first tensor, when it returns several) and that output's gradient as
    split along dim 0 (the batch) over the mesh's batch axes, at every forward: FSDPv2's `shard_output`
    (torch_xla.experimental.spmd_fully_sharded_data_parallel). Without it the partitioner may keep a sharded
    weight in place and move the activations instead (an all-gather of the whole global batch before a
    block's output projection, all-to-alls). Traced lazily and by dynamo alike. -> how many modules."""
    import torch_xla.distributed.spmd  # noqa: F401 - registers torch.ops.xla.aot_mark_sharding

    axis = BATCH_AXES[len(mesh.mesh_shape)]
    mesh_str = str(mesh)  # made here, outside any trace: constants for dynamo
    specs = {n: str((axis,) + (None,) * (n - 1)) for n in range(1, 9)}  # by the output's rank

    def hook(module, args, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        if not (isinstance(out, torch.Tensor) and out.dim() in specs and out.device.type == "xla"):
            return None
        out = _Resharded.apply(out, mesh_str, specs[out.dim()])
        return out if isinstance(output, torch.Tensor) else type(output)([out, *output[1:]])

    for m in modules:
        m.register_forward_hook(hook)
    return len(modules)


def shard_batch(t: torch.Tensor, mesh) -> torch.Tensor:
    """Annotate `t` as split along dim 0 over the mesh (the other dims replicated); returns `t`."""
    import torch_xla.distributed.spmd as xs

    xs.mark_sharding(t, mesh, (BATCH_AXES[len(mesh.mesh_shape)],) + (None,) * (t.dim() - 1))
    return t


def batch_sharding(mesh, minibatch: bool = False):
    """An `xs.ShardingSpec` that splits dim 0 of every tensor of a batch over the mesh's `data` axis (the
    other dims replicated), for the data feed: with it MpDeviceLoader sends each device only its shard.
    torch-xla's own spec applies to tensors of its partition spec's rank only (inputs and targets differ:
    the targets would go replicated), so the spec here is made per tensor rank. `minibatch`: the tensors
    fed are this host's rows of the global batch (its addressable devices' shards), not the whole of it."""
    import torch_xla.distributed.spmd as xs

    class BatchSharding(xs.ShardingSpec):
        def xla_spec(self, t):
            if t.dim() == 0:
                return None
            if t.dim() not in self.by_rank:
                self.by_rank[t.dim()] = xs.ShardingSpec(
                    self.mesh, (axis,) + (None,) * (t.dim() - 1), minibatch
                )
            return self.by_rank[t.dim()].xla_spec(t)

        def can_apply(self, t):
            return t.dim() >= 1

    axis = BATCH_AXES[len(mesh.mesh_shape)]
    spec = BatchSharding(mesh, (axis,), minibatch)
    spec.by_rank = {1: xs.ShardingSpec(mesh, (axis,), minibatch)}
    return spec


def _close_parallel_loader(mp_loader) -> None:
    pl = mp_loader._parallel_loader  # the current epoch's (MpDeviceLoader starts one per epoch)
    if pl is not None:
        pl.close()


class DeviceFeed:
    """next_batch() -> (inputs, targets) on the XLA device through torch-xla's MpDeviceLoader: a host
    thread reads the loader and another transfers batches to the device ahead of the step, so the step
    does not wait for the copy. With `input_sharding` (SPMD) each batch is transferred already split
    over the mesh: each device receives only its shard (no replicated copy resharded afterwards).
    Epochs cycle as on the plain feed (same batches, same order); `prepare` adjusts the inputs on the
    device (dtype, memory format). The loader's threads are closed when the feed is collected."""

    prefetch = True

    def __init__(self, loader, device, prepare=None, input_sharding=None):
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        self.mp_loader = MpDeviceLoader(loader, device, input_sharding=input_sharding)
        self.feed = "spmd_sharded" if input_sharding is not None else "mp_device_loader"
        self.prepare = prepare
        self.loader = loader
        # the loader's threads start when the loop first asks (the rank is still being built)
        self._next = None
        weakref.finalize(self, _close_parallel_loader, self.mp_loader)

    def __call__(self):
        if self._next is None:
            self._next = epoch_cycle(self.loader, self.mp_loader)
        inputs, targets = self._next()
        return (self.prepare(inputs) if self.prepare else inputs), targets


def sharding_spec(t: torch.Tensor) -> str:
    """XLA's sharding annotation of a tensor ('' when replicated / unannotated): evidence for the record."""
    return torch_xla._XLAC._get_xla_sharding_spec(t)


def device_nbytes(t: torch.Tensor) -> int:
    """Bytes one device holds of `t`: under SPMD its shard (the first device's index ranges, read from the
    runtime without a transfer), else the whole tensor."""
    if not sharding_spec(t):
        return t.numel() * t.element_size()
    [[(_, index), *_]] = torch_xla._XLAC._get_local_shard_replica_and_indices([t])
    n = 1
    for sl, dim in zip(index, t.shape, strict=True):
        n *= len(range(*sl.indices(dim)))
    return n * t.element_size()


def device_state_memory(model, optimizer=None) -> dict:
    """Parameters, gradients (where they exist) and optimizer state one XLA device holds, in GiB."""
    params = list(model.parameters())
    read = {"params": sum(device_nbytes(p) for p in params)}
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        read["grads"] = sum(device_nbytes(g) for g in grads)
    if optimizer is not None:
        opt = getattr(optimizer, "optimizer", optimizer)
        read["optimizer"] = sum(device_nbytes(v) for st in opt.state.values() for v in st.values()
                                if isinstance(v, torch.Tensor) and v.numel() > 1)
    out = {f"memory_{k}_gib": v / 2**30 for k, v in read.items()}
    out["memory_states_gib"] = sum(read.values()) / 2**30
    return out


def optimizer_step(optimizer) -> None:
    """All-reduce (mean) the gradients over the replicas, then step: the multi-process recipe's step."""
    xm.optimizer_step(optimizer)


def replica() -> tuple[int, int, int]:
    """(global ordinal, world size, local ordinal) of this process in a torch_xla.launch run."""
    import torch_xla.runtime as xr

    return xr.global_ordinal(), xr.world_size(), xr.local_ordinal()


def process() -> tuple[int, int]:
    """(index of this host's process, processes in all): > 1 on a multi-host pod slice."""
    import torch_xla.runtime as xr

    return xr.process_index(), xr.process_count()


def replicas_are_threads() -> bool:
    """True when several torch_xla.launch replicas are threads of this process (TPU v2/v3, PJRT CPU)."""
    import torch_xla.runtime as xr

    return xr.world_size() > 1 and xr.addressable_device_count() > 1


def replicas_are_threads_on_cpu() -> bool:
    """True when several replicas are threads of this process on PJRT CPU (CPU_NUM_DEVICES > 1)."""
    import torch_xla.runtime as xr

    return xr.device_type() == "CPU" and replicas_are_threads()


_LAUNCH_LOCK = threading.Lock()


def serialise_graph_launches() -> None:
    """Make replica threads on PJRT CPU launch their graphs one at a time (idempotent; call before any XLA
    work).

    XLA:CPU matches the two halves of an all-reduce by the HLO module's id (the op has no channel id),
    so every replica must run the one executable. Two threads that sync the same graph at the same
    time each compile their own (different ids: the all-reduce waits for a partner that is in another
    rendezvous, and XLA aborts the process after 10 s, seen here); with launches serialised, the second
    finds the first one's executable in torch_xla's cache. Only the launch is locked (the step marker
    compiles and enqueues; execution is asynchronous), so the replicas still run their steps together.
    `_xla_step_marker` is what `torch_xla.sync` and torch_xla's own syncs (rendezvous, broadcast,
    torch_xla.compile) call."""
    C = torch_xla._XLAC
    with _STATE_LOCK:
        if getattr(C._xla_step_marker, "xbench_serialised", False):
            return
        marker = C._xla_step_marker

        def serialised(*args, **kwargs):
            with _LAUNCH_LOCK:
                return marker(*args, **kwargs)

        serialised.xbench_serialised = True
        C._xla_step_marker = serialised


class _ThreadExchange:
    """All-gather of bytes between replicas that are threads of this process: a barrier, no device work."""

    def __init__(self, world: int):
        self.barrier = threading.Barrier(world)
        self.slots: list = [None] * world

    def gather(self, ordinal: int, payload: bytes, timeout_s: float) -> list[bytes]:
        self.slots[ordinal] = payload
        self.barrier.wait(timeout_s)
        out = list(self.slots)
        self.barrier.wait(timeout_s)  # nobody writes the next payload before every replica has read this one
        return out


_STATE_LOCK = threading.Lock()
_EXCHANGE: list[_ThreadExchange] = []
# a replica that never arrives (hung) breaks the others' gather instead of hanging them
GATHER_TIMEOUT_S = 1800.0


def _exchange(world: int) -> _ThreadExchange:
    with _STATE_LOCK:
        if not _EXCHANGE:
            _EXCHANGE.append(_ThreadExchange(world))
        return _EXCHANGE[0]


def _all_replicas_here() -> bool:
    import torch_xla.runtime as xr

    return xr.addressable_device_count() == xr.world_size()


def gather_bytes(tag: str, payload: bytes) -> list[bytes]:
    """Every replica's payload (index = global ordinal). Replicas that are all threads of this process
    exchange it in memory; otherwise out of graph through xm.rendezvous. (xm.rendezvous traces an
    all-gather whose graph differs per ordinal, which XLA:CPU cannot match across threads, see
    serialise_graph_launches.)"""
    import torch_xla.runtime as xr

    if xr.world_size() == 1:  # nothing to exchange (and no collective to compile)
        return [payload]
    if _all_replicas_here():
        return _exchange(xr.world_size()).gather(xr.global_ordinal(), payload, GATHER_TIMEOUT_S)
    return list(xm.rendezvous(tag, payload))


def abandon_exchange() -> None:
    """A replica that failed: the others' in-memory gathers raise BrokenBarrierError at once."""
    if _EXCHANGE:
        _EXCHANGE[0].barrier.abort()


def all_replicas_agree(ok: bool) -> bool:
    """True when every replica says True (out of graph)."""
    return all(b == b"1" for b in gather_bytes("xbench_agree", b"1" if ok else b"0"))


def broadcast_parameters(model) -> None:
    """Replica 0's parameters and buffers on every replica (xm.broadcast_master_param): a guard, since
    replicas that are threads of one process share the one global RNG (bench/worker.py seeds and builds
    under a lock, so each builds bench.seed's weights)."""
    import torch_xla.runtime as xr

    if xr.world_size() > 1:
        xm.broadcast_master_param(model)


def launch_processes(fn, args: tuple, single_process: bool, start_method: str = "spawn") -> None:
    """torch_xla.launch: one process per local chip (TPU v4+), or one process whose threads are the
    replicas (TPU v2/v3, PJRT CPU); one replica in this process when `single_process`."""
    torch_xla.launch(fn, args=args, debug_single_process=single_process, start_method=start_method)


def tpu_worker_id() -> int:
    """This host's index in a TPU slice (0 on a single-host VM), from the TPU environment / metadata."""
    from torch_xla._internal import tpu

    return tpu.worker_id()
