"""RunRecord: everything one run leaves behind, as a value object that round-trips through JSON."""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys
from dataclasses import asdict, dataclass, field

SCHEMA_VERSION = 1
# running: only ever seen if the process died without a chance to write (kill -9, power loss).
STATUSES = ("running", "ok", "failed", "oom", "interrupted", "diverged")
# Lists of throughput samples a record keeps (per timed window; per process under bench.process_repeats):
# CIs and ratio CIs are computed from them, so W&B keeps them too (sinks/wandb.py, analysis/wandb_source.py).
SAMPLE_LISTS = ("throughput_samples_per_s_windows", "throughput_samples_per_s_processes")
# Figures that cannot be negative: a throughput, a step time, a price or a cost (never averaged if they are).
NON_NEGATIVE = re.compile(
    r"samples_per_s|tokens_per_s|^step_time_s|_per_hour$|_per_million_samples$|cost|^price"
)


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` makes the record's status "oom" (the envelope's, a batch-search trial's): torch's
    out-of-memory error on any device, a failed host allocation, XLA's RESOURCE_EXHAUSTED. torch is read
    only when already imported: nothing here imports it."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                   "bad_alloc", "resource_exhausted"))


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
        if not isinstance(d, dict):
            raise ValueError(f"invalid record: a JSON object is expected, not a {type(d).__name__}")
        known = cls.__dataclass_fields__  # the field names (fields() is slow across 10,000 records)
        rec = cls(**{k: v for k, v in d.items() if k in known})
        problems = rec.problems()
        if problems:
            raise ValueError("invalid record: " + "; ".join(problems))
        return rec

    def problems(self) -> list[str]:
        """What makes this record invalid (empty when valid): its shape first; its contents only when the
        shape is right (their checks read inside the mappings)."""
        return self._shape_problems() or self._section_problems() or self._content_problems()

    def _shape_problems(self) -> list[str]:
        """Its id, schema version and status, and its mappings and lists of the right type."""
        out = []
        if not isinstance(self.run_id, str) or not self.run_id:
            out.append("run_id is empty or not text")
        if not _readable_schema(self.schema_version):
            out.append(
                f"schema_version {self.schema_version!r} is not one this xbench reads (1..{SCHEMA_VERSION}; "
                "a newer xbench wrote it?)"
            )
        if self.status not in STATUSES:
            out.append(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status not in ("ok", "running") and not self.reason:
            out.append(f"status {self.status!r} needs a reason")
        return out + [f"{name} must be {what}" for name, kind, what in _FIELD_TYPES
                      if not isinstance(getattr(self, name), kind)]

    def _section_problems(self) -> list[str]:
        """Sections of the config that are not mappings (nothing more is read then)."""
        return [f"config.{k} must be a mapping" for k in ("model", "data", "platform", "runtime", "parallel",
                                                            "precision", "bench", "goal", "store", "logger")
                if k in self.config and not isinstance(self.config[k], (dict, type(None)))]

    def _content_problems(self) -> list[str]:
        """A throughput run without its throughput, impossible values, series of unequal lengths."""
        out = []
        mode = (self.config.get("bench") or {}).get("mode", "throughput")
        if (
            self.status == "ok"
            and "throughput_samples_per_s" not in self.measurements
            and mode == "throughput"
        ):
            out.append("an ok throughput run has no throughput_samples_per_s")
        out += impossible_values(self)
        lengths = {k: len(v) for k, v in self.series.items() if isinstance(v, list)}
        if len(set(lengths.values())) > 1:
            out.append(f"series have unequal lengths: {lengths}")
        return out


# (field, its type, the type in words) of a record's mappings and lists
_FIELD_TYPES = (*((name, dict, "a mapping") for name in ("config", "env", "measurements", "derived", "series",
                                                         "artifacts")),
                ("warnings", list, "a list"), ("ranks", list, "a list"))


def _readable_schema(version) -> bool:
    return isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= SCHEMA_VERSION


def impossible_values(rec: RunRecord) -> list[str]:
    """Figures no measurement can produce: non-finite numbers anywhere in the measurements and derived
    figures (xbench writes null), a negative throughput, step time, price or cost, more epochs done than the
    run's goal.max_epochs, a priced component with a negative or non-finite amount."""
    return _figure_problems(rec) + _epochs_problems(rec) + _price_problems(rec)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    """A finite float, or an integer a float can hold (10**400 in a record's JSON is neither)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _shown(v) -> str:
    """A figure for a message: an integer past a float's range by its size, not its 400 digits."""
    return f"an integer of {len(str(abs(v)))} digits" if isinstance(v, int) and not _finite(v) else str(v)


def _figure_problems(rec: RunRecord) -> list[str]:
    """A measured or derived number that is not finite, or negative where it cannot be (NON_NEGATIVE)."""
    out = []
    for where, figures in (("measurements", rec.measurements), ("derived", rec.derived)):
        # at once first: numbers that are all >= 0 with a finite sum have no problem (one sum and one min
        # in C; each figure in Python was ~1 us, 34 a record); else each figure, for the messages
        nums = [v for v in figures.values() if _number(v)]
        try:
            if not nums or (min(nums) >= 0 and math.isfinite(sum(nums))):
                continue
        except OverflowError:  # integers past a float's range: each one is looked at
            pass
        for k, v in figures.items():
            if not _number(v):
                continue
            if not _finite(v):
                out.append(f"{where}.{k}={_shown(v)} is not a finite number")
            elif v < 0 and NON_NEGATIVE.search(k):
                out.append(f"{where}.{k}={v} cannot be negative")
    return out


def _epochs_problems(rec: RunRecord) -> list[str]:
    """More epochs done than goal.max_epochs: a run stops there, so more is a planted or damaged figure."""
    done, most = rec.measurements.get("epochs_done"), (rec.config.get("goal") or {}).get("max_epochs")
    if _number(done) and _number(most) and math.isfinite(done) and done > most:
        return [f"measurements.epochs_done={done:g} is beyond the run's goal.max_epochs={most:g}"]
    return []


def _price_problems(rec: RunRecord) -> list[str]:
    """A priced component whose amount is not a finite number >= 0."""
    price = (rec.config.get("platform") or {}).get("price") or []
    amounts = [c.get("amount", 0.0) if isinstance(c, dict) else c
               for c in (price if isinstance(price, list) else [price])]
    return [f"config.platform.price amount {a!r} is not a price (a finite number >= 0)" for a in amounts
            if not _number(a) or not math.isfinite(a) or a < 0]
