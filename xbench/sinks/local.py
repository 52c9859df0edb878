"""The local store: always written first, at start (status running) and at the end.

A store that cannot take the record (full, read-only, gone) never loses it: the record goes to the
first fallback root that can (records/store.py: fallback_roots), and `unsaved` says what happened, so
that the console names the place and the exit status says so. If nothing can be written at all, the
caller prints the record itself.
"""

from __future__ import annotations

from pathlib import Path

from xbench.records.record import RunRecord
from xbench.records.store import RECORD_FILE, atomic_write_text, fallback_roots, record_text, run_dir


class LocalSink:
    def __init__(self, root: str, name: str = RECORD_FILE):
        self.root = root
        self.name = name  # record.json, or a resume attempt's own file until it may replace it
        self.unsaved: str | None = None  # why the last write did not reach the store (None: it did)
        self.nowhere = False  # the last write reached no folder at all

    def run_dir(self, record: RunRecord) -> Path:
        return run_dir(self.root, record.run_id)

    def write_file(self, record: RunRecord, name: str, text: str, fallback_text=None) -> Path | None:
        """A file of the run (the record, its traceback): in the store, else in a fallback root's run
        folder (`fallback_text()`, if given, is what goes there); None when no folder could take it."""
        try:
            path = self.run_dir(record) / name
            atomic_write_text(path, text)
            self.unsaved = None
            return path
        except OSError as e:
            self.unsaved = f"{type(e).__name__}: {e}"
        text = fallback_text() if fallback_text else text
        for root in fallback_roots():
            try:
                path = run_dir(root, record.run_id) / name
                atomic_write_text(path, text)
                return path
            except OSError:
                continue
        return None

    def write(self, record: RunRecord) -> Path | None:
        def noted():  # the record itself says where it belongs
            note = f"not in its store: store.root={self.root} could not take this record ({self.unsaved})"
            if not any(w.startswith("not in its store:") for w in record.warnings):
                record.warnings.append(note)
            return record_text(record)

        path = self.write_file(record, self.name, record_text(record), noted)
        self.nowhere = path is None
        return path

    def write_strict(self, record: RunRecord) -> Path:
        """The first write of a run: a store that cannot take it stops the run before any work."""
        path = self.run_dir(record) / self.name
        atomic_write_text(path, record_text(record))
        return path
