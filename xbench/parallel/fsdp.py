"""Fully sharded data parallelism (PyTorch FSDP2, `torch.distributed.fsdp.fully_shard`), one process per
device.

Ranks and the process group come from the torchrun launcher, as for DDP (NCCL on GPUs, gloo on the CPU).
The units are torchtitan's (apply_fsdp): the embeddings, each transformer block, the final norm with the
output head, each sharded on its own (`fully_shard`), then the root, which holds nothing left when all three
exist. A unit's parameters are all-gathered just before its forward and freed after it
(`reshard_after_forward`: gathered again in backward), its gradients reduce-scattered in backward; the head
is never freed after forward (backward starts with it), nor the root (FSDP2's own default for it). A device
keeps 1/N of the parameters, gradients and optimizer state, which become DTensors (their `to_local()` is
the shard). `unit_layout` says which units a model gets and how many all-gathers a step makes.

A model with `init_parameters` (the Llama decoder) is built on the meta device, sharded, and only then
allocated (`to_empty`) and initialised, each rank drawing every full value on the CPU and keeping its shard
(`materialise`): host memory per rank is its shards plus the largest parameter, not the whole fp32 model
(32 GB for 8B, 282 GB for 70B, on every rank), and the weights equal a whole build with the same seed.
Other models are built whole, then sharded. Mixed precision is FSDP's own policy:
parameters all-gathered and computed in `param_dtype` (bf16), gradients reduced in `reduce_dtype` (fp32),
the sharded master copy in the model's dtype (fp32). `shard_size` < world size shards within groups of
that many ranks and replicates across them (HSDP, a 2-D mesh). Options: `parallel.<option>`, typed with
their choices and ranges in xbench/config/parallel.py (FsdpOptions; defaults in conf/parallel/fsdp.yaml).

What the rank records: the options in force (fsdp_*), the mesh, and memory per device by what holds it
(training/memory.py: parameters, gradients and optimizer state read from the local shards at the first step,
activations from autograd's saved tensors in the first forward). With compile_blocks, the compile figures
(compile_time_s, compiles_warmup/_timed, dynamo_*) are the runtime's: its meter counts what these blocks
compile.
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist
from torch import nn

from xbench.config.parallel import FsdpOptions, option_names
from xbench.parallel.ddp import DDP, torchrun_rules
from xbench.parallel.fit import fit_reasons
from xbench.runtimes.dynamo import BLOCKS_BACKEND

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# param_dtype follows precision= by default (conf/parallel/fsdp.yaml: ${precision.name}): its compute dtype
FROM_PRECISION = {"amp_bf16": "bf16", "bf16": "bf16", "fp32": "fp32", "tf32": "fp32", "amp_fp16": "fp16"}
OPTIONS = option_names(FsdpOptions)  # parallel.<option>: types, choices and ranges in config/parallel.py


def options(parallel) -> dict:
    """The FSDP options in force, read from the parallel section (a precision name as param_dtype: its
    compute dtype)."""
    o = {k: getattr(parallel, k) for k in OPTIONS}
    o["param_dtype"] = FROM_PRECISION.get(o["param_dtype"], o["param_dtype"])
    return o


def option_reasons(cfg) -> list[str]:
    """The shard group must divide the ranks (each option's own range: its field's knob)."""
    p = cfg.parallel
    s = p.shard_size
    if s is None or s < 1 or not p.world_size % s:
        return []
    return [f"parallel.shard_size={s!r} does not divide parallel.world_size={p.world_size}: the mesh is "
            "(world_size / shard_size) replicas x shard_size shards; allowed: "
            f"{', '.join(str(d) for d in range(1, p.world_size + 1) if p.world_size % d == 0)} or null"]


def precision_reasons(cfg, o: dict) -> list[str]:
    """FSDP's policy computes in param_dtype: the record's compute dtype (and MFU's peak) must say so."""
    name = cfg.precision.name
    if name == "amp_fp16" or o["param_dtype"] == "fp16":
        return [
            f"parallel={cfg.parallel.name} with precision=amp_fp16 needs a sharded gradient scaler, which "
            "xbench does not run: use precision=amp_bf16 (FSDP's bf16 policy) or fp32"
        ]
    if o["param_dtype"] == "bf16" and name in ("fp32", "tf32"):
        return [f"parallel.param_dtype=bf16 computes in bf16, but precision={name} would record "
                f"{name} (and MFU against its peak): use precision=amp_bf16, or parallel.param_dtype=fp32"]
    return []


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks FSDP shards one by one: the decoder's `layers`, else the first non-empty
    nn.ModuleList (Hugging Face's model.layers, h, ...); none: only the root is sharded."""
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers):
        return list(layers)
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m):
            return list(m)
    return []


