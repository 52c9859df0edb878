"""`python -m xbench.cost STORE --platform NAME [--price ...]`: recompute the cost figures of stored records
under another platform's price, without rerunning anything and without importing torch.

The measurements stay as they were (throughput, time to target); only the price changes, so this answers
"what would these runs have cost on X" when X's speed is the measured one: use it to re-price a run on
the same hardware under another pricing model (spot, reserved, another provider), or to refresh prices.

  python -m xbench.cost results --platform aws_p3_8xlarge_reserved_1y
  python -m xbench.cost results --platform gce_k80 --price gpu=0.35 --price host_vm=0.0475
  python -m xbench.cost results --platform tpu_v2_8 --baseline <run id> --json

With --baseline, the records that did the same work as the baseline (xbench/analysis/workload.py: model,
data and their options) get time and cost normalised to it; the others have nothing to be compared with.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from omegaconf import OmegaConf

from xbench.analysis import currency as fx
from xbench.analysis.baseline import same_work
from xbench.analysis.frame import read
from xbench.config import PlatformConfig, range_problems
from xbench.metrics.cost import currency, not_numbers, problems
from xbench.metrics.derived import derive
from xbench.records.record import RunRecord
from xbench.records.store import find_run, read_record
from xbench.tools import prog

CONF = Path(__file__).resolve().parent / "conf"
if not CONF.is_dir():  # editable install: the checkout's top-level conf/
    CONF = Path(__file__).resolve().parent.parent / "conf"


# A platform YAML is a page of prices: bounded in bytes, nesting and in its size once aliases are expanded
# (a few aliases nested can stand for a billion nodes: the "billion laughs").
MAX_PLATFORM_BYTES = 1 << 20
MAX_PLATFORM_NODES = 100_000
MAX_PLATFORM_DEPTH = 32


def _expanded_nodes(x, memo: dict, depth: int = 0) -> int:
    """Nodes of a safe-loaded YAML tree with every alias expanded (aliases share one object: memo by id)."""
    if depth > MAX_PLATFORM_DEPTH:
        raise ValueError(f"nested more than {MAX_PLATFORM_DEPTH} levels")
    if not isinstance(x, (dict, list)):
        return 1
    if id(x) not in memo:
        children = list(x.values()) + list(x.keys()) if isinstance(x, dict) else x
        memo[id(x)] = 1 + sum(_expanded_nodes(c, memo, depth + 1) for c in children)
    return memo[id(x)]


def read_platform_yaml(path: Path):
    """The YAML at `path` as plain data (SafeLoader), refused (ValueError) past the size limits above."""
    import yaml

    if not path.is_file():
        raise ValueError("not a regular file")
    with open(path, "rb") as f:
        data = f.read(MAX_PLATFORM_BYTES + 1)
    if len(data) > MAX_PLATFORM_BYTES:
        raise ValueError(f"more than {MAX_PLATFORM_BYTES} bytes")
    try:
        tree = yaml.safe_load(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except yaml.YAMLError as e:
        raise ValueError(f"not valid YAML: {e}") from None
    nodes = _expanded_nodes(tree, {})
    if nodes > MAX_PLATFORM_NODES:
        raise ValueError(f"{nodes} values once its aliases are expanded, more than {MAX_PLATFORM_NODES} "
                         "allowed (an alias bomb?)")
    if not isinstance(tree, dict):
        raise ValueError("not a mapping of platform keys")
    return tree


def load_platform(name: str) -> dict:
    """conf/platform/NAME.yaml (or a path to a YAML) merged onto the schema, as a plain dict. A file past the
    size limits (bytes, nesting, aliases expanded) is refused before OmegaConf sees it."""
    path = Path(name) if name.endswith(".yaml") else CONF / "platform" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (CONF / "platform").glob("*.yaml"))
        raise SystemExit(f"xbench.cost: no platform {name!r}; known: {', '.join(known)}")
    try:
        tree = read_platform_yaml(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"xbench.cost: platform file {path}: {e}") from None
    merged = OmegaConf.merge(OmegaConf.structured(PlatformConfig), tree)
    return OmegaConf.to_container(merged, resolve=True)


def _price_targets(platform: dict, o: str, name: str) -> list[dict]:
    """The components `--price o` sets: the named one, or the only usage component."""
    comps = platform.get("price") or []
    wanted = (lambda c: c.get("name") == name) if name else (lambda c: c.get("kind", "usage") == "usage")
    targets = [c for c in comps if wanted(c)]
    if not targets:
        raise SystemExit(f"xbench.cost: --price {o!r}: platform {platform.get('name')!r} has components "
                         f"{[c.get('name') for c in comps]}")
    if not name and len(targets) > 1:
        raise SystemExit(f"xbench.cost: --price {o!r} is ambiguous: name the component "
                         f"({', '.join(c.get('name') for c in targets)}=AMOUNT)")
    return targets


def _amount(o: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SystemExit(f"xbench.cost: --price {o!r}: {value!r} is not a number") from None


def apply_prices(platform: dict, overrides: list[str]) -> dict:
    """`--price 2.5` sets the only usage component's amount; `--price NAME=2.5` the named one."""
    for o in overrides:
        name, _, value = o.rpartition("=")
        targets = _price_targets(platform, o, name)
        amount = _amount(o, value)
        for c in targets:
            c["amount"] = amount
    return platform


