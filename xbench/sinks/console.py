"""Console output: a progress bar through warm-up and the timed steps, a summary table, and a run in one line
(`headline`: the SLURM launcher's end lines). Every figure to the digits it supports, beside its target and
unit."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tqdm import tqdm

from xbench.metrics import targets
from xbench.metrics.cost import currency
from xbench.metrics.numbers import by_spread, finite_number, granular, human
from xbench.rank import startup_phase
from xbench.records.record import RunRecord
from xbench.tools import StatusLine

# What each start-up phase (rank.startup_phase; measurements.startup_phases_s) is doing, as the console says
# it.
STARTUP_LABELS = {"imports": "imports", "compose": "composing the config", "record": "writing the record",
                  "torch_import": "importing torch", "checks": "checking the config against this host",
                  "wandb_start": "waiting for W&B to start", "launch": "starting the ranks",
                  "build": "building the model and data (other processes' load probed beside it)",
                  "first_step": "first step"}


class StartupLine(StatusLine):
    """Start-up's phases on one console line, each shown as it begins (`xbench: start-up: importing torch`),
    rewritten by the next and gone when the warm-up bar appears (Progress) or the run ends (envelope.py). One
    per process (`STARTUP_LINE`), so the record side and an inline rank write the same line; off with
    logger.progress=false."""

    def __init__(self):
        super().__init__("xbench: start-up: ")

    def show(self, phase: str, label: str | None = None) -> None:
        super().show(label or STARTUP_LABELS.get(phase, phase))


STARTUP_LINE = StartupLine()


def enter_startup_phase(name: str, label: str | None = None) -> None:
    """The record side enters start-up phase `name` (rank.startup_phase: the record's startup_phases_s), shown
    on the start-up line (as `label` where one phase has several steps)."""
    startup_phase(name)
    STARTUP_LINE.show(name, label)


class Progress:
    """`on_step(phase, i, **info)` for the loops; one bar per phase. tqdm redraws at most every 0.2 s.

    Warm-up counts its steps up to `warmup_max` and closes at the length it really ran (it ends early once
    the step times are stable). The timed bar's total is `timed_total` when the windows are sized in steps;
    windows sized by time are sized after warm-up, and the mode then says so once, outside any window:
    `on_step("timed", -1, window_steps=N, windows=R)` sets the total to N x R. A window measured again (a
    stall) adds its steps to the total as it starts, so the bar never passes 100% nor turns into a counter.
    Training to a target passes where it is: `epoch` (0-based) of `epochs`, `batch` (steps done in the epoch)
    of `batches`, and the latest evaluation (`metric`, `value`; None before the first): the bar then reads
    `epoch 2/10: 37/56 step [.., top1 0.9412]`.
    """

    def __init__(self, warmup_max: int, timed_total: int | None, enabled: bool = True):
        self.totals = {"warmup": warmup_max, "timed": timed_total}
        self.enabled = enabled
        self.bars: dict[str, tqdm] = {}
        self.epoch: int | None = None
        self.window_steps: int | None = timed_total  # steps per window, once known
        self.windows_seen = 0

    def _bar(self, phase: str, total: int | None, desc: str) -> tqdm:
        STARTUP_LINE.close()  # the steps have begun
        for other, bar in self.bars.items():
            self._finish(other, bar)
        self.bars.clear()  # a phase that comes again (the next trial's warm-up) gets a bar of its own
        bar = self.bars[phase] = tqdm(
            total=total,
            desc=desc,
            unit="step",
            file=sys.stderr,
            disable=not self.enabled,
            mininterval=0.2,
            leave=True,
            dynamic_ncols=True,
        )
        return bar

    def _finish(self, phase: str, bar: tqdm) -> None:
        """Close a bar at the length it ran (warm-up ends early on evidence: shown complete)."""
        if bar.disable:
            bar.close()
            return
        if phase == "warmup" and bar.total and bar.n < bar.total:
            bar.total = bar.n
            bar.refresh()
        bar.close()

    def __call__(self, phase: str, i: int, **info) -> None:
        if phase == "startup":  # a rank's start-up phase begins (bench/windows.py)
            if self.enabled:
                STARTUP_LINE.show(info["startup_phase"])
            return
        if "window_steps" in info:  # the timed windows are sized: N steps x R windows
            self.window_steps = int(info["window_steps"])
            self.windows_seen = 0
            total = self.window_steps * int(info.get("windows") or 1)
            self.totals["timed"] = total
            if (bar := self.bars.get("timed")) is not None:
                bar.total = max(total, bar.n)
                bar.refresh()
            # Else the bar appears with the first timed step: "timed steps" on the console says they began.
            return
        bar = self.bars.get(phase)
        epoch = info.get("epoch")
        if bar is None:
            desc = {"warmup": "warm-up (until stable)", "timed": "timed steps"}.get(phase, phase)
            if "batches" in info:
                self.epoch, desc = epoch, f"epoch {epoch + 1}/{info.get('epochs', '?')}"
            bar = self._bar(phase, info.get("batches", self.totals.get(phase)), desc)
        if "batches" not in info:
            if phase == "timed" and i == 0:  # a window starts: one more than planned grows the total
                self.windows_seen += 1
                if bar.total is not None and self.window_steps and bar.n + self.window_steps > bar.total:
                    bar.total = bar.n + self.window_steps
            if bar.total is not None and bar.n >= bar.total:  # more steps than said: the total follows
                bar.total = bar.n + 1
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
        STARTUP_LINE.close()
        for phase, bar in self.bars.items():
            self._finish(phase, bar)
        self.bars.clear()
        self.epoch = None


def seconds(v) -> str:
    """A duration in the unit it reads best in: 850.0 us, 21.17 ms, 2.415 s, 5.00 min, 4.00 h
    (tests/test_console.py)."""
    if not finite_number(v):
        return str(v)
    a = abs(v)
    if 0 < a < 1e-3:
        return f"{human(v * 1e6)} us"
    if 0 < a < 1:
        return f"{human(v * 1e3)} ms"
    if a < 180:
        return f"{human(v)} s"
    return f"{human(v / 60, 3)} min" if a < 3 * 3600 else f"{human(v / 3600, 3)} h"


def percent(v) -> str:
    return f"{human(v * 100, 3)}%" if finite_number(v) else str(v)


def scaled(v, unit: str) -> str:
    """A count with a metric prefix where it is large: 11.69 M, 24.3 GFLOP, 3.846 GFLOP/s."""
    if not finite_number(v):
        return str(v)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{human(v / factor)} {prefix}{unit}".rstrip()
    return f"{human(v)} {unit}".rstrip()


def throughput_spread(v: dict) -> float | None:
    """Half the throughput's interval, relative to it, as analysis/spread.py reads one run: the 95% CI over
    whole-process repeats, else over timed windows, else samples/s at the p90 and p10 step times; None:
    none."""
    tp = v.get("throughput_samples_per_s")
    if not finite_number(tp) or tp <= 0:
        return None
    cis = [ci for ci in map(v.get, ("throughput_process_ci95_samples_per_s", "throughput_ci95_samples_per_s"))
           if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite_number(x) for x in ci)]
    if cis:
        return (cis[0][1] - cis[0][0]) / 2 / tp
    return _step_time_spread(v, tp)


def _step_time_spread(v: dict, tp: float) -> float | None:
    """Half the spread of samples/s at the p10 and p90 step times, relative to `tp`; None: none."""
    gb, p10, p90 = v.get("global_batch_size"), v.get("step_time_s_p10"), v.get("step_time_s_p90")
    if all(finite_number(x) and x > 0 for x in (gb, p10, p90)):
        return (gb / p10 - gb / p90) / 2 / tp
    return None


def rate(x, v: dict, max_digits: int = 4) -> str:
    """A rate that moves with the throughput (samples/s, per device, tokens/s, steps/s) to the digits the
    throughput's spread supports: 223.7 samples/s +- 5% reads "220"."""
    spread = throughput_spread(v)
    return by_spread(x, spread * abs(x) if spread is not None and finite_number(x) else None, max_digits)


def _throughput(v: dict) -> str | None:
    tp = v.get("throughput_samples_per_s")
    if not finite_number(tp):
        return None
    steps = (
        tp / v["global_batch_size"]
        if finite_number(v.get("global_batch_size")) and v["global_batch_size"]
        else None
    )
    return f"{rate(tp, v)} samples/s" + (f" ({rate(steps, v, 3)} steps/s)" if steps else "")


def _rate(key: str, unit: str):
    return lambda v: None if not finite_number(v.get(key)) else f"{rate(v[key], v)} {unit}"


def _pair(a: str, b: str, fmt, sep: str = " / ", suffix: str = ""):
    """Two figures on one line ("x / y"), either alone when the other is missing."""
    def row(v: dict) -> str | None:
        shown = [fmt(v[k]) for k in (a, b) if v.get(k) is not None]
        return sep.join(shown) + suffix if shown else None
    return row


def _one(key: str, fmt):
    return lambda v: None if v.get(key) is None else fmt(v[key])


def _warmup(v: dict) -> str | None:
    n, t = v.get("warmup_steps"), v.get("warmup_s")
    if n is None and t is None:
        return None
    return " in ".join(
        x for x in (f"{n} steps" if n is not None else None, seconds(t) if t is not None else None) if x
    )


def _flops_rate(v: dict) -> str | None:
    t = v.get("achieved_tflops")
    return None if not finite_number(t) else scaled(t * 1e12, "FLOP/s")


def _target(v: dict) -> str | None:
    reached, status = v.get("target_reached"), v.get("target_status")
    if reached is None and status is None:
        return None
    word = "yes" if reached else "no"
    return f"{word} ({status})" if status and status != "reached" else word


def _flops_per_sample(v: dict) -> str | None:
    fwd, train = v.get("flops_per_sample_forward"), v.get("flops_per_sample_train")
    hw = v.get("flops_per_sample_train_hardware")  # activation checkpointing: the recomputed forward in
    parts = [f"{scaled(x, 'FLOP')} {what}" for x, what in ((fwd, "forward"), (train, "training step"),
                                                           (hw, "with recomputation")) if finite_number(x)]
    return ", ".join(parts) or None


def epochs(n, v: dict, at_evaluation: bool = True) -> str:
    """Epochs as counted: whole ones as integers, a fraction to the granularity it was counted at (an
    evaluation's, `epochs_per_eval`, or one step's, `epochs_per_step`; `figures` reads them from the
    config)."""
    return granular(n, v.get("epochs_per_eval" if at_evaluation else "epochs_per_step"))


def goal(v: dict) -> str | None:
    """The metric the run trained for beside its target: "top1 0.9722 (target 0.95: reached at epoch 4)",
    "(target 0.95: not reached)"; several targets: how many were reached (a line each follows)."""
    metric = v.get("goal_metric")
    if metric is None:
        return None
    final = v.get("metric_final")
    shown = f"{metric} {human(final)}" if finite_number(final) else f"{metric} not evaluated"
    ts = [t for t in (v.get("goal_targets") or [v.get("goal_target")]) if finite_number(t)]
    if not ts:
        return shown
    if len(ts) > 1:
        return f"{shown} (targets {', '.join(f'{t:g}' for t in ts)}: {v.get('targets_reached', 0)} reached)"
    if v.get("target_reached") and v.get("epochs_to_target") is not None:
        return f"{shown} (target {ts[0]:g}: reached at epoch {epochs(v['epochs_to_target'], v)})"
    return f"{shown} (target {ts[0]:g}: not reached)"


def _training(v: dict) -> str | None:
    t, n = v.get("train_time_s"), v.get("epochs_done")
    if t is None and n is None:
        return None
    return " over ".join(
        x
        for x in (
            seconds(t) if t is not None else None,
            f"{epochs(n, v, at_evaluation=False)} epochs" if n is not None else None,
        )
        if x
    )


def _memory(used: str, total: str):
    def row(v: dict) -> str | None:
        if v.get(used) is None:
            return None
        return f"{human(v[used])} GiB" + (f" of {human(v[total])} GiB" if finite_number(v.get(total)) else "")
    return row


def _cost(key: str, what: str = ""):
    """A cost in the platform's currency (the figures are named after it: `summary` reads them as
    `cost_*`)."""
    return lambda v: None if v.get(key) is None else f"{human(v[key])} {v['currency']}{what}"


def _costs(train: str, wall: str):
    def row(v: dict) -> str | None:
        shown = [f"{human(v[k])} {v['currency']}" for k in (train, wall) if v.get(k) is not None]
        return " / ".join(shown) or None
    return row


# (label, how the line reads from the figures): a row whose figures are all missing is left out.
SUMMARY_ROWS = (
    ("throughput", _throughput),
    ("per device", _rate("throughput_per_device_samples_per_s", "samples/s")),
    ("tokens", _rate("tokens_per_s", "tokens/s")),
    ("step time (median)", _one("step_time_s_median", seconds)),
    ("step time p10 / p90", _pair("step_time_s_p10", "step_time_s_p90", seconds)),
    ("step time spread (CV)", _one("step_time_cv", percent)),
    ("waiting for data", _one("data_wait_fraction", lambda x: f"{percent(x)} of the timed window")),
    ("warm-up", _warmup),
    ("first step", _one("first_step_s", seconds)),
    ("compilations", _pair("compiles_warmup", "compiles_timed", str, sep=" in warm-up, ", suffix=" timed")),
    ("compile time", _one("compile_time_s", seconds)),  # most of a compiled run's first step
    ("threads", _pair("threads_intra", "threads_interop", str, sep=" intra-op, ", suffix=" inter-op")),
    ("parameters", _one("params_count", lambda x: scaled(x, ""))),
    ("FLOPs per sample", _flops_per_sample),
    ("achieved", _flops_rate),
    ("MFU", _one("mfu", percent)),
    ("HFU (with recomputation)", _one("hfu", percent)),
    ("cost", _cost("cost_per_million_samples", " per 1M samples")),
    ("loss first / last", _pair("loss_first", "loss_last", human)),
    ("target reached", _target),
    (
        "epochs to target",
        lambda v: None if v.get("epochs_to_target") is None else epochs(v["epochs_to_target"], v),
    ),
    (
        "time to target",
        _pair("train_time_to_target_s", "wall_time_to_target_s", seconds, sep=" training, ", suffix=" wall"),
    ),
    ("start-up / evaluation", _pair("startup_s", "eval_time_s", seconds)),
    ("cost to target train / wall", _costs("cost_train_to_target", "cost_to_target")),
    ("final metric", goal),
    ("training (all)", _training),
    ("training cost (all)", _cost("cost_train")),
    ("resumes", _one("resumes", human)),
    # runs that did not end ok, and the batch search
    ("largest batch that fits", _one("max_batch_size_per_device", lambda x: f"{human(x)} per device")),
    (
        "smallest that does not fit",
        _one("min_failing_batch_size_per_device", lambda x: f"{human(x)} per device"),
    ),
    (
        "throughput before the stop",
        _one("throughput_samples_per_s_partial", lambda x: f"{human(x)} samples/s"),
    ),
    ("diverged at step", _one("diverged_at_step", human)),
    ("host RSS peak", _memory("host_peak_rss_gib", "host_available_gib")),
    ("device memory peak", _memory("device_peak_allocated_gib", "device_total_gib")),
)

# The cost figures are named after the platform's currency (metrics/derived.py): read under one name here.
COST_KEYS = {"cost_per_million_samples": "{cur}_per_million_samples", "cost_train": "train_cost_{cur}",
             "cost_train_to_target": "train_cost_to_target_{cur}", "cost_to_target": "cost_to_target_{cur}"}


def figures(config: dict, measurements: dict, derived: dict) -> dict:
    """What the console's lines read: the record's figures, its costs under one name each (COST_KEYS), and the
    granularity its epochs were counted at (`epochs_per_eval`, `epochs_per_step`)."""
    values = {**measurements, **derived}
    # cost figures are named after it (metrics/derived.py)
    cur = currency(config.get("platform") or {}).lower()
    values.update(
        currency=cur.upper(), **{alias: values.get(key.format(cur=cur)) for alias, key in COST_KEYS.items()}
    )
    g, per_epoch = config.get("goal") or {}, values.get("steps_per_epoch")
    if finite_number(per_epoch) and per_epoch > 0:
        values["epochs_per_step"] = 1 / per_epoch
        values["epochs_per_eval"] = (g["eval_every_steps"] / per_epoch if g.get("eval_every_steps")
                                     else g.get("eval_every_epochs") or 1)
    return values


# Warnings whose first words do not name them; the others say their kind before a colon ("noisy: ...").
WARNING_KINDS = (
    (r"^warm-up did not stabilise", "warm-up unstable"),
    (r"^timed windows capped", "windows capped"),
    (r"compilation\(s\) during a timed window", "compiled while timed"),
    (r"^MFU .* is above", "MFU high"),
    (r"^throughput fell", "throughput fell with batch"),
    (r"recompile limit", "recompile limit"),
    (r"skipped CUDA graphs", "CUDA graphs skipped"),
    (r"^target .* not reached", "target not reached"),
    (r"^resumed \d+ time", "resumed"),
    (r"^ranks computed different", "ranks' curves differ"),
    (r"^find_max_batch stopped", "search time limit"),
    (r"live curve feed stopped", "curve feed stopped"),
)


def warning_kind(text: str) -> str:
    """A warning's first words, the kind it says it is: "noisy: spread above ..." -> "noisy", a sentence
    without a "kind:" head by WARNING_KINDS, else its first four words."""
    for pattern, kind in WARNING_KINDS:
        if re.search(pattern, text):
            return kind
    head = re.split(r": | \(|; |, ", text, maxsplit=1)[0].strip()
    words = head.split()
    return head if len(words) <= 4 else " ".join(words[:4]) + "..."


def warning_kinds(warnings) -> list[str]:
    """Each warning's kind once, in the record's order."""
    return list(dict.fromkeys(warning_kind(str(w)) for w in warnings or ()))


def headline(record: dict) -> str:
    """One point in one line (the SLURM launcher's end lines): its figure as the summary shows it (throughput
    to its spread's digits; the metric beside its target and the time to it; the largest batch), then the
    kinds of its warnings: "220 samples/s [oversubscribed, noisy, contended]"."""
    v = figures(record.get("config") or {}, record.get("measurements") or {}, record.get("derived") or {})
    if v.get("goal_metric") is not None:
        t = v.get("wall_time_to_target_s")
        shown = goal(v) + (f" in {seconds(t)} wall" if finite_number(t) else "")
    elif v.get("max_batch_size_per_device") is not None:
        shown = f"{human(v['max_batch_size_per_device'])} samples per device (largest batch that fits)"
    elif finite_number(v.get("throughput_samples_per_s")):
        shown = f"{rate(v['throughput_samples_per_s'], v)} samples/s"
    elif finite_number(v.get("throughput_samples_per_s_partial")):
        shown = f"{human(v['throughput_samples_per_s_partial'])} samples/s before the stop"
    else:
        shown = "no figure"
    kinds = warning_kinds(record.get("warnings"))
    return shown + (f" [{', '.join(kinds)}]" if kinds else "")


def summary(record: RunRecord, path) -> str:
    c = record.config
    head = (f"xbench run {record.run_id}: {record.status.upper()}"
            + (f" ({record.reason})" if record.reason else ""))
    what = (f"  {c.get('model', {}).get('name')} on {c.get('data', {}).get('name')} | "
            f"platform={c.get('platform', {}).get('name')} runtime={c.get('runtime', {}).get('name')} "
            f"precision={c.get('precision', {}).get('name')} parallel={c.get('parallel', {}).get('name')} "
            f"batch={c.get('data', {}).get('batch_size')}/device")
    lines = [head, what]
    values = figures(c, record.measurements, record.derived)
    cur = values["currency"].lower()
    for label, row in SUMMARY_ROWS:
        shown = row(values)
        if shown is not None:
            lines.append(f"  {label:<30} {shown}".rstrip())
    if values.get("batch_search_limit_reached"):  # the search stopped at its limit, not at a failure
        lines.append(f"  {'smallest that does not fit':<30} none up to bench.max_batch_limit="
                     f"{values.get('batch_search_limit')}")
    for t, row in targets.summary_rows(values):  # several targets: one line each
        costs = [row.get(f"{k}_{targets.label(t)}_{cur}") for k in ("train_cost_to_target", "cost_to_target")]
        cost = (f", {' / '.join(human(c) for c in costs)} {cur.upper()} train / wall"
                if any(c is not None for c in costs) else "")
        to = f"to {t:g}"  # the target and the epochs as counted, not as measured figures
        if row["epochs"] is None:
            lines.append(f"  {to:<30} not reached")
            continue
        lines.append(f"  {to:<30} {epochs(row['epochs'], values)} epochs, {human(row['train_time_s'])} / "
                     f"{human(row['wall_s'])} s train / wall{cost}")
    for w in record.warnings:
        lines.append(f"  WARNING: {w}")
    lines += profile_lines(record.artifacts, path)
    lines.append(f"  record: {path}")
    return "\n".join(lines)


# bench.profile's files (record.artifacts: paths in the run folder), as the summary names them.
PROFILE_FILES = {"profile_trace": "profile trace", "profile_ops": "profile top operators",
                 "profile_xla_metrics": "XLA metrics report", "profile_hlo_dump": "XLA HLO dump"}


def profile_lines(artifacts: dict, record_path) -> list[str]:
    """Where bench.profile wrote, as paths to open: the record's folder is the run folder (`record_path` not a
    path: the record went nowhere; the paths are then the run folder's own)."""
    folder = Path(record_path).parent if isinstance(record_path, Path) else None
    lines = []
    for key, label in PROFILE_FILES.items():
        if not artifacts.get(key):
            continue
        where = folder / artifacts[key] if folder is not None else Path(artifacts[key])
        viewers = (f" (ui.perfetto.dev or chrome://tracing; tensorboard --logdir {where.parent.parent})"
                   if key == "profile_trace" else "")
        lines.append(f"  {label:<30} {where}{viewers}")
    return lines
