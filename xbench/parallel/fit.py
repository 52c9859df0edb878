"""Whether a model's training state fits one device, before any work: parameters, gradients and optimizer
state (fp32 master weights) from a build on the meta device, over the shards a strategy splits them into
(1 for DDP's whole replica; the ranks, or the shard group, for fsdp and xla_fsdp), against the device's
memory. Activations come on top: a model refused here cannot run at any batch size.

Device memory is what a run needs once built; building it needs host memory too. parallel=fsdp builds the
decoder on the meta device and each rank allocates only its shards (parallel/fsdp.py): its host needs one fp32
parameter at a time (the largest: 4.2 GB of 70B's 128,256 x 8,192 embedding), so a 70B that passes here can
be built. A whole build (ddp, xla_fsdp, fsdp on a model without init_parameters) holds the whole fp32 model in
host memory per process first (282 GB for 70B): not checked here (host memory is not a host fact); the
report's fit table shows both (report/llm.py).
"""

from __future__ import annotations

from xbench.metrics.llm_sizes import STATE_BYTES, shards_needed, state_gib_per_device

# the strategies that shard parameters (others keep a whole replica per device)
SHARDED = ("fsdp", "xla_fsdp")


def params_of(cfg) -> int | None:
    """The model's parameter count, from a build on the meta device (nothing allocated); None if it cannot
    be built (compat's model rules say why)."""
    from xbench import models
    from xbench.data.spec import InputSpec
    from xbench.models.zoo import abstract_run

    try:
        model = abstract_run(lambda d: models.build(cfg.model.name, InputSpec.from_data(cfg.data),
                                                    dict(cfg.model.options)))
    except Exception:  # noqa: BLE001 - the model's own rules report it
        return None
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def device_memory_gib(cfg, facts, dev: str) -> float | None:
    """Memory of one device: the platform's figure, else the smallest visible GPU's; None off CUDA."""
    if cfg.platform.memory_gib:
        return cfg.platform.memory_gib
    if dev == "cuda" and facts.cuda_memory_gib:
        return min(facts.cuda_memory_gib)
    return None


def fit_reasons(cfg, facts, dev: str, shards: int, strategy: str) -> list[str]:
    """A model whose parameters, gradients and optimizer state alone exceed one device's memory, even
    sharded over `shards` ranks (activations come on top)."""
    mem = device_memory_gib(cfg, facts, dev)
    if not mem:
        return []
    n = params_of(cfg)
    if n is None:
        return []
    need = state_gib_per_device(n, cfg.optim.name, shards)
    if need <= mem:
        return []
    least = shards_needed(n, cfg.optim.name, mem)
    how = ("parallel=fsdp (or xla_fsdp on XLA devices) over at least" if strategy not in SHARDED
           else "at least")
    return [
        f"model {cfg.model.name} ({n / 1e9:.2f}B parameters) needs {need:.1f} GiB per device for its fp32 "
        f"parameters, gradients and {cfg.optim.name} state under parallel={strategy} over {shards} "
        f"shard(s) ({STATE_BYTES.get(cfg.optim.name, 16)} bytes per parameter / {shards}), more than "
        f"the {mem:.0f} GiB of one device: it cannot fit even before activations; use {how} {least} "
        "shards (parallel.world_size, parallel.shard_size / fsdp_size) or a smaller model"
    ]