def price_problems(platform: dict) -> list[str]:
    """Prices no run could have had, each named (empty: fine): the ranges a run's own platform is held to
    (the knobs of xbench/config/platform.py: an amount up to 1e12, a count of at least 1, finite numbers),
    and a currency the rate table knows (else its figures could be compared with nothing)."""
    out = [f"xbench.cost: {p}" for p in range_problems({"platform": platform})]
    for c in platform.get("price") or []:
        cur = c.get("currency", "USD")
        if not fx.known(cur):
            out.append(f"xbench.cost: platform {platform.get('name')!r} price component "
                       f"{c.get('name', '?')!r}: currency={cur!r} is unknown; known: "
                       f"{', '.join(fx.currencies())}")
    return out + [f"xbench.cost: {p}" for p in problems(platform, numbers=False)]  # numbers: said above


def reprice(record: dict, platform: dict, baseline: dict | None = None) -> dict:
    """The record's derived figures recomputed with `platform` in place of its own."""
    config = {**record["config"], "platform": platform}
    return derive(record["measurements"], config, baseline=baseline)


SHOWN = ("throughput_samples_per_s", "epochs_to_target", "train_time_to_target_s")


class _Refused(Exception):
    """Nothing to price: its message on stderr, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog("xbench.cost"),
                                 description=__doc__.split("\n\n")[0].split("`: ", 1)[1])
    ap.add_argument("store", help="a results folder (or one run folder)")
    ap.add_argument("--platform", required=True, help="conf/platform name, or a path to a platform YAML")
    ap.add_argument("--price", action="append", default=[], metavar="[COMPONENT=]AMOUNT",
                    help="override a price component's amount (repeatable)")
    ap.add_argument("--baseline", help="run id or folder: add time and cost normalised against it")
    ap.add_argument("--json", action="store_true", help="one JSON object per record instead of a table")
    return ap


def _records(store: str) -> list:
    """The store's records; the ones that could not be read named on stderr."""
    try:
        records, skipped = read([store])
    except FileNotFoundError as e:
        raise _Refused(f"xbench.cost: {e}") from e
    for msg in skipped:
        print(f"xbench.cost: WARNING {msg}", file=sys.stderr)
    return records


def _baseline(run: str | None, store: str, platform: dict) -> tuple[RunRecord | None, dict | None]:
    """(the baseline's record, the baseline re-priced the same way, config included: normalise reads its
    currency there); (None, None) without --baseline."""
    if not run:
        return None, None
    try:
        base_rec = read_record(find_run(run, store))
    except (OSError, ValueError) as e:
        raise _Refused(f"xbench.cost: --baseline {run!r}: {e}") from e
    base = base_rec.to_dict()
    return base_rec, {**base, "config": {**base["config"], "platform": platform},
                      "derived": reprice(base, platform)}


def _skip(rec, why: str) -> None:
    print(f"xbench.cost: WARNING skipping record {getattr(rec, 'source', None) or rec.run_id}: {why}",
          file=sys.stderr)


def _row(r: dict, platform: dict, against: dict | None) -> dict:
    """One record's row: what it measured and its figures re-priced (ValueError: one is not finite)."""
    row = {"run_id": r["run_id"], "experiment": r["experiment"], "platform": platform["name"],
           **{k: r["measurements"].get(k) for k in SHOWN}, **reprice(r, platform, against)}
    if inf := [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]:
        raise ValueError(f"{', '.join(inf)} not finite (an extreme measurement or price)")
    return row


def _rows(records: list, platform: dict, base_rec, baseline: dict | None) -> list[dict]:
    """The ok records re-priced; one odd record never stops the others: named, skipped."""
    rows = []
    for rec in (rec for rec in records if rec.status == "ok"):
        r = rec.to_dict()
        if bad := not_numbers(r.get("measurements") or {}):  # a boolean or text throughput is not priced
            _skip(rec, "; ".join(bad))
            continue
        try:
            against = baseline if base_rec is not None and same_work(rec, base_rec) else None
            rows.append(_row(r, platform, against))
        except Exception as e:
            _skip(rec, f"{type(e).__name__}: {e}")
    return rows


def _print_table(rows: list[dict], platform: dict) -> None:
    """The rows as a tab-separated table of the columns some row has."""
    cur = currency(platform).lower()
    cols = ["run_id", "throughput_samples_per_s", f"{cur}_per_hour", f"{cur}_per_million_samples",
            f"window_cost_{cur}", "epochs_to_target", "train_time_to_target_s", f"train_cost_to_target_{cur}",
            f"cost_to_target_{cur}", "normalised_time", "normalised_cost"]
    cols = [c for c in cols if any(row.get(c) is not None for row in rows)]
    print(f"priced as {platform['name']} ({platform.get('price_source')}, "
          f"as of {platform.get('price_as_of')})")
    print("\t".join(cols))
    for row in rows:
        print("\t".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in (row.get(c) for c in cols)))


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    platform = apply_prices(load_platform(a.platform), a.price)
    if bad := price_problems(platform):  # every impossible price at once, one line each, before any record
        print("\n".join(dict.fromkeys(bad)), file=sys.stderr)
        return 2
    try:
        records = _records(a.store)
        base_rec, baseline = _baseline(a.baseline, a.store, platform)
    except _Refused as e:
        print(e, file=sys.stderr)
        return 2
    rows = _rows(records, platform, base_rec, baseline)
    if a.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print(f"xbench.cost: no ok records under {a.store}", file=sys.stderr)
        return 1
    _print_table(rows, platform)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
