"""RunRecord: everything one run leaves behind, as a value object that round-trips through JSON."""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field

SCHEMA_VERSION = 1
# running: only ever seen if the process died without a chance to write (kill -9, power loss).
STATUSES = ("running", "ok", "failed", "oom", "interrupted", "diverged")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class RunRecord:
    run_id: str
    status: str = "running"
    reason: str | None = None  # why it is not ok (error type and message), or None
    created_at: str = field(default_factory=utc_now)
    finished_at: str | None = None
    experiment: str | None = None
    config: dict = field(default_factory=dict)  # the resolved Hydra config
    env: dict = field(default_factory=dict)  # where it ran: host, libraries, devices, git revision
    measurements: dict = field(default_factory=dict)  # measured values; names carry their units
    derived: dict = field(default_factory=dict)  # computed from measurements + config (metrics/derived.py)
    series: dict = field(default_factory=dict)  # per-step lists: step, phase, loss, step_time_s
    warnings: list[str] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)  # per-rank figures of a multi-rank run
    artifacts: dict = field(default_factory=dict)  # name -> path relative to the run folder
    schema_version: int = SCHEMA_VERSION

    def finish(self, status: str, reason: str | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; allowed: {', '.join(STATUSES)}")
        self.status, self.reason, self.finished_at = status, reason, utc_now()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunRecord:
        known = cls.__dataclass_fields__  # the field names (fields() is slow across 10,000 records)
        rec = cls(**{k: v for k, v in d.items() if k in known})
        problems = rec.problems()
        if problems:
            raise ValueError("invalid record: " + "; ".join(problems))
        return rec

    def problems(self) -> list[str]:
        """What makes this record invalid (empty when valid)."""
        out = []
        if not self.run_id:
            out.append("run_id is empty")
        if self.status not in STATUSES:
            out.append(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status not in ("ok", "running") and not self.reason:
            out.append(f"status {self.status!r} needs a reason")
        if self.status == "ok" and "throughput_samples_per_s" not in self.measurements \
                and self.config.get("bench", {}).get("mode", "throughput") == "throughput":
            out.append("an ok throughput run has no throughput_samples_per_s")
        for name in ("config", "env", "measurements", "derived", "series", "artifacts"):
            if not isinstance(getattr(self, name), dict):
                out.append(f"{name} must be a mapping")
        lengths = {k: len(v) for k, v in self.series.items() if isinstance(v, list)}
        if len(set(lengths.values())) > 1:
            out.append(f"series have unequal lengths: {lengths}")
        return out
