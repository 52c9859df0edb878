"""parallel: how the work is spread over devices and processes (conf/parallel/*.yaml; the names are
xbench.parallel's registry).

A strategy's own options are a typed class here (DdpOptions, FsdpOptions, XlaFsdpOptions), each field with
its range or choices; ParallelConfig has them all, so every one is spelled `parallel.<option>` on the command
line (`parallel=fsdp parallel.reshard_after_forward=false`) and a misspelled one fails at compose time.
STRATEGY_OPTIONS says which strategy reads which class: compat refuses an option changed under another
strategy (nothing would read it, and the record would say it was used). The other cross-field rules (world
size against nodes, a shard size that divides the world) are compat's and the strategies' `rules`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from omegaconf import MISSING

from xbench.config.knobs import knob

BACKENDS = ("auto", "gloo", "nccl")
# FSDP's param_dtype: a dtype, or a precision name standing for its compute dtype (conf/parallel/fsdp.yaml
# sets ${precision.name}; xbench/parallel/fsdp.py FROM_PRECISION)
PARAM_DTYPES = ("bf16", "fp32", "fp16", "amp_bf16", "amp_fp16", "tf32")


@dataclass
class DdpOptions:
    """DistributedDataParallel's own options (torch's defaults), recorded per rank as ddp_*."""

    bucket_cap_mb: float = knob(25.0, gt=0, le=1e6)  # gradients all-reduced in buckets of this many MiB
    gradient_as_bucket_view: bool = False  # .grad are views into the buckets: no copy, one gradient copy less
    static_graph: bool = False  # the same parameters are used every step: DDP skips its per-step bookkeeping
    broadcast_buffers: bool = True  # rank 0's buffers (BatchNorm statistics) sent to every rank each forward
    find_unused_parameters: bool = False  # walk the graph each step for parameters that got no gradient


@dataclass
class FsdpOptions:
    """PyTorch FSDP2's options (xbench/parallel/fsdp.py), recorded per rank as fsdp_*."""

    # free each block's all-gathered parameters after its forward (gathered again in backward); false:
    # keep them
    reshard_after_forward: bool = True
    # the dtype parameters are gathered and computed in (a precision name: its compute dtype)
    param_dtype: str = knob("bf16", choices=PARAM_DTYPES)
    reduce_dtype: str = knob("fp32", choices=("fp32", "bf16"))  # the dtype gradients are reduce-scattered in
    activation_checkpointing: bool = False  # recompute each block's activations in backward
    compile_blocks: bool = False  # torch.compile each transformer block (before sharding)
    # null: shard over every rank; k (dividing world_size): shard within groups of k, replicate across (HSDP)
    shard_size: int | None = knob(None, ge=1, le=1000000)


@dataclass
class XlaFsdpOptions:
    """torch-xla SPMD FSDP's options (xbench/parallel/xla_fsdp.py)."""

    # devices sharing one copy of the parameters (null: all); must divide world_size
    fsdp_size: int | None = knob(None, ge=1, le=1000000)


@dataclass
class StrategyConfig:
    """What every strategy has: which one, over how many processes or devices, and how they meet."""

    # single | ddp | dataparallel | xla_spmd | xla_mp | accelerate | fsdp | xla_fsdp | jax_dp
    name: str = MISSING
    world_size: int = knob(1, ge=1, le=1000000)  # processes (ddp, xla_mp) or devices (dataparallel, xla_spmd)
    backend: str = knob("auto", choices=BACKENDS)  # auto: nccl on CUDA, gloo on the CPU
    nnodes: int = knob(1, ge=1, le=100000)
    node_rank: int = knob(0, ge=0, le=100000)
    rdzv_endpoint: str | None = None  # host:port for multi-node torchrun
    # collective timeout: a dead or hung rank ends the job within this
    timeout_s: float = knob(120.0, gt=0, le=86400)


@dataclass
class ParallelConfig(XlaFsdpOptions, FsdpOptions, DdpOptions, StrategyConfig):
    """The parallel section: StrategyConfig's fields, then each strategy's options (all
    `parallel.<option>`)."""


# strategy -> the option class it reads (the others' options must keep their defaults under it)
STRATEGY_OPTIONS = {"ddp": DdpOptions, "fsdp": FsdpOptions, "xla_fsdp": XlaFsdpOptions}


def option_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# The ParallelConfig keys that are DistributedDataParallel's keywords (read by parallel=ddp only).
DDP_OPTIONS = option_names(DdpOptions)
