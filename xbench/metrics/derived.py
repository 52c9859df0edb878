"""Figures derived from measurements and config: throughput per device, FLOP/s, MFU (and HFU), cost.

Pure Python over plain dicts (a record's `measurements` and `config`), so the report can recompute
them for stored records under another price without torch. Add a derived metric as one function
registered in DERIVED; it then reaches the record, W&B and the report.
"""

from __future__ import annotations

from collections.abc import Callable

from xbench.metrics.cost import currency, price_per_hour, run_cost
from xbench.metrics.overhead import steady_step_s
from xbench.metrics.targets import label as target_label

DERIVED: list[Callable[[dict, dict], dict]] = []


def derived(fn):
    DERIVED.append(fn)
    return fn


def _throughput(m: dict) -> float | None:
    return m.get("throughput_samples_per_s")


@derived
def per_device(m: dict, cfg: dict) -> dict:
    tp, n = _throughput(m), m.get("devices")
    return {"throughput_per_device_samples_per_s": tp / n} if tp and n else {}


def _peak_flops(m: dict, cfg: dict) -> float | None:
    """The devices' peak FLOP/s for the compute dtype in force, all devices together."""
    peak = (_platform(cfg).get("peak_tflops") or {}).get(m.get("compute_dtype", "fp32"))
    return peak * 1e12 * m["devices"] if peak and m.get("devices") else None


@derived
def flops(m: dict, cfg: dict) -> dict:
    """`achieved_tflops` and `mfu` from the model FLOPs (`flops_per_sample_train`: recomputation not counted,
    PaLM's and torchtitan's MFU); where activation checkpointing recomputes blocks, `achieved_hardware_tflops`
    and `hfu` from the FLOPs the devices did (`flops_per_sample_train_hardware`, the recomputed forward
    in)."""
    tp, f = _throughput(m), m.get("flops_per_sample_train")
    if not tp or not f:
        return {}
    achieved, peak = tp * f, _peak_flops(m, cfg)
    out = {"achieved_tflops": achieved / 1e12}
    if peak:
        out["mfu"] = achieved / peak
    f_hw = m.get("flops_per_sample_train_hardware")
    if f_hw:
        out["achieved_hardware_tflops"] = tp * f_hw / 1e12
        if peak:
            out["hfu"] = tp * f_hw / peak
    return out


@derived
def tokens(m: dict, cfg: dict) -> dict:
    """Token-sequence runs (data.modality=tokens: every sample is data.seq_len tokens): the figures LLM
    training is quoted in. tokens/s over the run and per device; FLOPs per token from the measured FLOPs
    per sample (for the decoder, FlopCounterMode's count equals 6N + 12·L·d·T: tests/test_llm.py), and MFU
    per token: tokens/s x FLOPs per token over the devices' peak, the PaLM paper's definition (the same
    number as `mfu`, which counts in samples; model FLOPs, recomputation not counted)."""
    data = cfg.get("data") or {}
    tp, seq = _throughput(m), data.get("seq_len")
    if data.get("modality") != "tokens" or not tp or not seq:
        return {}
    out = {"tokens_per_s": tp * seq, "tokens_per_sample": seq}
    if m.get("devices"):
        out["tokens_per_s_per_device"] = tp * seq / m["devices"]
    if m.get("global_batch_size"):
        out["global_batch_tokens"] = m["global_batch_size"] * seq
    f = m.get("flops_per_sample_train")
    if f:
        out["flops_per_token_train"] = f / seq
        peak = _peak_flops(m, cfg)
        if peak:
            out["mfu_per_token"] = tp * seq * (f / seq) / peak
    return out


def _platform(cfg: dict) -> dict:
    return cfg.get("platform") or {}


def _cur(cfg: dict) -> str:
    return currency(_platform(cfg)).lower()


def _billed(cfg: dict, seconds: float | None, standalone: bool = False) -> float | None:
    if seconds is None:
        return None
    c = run_cost(_platform(cfg), seconds, standalone)
    return None if c is None else c["total"]


def _has_amortised(platform: dict) -> bool:
    return any(c.get("kind", "usage") != "usage" or c.get("unit") == "month"
               or (c.get("billing") or platform.get("billing")) == "month_amortised"
               for c in platform.get("price") or [])


@derived
def cost(m: dict, cfg: dict) -> dict:
    """Steady-state rate figures (no rounding) and the billed cost of the measured window."""
    tp = _throughput(m)
    per_hour = price_per_hour(_platform(cfg))
    if not per_hour or not tp:
        return {}
    cur = _cur(cfg)
    out = {
        f"{cur}_per_hour": per_hour,
        f"samples_per_s_per_{cur}_per_hour": tp / per_hour,
        f"{cur}_per_million_samples": per_hour / 3600 / tp * 1e6,
    }
    if m.get("window_s_total"):  # billed as a job of that length: rounding and minimum charge apply
        out[f"window_cost_{cur}"] = _billed(cfg, m["window_s_total"])
    size = (cfg.get("data") or {}).get("dataset_size")
    if size:
        out["projected_epoch_s"] = size / tp
        out[f"projected_epoch_cost_{cur}"] = size / tp / 3600 * per_hour
        epochs = (cfg.get("goal") or {}).get("projection_epochs")
        if epochs:
            out["projected_training_s"] = size * epochs / tp
            out[f"projected_training_cost_{cur}"] = _billed(cfg, size * epochs / tp)
    return out


