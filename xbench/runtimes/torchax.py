"""torchax: the torch model run as JAX code, the whole train step (forward, backward, optimizer) one
`jax.jit`.

torchax (google/torchax) executes torch ops as JAX ops on torchax tensors. xbench builds the same model, data
and precision policy as for every runtime, then hands the model's parameters and buffers to JAX (functional
state, kept here between steps) and jits one step at the JAX level:

    (loss, buffers), grads = jax.value_and_grad(torch forward + loss under torchax)(weights, buffers, x, y)
    updates, opt_state = optax transformation (xbench's optimizer, same semantics: `optax_of`)
    weights = optax.apply_updates(weights, updates)

with torchax's PRNG key threaded through the step (dropout), the weights, buffers and optimizer state donated
(updated in place, as torch's step does), and every argument's sharding pinned on a 1-D mesh (`data`) so the
step compiles once: one device (parallel=single) or several (parallel=jax_dp: batch split over the mesh,
parameters replicated; XLA's partitioner adds the gradient all-reduce). JAX runs where it finds its backend:
the CPU here, NVIDIA GPUs with JAX's CUDA plugin, TPUs with jax[tpu].

The loop hands the step host tensors (the torch side of this runtime is the CPU); the step puts them on the
mesh itself, so the host-to-device copy is inside the step's time, as the other runtimes' H2D copies are in
theirs. Figures (`overhead`): JAX's own compile events (jax.monitoring; process-wide, as deltas from this
runtime's start): `jax_compiles` (XLA backend compilations: the loop's compile count, 0 after warm-up),
`jax_traces` (functions traced to a jaxpr: a jit cache miss traces again), `compile_time_s` (trace +
lowering + backend compile); the JAX platform and devices. (The jitted step's `_cache_size()` is not a compile
count: with 2 devices its C++ dispatch cache takes a second entry at the third call, with no trace and no
compilation.) Memory: `Device.memory_stats()` of the mesh's devices; on the CPU it is None, and the record
says so.

Limits, refused by `rules` before any work: amp_fp16 (torchax has no gradient scaler), tf32 (a CUDA setting
of torch's matmuls), gradient accumulation, train_to_target (the trained weights stay in JAX; the
evaluation and checkpoints read the torch model), channels_last, bench.profile. torchax's batch norm computes
the running statistics but does not write them back (they stay at their initial values; the training loss,
which uses batch statistics, is unaffected): a warning says so when the model has them.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import fields

import torch
from torch import nn

from xbench.extras import installed
from xbench.precision import Precision
from xbench.runtimes.base import Runtime
from xbench.training.step import StepOptions, loss_for_task

PACKAGES = ("torchax", "jax", "optax")  # import names; pip: torchax jax optax (+ jax[cuda13] / jax[tpu])
PRECISIONS = ("fp32", "bf16", "amp_bf16")
OPTIMIZERS = ("sgd", "adamw", "lars", "lamb")  # every one xbench has (training/optim.py)
STRATEGIES = ("single", "jax_dp")
# torch's device type of the platform -> the JAX platform that drives it
JAX_PLATFORM = {"cpu": "cpu", "cuda": "gpu", "xla": "tpu"}

# JAX's compile events (jax._src.dispatch): tracing to a jaxpr, lowering to StableHLO, XLA's compile
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "backend"}
_totals = {k: [0, 0.0] for k in EVENTS.values()}  # kind -> [count, seconds], since the listener went in
_listening = threading.Lock()
_listener_in = False


def _on_event(event: str, duration_s: float, **_) -> None:
    kind = EVENTS.get(event)
    if kind is not None:
        t = _totals[kind]
        t[0] += 1
        t[1] += duration_s


def _listen() -> None:
    """One process-wide listener on JAX's compile events (registered once; runtimes read deltas)."""
    global _listener_in
    import jax.monitoring

    with _listening:
        if not _listener_in:
            jax.monitoring.register_event_duration_secs_listener(_on_event)
            _listener_in = True


def _snapshot() -> dict:
    return {k: tuple(v) for k, v in _totals.items()}


