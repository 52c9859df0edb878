"""A batch search's trials (bench.mode=find_max_batch, `batch_search_trials` in the record) as W&B history
rows, one per trial, and back: the report drawn from W&B gets the same max_batch table as from the store,
and W&B can plot each trial's samples/s (over its timed window) against every batch tried.

What a trial's figure is travels with it: `timed_steps` and `window_s` (the window it was measured over,
modes/batch_search.py) and `contended` (other processes used the machine in that window). A record written
before trials had windows timed one step after a 2-step warm-up: `speed` gives no figure for such a trial,
and `text` shows it as a one-step trial, never as throughput."""

from __future__ import annotations

PREFIX = "trial_"  # history keys: trial_batch_size, trial_fits, trial_throughput_samples_per_s, ...
FIELDS = (
    "batch_size",
    "fits",
    "throughput_samples_per_s",
    "step_time_s",
    "host_rss_gib",
    "device_peak_allocated_gib",
    "seconds",
    "timed_steps",
    "window_s",
    "contended",
    "other_cpu_cores_during",
)
ONE_STEP = "one_step_samples_per_s"  # an old record's one-step figure, under its own history key


def one_step(trial: dict) -> bool:
    """A trial timed over one step (a record from before trial windows: no `timed_steps`)."""
    return (trial.get("timed_steps") or 1) <= 1


def speed(trial: dict) -> float | None:
    """A fitting trial's samples/s where it is a throughput: over a timed window of several steps, with
    no other process on the machine; None otherwise (one step, contended, or no figure)."""
    tp = trial.get("throughput_samples_per_s")
    if not trial.get("fits") or not isinstance(tp, (int, float)) or one_step(trial) or trial.get("contended"):
        return None
    return tp


def text(trials) -> str:
    """Every trial as `batch: samples/s`, in batch order, each marked for what it is: `(one step)`,
    `(contended)`, or `does not fit`."""
    out = []
    for t in sorted((t for t in trials or [] if isinstance(t, dict)), key=lambda t: t.get("batch_size") or 0):
        tp = t.get("throughput_samples_per_s")
        if not t.get("fits") or not isinstance(tp, (int, float)):
            out.append(f"{t.get('batch_size')}: does not fit")
            continue
        marks = [m for m, hit in (("one step", one_step(t)), ("contended", t.get("contended"))) if hit]
        out.append(f"{t.get('batch_size')}: {tp:.3g}" + "".join(f" ({m})" for m in marks))
    return ", ".join(out)


def to_history(trials) -> list[dict]:
    """History rows for W&B (`fits` and `contended` as 0/1: W&B plots numbers; a one-step figure under
    `trial_one_step_samples_per_s`, never in the throughput panel)."""
    rows = []
    for i, t in enumerate(trials or []):
        if not isinstance(t, dict):
            continue
        row = {"trial": i}
        for k in FIELDS:
            v = t.get(k)
            if v is not None:
                key = ONE_STEP if k == "throughput_samples_per_s" and one_step(t) else k
                row[PREFIX + key] = int(v) if isinstance(v, bool) else v
        rows.append(row)
    return rows


def from_history(history) -> list[dict]:
    """The trials back from history rows (in trial order); [] when the run searched nothing."""
    rows = sorted((h for h in history if isinstance(h, dict) and PREFIX + "batch_size" in h),
                  key=lambda h: h.get("trial") or 0)
    out = []
    for h in rows:
        t = {k: h.get(PREFIX + k) for k in FIELDS}
        if t["throughput_samples_per_s"] is None:
            t["throughput_samples_per_s"] = h.get(PREFIX + ONE_STEP)
        t["fits"] = bool(t["fits"])
        if t["contended"] is not None:
            t["contended"] = bool(t["contended"])
        out.append(t)
    return out


def is_trial_key(key: str) -> bool:
    return key == "trial" or key.startswith(PREFIX)
