"""The store: one folder per run under a root, each with record.json written atomically.

- A reader never sees a half-written record: the JSON goes to a temporary file in the same folder,
  is flushed to disk, then renamed over record.json (rename is atomic on POSIX file systems). Files
  get the permissions the umask gives any file (the user's group reads the store as it says).
- Names stay where they belong: a run id or `store.run_name` is one plain folder name directly under
  the root (no '/', no '..').
- The reader opens only regular files of sane size (a FIFO, a device, a folder named record.json or a
  huge file is refused without blocking), refuses NaN/Infinity and anything but a JSON object, and
  names every file it skips.
- `RunLock`: the process that owns a run holds a lock in its folder, so two resumes never share it.
- `fallback_roots()`: where a record goes when the store cannot take it (sinks/local.py).
"""

from __future__ import annotations

import contextlib
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

from xbench.records import safe_io
from xbench.records.names import name_problem
from xbench.records.record import RunRecord
from xbench.records.redact import redact
from xbench.records.run_files import CHECKPOINT_FILE  # noqa: F401 (named there: a rank writes it)

RECORD_FILE = "record.json"
LOCK_FILE = ".lock"  # held (flock) by the process that owns the run: a second resume is refused
ATTEMPT_PREFIX = "attempt-"  # a resume attempt's record until it may replace record.json (runner.py)
# A record is JSON of a few MB at most (a long series); anything bigger, or not a regular file, is refused
# before it is read: a FIFO would block the reader, /dev/zero would never end.
MAX_RECORD_BYTES = 64 << 20
FALLBACK_ENV = "XBENCH_FALLBACK_DIR"


def new_run_id(prefix: str | None = None) -> str:
    """Sortable by time and unique across parallel jobs (random suffix, no shared counter)."""
    if prefix is not None and (why := name_problem(prefix, "store.run_name")):
        raise ValueError(why)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rid = f"{stamp}-{secrets.token_hex(4)}"
    return f"{prefix}-{rid}" if prefix else rid


def run_dir(root: str | os.PathLike, run_id: str) -> Path:
    """The run's folder, always directly under the root (a run id never climbs out of the store)."""
    if why := name_problem(run_id, "run_id"):
        raise ValueError(why)
    return Path(root) / run_id


def find_run(ref: str | os.PathLike, root: str | os.PathLike) -> Path:
    """The record.json of a run given by folder (or record.json path) or by run id under `root`."""
    cands = [Path(ref), Path(ref) / RECORD_FILE]
    if not name_problem(str(ref), "run"):  # an id: only directly under the root
        cands.append(run_dir(root, str(ref)) / RECORD_FILE)
    for cand in cands:
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
    """Temporary file of an unpredictable name in the same folder, fsync, rename: a reader sees the old file
    or the new one; never written through a planted link (records/safe_io.py). The file gets the
    permissions any file would (0666 less the umask), so the user's group reads the store as it says."""
    safe_io.atomic_write(path, text)


def record_text(record: RunRecord) -> str:
    # Last net for secrets: secret values never reach the disk, whatever field holds them.
    return json.dumps(_json_safe(redact(record.to_dict(), by_name=False)), indent=1, sort_keys=False,
                      allow_nan=False, default=str)


def write_record(root: str | os.PathLike, record: RunRecord, name: str = RECORD_FILE) -> Path:
    path = run_dir(root, record.run_id) / name
    atomic_write_text(path, record_text(record))
    return path


def fallback_roots() -> list[Path]:
    """Where a record goes when its store cannot take it: $XBENCH_FALLBACK_DIR, the user's state folder,
    the temporary folder (most likely other file systems than a full or read-only store)."""
    roots = [Path(os.environ[FALLBACK_ENV])] if os.environ.get(FALLBACK_ENV) else []
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    roots += [
        Path(state) / "xbench" / "unsaved",
        Path(tempfile.gettempdir()) / f"xbench-unsaved-{os.getuid()}",
    ]
    return roots


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a record can hold (xbench writes null)")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        _reject_constant(text)
    return v


# A number that could overflow a float to inf (1e999, or hundreds of digits): only then is each float checked
# in Python (_finite_float, a million calls over 10,000 records). Found on the text with its digits as 0 and E
# as e: without an exponent of 3 digits or a run of 200 digits every float is below 1e299.
_DIGITS_AS_0 = bytes.maketrans(b"123456789E", b"000000000e")


def _may_overflow(data: bytes) -> bool:
    t = data.translate(_DIGITS_AS_0)
    return b"e000" in t or b"e+000" in t or b"0" * 200 in t


