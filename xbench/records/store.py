"""The store: one folder per run under a root, each with record.json written atomically.

A reader never sees a half-written record: the JSON goes to a temporary file in the same folder,
is flushed to disk, then renamed over record.json (rename is atomic on POSIX file systems).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from xbench.records.record import RunRecord
from xbench.records.redact import redact

RECORD_FILE = "record.json"
CHECKPOINT_FILE = "checkpoint.pt"  # a train-to-target run's resumable state (modes/target.py)


def new_run_id(prefix: str | None = None) -> str:
    """Sortable by time and unique across parallel jobs (random suffix, no shared counter)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rid = f"{stamp}-{secrets.token_hex(4)}"
    return f"{prefix}-{rid}" if prefix else rid


def run_dir(root: str | os.PathLike, run_id: str) -> Path:
    return Path(root) / run_id


def find_run(ref: str | os.PathLike, root: str | os.PathLike) -> Path:
    """The record.json of a run given by folder (or record.json path) or by run id under `root`."""
    for cand in (Path(ref), Path(ref) / RECORD_FILE, run_dir(root, str(ref)) / RECORD_FILE):
        if cand.is_file() and cand.name == RECORD_FILE:
            return cand
    raise FileNotFoundError(f"no run {str(ref)!r}: not a run folder, nor a run id under {root}")


def _json_safe(x):
    """NaN/inf are not JSON: store them as null (and keep JSON strict for every reader)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(root: str | os.PathLike, record: RunRecord) -> Path:
    path = run_dir(root, record.run_id) / RECORD_FILE
    # Last net for secrets: environment secret values never reach the disk, whatever field holds them.
    text = json.dumps(_json_safe(redact(record.to_dict(), by_name=False)), indent=1, sort_keys=False, allow_nan=False, default=str)
    atomic_write_text(path, text)
    return path


def read_record(path: str | os.PathLike) -> RunRecord:
    with open(path) as f:
        return RunRecord.from_dict(json.load(f))


def iter_record_paths(root: str | os.PathLike) -> Iterator[Path]:
    root = Path(root)
    if (root / RECORD_FILE).is_file():  # a run folder given directly
        yield root / RECORD_FILE
        return
    yield from sorted(root.glob(f"*/{RECORD_FILE}"))


def scan_records(*roots: str | os.PathLike, progress: bool = False,
                 strict: bool = False) -> tuple[list[RunRecord], list[str]]:
    """(every readable record under the roots, one message per unreadable file naming it).

    The report and `xbench.cost` list the skipped files themselves; strict=True raises at the first.
    progress=True shows a bar on stderr when there are many files (the report loads thousands).
    """
    out, skipped = [], []
    paths = [p for root in roots for p in iter_record_paths(root)]
    if progress and len(paths) > 200:
        from tqdm import tqdm

        paths = tqdm(paths, desc="loading records", unit="record", mininterval=0.5, file=sys.stderr)
    for path in paths:
        try:
            out.append(read_record(path))
        except (OSError, ValueError, TypeError) as e:
            if strict:
                raise
            skipped.append(f"skipping unreadable record {path}: {e}")
    return out, skipped


def load_records(*roots: str | os.PathLike, on_error: str = "warn", progress: bool = False) -> list[RunRecord]:
    """Every readable record under the roots; unreadable ones are skipped with a warning naming them
    (on_error="raise": the first one raises)."""
    out, skipped = scan_records(*roots, progress=progress, strict=on_error == "raise")
    for msg in skipped:
        warnings.warn(msg, stacklevel=2)
    return out
