"""store: where each run's record and files go (xbench/records/store.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StoreConfig:
    root: str = "results"  # one folder per run below this
    run_name: str | None = None  # optional readable prefix of the run id


def name_problems(plain: dict) -> list[str]:
    """What must be refused before a record can be written: an empty store.root, a run name whose run ids
    could not name a folder, resume=''. `plain`: the whole config as plain dicts."""
    from xbench.records.names import name_problem

    out = []
    store = plain.get("store") or {}
    if not str(store.get("root") or "").strip():
        out.append(f"store.root={store.get('root')!r} names no folder; give the folder the runs go under "
                   "(default results)")
    name = store.get("run_name")
    if name is not None:
        # the longest run id it would give: <name>-<YYYYmmdd-HHMMSS>-<hex8>
        example = f"{name}-{'0' * 15}-{'0' * 8}"
        if why := name_problem(str(name), "store.run_name"):
            out.append(why)
        elif name_problem(example, "store.run_name"):
            out.append(
                f"store.run_name={name!r} is {len(str(name))} characters; its run ids ({len(example)}) would "
                f"not name a folder: at most {len(str(name)) - (len(example) - 120)} characters"
            )
    if plain.get("resume") is not None and not str(plain["resume"]).strip():
        out.append("resume='' names no run; give a run id or folder (or leave resume out for a fresh run)")
    return out
