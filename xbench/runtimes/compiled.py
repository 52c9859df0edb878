"""torch.compile (TorchDynamo + a backend, inductor by default) of the model or of the whole step.

Its figures are dynamo's (runtimes/dynamo.py's meter, started in `prepare`): compile count, compile time,
graph breaks, recompiles, recompile-limit hits, frames run eagerly, CUDA-graph skips; what a strategy
compiled in place (parallel=fsdp's compile_blocks) is counted with them (dynamo's counters are process-wide).
"""

from __future__ import annotations

import torch

from xbench.runtimes.base import Runtime
from xbench.runtimes.dynamo import DynamoMeter, compiled_blocks
from xbench.training.step import make_train_step


def dynamo_backends() -> list[str]:
    import torch._dynamo

    return sorted(set(torch._dynamo.list_backends(exclude_tags=())) | {"inductor", "eager", "aot_eager"})


class CompiledRuntime(Runtime):
    name = "compile"

    @classmethod
    def rules(cls, cfg, facts, dev):
        r, out = cfg.runtime, super().rules(cfg, facts, dev)
        if r.backend.startswith("openxla"):
            out.append(f"runtime compile: backend {r.backend!r} runs on XLA devices; use runtime=xla_openxla "
                       "(runtime name xla_compile, backend openxla)")
        elif r.backend not in (backends := dynamo_backends()):
            out.append(f"runtime compile: backend {r.backend!r} is unknown to torch.compile; "
                       f"allowed: {', '.join(backends)}")
        return out

    def _compile(self, fn):
        c = self.cfg
        return torch.compile(fn, backend=c.backend, mode=None if c.mode == "default" else c.mode,
                             fullgraph=c.fullgraph, dynamic=c.dynamic)

    def cuda_graphs(self) -> str | None:
        """CUDA graphs on a GPU: backend cudagraphs, or inductor with mode reduce-overhead or max-autotune
        (their `triton.cudagraphs`), or with it set in inductor's config (TORCHINDUCTOR_CUDAGRAPHS=1).
        Of the whole step, the loss is a graph output ("clone"); of the model, a tensor of its own."""
        c = self.cfg
        if self.device.type != "cuda":
            return None
        if c.backend == "inductor":
            import torch._inductor.config as inductor_config

            on = c.mode in ("reduce-overhead", "max-autotune") or bool(inductor_config.triton.cudagraphs)
        else:
            on = c.backend == "cudagraphs"
        if not on:
            return None
        return "clone" if c.target == "step" else "mark"

    def prepare(self, model, optimizer, task: str, precision, options=None):
        c = self.cfg
        self.dynamo = DynamoMeter(c.backend, c.mode, c.target + ("+blocks" if compiled_blocks(model) else ""))
        if c.target == "step":
            # The whole step: dynamo breaks the graph at backward() and compiles the optimizer step apart.
            return self._compile(make_train_step(model, optimizer, task, precision, options=options))
        return make_train_step(self._compile(model), optimizer, task, precision, options=options)
