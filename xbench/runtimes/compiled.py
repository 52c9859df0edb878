"""torch.compile (TorchDynamo + a backend, inductor by default) of the model or of the whole step.

Counting and timing come from dynamo's own process-wide bookkeeping, read as deltas from the moment
`prepare` ran (so an earlier compiled run in the same process does not leak into this one):
- compile_count: `counters["stats"]["unique_graphs"]`, one per graph dynamo captured, recompiles
  included. The loop's warm-up waits for it to stop growing; growth in a timed window is a warning.
- graph breaks: the sum of `counters["graph_break"]` (reason -> count).
- compile time: dynamo's `compilation_time_metrics` for `_compile.compile_inner` (tracing + forward
  compile; AOTAutograd's joint graph included) plus the lazily compiled backward (`bw_compiler`).
- what the compile gave up on (`DYNAMO_FIGURES`), as totals since `prepare` and as `*_timed` since
  the timed windows began (`mark_timed`): recompiles (a frame compiled again after its guards failed:
  `convert_frame.FRAME_COMPILE_COUNTER` beyond each frame's first), recompile-limit hits (dynamo's
  `counters["unimplemented"]` "recompile_limit reached": past `cache_size_limit` the frame runs eagerly
  from then on, and the compile counter stops growing, so warm-up looks steady), frames dynamo failed
  to compile and ran eagerly (`counters["frames"]` total - ok), and inductor's CUDA-graph skips
  (`counters["inductor"]["cudagraph_skips"]`: a graph that replays without CUDA graphs under a mode
  that promises them). Limit hits and CUDA-graph skips are warned of wherever they happened (the windows
  ran what they left); the others when they happened during the windows.
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

    from torch._dynamo import convert_frame

    frames = counters["frames"]
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "compile_s": seconds(lambda k: k == "_compile.compile_inner" or k.endswith("bw_compiler")),
        "recompiles": sum(max(0, n - 1) for n in getattr(convert_frame, "FRAME_COMPILE_COUNTER", {}).values()),
        "cache_limit_hits": sum(n for reason, n in counters["unimplemented"].items() if _is_limit_hit(reason)),
        "eager_frames": frames["total"] - frames["ok"],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


def _is_limit_hit(reason: str) -> bool:
    # torch 2.9: "recompile_limit reached" (also accumulated_recompile_limit); older: cache_size_limit
    return "limit reached" in reason or "cache limit" in reason.lower() or "cache_size_limit" in reason


# state key -> figure name; each also as <name>_timed (since mark_timed)
DYNAMO_FIGURES = {"graph_breaks": "dynamo_graph_breaks", "recompiles": "dynamo_recompiles",
                  "cache_limit_hits": "dynamo_cache_limit_hits", "eager_frames": "dynamo_eager_frames",
                  "cudagraph_skips": "cudagraph_skips"}


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

    def _delta(self, since: dict | None = None) -> dict:
        now, start = _dynamo_state(), since or self._start
        return {k: now[k] - start[k] for k in now}

    def mark_timed(self) -> None:
        self._timed = _dynamo_state()

    def compile_count(self) -> int | None:
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"] - self._start["graphs"]

    def overhead(self) -> dict:
        d = self._delta()
        out = {"compile_time_s": d["compile_s"], "graphs_compiled": d["graphs"], "compile_backend": self.cfg.backend,
               "compile_mode": self.cfg.mode or "default", "compile_target": self.cfg.target}
        out.update({name: d[key] for key, name in DYNAMO_FIGURES.items()})
        if getattr(self, "_timed", None) is not None:
            t = self._delta(self._timed)
            out.update({f"{name}_timed": t[key] for key, name in DYNAMO_FIGURES.items()})
        return out

    def warnings(self) -> list[str]:
        f, out = self.overhead(), []
        if f["dynamo_cache_limit_hits"]:
            out.append(f"torch.compile hit its recompile limit {f['dynamo_cache_limit_hits']} time(s) "
                       "(torch._dynamo.config.cache_size_limit): those frames ran eagerly from then on, "
                       "so the timed windows measured them uncompiled")
        if f["cudagraph_skips"]:
            out.append(f"{f['cudagraph_skips']} graph(s) skipped CUDA graphs (inductor's cudagraph_skips; "
                       f"mode {self.cfg.mode}): they replayed as plain kernel launches")
        timed = {k: f.get(f"{k}_timed") for k in ("dynamo_recompiles", "dynamo_graph_breaks", "dynamo_eager_frames")}
        if any(timed.values()):
            out.append("torch.compile was not steady during the timed windows: "
                       + ", ".join(f"{v} {k.removeprefix('dynamo_').replace('_', ' ')}" for k, v in timed.items() if v))
        return out
