"""HF Accelerate's multi-process data parallelism, ranks started by the torchrun launcher.

The launcher (launch/torchrun.py) starts the ranks and the gloo/NCCL process group, as for DDP;
runtime=accelerate then builds `Accelerator(cpu=...)`, whose state joins that process group, and its
`prepare` wraps the model in DistributedDataParallel. So the model is not wrapped here (it would be
wrapped twice). Synchronisation and the per-rank figures are DDP's: a barrier at window edges, and a
parameter hash that proves the replicas stayed identical.

On a CPU, a plain `Accelerator()` under torchrun trains unsynchronised copies (GOTCHAS): runtime
accelerate asks for `cpu=True` there, and the record's `accelerate_num_processes` and the equal hashes
show that the ranks really were one job.
"""

from __future__ import annotations

import torch.distributed as dist

from xbench.parallel.ddp import DDP


class AccelerateDDP(DDP):
    name = "accelerate"

    @classmethod
    def rules(cls, cfg, facts, dev):
        out = super().rules(cfg, facts, dev)
        if cfg.runtime.name != "accelerate":
            out.append(
                f"parallel=accelerate runs Accelerate's prepare/backward in every rank, which is "
                f"runtime=accelerate (asked: runtime={cfg.runtime.name}); for plain DDP use parallel=ddp"
            )
        return out

    def wrap(self, model, device):
        if not dist.is_initialized():
            raise RuntimeError(
                "parallel=accelerate needs a process group; it is started by the torchrun launcher "
                "(python -m xbench parallel=accelerate, or under torchrun)"
            )
        return model  # Accelerator.prepare (runtime=accelerate) wraps it in DDP
