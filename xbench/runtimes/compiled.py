"""torch.compile (TorchDynamo + a backend, inductor by default) of the model or of the whole step.

Counting and timing come from dynamo's own process-wide bookkeeping, read as deltas from the moment
`prepare` ran (so an earlier compiled run in the same process does not leak into this one):
- compile_count: `counters["stats"]["unique_graphs"]`, one per graph dynamo captured, recompiles
  included. The loop's warm-up waits for it to stop growing; growth in a timed window is a warning.
- graph breaks: the sum of `counters["graph_break"]` (reason -> count).
- compile time: dynamo's `compilation_time_metrics` for `_compile.compile_inner` (tracing + forward
  compile; AOTAutograd's joint graph included) plus the lazily compiled backward (`bw_compiler`).
"""

from __future__ import annotations

import torch

from xbench.runtimes.base import Runtime
from xbench.training.step import make_train_step

TARGETS = ("model", "step")
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _dynamo_state() -> dict:
    from torch._dynamo.utils import compilation_time_metrics, counters

    def seconds(match) -> float:
        return sum(sum(v) for k, v in compilation_time_metrics.items() if match(k))

    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "compile_s": seconds(lambda k: k == "_compile.compile_inner" or k.endswith("bw_compiler")),
    }


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
        if r.mode not in MODES:
            out.append(f"runtime compile: mode {r.mode!r} is unknown; allowed: {', '.join(m for m in MODES if m)}")
        if r.target not in TARGETS:
            out.append(f"runtime compile: target {r.target!r} is unknown; allowed: {', '.join(TARGETS)}")
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
        self._start = _dynamo_state()
        if self.cfg.target == "step":
            # The whole step: dynamo breaks the graph at backward() and compiles the optimizer step apart.
            return self._compile(make_train_step(model, optimizer, task, precision, options=options))
        return make_train_step(self._compile(model), optimizer, task, precision, options=options)

    def _delta(self) -> dict:
        now = _dynamo_state()
        return {k: now[k] - self._start[k] for k in now}

    def compile_count(self) -> int | None:
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"] - self._start["graphs"]

    def overhead(self) -> dict:
        d = self._delta()
        return {"compile_time_s": d["compile_s"], "graph_breaks": d["graph_breaks"],
                "graphs_compiled": d["graphs"], "compile_backend": self.cfg.backend,
                "compile_mode": self.cfg.mode or "default", "compile_target": self.cfg.target}
