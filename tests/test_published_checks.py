"""studies.published_problems says every problem of a published entry, each once and in order: a field
missing, a kind not in KINDS, conditions that are not exactly the four, a source not of a listed article
with its quote, a date not YYYY[-MM[-DD]], a compare column of another kind; a good entry has none."""

from __future__ import annotations

from xbench import studies

GOOD = {"id": "ok", "what": "x", "value": 2796, "unit": "images/s", "kind": "real_throughput", "date": "2018-04",
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
