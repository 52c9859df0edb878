"""Console output: a progress bar through warm-up and the timed steps, and a summary table."""

from __future__ import annotations

import math
import sys

from tqdm import tqdm

from xbench.metrics import targets
from xbench.metrics.cost import currency
from xbench.records.record import RunRecord


class Progress:
    """`on_step(phase, i, **info)` for the loops; one bar per phase. tqdm redraws at most every 0.2 s.

    Warm-up and timed steps count steps. Training to a target passes where it is: `epoch` (0-based) of
    `epochs`, `batch` (steps done in the epoch) of `batches`, and the latest evaluation (`metric`,
    `value`; None before the first): the bar then reads `epoch 2/10: 37/56 step [.., top1 0.9412]`.
    """

    def __init__(self, warmup_max: int, timed_total: int, enabled: bool = True):
        self.totals = {"warmup": warmup_max, "timed": timed_total}
        self.enabled = enabled
        self.bars: dict[str, tqdm] = {}
        self.epoch: int | None = None

    def __call__(self, phase: str, i: int, **info) -> None:
        bar = self.bars.get(phase)
        epoch = info.get("epoch")
        if bar is None:
            for other in self.bars.values():
                other.close()
            desc = {"warmup": "warm-up (until stable)", "timed": "timed steps"}.get(phase, phase)
            if "batches" in info:
                self.epoch, desc = epoch, f"epoch {epoch + 1}/{info.get('epochs', '?')}"
            bar = self.bars[phase] = tqdm(total=info.get("batches", self.totals.get(phase)), desc=desc,
                                          unit="step", file=sys.stderr, disable=not self.enabled,
                                          mininterval=0.2, leave=True, dynamic_ncols=True)
        if "batches" not in info:
            bar.update(1)
            return
        if epoch != self.epoch:  # a new epoch: the bar restarts at its first step
            self.epoch = epoch
            bar.reset(total=info["batches"])
            bar.set_description(f"epoch {epoch + 1}/{info.get('epochs', '?')}", refresh=False)
        if info.get("value") is not None:
            bar.set_postfix_str(f"{info.get('metric', 'eval')} {human(info['value'])}", refresh=False)
        bar.update(info["batch"] - bar.n)

    def close(self) -> None:
        for phase, bar in self.bars.items():
            if phase == "warmup" and self.enabled and bar.total and bar.n < bar.total:
                bar.total = bar.n  # warm-up ended early on evidence: show it as complete
                bar.refresh()
            bar.close()
        self.bars.clear()
        self.epoch = None