def _checkpoint_blocks(model: nn.Module) -> None:
    """Activation checkpointing per block, inside the block's FSDP unit (torch's checkpoint wrapper around the
    block, then fully_shard around that, as torchtitan does): FSDP's hooks (the gather, the cast of the
    block's inputs to param_dtype) then run outside the recomputed region, so backward recomputes exactly
    what forward computed. The decoder's own switch (checkpoint_blocks) would put them inside it: the
    recomputed inputs would not be cast (torch's CheckpointError: fp32 recomputed, bf16 saved)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    layers = getattr(model, "layers", None)
    lists = [layers] if isinstance(layers, nn.ModuleList) and len(layers) else \
        [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)][:1]
    for lst in lists:
        for i, block in enumerate(lst):
            lst[i] = checkpoint_wrapper(block)


def _head_units(model: nn.Module) -> tuple[nn.Module | None, list[nn.Module]]:
    """The decoder's embeddings and its norm + output head (torchtitan's units of their own); none when the
    model lacks them or ties the head to the embeddings (a tied weight must stay in one unit: the root)."""
    emb, norm, out = (getattr(model, k, None) for k in ("tok_embeddings", "norm", "output"))
    if not all(isinstance(m, nn.Module) for m in (emb, norm, out)) or out.weight is emb.weight:
        return None, []
    return emb, [norm, out]


def unit_layout(model: nn.Module, reshard_after_forward: bool) -> dict:
    """The FSDP units wrap gives `model` and the all-gathers they make per step: every unit holding
    parameters is gathered once in forward, and again in backward if it was freed after forward (the blocks
    and the embeddings under reshard_after_forward; the head and the root never)."""
    emb, head = _head_units(model)
    blocks = transformer_blocks(model)
    held = {id(p) for m in [*([emb] if emb else []), *blocks, *head] for p in m.parameters()}
    units = {"embeddings": int(emb is not None), "blocks": len(blocks), "head": int(bool(head)),
             "root": int(any(id(p) not in held for p in model.parameters()))}
    freed = (len(blocks) + units["embeddings"]) if reshard_after_forward else 0
    return {**units, "all_gathers_per_step": sum(units.values()) + freed}


def _reshard_after_evaluation(model: nn.Module, args, output) -> None:
    """After a forward no backward follows (an evaluation, under no_grad): free what FSDP keeps gathered for
    backward (the head, the root), which only backward would free; a checkpoint or the record's figures
    read after it then see the shards (DTensors), and the memory is the step's, not the evaluation's."""
    from torch.distributed.fsdp import FSDPModule

    if not torch.is_grad_enabled():
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.reshard()


def _write_shard(p: nn.Parameter, fill) -> None:
    """One parameter's initial value for this rank: `fill` draws the full value on the CPU in fp32 (exactly
    a whole build's draw), the rank keeps its part of it (a local split: every rank drew the same)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    full = fill(torch.empty(p.shape, dtype=torch.float32)).to(p.dtype)
    if isinstance(p, DTensor):
        p.to_local().copy_(
            distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local()
        )
    else:
        p.copy_(full)


