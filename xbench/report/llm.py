"""LLM pretraining's tables: DDP against the sharded strategies at the same global batch (tokens/s, step
time and memory per device by what holds it), and which Llama sizes fit one device's memory under which
strategy; and a plot of the memory per device by holder beside tokens/s per device. tables.py and plots.py
register them (this module imports neither: no cycle).

The memory figures are the ranks' own (xbench/training/memory.py: read from the tensors, local shards
under FSDP2); the fit table is arithmetic on the published shapes (xbench/metrics/llm_sizes.py, the
same rule parallel/fit.py refuses a run with).
"""

from __future__ import annotations

from xbench.analysis.rows import NoData, Rows, groups
from xbench.analysis.workload import CONFIGURATION
from xbench.metrics.llm_sizes import (
    GIB,
    LLAMA3_VOCAB,
    PUBLISHED,
    SIZES,
    shards_needed,
    size_params,
    state_gib_per_device,
)
from xbench.report.rows import (
    Context,
    Table,
    bar_keys,
    bar_label,
    constant_caption,
    frame,
    key_cols,
    reasons,
    status_text,
    varying_keys,
)

# Each sharded strategy against the one that keeps a whole replica per device on the same devices.
REPLICATED = {"fsdp": "ddp", "xla_fsdp": "xla_spmd"}
STRATEGIES = ("ddp", "fsdp", "xla_spmd", "xla_fsdp")
MEMORY = (("memory_params_gib", "parameters"), ("memory_grads_gib", "gradients"),
          ("memory_optimizer_gib", "optimizer state"), ("memory_states_gib", "params + grads + optimizer"),
          ("memory_activations_gib", "activations"))
MIB = 1024  # the figures are GiB; a tiny decoder's are fractions of a MiB, an 8B's thousands: MiB reads both
OPTIMIZER = "adamw"  # the fit table's optimizer (the llama recipes' and MLPerf's)


def llm_rows(rows: Rows) -> Rows:
    """Token runs (tokens/s derived) and memory-per-device runs, under the strategies compared; failed runs
    of those strategies on a decoder stay, with their reason."""
    return Rows(r for r in rows if r.get("parallel") in STRATEGIES and (
        r.get("tokens_per_s") is not None or r.get("memory_states_gib") is not None
        or (r.get("status") != "ok" and str(r.get("model") or "").startswith("llama"))))


def _mib(sub: Rows, col: str) -> float | None:
    v = sub.median(col)
    return None if v is None else v * MIB


def _percent(ok: Rows, col: str) -> float | None:
    v = ok.median(col)
    return None if v is None else v * 100


# What a sharded strategy's row sets against its replicated twin's (REPLICATED): (column, label).
VERSUS_REPLICATED = (("tokens_per_s", "tokens/s"), ("memory_states_gib", "params + grads + optimizer"),
                     ("memory_activations_gib", "activations"))


def _strategy_row(keys: dict, sub: Rows, show: list[str], base: Rows | None) -> dict:
    """One configuration's row: tokens/s, step time, MFU/HFU and memory per device by holder, and against
    `base` (its replicated twin's ok runs, when it is a sharded strategy that has one) their ratios."""
    ok = sub.ok()
    row = {**key_cols(keys, show), "runs": len(sub), "status": status_text(sub.col("status")),
           "tokens/s [tokens/s]": ok.median("tokens_per_s"),
           "tokens/s per device [tokens/s]": ok.median("tokens_per_s_per_device"),
           "global batch [tokens]": ok.median("global_batch_tokens"),
           "step time median [s]": ok.median("step_time_s_median"),
           "MFU per token [%]": _percent(ok, "mfu_per_token"),
           # activation checkpointing's recomputed forward counted too (the column goes where none was)
           "HFU [%]": _percent(ok, "hfu")}
    row.update({f"{label} per device [MiB]": _mib(ok, c) for c, label in MEMORY})
    if base:
        name = REPLICATED[keys["parallel"]]
        for c, label in VERSUS_REPLICATED:
            a, b = ok.median(c), base.median(c)
            row[f"{label} / {name}'s [x]"] = a / b if a is not None and b else None
    row["reason"] = reasons(sub)
    return row


def _twin_key(keys: dict, same: list[str]) -> tuple:
    """by_key's key of the configuration's replicated twin: the same keys, REPLICATED's strategy."""
    return tuple(map(keys.get, same)), REPLICATED.get(keys["parallel"])


def strategies_table(rows: Rows, ctx: Context) -> Table:
    llm = llm_rows(rows)
    if not any(r.get("parallel") in REPLICATED for r in llm):
        raise NoData("no token run under parallel=fsdp or xla_fsdp (the DDP-vs-FSDP comparison needs one)")
    show = varying_keys(llm) or ["parallel"]
    if "parallel" not in show:
        show.insert(0, "parallel")
    same = [k for k in CONFIGURATION if k != "parallel"]  # the pair: everything but the strategy
    by_key = {(tuple(map(keys.get, same)), keys["parallel"]): sub.ok() for keys, sub in groups(llm)}
    out = [_strategy_row(keys, sub, show, by_key.get(_twin_key(keys, same))) for keys, sub in groups(llm)]
    return Table("llm_strategies", "DDP against the sharded strategies at the same global batch: tokens/s "
                 "and memory per device (rank 0's figures, median over runs)", frame(out),
                 note=constant_caption(llm) + " Memory per device by what holds it, read from the tensors "
                 "(FSDP2: each rank's local shards; activations: what autograd keeps for backward in one "
                 "training forward). A '/ ddp's' (fsdp) or '/ xla_spmd's' (xla_fsdp) ratio compares "
                 "runs that differ in the strategy only: the same work, devices and global batch.")


