"""Memory per device by what holds it: parameters, gradients, optimizer state (read from the tensors, local
shards under FSDP2) and activations (autograd's saved tensors), on any device, the CPU included.

The strategies install these at the build (parallel/ddp.py, fsdp.py) and put `figures()` in the rank's
figures: the memory_*_gib the report compares between DDP and FSDP.
"""

from __future__ import annotations

GIB = 2**30


def local_nbytes(t) -> int:
    """Bytes this device holds of `t`: a DTensor's (FSDP2) local shard, else the tensor itself."""
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def _tensors_nbytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        total += local_nbytes(t)
    return total


class StateMemory:
    """Parameters, gradients and optimizer state this device holds, read from the tensors themselves (local
    shards under FSDP2: what sharding saves is measured, not computed from a formula).

    Gradients are read just before the first optimizer step (they exist then, whatever zero_grad does after),
    the optimizer state just after it (created lazily by the first step); parameters at either moment.
    `watch(optimizer)` installs the two hooks; `figures()` says what was read (GiB per device)."""

    def __init__(self):
        self.read: dict[str, int] = {}
        self._handles = []

    def watch(self, optimizer) -> StateMemory:
        opt = getattr(optimizer, "optimizer", optimizer)
        params = [p for g in opt.param_groups for p in g["params"]]

        def before(o, args, kwargs):
            if "grads" not in self.read:
                self.read["params"] = _tensors_nbytes(params)
                self.read["grads"] = _tensors_nbytes(p.grad for p in params)

        def after(o, args, kwargs):
            if "optimizer" not in self.read:
                self.read["optimizer"] = _tensors_nbytes(v for s in opt.state.values() for v in s.values()
                                                         if hasattr(v, "numel") and v.numel() > 1)
                for h in self._handles:
                    h.remove()

        self._handles = [opt.register_step_pre_hook(before), opt.register_step_post_hook(after)]
        return self

    def figures(self) -> dict:
        if "optimizer" not in self.read:
            return {}
        out = {f"memory_{k}_gib": v / GIB for k, v in self.read.items()}
        out["memory_states_gib"] = sum(self.read.values()) / GIB
        return out


class SavedActivations:
    """Bytes autograd keeps for backward during the first training forward of `module` (saved-tensor hooks):
    the activation memory of one step on any device, CPU included. Parameters saved for backward (a
    Linear keeps its weight; FSDP2's all-gathered parameters are Parameters too) are not activations and
    are left out; a weight cast by autocast is a new tensor autograd keeps, and is counted. One storage
    saved twice counts once. Under activation checkpointing only each block's inputs are kept: that is
    what it saves."""

    def __init__(self):
        self.nbytes: int | None = None
        self._storages: set = set()
        self._ctx = None
        self._handles = []

    def _pack(self, t):
        if isinstance(t, self._parameter):
            return t
        try:
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            size = key[1]
        except (RuntimeError, NotImplementedError, AttributeError):  # XLA/DTensor: no storage to ask
            key, size = id(t), local_nbytes(t)
        if key not in self._storages:
            self._storages.add(key)
            self.nbytes = (self.nbytes or 0) + size
        return t

    def watch(self, module) -> SavedActivations:
        import torch

        self._parameter = torch.nn.Parameter

        def pre(mod, args):
            if self.nbytes is None and mod.training and torch.is_grad_enabled():
                self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
                self._ctx.__enter__()

        def post(mod, args, out):
            if self._ctx is not None:
                self._ctx.__exit__(None, None, None)
                self._ctx = None
                self.nbytes = self.nbytes or 0
                self._storages.clear()
                for h in self._handles:
                    h.remove()

        self._handles = [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
        return self

    def figures(self) -> dict:
        if self.nbytes is None:
            return {}
        return {
            "memory_activations_gib": self.nbytes / GIB,
            "memory_activations_source": "saved_tensors_hooks",
        }
