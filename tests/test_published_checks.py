"""studies.published_problems says every problem of a published entry, each once and in order: a field
missing, a kind not in KINDS, conditions that are not exactly the four, a source not of a listed article
with its quote, a date not YYYY[-MM[-DD]], a compare column of another kind; a good entry has none."""

from __future__ import annotations

from xbench import studies

GOOD = {"id": "ok", "what": "x", "value": 2796, "unit": "images/s", "kind": "real_throughput",
        "date": "2018-04",
        "conditions": {"hardware": "h", "batch": "b", "precision": "p", "data": "d"},
        "source": {"article": "riseml_2018", "quote": "q"},
        "compare": {"column": "throughput_samples_per_s", "where": {"data": "imagenet"}}}
BAD = {"id": "bad", "what": "x", "value": "", "unit": "images/s", "kind": "speed", "date": "April 2018",
       "conditions": {"hardware": "h", "batch": ""}, "source": {"article": "nobody", "quote": "q"},
       "compare": {"column": "throughput_samples_per_s", "where": {}}}


def test_every_problem_of_an_entry_is_said_in_order(monkeypatch):
    manifest = studies._manifest()
    fake = {**manifest, "studies": [{"id": "s", "preset": "s", "published": [GOOD, BAD]}]}
    monkeypatch.setattr(studies, "_manifest", lambda: fake)
    arts = ", ".join(manifest["articles"])
    assert studies.published_problems() == [
        "s/bad: no value",
        f"s/bad: kind 'speed' is not one of {', '.join(studies.KINDS)}",
        "s/bad: conditions must give exactly hardware, batch, precision, data (n/a where none applies), got "
        "{'hardware': 'h', 'batch': ''}",
        f"s/bad: source must be {{article: <one of {arts}>, quote: <the sentence>}}",
        "s/bad: date 'April 2018' is not YYYY[-MM[-DD]]",
        "s/bad: compare column throughput_samples_per_s (where {}) is of no kind, the figure is speed",
    ]


def test_a_compare_of_another_kind_that_slips_through_is_never_set_beside_a_run(monkeypatch):
    from xbench.analysis.published import published_beside_measured

    manifest = studies._manifest()
    other = {**GOOD, "id": "bad", "compare": {"column": "throughput_samples_per_s", "where": {}}}
    fake = {**manifest, "studies": [{"id": "s", "preset": "p",
                                     "published": [GOOD, other, {**GOOD, "id": "none", "compare": None}]}]}
    monkeypatch.setattr(studies, "_manifest", lambda: fake)
    runs = [{"experiment": "p", "status": "ok", "data": "imagenet", "throughput_samples_per_s": t}
            for t in (1.0, 3.0)]
    got = {r["figure"]: r for r in published_beside_measured(runs)}
    ok = got["ok"]
    assert (ok["measured"], ok["measured_runs"], ok["measured_where"]) == (2.0, 2, "data=imagenet")
    assert ok["why_not"] is None
    assert got["bad"]["measured"] is None and got["bad"]["measured_runs"] == 0
    assert got["bad"]["why_not"] == ("throughput_samples_per_s is of no kind here, the figure is "
                                     "real_throughput: not comparable")
    assert got["none"]["why_not"] == "no xbench run measures this figure's setting"
    assert list(ok)[-4:] == ["measured", "measured_runs", "measured_column", "measured_where"]
    assert "compare" not in ok