@derived
def host_overhead(m: dict, cfg: dict) -> dict:
    """Share of a steady step the host spends on it (dispatch, tracing, launches) over the steady step's
    wall time: bench/meters/breakdown.py's host time for every runtime; without it (older records), XLA's
    tracing time."""
    step_s = steady_step_s(m)
    if not step_s:
        return {}
    if m.get("host_s_per_step") is not None:
        return {"host_overhead_fraction": m["host_s_per_step"] / step_s,
                "host_overhead_source": m.get("breakdown_source")}
    if m.get("xla_trace_s_median") is None:
        return {}
    return {"host_overhead_fraction": m["xla_trace_s_median"] / step_s, "host_overhead_source": "xla_tracing"}


@derived
def cost_to_target(m: dict, cfg: dict) -> dict:
    """Train-to-target runs: what reaching the target (and the whole run) cost, billing rules applied.

    `cost_to_target` bills the wall time to target (the machine runs through evaluation and start-up);
    `train_cost_to_target` bills the training time alone, the figure the studies publish; `train_cost` bills
    the whole training time (a run of a fixed number of epochs: the study's "cost of the 4-epoch training").
    With several targets (`goal_targets`), each has its own pair, named as metrics/targets.py says.
    """
    if not _platform(cfg).get("price") or "target_reached" not in m:
        return {}
    cur = _cur(cfg)
    out = {
        f"cost_to_target_{cur}": _billed(cfg, m.get("wall_time_to_target_s")),
        f"train_cost_to_target_{cur}": _billed(cfg, m.get("train_time_to_target_s")),
        f"train_cost_{cur}": _billed(cfg, m.get("train_time_s")),
        f"run_cost_{cur}": _billed(cfg, m.get("wall_s_total")),
    }
    for t in m.get("goal_targets") or []:
        lab = target_label(t)
        out[f"cost_to_target_{lab}_{cur}"] = _billed(cfg, m.get(f"wall_time_to_target_{lab}_s"))
        out[f"train_cost_to_target_{lab}_{cur}"] = _billed(cfg, m.get(f"train_time_to_target_{lab}_s"))
    if _has_amortised(_platform(cfg)):  # rented only for this job: whole months, whole setup fee
        out[f"cost_to_target_standalone_{cur}"] = _billed(
            cfg, m.get("wall_time_to_target_s"), standalone=True
        )
    return out


# (figure for time, figure for cost) pairs, most specific first: a run and its baseline are compared
# on the first pair both have.
_NORMALISE_BASES = (
    ("train_time_to_target_s", "train_cost_to_target"),
    ("projected_training_s", "projected_training_cost"),
    ("seconds_per_sample", "per_million_samples"),
)


def normalise(record: dict, baseline: dict) -> dict:
    """Time and cost of `record` over its `baseline`'s (both {'measurements', 'derived', 'config'}).

    1.0 is the baseline; 0.5 is twice as fast / half the cost. Cost ratios need one currency.
    """
    def figures(r):
        v = {**(r.get("measurements") or {}), **(r.get("derived") or {})}
        if v.get("throughput_samples_per_s"):
            v["seconds_per_sample"] = 1.0 / v["throughput_samples_per_s"]
        return v, _cur(r.get("config") or {})

    mine, cur = figures(record)
    base, base_cur = figures(baseline)
    for time_key, cost_stem in _NORMALISE_BASES:
        if mine.get(time_key) and base.get(time_key):
            out = {"normalised_basis": time_key, "normalised_time": mine[time_key] / base[time_key],
                   "baseline_run_id": baseline.get("run_id")}
            a, b = mine.get(f"{cur}_{cost_stem}"), base.get(f"{base_cur}_{cost_stem}")
            a = a if a is not None else mine.get(f"{cost_stem}_{cur}")
            b = b if b is not None else base.get(f"{cost_stem}_{base_cur}")
            if a is not None and b and cur == base_cur:
                out["normalised_cost"] = a / b
            return out
    return {}


def derive(measurements: dict, config: dict, baseline: dict | None = None) -> dict:
    """Every registered figure; with a baseline record (a dict), also the normalised time and cost."""
    out: dict = {}
    for fn in DERIVED:
        out.update(fn(measurements, config))
    if baseline:
        out.update(normalise({"measurements": measurements, "derived": out, "config": config}, baseline))
    return out
