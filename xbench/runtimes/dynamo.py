"""The compile meter for everything in a run that compiles through TorchDynamo: runtime=compile (the model or
the whole step) and modules compiled in place before the runtime's step is built (parallel=fsdp's
compile_blocks).

Dynamo's bookkeeping is process-wide, so one meter serves every way of compiling; it reads deltas from the
moment it was started (an earlier compiled run in the same process does not leak into this one):
- compile count: `counters["stats"]["unique_graphs"]`, one per graph dynamo captured, recompiles
  included. The loop's warm-up waits for it to stop growing; growth in a timed window is a warning.
- graph breaks: the sum of `counters["graph_break"]` (reason -> count).
- compile time: dynamo's `compilation_time_metrics` for `_compile.compile_inner` (tracing + forward
  compile; AOTAutograd's joint graph included) plus the lazily compiled backward (`bw_compiler`).
- what the compile gave up on (`DYNAMO_FIGURES`), as totals since the start and as `*_timed` since
  the timed windows began (`mark_timed`): recompiles (a frame compiled again after its guards failed:
  `convert_frame.FRAME_COMPILE_COUNTER` beyond each frame's first), recompile-limit hits (dynamo's
  `counters["unimplemented"]`: "recompile_limit reached" on torch 2.9, "Dynamo recompile limit exceeded..."
  on 2.15: past `recompile_limit` the frame runs eagerly from then on, and the compile counter stops
  growing, so warm-up looks steady), frames dynamo failed to compile and ran eagerly (`counters["frames"]`
  total - ok), and inductor's CUDA-graph skips (`counters["inductor"]["cudagraph_skips"]`: a graph that
  replays without CUDA graphs under a mode that promises them). Limit hits and CUDA-graph skips are warned of
  wherever they happened (the windows ran what they left); the others when they happened during the windows.
"""

from __future__ import annotations

from torch import nn


def _dynamo_state() -> dict:
    from torch._dynamo import convert_frame
    from torch._dynamo.utils import compilation_time_metrics, counters

    def seconds(match) -> float:
        return sum(sum(v) for k, v in compilation_time_metrics.items() if match(k))

    frames = counters["frames"]
    return {
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "compile_s": seconds(lambda k: k == "_compile.compile_inner" or k.endswith("bw_compiler")),
        "recompiles": sum(
            max(0, n - 1) for n in getattr(convert_frame, "FRAME_COMPILE_COUNTER", {}).values()
        ),
        "cache_limit_hits": sum(
            n for reason, n in counters["unimplemented"].items() if _is_limit_hit(reason)
        ),
        "eager_frames": frames["total"] - frames["ok"],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


def _is_limit_hit(reason: str) -> bool:
    # torch 2.9: "recompile_limit reached" (also accumulated_recompile_limit); older: cache_size_limit;
    # torch 2.15: the graph-break message whose first line (gb_type) is "Dynamo recompile limit exceeded"
    low = reason.lower()
    return ("limit reached" in low or "cache limit" in low or "cache_size_limit" in low
            or "recompile limit exceeded" in low)


# state key -> figure name; each also as <name>_timed (since mark_timed)
DYNAMO_FIGURES = {"graph_breaks": "dynamo_graph_breaks", "recompiles": "dynamo_recompiles",
                  "cache_limit_hits": "dynamo_cache_limit_hits", "eager_frames": "dynamo_eager_frames",
                  "cudagraph_skips": "cudagraph_skips"}


BLOCKS_BACKEND = "inductor"  # what strategies compile blocks in place with (parallel=fsdp's compile_blocks)


def compiled_blocks(model: nn.Module) -> int:
    """Modules of `model` compiled in place (`nn.Module.compile`, as parallel=fsdp's compile_blocks does):
    they compile at their first call, inside the runtime's step, whichever runtime builds it."""
    return sum(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())


class DynamoMeter:
    """Dynamo's compile figures from its start (`backend`, `mode`, `target`: what was compiled, for the
    record)."""

    def __init__(self, backend: str, mode: str | None, target: str):
        self.backend, self.mode, self.target = backend, mode or "default", target
        self._start = _dynamo_state()
        self._timed: dict | None = None

    def _delta(self, since: dict | None = None) -> dict:
        now, start = _dynamo_state(), since or self._start
        return {k: now[k] - start[k] for k in now}

    def mark_timed(self) -> None:
        self._timed = _dynamo_state()

    def compile_count(self) -> int:
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"] - self._start["graphs"]

    def figures(self) -> dict:
        d = self._delta()
        out = {
            "compile_time_s": d["compile_s"],
            "graphs_compiled": d["graphs"],
            "compile_backend": self.backend,
            "compile_mode": self.mode,
            "compile_target": self.target,
        }
        out.update({name: d[key] for key, name in DYNAMO_FIGURES.items()})
        if self._timed is not None:
            t = self._delta(self._timed)
            out.update({f"{name}_timed": t[key] for key, name in DYNAMO_FIGURES.items()})
        return out

    def warnings(self) -> list[str]:
        f, out = self.figures(), []
        if f["dynamo_cache_limit_hits"]:
            out.append(f"torch.compile hit its recompile limit {f['dynamo_cache_limit_hits']} time(s) "
                       "(torch._dynamo.config.cache_size_limit): those frames ran eagerly from then on, "
                       "so the timed windows measured them uncompiled")
        if f["cudagraph_skips"]:
            out.append(f"{f['cudagraph_skips']} graph(s) skipped CUDA graphs (inductor's cudagraph_skips; "
                       f"mode {self.mode}): they replayed as plain kernel launches")
        timed = {
            k: f.get(f"{k}_timed")
            for k in ("dynamo_recompiles", "dynamo_graph_breaks", "dynamo_eager_frames")
        }
        if any(timed.values()):
            out.append(
                "torch.compile was not steady during the timed windows: "
                + ", ".join(
                    f"{v} {k.removeprefix('dynamo_').replace('_', ' ')}" for k, v in timed.items() if v
                )
            )
        return out
