"""A batch search's trials (bench.mode=find_max_batch, `batch_search_trials` in the record) as W&B history
rows, one per trial, and back: the report drawn from W&B gets the same max_batch table as from the store,
and W&B can plot throughput against every batch tried."""

from __future__ import annotations

PREFIX = "trial_"  # history keys: trial_batch_size, trial_fits, trial_throughput_samples_per_s, ...
FIELDS = ("batch_size", "fits", "throughput_samples_per_s", "step_time_s", "host_rss_gib",
          "device_peak_allocated_gib", "seconds")


def to_history(trials) -> list[dict]:
    """History rows for W&B (`fits` as 0/1: W&B plots numbers)."""
    rows = []
    for i, t in enumerate(trials or []):
        if not isinstance(t, dict):
            continue
        row = {"trial": i}
        for k in FIELDS:
            v = t.get(k)
            if v is not None:
                row[PREFIX + k] = int(v) if isinstance(v, bool) else v
        rows.append(row)
    return rows


def from_history(history) -> list[dict]:
    """The trials back from history rows (in trial order); [] when the run searched nothing."""
    rows = sorted((h for h in history if isinstance(h, dict) and PREFIX + "batch_size" in h),
                  key=lambda h: h.get("trial") or 0)
    out = []
    for h in rows:
        t = {k: h.get(PREFIX + k) for k in FIELDS}
        t["fits"] = bool(t["fits"])
        out.append(t)
    return out


def is_trial_key(key: str) -> bool:
    return key == "trial" or key.startswith(PREFIX)
