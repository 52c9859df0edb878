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

from xbench.bench.step import make_train_step
from xbench.runtimes.base import Runtime

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


class CompiledRuntime(Runtime):
    name = "compile"

    def _compile(self, fn):
        c = self.cfg
        return torch.compile(fn, backend=c.backend, mode=None if c.mode == "default" else c.mode,
                             fullgraph=c.fullgraph, dynamic=c.dynamic)

    def prepare(self, model, optimizer, task: str, precision):
        self._start = _dynamo_state()
        if self.cfg.target == "step":
            # The whole step: dynamo breaks the graph at backward() and compiles the optimizer step apart.
            return self._compile(make_train_step(model, optimizer, task, precision))
        return make_train_step(self._compile(model), optimizer, task, precision)

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