def local_sha256(model) -> str:
    """Fingerprint of this rank's shards (a DTensor's local part): differs between ranks by design."""
    h = hashlib.sha256()
    with torch.no_grad():
        for p in model.parameters():
            t = p.to_local() if hasattr(p, "to_local") else p
            h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class FSDP(DDP):
    """FSDP2 over the torchrun launcher's process group; synchronisation, agreement and gathers are DDP's
    (the same process group), the wrap is FSDP's."""

    name = "fsdp"
    builds_on_meta = True  # for a model with init_parameters (bench/worker.py builds the others whole)

    @classmethod
    def rules(cls, cfg, facts, dev):
        out = torchrun_rules(cfg, facts, dev) + option_reasons(cfg)
        if cfg.runtime.name not in ("eager", "compile"):
            out.append(
                f"parallel={cfg.parallel.name} runs torch.distributed FSDP2 with runtime=eager or compile "
                f"(per-block compile: parallel.compile_blocks=true), not runtime={cfg.runtime.name}"
            )
        if not out:
            o = options(cfg.parallel)
            out += precision_reasons(cfg, o)
            shards = o["shard_size"] if (o["shard_size"] or 0) >= 1 else cfg.parallel.world_size
            out += fit_reasons(cfg, facts, dev, shards, cfg.parallel.name)
        return out

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.opts = options(cfg)
        self.recompute_blocks = _checkpoint_blocks if self.opts["activation_checkpointing"] else None
        self.mesh = None
        self.blocks = 0
        self.layout: dict = {}
        self.meta_built = False

    def mesh_shape(self) -> tuple[int, ...]:
        world = dist.get_world_size()
        shard = self.opts["shard_size"] or world
        return (shard,) if shard == world else (world // shard, shard)

    def wrap(self, model, device):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if not dist.is_initialized():
            raise RuntimeError(
                f"parallel={self.cfg.name} needs a process group; it is started by the torchrun "
                f"launcher (python -m xbench parallel={self.cfg.name}, or under torchrun)"
            )
        o = self.opts
        if self.recompute_blocks:
            self.recompute_blocks(model)
        blocks = transformer_blocks(model)
        if o["compile_blocks"]:
            for b in blocks:
                # In place: parameter names unchanged (checkpoints load either way), and the runtime sees the
                # compiled blocks in the model it is given, so its dynamo meter counts them
                # (runtimes/dynamo.py).
                b.compile(backend=BLOCKS_BACKEND)
        shape = self.mesh_shape()
        names = ("fsdp",) if len(shape) == 1 else ("replicate", "fsdp")
        self.mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
        policy = MixedPrecisionPolicy(
            param_dtype=DTYPES[o["param_dtype"]], reduce_dtype=DTYPES[o["reduce_dtype"]]
        )
        raf = o["reshard_after_forward"]
        self.layout = unit_layout(model, raf)
        emb, head = _head_units(model)
        if emb is not None:
            fully_shard(emb, mesh=self.mesh, mp_policy=policy, reshard_after_forward=raf)
        for b in blocks:
            fully_shard(b, mesh=self.mesh, mp_policy=policy, reshard_after_forward=raf)
        if head:  # backward starts with the head: freeing it after forward would only gather it again
            fully_shard(head, mesh=self.mesh, mp_policy=policy, reshard_after_forward=False)
        # The root's reshard is FSDP2's (kept through backward): reshard_after_forward=True here gathered
        # the root (embeddings, norm, head, before they had units) twice a step.
        fully_shard(model, mesh=self.mesh, mp_policy=policy)
        model.register_forward_hook(_reshard_after_evaluation)
        self.blocks = len(blocks)
        self.activations.watch(model)
        return model

    def materialise(self, model, device) -> None:
        """A model sharded on the meta device: allocate this rank's shards on `device`, then initialise them
        with the model's own init_parameters (the caller seeds it as for a whole build)."""
        model.to_empty(device=device)
        model.init_parameters(write=_write_shard)
        self.meta_built = True

    def wrap_optimizer(self, optimizer):
        self.states.watch(optimizer)
        return optimizer

    def unwrap(self, model):
        return model  # fully_shard changes the module's class in place: there is no wrapper

    def state_dicts(self, module, optimizer) -> tuple[dict, dict]:
        """The full (unsharded) model and optimizer state, gathered from every rank's shards onto rank 0's
        CPU (torch.distributed.checkpoint.state_dict; a collective: every rank calls it, the others get {}):
        one checkpoint file, whatever the number of shards; the optimizer state is keyed by parameter name
        (that module's layout), so it resumes under parallel=fsdp."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(
            module, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def load_state_dicts(self, module, optimizer, model_state: dict, optimizer_state: dict) -> None:
        """Every rank reads the full state and keeps its own shard of it (parameters and optimizer state)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(module, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state,
                       options=StateDictOptions(full_state_dict=True))

    def rank_figures(self, model) -> dict:
        params = list(model.parameters())
        return {
            "params_local_sha256": local_sha256(model),
            "process_group_world_size": dist.get_world_size(),
            "process_group_backend": dist.get_backend(),
            "fsdp_mesh_shape": list(self.mesh.mesh.shape) if self.mesh is not None else None,
            "fsdp_sharded_blocks": self.blocks,
            "fsdp_units": sum(v for k, v in self.layout.items() if k != "all_gathers_per_step"),
            "fsdp_all_gathers_per_step": self.layout.get("all_gathers_per_step"),
            "fsdp_meta_build": self.meta_built,
            "fsdp_params_dtensor": bool(params) and all(type(p).__name__ == "DTensor" for p in params),
            **{f"fsdp_{k}": v for k, v in self.opts.items()},
            **self.states.figures(),
            **self.activations.figures(),
        }
