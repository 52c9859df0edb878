"""The report at scale (issue [R4 6/7]): what keeps 100,000 records within memory. Timings are make bench's
(scripts/bench_report.py), not a test's: a shared machine's seconds say nothing."""

from __future__ import annotations

import gc
import json
import weakref

from xbench.analysis import frame
from xbench.report.fake import write_fake_store


def test_load_lets_each_record_go_once_its_row_is_made(tmp_path, monkeypatch):
    """frame.load lays out each record as it is read and keeps only its row: when the 5th record is laid out,
    the 1st is gone. Before, every record was read into a list first (100,000 records held at once)."""
    store = write_fake_store(tmp_path / "store", 6)
    alive: list[weakref.ref] = []
    seen_alive: list[int] = []
    real = frame.flatten

    def flatten(rec):
        alive.append(weakref.ref(rec))
        gc.collect()
        seen_alive.append(sum(r() is not None for r in alive))
        return real(rec)

    monkeypatch.setattr(frame, "flatten", flatten)
    loaded = frame.load([store], progress=False)
    assert len(loaded.frame) == 6 and loaded.skipped == []
    assert max(seen_alive) <= 2, seen_alive  # the one being laid out (and at most the one before): was 1, 2, ... 6


def test_streamed_load_keeps_the_messages_of_copies_and_refusals(tmp_path):
    """The same skipped messages as reading every record first: a copied run folder counted once and named, a
    record whose numbers are not numbers refused by name, an unreadable file named."""
    store = write_fake_store(tmp_path / "store", 3)
    (store / "copy").mkdir()
    (store / "copy" / "record.json").write_text((store / "fake-000001" / "record.json").read_text())
    bad = json.loads((store / "fake-000002" / "record.json").read_text())
    bad["measurements"]["step_time_s_median"] = "fast"
    (store / "fake-000002" / "record.json").write_text(json.dumps(bad))
    (store / "torn").mkdir()
    (store / "torn" / "record.json").write_text('{"run_id": ')
    records, skipped = frame.read([store])
    expected = frame.to_frame(records, skipped)
    loaded = frame.load([store], progress=False)
    assert loaded.skipped == skipped and len(skipped) == 3
    assert list(loaded.frame["run_id"]) == list(expected["run_id"]) == ["fake-000001", "fake-000000"]  # by first sight: copy/ sorts first
    assert "refusing record" in skipped[-1] and "step_time_s_median='fast'" in skipped[-1]


def test_two_process_load_gives_the_same_frame_and_messages(tmp_path, monkeypatch):
    """From PARALLEL_MIN_RECORDS files a forked process reads the second half: the frame, its column order and
    the skipped messages are those of one process (unreadable files in both halves, a copy across them)."""
    store = write_fake_store(tmp_path / "store", 8)
    (store / "fake-000001" / "record.json").write_text('{"run_id": ')
    (store / "fake-000006" / "record.json").write_text("[]")
    (store / "zz-copy").mkdir()
    (store / "zz-copy" / "record.json").write_text((store / "fake-000002" / "record.json").read_text())
    one = frame.load([store], progress=False)
    monkeypatch.setattr(frame, "PARALLEL_MIN_RECORDS", 2)
    two = frame.load([store], progress=False)
    assert two.frame.equals(one.frame) and list(two.frame.columns) == list(one.frame.columns)
    assert two.skipped == one.skipped and len(one.skipped) == 3  # 2 unreadable, the copy (in both halves)
    assert len(one.frame) == 6