def forced_host_devices(xla_flags: str | None = None) -> int:
    """JAX CPU devices asked with XLA_FLAGS=--xla_force_host_platform_device_count=N (1 when not asked)."""
    found = re.findall(r"--xla_force_host_platform_device_count=(\d+)",
                       os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags)
    return int(found[-1]) if found else 1


def data_mesh(n: int):
    """A 1-D mesh named `data` over the first `n` JAX devices; a clear error when JAX has fewer."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = jax.devices()
    if len(devices) < n:
        hint = (f"; on the CPU start xbench with XLA_FLAGS=--xla_force_host_platform_device_count={n}"
                if devices[0].platform == "cpu" else "")
        raise RuntimeError(f"a JAX mesh of {n} devices was asked, but JAX sees {len(devices)} "
                           f"({devices[0].platform}){hint}")
    return Mesh(np.array(devices[:n]), ("data",))


class OnMesh(nn.Module):
    """The model and the JAX mesh it trains over (parallel=jax_dp's wrap): the runtime reads both."""

    def __init__(self, module: nn.Module, mesh):
        super().__init__()
        self.module, self.mesh = module, mesh

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class TorchaxPrecision(Precision):
    """The policy with torchax's autocast (its own op table, `torchax.amp`), which torch's autocast state does
    not show: `executed` reads the dtype torchax's environment holds inside the context."""

    def executed(self) -> dict:
        out = super().executed()
        if self.autocast_dtype is not None:
            import torchax

            with self.autocast():
                dtype = torchax.default_env().param.autocast_dtype
            out["autocast_dtype"] = None if dtype is None else str(dtype).removeprefix("torch.")
        return out


def _torchax_precision(precision: Precision) -> TorchaxPrecision:
    import torchax.amp

    p = TorchaxPrecision(**{f.name: getattr(precision, f.name) for f in fields(precision)})
    if p.autocast_dtype is not None:
        p.autocast_fn = lambda: torchax.amp.autocast(None, dtype=p.autocast_dtype)
    return p


def optax_of(optimizer, names: dict[int, str]):
    """xbench's torch optimizer (its param groups: lr after the scaling rule, weight decay per group) as one
    optax transformation with the same update, over a dict of parameters named as `names` (id(param) -> name).

    SGD (torch, dampening 0): g += wd w; b = m b + g; w -= lr (g + m b if nesterov else b): optax's
    add_decayed_weights -> trace -> scale(-lr) (the trace starts at zero, so its first step is g, as torch's).
    AdamW: w -= lr (m_hat / (sqrt(v_hat) + eps) + wd w): optax's scale_by_adam -> add_decayed_weights ->
    scale. LAMB (training/optim.py): scale_by_adam -> add_decayed_weights -> scale_by_trust_ratio (||w|| /
    ||u||, 1 where either is 0; not on a group with `adapt` False) -> scale. LARS: `_lars` (optax.lars divides
    by ||g + wd w||, xbench's MLPerf LARS by ||g|| + wd ||w||)."""
    import optax

    kind = type(optimizer).__name__
    if kind not in ("SGD", "AdamW", "LARS", "LAMB"):
        raise ValueError(f"runtime torchax maps optim.name sgd, adamw, lars and lamb to optax, not {kind}")

    def one(g) -> optax.GradientTransformation:
        wd, lr = g["weight_decay"], g["lr"]
        if kind == "LARS":
            return _lars(lr, g["momentum"], g["nesterov"], wd, g["trust_coefficient"], g["eps"], g["adapt"])
        if kind == "SGD":
            if g.get("dampening", 0) or g.get("maximize"):
                raise ValueError("runtime torchax: SGD with dampening or maximize has no mapping here")
            parts = [optax.add_decayed_weights(wd)] if wd else []
            if g["momentum"]:
                parts.append(optax.trace(decay=g["momentum"], nesterov=g["nesterov"]))
            return optax.chain(*parts, optax.scale(-lr))
        if g.get("amsgrad") or g.get("maximize"):
            raise ValueError("runtime torchax: AdamW with amsgrad or maximize has no mapping here")
        b1, b2 = g["betas"]
        parts = [optax.scale_by_adam(b1=b1, b2=b2, eps=g["eps"])]
        if wd:
            parts.append(optax.add_decayed_weights(wd))
        if kind == "LAMB" and g["adapt"]:
            parts.append(optax.scale_by_trust_ratio())
        return optax.chain(*parts, optax.scale(-lr))

    groups = optimizer.param_groups
    if len(groups) == 1:
        return one(groups[0])
    labels = {names[id(p)]: str(i) for i, g in enumerate(groups) for p in g["params"]}
    return optax.multi_transform({str(i): one(g) for i, g in enumerate(groups)}, labels)


def _lars(lr: float, momentum: float, nesterov: bool, wd: float, trust: float, eps: float, adapt: bool):
    """xbench's LARS (training/optim.LARS, MLPerf's) as an optax transformation: g' = g + wd w; with `adapt`,
    lr_l = lr x trust ||w|| / (||g|| + wd ||w|| + eps) (lr where a norm is 0), else lr; v = m v + lr_l g';
    the update is -(v), or -(lr_l g' + m v) with Nesterov. Its state is v (zeros at first, as torch's
    buffer)."""
    import jax
    import jax.numpy as jnp
    import optax

    def scaled(g, w):
        upd = g + wd * w if wd else g
        if not adapt:
            return upd * lr
        w_norm = jnp.linalg.norm(w.ravel())
        u_norm = jnp.linalg.norm(g.ravel()) + wd * w_norm
        ratio = jnp.where((w_norm > 0) & (u_norm > 0), trust * w_norm / (u_norm + eps), 1.0)
        return upd * (lr * ratio).astype(upd.dtype)

    def init(params):
        return jax.tree.map(jnp.zeros_like, params)

    def update(grads, velocity, params):
        upd = jax.tree.map(scaled, grads, params)
        velocity = jax.tree.map(lambda v, u: momentum * v + u, velocity, upd)
        if nesterov:
            return jax.tree.map(lambda u, v: -(u + momentum * v), upd, velocity), velocity
        return jax.tree.map(lambda v: -v, velocity), velocity

    return optax.GradientTransformation(init, update)


def _host_array(t: torch.Tensor):
    """A host tensor as a numpy array without a copy where numpy has the dtype (bf16 through ml_dtypes: no
    JAX op, so nothing compiles)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


class TorchaxRuntime(Runtime):
    name = "torchax"

    @classmethod
    def rules(cls, cfg, facts, dev):
        """What torchax runs here (its packages, precisions, optimizers, modes, strategies); the base rule is
        not asked: on a TPU platform (device xla) torchax drives the TPU through JAX, without torch-xla."""
        absent = [m for m in PACKAGES if not installed(m)]
        if absent:
            return [
                f"runtime torchax needs {', '.join(absent)}, which {'is' if len(absent) == 1 else 'are'} not "
                "installed here: pip install torchax jax optax (GPUs: jax[cuda13]; TPUs: jax[tpu])"
            ]
        out, p, o = [], cfg.precision.name, cfg.optim
        if p == "amp_fp16":
            out.append(
                "runtime torchax: precision amp_fp16 needs a gradient scaler, and torchax has none "
                "(torch.amp.GradScaler scales torch's backward; torchax's is jax.grad): use amp_bf16 or bf16"
            )
        elif p == "tf32":
            out.append(
                "runtime torchax: precision tf32 is a CUDA setting of torch's matmuls, which JAX does not "
                "read (its matmuls follow jax_default_matmul_precision): use fp32, amp_bf16 or bf16"
            )
        elif p not in PRECISIONS:
            out.append(f"runtime torchax: precision {p!r} is not supported; allowed: {', '.join(PRECISIONS)}")
        if o.name not in OPTIMIZERS:
            out.append(f"runtime torchax: optim.name={o.name} is not mapped to optax here; allowed: "
                       f"{', '.join(OPTIMIZERS)}")
        if o.accumulate_steps != 1:
            out.append(
                f"runtime torchax: optim.accumulate_steps={o.accumulate_steps} (gradient accumulation) is "
                "not in its jitted step: use 1"
            )
        if cfg.bench.mode == "train_to_target":
            out.append(
                "runtime torchax: bench.mode=train_to_target evaluates and checkpoints the torch model, but "
                "torchax trains the weights as JAX arrays and does not write them back: use "
                "bench.mode=throughput"
            )
        if cfg.parallel.name not in STRATEGIES:
            out.append(f"runtime torchax: parallel={cfg.parallel.name} is a torch strategy; torchax runs "
                       f"{' or '.join(STRATEGIES)} (parallel=jax_dp: data parallel over a JAX mesh)")
        if cfg.model.channels_last:
            out.append(
                "runtime torchax: model.channels_last is a torch memory format; XLA chooses its own layouts"
            )
        if cfg.bench.profile:
            out.append(
                f"runtime torchax: bench.profile={cfg.bench.profile} cannot see JAX's execution (torch's "
                "profiler sees the host's dispatch only): use bench.profile=null"
            )
        return out

    def __init__(self, cfg, device_type: str, local_rank: int = 0):
        super().__init__(cfg, "cpu")  # the torch side (model, data) is the host; JAX owns the device
        import jax

        _listen()
        self._start = _snapshot()
        self._timed: dict | None = None
        self.asked = device_type  # the platform's device type: what JAX should be running on
        self.jax_platform = jax.devices()[0].platform
        self.mesh = None
        self.state: list = []  # weights, buffers, optimizer state, PRNG key: the step's donated inputs
        self.has_bn_stats = False

    def adapt_precision(self, precision):
        return _torchax_precision(precision)

    def prepare(self, model, optimizer, task: str, precision, options=None):
        import jax
        import optax
        import torchax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P
        from torchax import interop

        mesh = model.mesh if isinstance(model, OnMesh) else data_mesh(1)
        module = model.module if isinstance(model, OnMesh) else model
        self.mesh = mesh
        env = torchax.default_env()
        smooth = (options or StepOptions()).label_smoothing
        replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

        params = dict(module.named_parameters())
        names = {id(p): n for n, p in params.items()}
        buffers = dict(module.named_buffers())
        self.has_bn_stats = any(n.endswith("running_mean") for n in buffers)
        tx = optax_of(optimizer, names)
        weights = {n: jax.device_put(_host_array(p), replicated) for n, p in params.items()}
        bufs = {n: jax.device_put(_host_array(b), replicated) for n, b in buffers.items()}
        opt_state = jax.device_put(tx.init(weights), replicated)
        key = jax.device_put(jax.random.key(torch.initial_seed() % (1 << 63)), replicated)

        def torch_loss(w, b, x, y):  # torchax tensors, under torchax's environment (interop.jax_view)
            with precision.autocast():
                out = torch.func.functional_call(module, {**w, **b}, (x,))
            return loss_for_task(task, out, y, smooth), b

        jax_loss = interop.jax_view(torch_loss)

        def jax_step(w, b, opt, key, x, y):
            with env.override_property(prng=key):  # dropout draws from the key passed in, not a global
                (loss, b), grads = jax.value_and_grad(jax_loss, has_aux=True)(w, b, x, y)
                key = env.prng_key
            updates, opt = tx.update(grads, opt, w)
            return loss, optax.apply_updates(w, updates), b, opt, key

        state_shardings = jax.tree.map(lambda _: replicated, (weights, bufs, opt_state, key))
        jitted = jax.jit(
            jax_step, donate_argnums=(0, 1, 2),
            in_shardings=(*state_shardings, split, split),
            out_shardings=(replicated, *state_shardings))
        self.state = state = [weights, bufs, opt_state, key]
        put = jax.device_put

        def step(inputs, targets):
            # Host -> mesh inside the step (the batch split over the devices): the copy is the step's time.
            x, y = put(_host_array(inputs), split), put(_host_array(targets), split)
            loss, state[0], state[1], state[2], state[3] = jitted(*state, x, y)
            return loss

        return step

    def keep_loss(self, step):
        """On the CPU the step is finished before the next one starts, as eager's is (each step waits for its
        loss: the host's stamps are step times); on an accelerator the loss stays a device array until the
        window has closed (JAX dispatches asynchronously; the window's edges wait for the device)."""
        if self.jax_platform != "cpu":
            return step

        def step_reading_loss(inputs, targets):
            return float(step(inputs, targets))  # blocks until this step's computation is done

        return step_reading_loss

    def read_losses(self, losses: list) -> list[float]:
        import jax

        if not losses or isinstance(losses[0], float):
            return list(losses)
        return [float(v) for v in jax.device_get(losses)]  # host copies only: no JAX op, nothing compiles

    def sync(self) -> None:
        import jax

        if self.state:
            jax.block_until_ready(self.state)  # the last step's outputs: every queued step has finished

    def compile_count(self) -> int:
        """XLA compilations since this runtime started (JAX's backend-compile events, process-wide)."""
        return _totals["backend"][0] - self._start["backend"][0]

    def mark_timed(self) -> None:
        self._timed = _snapshot()

    def overhead(self) -> dict:
        import jax

        now = _snapshot()
        d = {k: (now[k][0] - self._start[k][0], now[k][1] - self._start[k][1]) for k in now}
        out = {
            "compile_time_s": sum(s for _, s in d.values()),
            "jax_trace_s": d["trace"][1],
            "jax_lower_s": d["lower"][1],
            "jax_backend_compile_s": d["backend"][1],
            "jax_compiles": d["backend"][0],
            "jax_traces": d["trace"][0],
            "jax_platform": self.jax_platform,
            "jax_mesh_devices": None if self.mesh is None else int(self.mesh.devices.size),
            "jax_version": jax.__version__,
            "torchax_version": _version("torchax"),
            "step_time_clock": (
                "host wall clock; each step waits for its loss (jax.block_until_ready)"
                if self.jax_platform == "cpu"
                else "host dispatch per step; the window's wall time between jax.block_until_ready"
            ),
        }
        if self._timed is not None:
            out["jax_compiles_timed"] = now["backend"][0] - self._timed["backend"][0]
            out["jax_traces_timed"] = now["trace"][0] - self._timed["trace"][0]
        return out

    def warnings(self) -> list[str]:
        out = []
        want = JAX_PLATFORM.get(self.asked, self.asked)
        if want != self.jax_platform:
            out.append(
                f"the platform is {self.asked}, but JAX ran on {self.jax_platform} (install JAX's plugin "
                "for the device: jax[cuda13] for NVIDIA GPUs, jax[tpu] for TPUs)"
            )
        # bench/meters/breakdown.py profiles with torch.profiler, which sees torch's ops only: under
        # torchax none computes
        out.append(
            "host_s_per_step/device_s_per_step (bench.breakdown_steps) are torch.profiler's, which does not "
            "see JAX's execution: they are not torchax's host/device split"
        )
        if self.has_bn_stats:
            out.append("torchax's batch norm does not write its running statistics back (they stay at their "
                       "initial values): the training loss is unaffected, an evaluation would not be")
        return out

    def memory(self) -> dict:
        """The mesh's devices' allocator figures (the largest over them); the CPU's Device.memory_stats() is
        None."""
        devices = [] if self.mesh is None else list(self.mesh.devices.flat)
        stats = [d.memory_stats() for d in devices]
        if not stats or any(s is None for s in stats):
            return {"device_memory_unavailable": f"jax {self.jax_platform}: Device.memory_stats() is None"}
        out = {"device_memory_used_gib": max(s.get("bytes_in_use", 0) for s in stats) / 2**30}
        if all("bytes_limit" in s for s in stats):
            out["device_memory_limit_gib"] = min(s["bytes_limit"] for s in stats) / 2**30
        if all("peak_bytes_in_use" in s for s in stats):
            out["peak_device_used_gib"] = max(s["peak_bytes_in_use"] for s in stats) / 2**30
        return out


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
