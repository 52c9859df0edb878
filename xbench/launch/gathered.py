"""What the ranks of one run left, as the record's launcher result: every rank's figures, or one stop.

torchrun's ranks and xla_mp's replicas both hand rank 0 (or the launcher's folder) one entry per rank: its
RankResult, its StopRequested (a stop every rank agreed on: bench/loop.py rule 10, train_to_target's control
points), or a RankLost (what a rank measured before an error ended it). A stop becomes one StopRequested:
rank 0's partial figures at the top, every rank's in `rank_partials`, `ranks_reporting` counting those with
any.
"""

from __future__ import annotations

from dataclasses import dataclass

from xbench.rank import LaunchResult, RankResult, StopRequested


@dataclass
class RankLost:
    """What a rank measured before an error ended it (a collective whose peer had gone: killed, or stopped
    without waiting), left in the launcher's folder: the record keeps its closed windows."""

    error: str
    partial: dict
    traceback: str | None = None  # the rank's own: the launcher may see only its peer's failure


def results_of(gathered: list, stop) -> LaunchResult:
    """Rank 0's gathered results; an agreed stop comes back as the StopRequested it was (with its signal)."""
    if any(isinstance(r, StopRequested) for r in gathered):
        raise stopped_of({0: gathered}, stop)  # every rank's partial figures, rank 0's at the top
    return LaunchResult.of(gathered)


def stopped_of(left: dict, stop, world: int = 0) -> StopRequested:
    """One StopRequested for the record from what the ranks left (rank -> gathered list, RankResult,
    StopRequested or RankLost): None in `rank_partials` for a rank that left nothing (killed, or failed in a
    collective its stopped peer left), counted up to `world` (the ranks started here). Sets `stop` from the
    signal a rank saw when the caller saw none."""
    gathered = left.get(0) if isinstance(left.get(0), list) else None
    world = len(gathered) if gathered is not None else max(world, max(left) + 1 if left else 0)
    per_rank = gathered if gathered is not None else [left.get(r) for r in range(world)]
    partials = [_partial(r) for r in per_rank]
    reason = next(filter(None, [p.pop("stop_reason", None) for p in partials if p]), None)
    if stop is not None:
        stop.requested, stop.reason = True, stop.reason or reason
    first = partials[0] if partials and partials[0] else next((p for p in partials if p), None)
    if first is None:
        return StopRequested({"phase": "ranks"})
    out = dict(first)
    out["phase"] = out.get("phase") or "ranks"
    out["rank_partials"] = partials
    out["ranks_reporting"] = sum(p is not None for p in partials)
    return StopRequested(out)


def _partial(left) -> dict | None:
    """One rank's figures from what it left: its stop's, its whole result's, or those before its error."""
    if isinstance(left, StopRequested):
        return left.partial
    if isinstance(left, RankResult):
        return left.measurements
    if isinstance(left, RankLost):
        return dict(left.partial, error=left.error)
    return None