def read_record_dict(path: str | os.PathLike) -> dict:
    """A record file's JSON object, read only if it is a regular file of sane size (a FIFO, a device,
    a folder or a huge file is refused without blocking or filling memory); NaN/Infinity are refused."""
    data = safe_io.read_limited(path, MAX_RECORD_BYTES, "record")
    d = safe_io.load_json(data, MAX_RECORD_BYTES, parse_constant=_reject_constant,
                          parse_float=_finite_float if _may_overflow(data) else None)
    if not isinstance(d, dict):
        raise ValueError(f"a record is a JSON object; this file holds a {type(d).__name__}")
    return d


def read_record(path: str | os.PathLike) -> RunRecord:
    """The record at `path`. A `running` record whose run folder's lock no process holds is a run that was
    killed outright (SIGKILL, power loss): it is marked `stale` (not a field) and its reason says so, so a
    listing never shows it as a live run."""
    rec = RunRecord.from_dict(read_record_dict(path))
    rec.source = str(path)  # not a field: where it was read from, for messages that name the file
    rec.stale = rec.status == "running" and not lock_held(Path(path).parent)
    if rec.stale and not rec.reason:
        rec.reason = ("stale: no process holds this run's lock (the run was killed: SIGKILL, power loss or a "
                      "crash before it could write its status)")
    return rec


def lock_held(folder: str | os.PathLike) -> bool:
    """Whether a live process holds the run folder's lock (RunLock). No lock file: not held."""
    import fcntl

    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the shared lock taken just now


def iter_record_paths(root: str | os.PathLike) -> Iterator[Path]:
    root = Path(root)
    if (root / RECORD_FILE).is_file():  # a run folder given directly
        yield root / RECORD_FILE
        return
    yield from sorted(root.glob(f"*/{RECORD_FILE}"))


class RunLocked(RuntimeError):
    """Another live process owns the run (its lock is held)."""


class RunLock:
    """An exclusive lock on one run folder: flock on `<run>/.lock`, released by the kernel when the
    owner exits however it exits (SIGKILL included), so a stale lock file never blocks anything."""

    def __init__(self, folder: str | os.PathLike):
        self.path = Path(folder) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        import fcntl

        safe_io.make_folder(self.path.parent)  # a run folder that is a planted link is refused
        # Opened without following a link (a planted .lock is refused, never truncated). Held read-only: a
        # store that turns read-only under a running run can still be remounted so.
        fd = safe_io.open_fd(self.path, os.O_RDONLY | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunLocked(
                f"run folder {self.path.parent} is in use by another process (pid {holder})"
            ) from None
        # who holds it, for the message
        with contextlib.suppress(OSError), safe_io.open_truncate(self.path) as f:
            f.write(f"{os.getpid()}\n")
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


def scan_records(*roots: str | os.PathLike, progress: bool = False,
                 strict: bool = False) -> tuple[list[RunRecord], list[str]]:
    """(every readable record under the roots, one message per unreadable file naming it).

    The report and `xbench.cost` list the skipped files themselves; strict=True raises at the first.
    progress=True shows a bar on stderr when there are many files (the report loads thousands).
    """
    skipped: list[str] = []
    return list(iter_records(*roots, skipped=skipped, progress=progress, strict=strict)), skipped


def iter_records(*roots: str | os.PathLike, skipped: list[str], progress: bool = False,
                 strict: bool = False) -> Iterator[RunRecord]:
    """scan_records one record at a time (a reader of 100,000 records keeps what it needs of each, not them
    all); each unreadable file is named in `skipped`."""
    return read_records([p for root in roots for p in iter_record_paths(root)], skipped, progress, strict)


def loading_bar(total: int, progress: bool, paths: list | None = None):
    """The bar on stderr while records are read (many files only; over `paths`: counting as they are read),
    or None."""
    if not progress or total <= 200:
        return None
    from tqdm import tqdm

    return tqdm(paths, total=total, desc="loading records", unit="record", mininterval=0.5, file=sys.stderr)


def read_records(paths: list[Path], skipped: list[str], progress: bool = False,
                 strict: bool = False) -> Iterator[RunRecord]:
    """The records at `paths`, one at a time; each unreadable file is named in `skipped`."""
    for path in loading_bar(len(paths), progress, paths) or paths:
        try:
            rec = read_record(path)
        except Exception as e:  # one odd file never stops a reader: it is named and skipped
            if strict:
                raise
            what = "" if isinstance(e, (OSError, ValueError)) else f"{type(e).__name__}: "
            skipped.append(f"skipping unreadable record {path}: {what}{e}")
            continue
        yield rec


def load_records(
    *roots: str | os.PathLike, on_error: str = "warn", progress: bool = False
) -> list[RunRecord]:
    """Every readable record under the roots; unreadable ones are skipped with a warning naming them
    (on_error="raise": the first one raises)."""
    out, skipped = scan_records(*roots, progress=progress, strict=on_error == "raise")
    for msg in skipped:
        warnings.warn(msg, stacklevel=2)
    return out
