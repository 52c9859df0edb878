"""parallel: how the work is spread over devices and processes (conf/parallel/*.yaml; the names are
xbench.parallel's registry). The cross-field rules (world size against nodes, an option under the wrong
strategy) are compat's and the strategies' `rules`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from xbench.config.knobs import knob

BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class ParallelConfig:
    name: str = MISSING  # single | ddp | dataparallel | xla_spmd | xla_mp | accelerate | fsdp | xla_fsdp | jax_dp
    world_size: int = knob(1, ge=1, le=1000000)  # processes (ddp, xla_mp) or devices (dataparallel, xla_spmd)
    backend: str = knob("auto", choices=BACKENDS)  # auto: nccl on CUDA, gloo on the CPU
    nnodes: int = knob(1, ge=1, le=100000)
    node_rank: int = knob(0, ge=0, le=100000)
    rdzv_endpoint: str | None = None  # host:port for multi-node torchrun
    timeout_s: float = knob(120.0, gt=0, le=86400)  # collective timeout: a dead or hung rank ends the job within this
    # DistributedDataParallel's own options (parallel=ddp only; torch's defaults), recorded per rank as ddp_*
    bucket_cap_mb: float = knob(25.0, gt=0, le=1e6)  # gradients all-reduced in buckets of this many MiB
    gradient_as_bucket_view: bool = False  # .grad are views into the buckets: no copy, one gradient copy less
    static_graph: bool = False  # the same parameters are used every step: DDP skips its per-step bookkeeping
    broadcast_buffers: bool = True  # rank 0's buffers (BatchNorm statistics) sent to every rank each forward
    find_unused_parameters: bool = False  # walk the graph each step for parameters that got no gradient
    # a strategy's own knobs (fsdp, xla_fsdp: conf/parallel/*.yaml)
    options: dict[str, Any] = field(default_factory=dict)


# The ParallelConfig keys that are DistributedDataParallel's keywords (read by parallel=ddp only).
DDP_OPTIONS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "broadcast_buffers", "find_unused_parameters")
