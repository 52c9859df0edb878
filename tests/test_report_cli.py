"""`python -m xbench.report`'s own lines, in this process: each option refused by argparse with its one line
(--out a file, --jobs 0, an unknown --format, a malformed --fx, an unknown --pool key), a query the frame
cannot answer as one line and status 2, and a report's summary (runs, tables, plots, the stages' times, what
was not drawn, each file written) and header (runs shown of those loaded, the notes on record files, the
query). FAKE records (xbench.report.fake)."""

from __future__ import annotations

import re

import pytest

from xbench.records.store import write_record
from xbench.report.__main__ import main
from xbench.report.fake import fake_record


def _store(root):
    for r in (fake_record("a", throughput=100.0, platform="cpu"),
              fake_record("b", throughput=200.0, platform="gpu"),
              fake_record("c", status="failed", reason="x")):
        write_record(root, r)
    return str(root)


@pytest.mark.parametrize("args,said", [
    (["--out", "FILE"], "--out FILE: not a folder (it is a file or a device); give a folder to write the "
                        "report in"),
    (["--jobs", "0"], "--jobs 0: give 1 or more processes"),
    (["--format", "md,pdf,x"], "--format pdf,x is unknown; allowed: html, md, csv"),
    (["--fx", "EUR"], "--fx takes CUR=RATE (USD per unit of CUR), e.g. --fx EUR=1.09; got ['EUR']"),
    (["--pool", "model"], "--pool model: not a key a bar may pool over; allowed: "),
])
def test_each_option_refused_is_argparses_one_line(tmp_path, capsys, monkeypatch, args, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("")
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), *args])
    assert e.value.code == 2 and f"error: {said}" in capsys.readouterr().err


def test_a_query_the_frame_cannot_answer_is_one_line(tmp_path, capsys):
    """A baseline that matches two configurations at one global batch: refused by the tables' stage."""
    store = _store(tmp_path / "s")
    write_record(tmp_path / "s", fake_record("d", throughput=300.0, platform="cpu", runtime="compile"))
    assert main([store, "--out", str(tmp_path / "o"), "--format", "csv", "--no-progress",
                 "--baseline", "platform=cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xbench.report: --baseline 'platform=cpu' is ambiguous: ") and err.count("\n") == 1


def test_the_summary_and_the_header_say_what_was_made(tmp_path, capsys):
    store = _store(tmp_path / "s")
    (tmp_path / "s" / "broken").mkdir()
    (tmp_path / "s" / "broken" / "record.json").write_text("{")
    out = tmp_path / "o"
    assert main([store, "--out", str(out), "--format", "md,csv", "--no-progress",
                 "--filter", "status=ok,failed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"xbench\.report: 3 runs -> \d+ tables, \d+ plots in {re.escape(str(out))}/ "
                        r"\(load [\d.]+ s, tables [\d.]+ s, csv [\d.]+ s, plots \(waited\) [\d.]+ s, "
                        r"html/md [\d.]+ s; total [\d.]+ s\)", lines[0]), lines[0]
    assert not [x for x in lines[1:] if not x.startswith(("  wrote ", "  not drawn: "))]
    assert lines[-1] == f"  wrote {out / 'report.md'}" and f"  wrote {out / 'tables'}" in "\n".join(lines)
    md = (out / "report.md").read_text()
    assert ("3 runs shown (2 ok, 1 failed) of 3 records loaded; 1 notes on record files (unreadable, "
            "refused, copied or misnamed; named above)") in md
    assert ("Filters: status=ok,failed. Baseline: none. Pooled: nothing (batch size, precision and "
            "strategy kept apart).") in md
    assert "# xbench report: status=ok,failed" in md


def test_the_stages_are_shown_as_they_begin_and_gone_before_the_summary(tmp_path, capsys, monkeypatch):
    """Over many runs the report works for seconds after its loading bar: each stage is named on one stderr
    line as it begins (rewritten by the next, erased before the summary); none with --no-progress or under
    STAGES_MIN_RUNS runs."""
    import xbench.report.__main__ as cli

    store = _store(tmp_path / "s")
    monkeypatch.setattr(cli, "STAGES_MIN_RUNS", 3)
    assert main([store, "--out", str(tmp_path / "o"), "--format", "md,csv", "--jobs", "1"]) == 0
    said = capsys.readouterr()
    stages = [s.strip() for s in said.err.split("\r") if s.strip()]
    assert len(stages) == 4, stages
    assert re.fullmatch(r"xbench\.report: 3 runs read in [\d.]+ s; building the tables and findings", stages[0])
    assert re.fullmatch(r"xbench\.report: writing the CSV tables \(\d+ files\)", stages[1]), stages[1]
    assert stages[2:] == ["xbench.report: drawing the plots", "xbench.report: writing report.md"]
    assert said.err.endswith("\r"), repr(said.err[-80:])  # tqdm's leave=False: the line erased
    assert said.out.startswith("xbench.report: 3 runs -> ")
    assert main([store, "--out", str(tmp_path / "o2"), "--format", "csv", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(cli, "STAGES_MIN_RUNS", 4)
    assert main([store, "--out", str(tmp_path / "o3"), "--format", "csv"]) == 0
    assert capsys.readouterr().err == ""
    # a query the tables cannot answer: its message on a line of its own, after the erased stage line
    write_record(tmp_path / "s", fake_record("d", throughput=300.0, platform="cpu", runtime="compile"))
    assert main([store, "--out", str(tmp_path / "o4"), "--format", "csv", "--baseline", "platform=cpu"]) == 2
    err = capsys.readouterr().err
    assert err.split("\r")[-1].startswith("xbench.report: --baseline"), repr(err)