def largest_param(size: str, vocab: int = LLAMA3_VOCAB) -> int:
    """The decoder's largest parameter: the embedding (vocab x dim) or a SwiGLU matrix (dim x ffn_dim)."""
    s = SIZES[size]
    return max(vocab * s["dim"], s["dim"] * s["ffn_dim"])


def fit_table(rows: Rows, ctx: Context) -> Table:
    llm = llm_rows(rows)
    machines = sorted({(r["platform"], r["platform_memory_gib"],
                        int(r.get("devices") or r.get("world_size") or 1))
                       for r in llm
                       if r.get("platform_memory_gib") and (r.get("devices") or r.get("world_size"))})
    if not machines:
        raise NoData("no token run on a platform with memory_gib (one device's memory) to fit the Llama "
                     "sizes to")
    out = []
    for platform, mem, n in machines:
        for size in PUBLISHED:
            params = size_params(size)
            whole = state_gib_per_device(params, OPTIMIZER, 1)
            sharded = state_gib_per_device(params, OPTIMIZER, n)
            least = shards_needed(params, OPTIMIZER, mem)
            out.append({
                "platform": platform, "device memory [GiB]": float(mem), "devices": n,
                "model": f"llama {size}",
                "parameters [B]": params / 1e9, "states, whole model [GiB]": whole,
                "ddp": "fits" if whole <= mem else "refused",
                f"states per device over {n} [GiB]": sharded,
                "fsdp / xla_fsdp": "fits" if sharded <= mem else f"refused (needs {least} shards)",
                "host memory to build, whole [GiB per process]": params * 4 / GIB,
                "host memory to build, fsdp [GiB per rank]": largest_param(size) * 4 / GIB,
            })
    return Table("llm_fit", "Which Llama sizes fit one device under DDP and sharded (fsdp, xla_fsdp) over "
                 "the run's devices", frame(out),
                 note="fp32 parameters, gradients and AdamW's two moments: 16 bytes a parameter, whole under "
                 "DDP, 1/devices each when sharded; activations come on top (a 'fits' here is the states "
                 "only). xbench refuses a run that cannot fit before any work (parallel/fit.py, the same "
                 "rule). Building needs host memory: ddp and xla_fsdp build the whole fp32 model in each "
                 "process first (4 bytes a parameter, not checked before the run); fsdp builds the decoder "
                 "on the meta device and each rank allocates only its shards, drawing one fp32 parameter at "
                 "a time on the host (the largest). Parameters from Meta's published shapes with the "
                 "128,256-token vocabulary.")


HOLDERS = (("memory_params_gib", "parameters"), ("memory_grads_gib", "gradients"),
           ("memory_optimizer_gib", "optimizer state"), ("memory_activations_gib", "activations"))


def _memory_facets(title: str, sub: Rows, ctx: Context) -> list:
    """A work's two facets: memory per device by holder (a bar per holder and configuration), and tokens/s
    per device; either left out when no configuration has its figures (xla_spmd records no memory breakdown:
    its tokens/s only)."""
    from xbench.report import layout
    from xbench.report.layout import Bar, Facet

    names = bar_keys(sub, ctx) or ["parallel"]
    configs = groups(sub)
    mem = [Bar(f"{bar_label(keys, names)} / {label}", g.median(c) * MIB, hue=label, runs=len(g))
           for keys, g in configs for c, label in HOLDERS if g.median(c) is not None]
    tps = [Bar(bar_label(keys, names), g.median("tokens_per_s_per_device"), runs=len(g))
           for keys, g in configs if g.median("tokens_per_s_per_device") is not None]
    facets = []
    if mem:
        facets.append(Facet(f"memory per device: {title}", mem[:layout.MAX_BARS],
                            xlabel="memory per device [MiB]"))
    if tps:
        facets.append(Facet(f"tokens/s per device: {title}", tps[:layout.MAX_BARS],
                            xlabel="tokens/s per device [tokens/s] (higher is better)"))
    return facets


def memory_plot(rows: Rows, ctx: Context, works):
    """Per work, memory per device by what holds it (a bar per holder and configuration, coloured by holder)
    and tokens/s per device, DDP beside the sharded strategies. `works` is plots.py's `workloads` (the works
    it draws, the rest on a next page)."""
    from xbench.report import layout  # matplotlib: only when plots are drawn (the tables import this module)
    from xbench.report.layout import hbar_figure

    llm = llm_rows(rows).ok()
    if not any(r.get("parallel") in REPLICATED and r.get("memory_states_gib") is not None for r in llm):
        raise NoData("no token run under parallel=fsdp or xla_fsdp with memory per device (memory_*_gib)")
    found, left = works(llm, facets_per_work=2)
    facets = [f for title, sub in found for f in _memory_facets(title, sub, ctx)]
    hues = {label: color for (_, label), (color, _) in zip(HOLDERS, layout.palette())}
    note = " ".join(x for x in (
        constant_caption(llm), "Each bar: one configuration (median over its runs); rank 0's figures, read "
        "from the tensors (FSDP2: local shards). The llm_strategies table has the ratios.", left) if x)
    return hbar_figure(facets, "Memory per device by holder and tokens/s per device: DDP against FSDP (same "
                       "global batch)", "", note, hues=hues)
