"""The studies' published figures beside what the stored runs measured (xbench/studies/studies.yaml).

A published figure is never a run: it is not in the frame, so no median, spread or baseline ever
mixes it with measured records. Here each figure of a study whose runs are in the frame comes back as
one row; when the manifest says what to compare it with (`compare: {column, where}`), the row also
holds the median of that column over the ok runs matching `where` (column -> value, as the tidy frame
has them), and how many runs that was. No match: `measured` is None and the row says why.
"""

from __future__ import annotations

from xbench import studies
from xbench.analysis.frame import matches
from xbench.analysis.rows import Rows


def published_beside_measured(rows) -> list[dict]:
    """One row per published figure of the studies present in `rows` (by experiment = preset)."""
    rows = Rows.of(rows)
    present = {r.get("experiment") for r in rows}
    out = []
    for study in studies.all_studies():
        if study["preset"] not in present:
            continue
        mine = Rows(r for r in rows if r.get("experiment") == study["preset"])
        for fig, pub in zip(study.get("published") or [], studies.published_rows(study["id"])):
            row = {**pub, "measured": None, "measured_runs": 0, "measured_column": None, "measured_where": None}
            spec = fig.get("compare")
            if spec:
                where = {k: [str(v)] for k, v in (spec.get("where") or {}).items()}
                hit = Rows(r for r in mine.ok(spec["column"]) if matches(r, where))
                row.update(measured=hit.median(spec["column"]), measured_runs=len(hit),
                           measured_column=spec["column"],
                           measured_where=", ".join(f"{k}={v}" for k, v in (spec.get("where") or {}).items()))
            out.append(row)
    return out