def human(v, digits: int = 4) -> str:
    """A number as people read it: thousands separators and fixed decimals, never an exponent:
    24,150 samples/s, 241.5, 2.415 s, 0.02415 s (`digits` significant digits below 1,000)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    magnitude = math.floor(math.log10(abs(v)))
    if magnitude >= digits - 1:
        return f"{v:,.0f}"
    decimals = digits - 1 - magnitude
    if decimals > 9:  # below a nanounit: no fixed form is readable
        return f"{v:.{digits - 1}e}"
    return f"{v:,.{decimals}f}"


def _fmt(v, digits=4):
    return human(v, digits)


SUMMARY_ROWS = (
    ("throughput", "throughput_samples_per_s", "samples/s"),
    ("per device", "throughput_per_device_samples_per_s", "samples/s"),
    ("step time (median)", "step_time_s_median", "s"),
    ("step time p10 / p90", ("step_time_s_p10", "step_time_s_p90"), "s"),
    ("step time CV", "step_time_cv", ""),
    ("waiting for data", "data_wait_fraction", "of the timed window"),
    ("warm-up", ("warmup_steps", "warmup_s"), "steps / s"),
    ("first step", "first_step_s", "s"),
    ("compilations warm-up / timed", ("compiles_warmup", "compiles_timed"), ""),
    ("threads intra / inter-op", ("threads_intra", "threads_interop"), ""),
    ("achieved", "achieved_tflops", "TFLOP/s"),
    ("MFU", "mfu", ""),
    ("cost", "{cur}_per_million_samples", "{CUR} per 1M samples"),
    ("loss first / last", ("loss_first", "loss_last"), ""),
    ("target reached", ("target_reached", "target_status"), ""),
    ("epochs to target", "epochs_to_target", ""),
    ("time to target train / wall", ("train_time_to_target_s", "wall_time_to_target_s"), "s"),
    ("start-up / evaluation", ("startup_s", "eval_time_s"), "s"),
    ("cost to target train / wall", ("train_cost_to_target_{cur}", "cost_to_target_{cur}"), "{CUR}"),
    ("final metric", ("goal_metric", "metric_final"), ""),
    ("training time / epochs (all)", ("train_time_s", "epochs_done"), "s / epochs"),
    ("training cost (all)", "train_cost_{cur}", "{CUR}"),
    ("resumes", "resumes", ""),
    # runs that did not end ok, and the batch search
    ("largest batch that fits", "max_batch_size_per_device", "per device"),
    ("smallest that does not fit", "min_failing_batch_size_per_device", "per device"),
    ("throughput before the stop", "throughput_samples_per_s_partial", "samples/s"),
    ("diverged at step", "diverged_at_step", ""),
    ("host RSS peak / available", ("host_peak_rss_gib", "host_available_gib"), "GiB"),
    ("device memory peak / total", ("device_peak_allocated_gib", "device_total_gib"), "GiB"),
)


def summary(record: RunRecord, path) -> str:
    c = record.config
    head = (f"xbench run {record.run_id}: {record.status.upper()}"
            + (f" ({record.reason})" if record.reason else ""))
    what = (f"  {c.get('model', {}).get('name')} on {c.get('data', {}).get('name')} | "
            f"platform={c.get('platform', {}).get('name')} runtime={c.get('runtime', {}).get('name')} "
            f"precision={c.get('precision', {}).get('name')} parallel={c.get('parallel', {}).get('name')} "
            f"batch={c.get('data', {}).get('batch_size')}/device")
    lines = [head, what]
    values = {**record.measurements, **record.derived}
    cur = currency(c.get("platform") or {}).lower()  # cost figures are named after it (metrics/derived.py)
    for label, keys, unit in SUMMARY_ROWS:
        keys = tuple(k.format(cur=cur) for k in (keys if isinstance(keys, tuple) else (keys,)))
        unit = unit.format(CUR=cur.upper())
        if all(values.get(k) is None for k in keys):
            continue
        shown = " / ".join(_fmt(values.get(k)) for k in keys)
        lines.append(f"  {label:<30} {shown} {unit}".rstrip())
    if values.get("batch_search_limit_reached"):  # the search stopped at its limit, not at a failure
        lines.append(f"  {'smallest that does not fit':<30} none up to bench.max_batch_limit="
                     f"{values.get('batch_search_limit')}")
    for t, row in targets.summary_rows(values):  # several targets: one line each
        costs = [row.get(f"{k}_{targets.label(t)}_{cur}") for k in ("train_cost_to_target", "cost_to_target")]
        cost = (f", {' / '.join(_fmt(c) for c in costs)} {cur.upper()} train / wall"
                if any(c is not None for c in costs) else "")
        goal = f"to {t:g}"  # the target and the epochs as counted, not as measured figures
        if row["epochs"] is None:
            lines.append(f"  {goal:<30} not reached")
            continue
        lines.append(f"  {goal:<30} {row['epochs']:g} epochs, {_fmt(row['train_time_s'])} / "
                     f"{_fmt(row['wall_s'])} s train / wall{cost}")
    for w in record.warnings:
        lines.append(f"  WARNING: {w}")
    lines.append(f"  record: {path}")
    return "\n".join(lines)
