"""The studies' published figures beside what the stored runs measured (xbench/studies/studies.yaml).

A published figure is never a run: it is not in the frame, so no median, spread or baseline ever
mixes it with measured records. Here each figure of a study whose runs are in the frame comes back as
one row. A figure is drawn beside a measurement only when the manifest names one of the same kind
(`compare: {column, where, scale}`; studies.column_kind: a throughput column is synthetic or real by the
data set `where` pins, so 2,796 img/s of real, augmented ImageNet never meets a synthetic run): the row
then holds the median of that column over the ok runs matching `where`, times `scale` (into the published
unit), and how many runs that was. Every row without a measured value says why (`why_not`).
"""

from __future__ import annotations

from xbench import studies
from xbench.analysis.frame import matches
from xbench.analysis.rows import Rows


def why_not_compared(fig: dict) -> str:
    """Why a figure without a compare spec is not drawn beside a measurement (the manifest may say itself)."""
    if fig.get("why_not"):
        return fig["why_not"]
    if fig.get("kind") == "cost" and studies.PRICE_UNIT.search(str(fig.get("unit") or "")):
        return (
            "a price, not a measurement: the platform files (conf/platform) carry the prices runs are billed "
            "at"
        )
    if fig.get("kind") in ("ratio", "difference"):
        return (f"a {fig['kind']} between two set-ups: xbench measures each side as a run of its own, and "
                "the baseline, scaling and overhead tables give the measured ratio")
    if fig.get("kind") == "count":
        return "a count the article states (of chips or accelerators), not a measurement"
    return "no xbench run measures this figure's setting"


def _measured(pub: dict, spec: dict | None, mine: Rows) -> dict:
    """What the study's runs measured for one published figure under its compare spec, or why nothing was."""
    if not spec:
        return {"why_not": why_not_compared(pub)}
    if mismatch := _kind_mismatch(pub, spec):
        return {"why_not": mismatch}
    return _median_under(spec, mine)


def _kind_mismatch(pub: dict, spec: dict) -> str | None:
    """Why a compare spec's column is not of the figure's kind; published_problems refuses this in the
    manifest, so it is never drawn if it slips."""
    kind = studies.column_kind(spec["column"], spec.get("where") or {})
    if kind != pub["kind"]:
        return f"{spec['column']} is {kind or 'of no kind'} here, the figure is {pub['kind']}: not comparable"
    return None


def _median_under(spec: dict, mine: Rows) -> dict:
    """The median of the spec's column over the ok runs under its `where` (times its scale), or why none."""
    where_spec = spec.get("where") or {}
    where = {k: [str(v)] for k, v in where_spec.items()}
    hit = Rows(r for r in mine.ok(spec["column"]) if matches(r, where))
    median = hit.median(spec["column"])
    where_text = ", ".join(f"{k}={v}" for k, v in where_spec.items())
    return {"measured": None if median is None else median * spec.get("scale", 1.0),
            "measured_runs": len(hit), "measured_column": spec["column"], "measured_where": where_text,
            "why_not": None if hit else f"no ok run here has {spec['column']} under {where_text}"}


def published_beside_measured(rows) -> list[dict]:
    """One row per published figure of the studies present in `rows` (by experiment = preset): the
    published row (studies.published_rows) plus measured, measured_runs, measured_column, measured_where
    and why_not."""
    rows = Rows.of(rows)
    present = {r.get("experiment") for r in rows}
    out = []
    for study in (s for s in studies.all_studies() if s["preset"] in present):
        mine = Rows(r for r in rows if r.get("experiment") == study["preset"])
        for pub in studies.published_rows(study["id"]):
            spec = pub.pop("compare")
            out.append({**pub, "measured": None, "measured_runs": 0, "measured_column": None,
                        "measured_where": None, **_measured(pub, spec, mine)})
    return out
