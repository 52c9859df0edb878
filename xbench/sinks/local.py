"""The local store: always written first, at start (status running) and at the end."""

from __future__ import annotations

from pathlib import Path

from xbench.records.record import RunRecord
from xbench.records.store import run_dir, write_record


class LocalSink:
    def __init__(self, root: str):
        self.root = root

    def run_dir(self, record: RunRecord) -> Path:
        return run_dir(self.root, record.run_id)

    def write(self, record: RunRecord) -> Path:
        return write_record(self.root, record)
