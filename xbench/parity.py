"""`python -m xbench.parity --a runtime=eager --b runtime=compile [common overrides]`

Runs the same workload under two configs (each a normal xbench run leaving its own record), then
compares their losses at the first `--steps` optimizer steps both runs recorded, step by step, within a
tolerance set by precision (xbench.metrics.parity), and writes a third record, `experiment: parity`, with
the verdict: status `ok` when they agree, `failed` with the worst step and deviation when they do not, or
when the runs have fewer steps in common than that. Exit status 0/1.

Steps are optimizer steps counted from each run's first (record.series `step`), not places in the loss
series: warm-up ends on evidence and a stalled window is measured again (its steps trained, not kept), so
on a loaded machine the two runs keep different steps, and comparing by place compared different steps.

Parity holds only when both runs start from the same weights and see the same batches: xbench seeds
the model before building it on the host and generates synthetic pools on the host with a fixed
seed, so the data are identical across runtimes and devices.

Design: a separate entry point rather than a `bench.mode`, because one run = one config everywhere
else in xbench; parity is a relation between two runs and is recorded as such.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from hydra import compose, initialize_config_dir

from xbench.config import config_dir, register_configs, register_model_choices
from xbench.metrics.parity import by_step, common_steps, compare_losses, tolerance
from xbench.records.record import RunRecord
from xbench.records.store import new_run_id
from xbench.runner import run
from xbench.runtimes import preload_xla
from xbench.sinks.local import LocalSink
from xbench.tools import prog


def _split(values: list[str]) -> list[str]:
    return [tok for v in values for tok in shlex.split(v)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog("xbench.parity"), description=__doc__.split("\n\n")[1])
    ap.add_argument("--a", action="append", default=[], help="overrides of run A (repeat or quote several)")
    ap.add_argument("--b", action="append", default=[], help="overrides of run B")
    ap.add_argument("--steps", type=int, default=20, help="losses compared: the first steps both runs kept")
    ap.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: by precision)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides common to both runs")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    # Windows of exactly --steps steps (not sized by time), one more than the stalled windows a run may
    # measure again: each run keeps every step of its warm-up, then R windows out of at most R + r slots of N
    # steps (r re-measured); with R = r + 1 the steps both runs kept are at least N, whatever was re-measured.
    common = [*args.overrides, f"bench.steps={args.steps}", "bench.min_window_s=0", "bench.repeats=1"]
    register_configs()
    register_model_choices(common + _split(args.a) + _split(args.b))  # model=torchvision/NAME and the like
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfgs = {k: compose(config_name="config", overrides=common + _split(v))
                for k, v in (("a", args.a), ("b", args.b))}
    for c in cfgs.values():
        c.bench.repeats = max(c.bench.repeats, c.bench.stall_remeasure + 1)
    preload_xla(" ".join(c.runtime.name for c in cfgs.values()))
    recs = {k: run(c) for k, c in cfgs.items()}

    precisions = [c.precision.name for c in cfgs.values()]
    rtol = args.rtol if args.rtol is not None else tolerance(*precisions)
    rec = RunRecord(
        run_id=new_run_id("parity"),
        experiment="parity",
        config={
            "bench": {"mode": "parity"},
            "parity": {
                "a": _split(args.a),
                "b": _split(args.b),
                "common": common,
                "steps": args.steps,
                "rtol": rtol,
            },
        },
    )
    rec.measurements = {"run_a": recs["a"].run_id, "run_b": recs["b"].run_id,
                        "precision_a": precisions[0], "precision_b": precisions[1]}
    bad = [f"run {k} ({r.run_id}) ended {r.status}: {r.reason}" for k, r in recs.items() if r.status != "ok"]
    if bad:
        rec.finish("failed", "parity not checked: " + "; ".join(bad))
    else:
        _verdict(rec, recs, args.steps, rtol)
    store = cfgs["a"].store.root
    path = LocalSink(store).write(rec)
    m = rec.measurements
    over = (f"over {m['parity_steps_compared']} steps ({m['parity_step_first']}-{m['parity_step_last']})"
            if "parity_steps_compared" in m else "no steps compared")
    print(f"xbench parity {rec.run_id}: {rec.status.upper()}  A={' '.join(_split(args.a))}  "
          f"B={' '.join(_split(args.b))}  max rel dev {m.get('parity_max_rel_dev', float('nan')):.3g} "
          f"(tolerance {rtol:g}) {over}\n  record: {path}", flush=True)
    if rec.status != "ok":
        print(f"  {rec.reason}", file=sys.stderr)
    return 0 if rec.status == "ok" else 1


def _verdict(rec: RunRecord, recs: dict[str, RunRecord], steps: int, rtol: float) -> None:
    """Compare the two runs' losses at the same optimizer steps; finish `rec` with the verdict."""
    try:
        la, lb = (by_step(r.series, f"run {k} ({r.run_id})") for k, r in recs.items())
        compared = common_steps(la, lb, steps)
    except ValueError as e:
        rec.finish("failed", f"parity not checked: {e}")
        return
    verdict = compare_losses(la, lb, steps, rtol)
    rec.measurements.update(verdict)
    rec.series = {"step": compared, "loss_a": [la[s] for s in compared], "loss_b": [lb[s] for s in compared]}
    if verdict["parity_passed"]:
        rec.finish("ok")
    else:
        rec.finish(
            "failed",
            f"parity: losses differ by {verdict['parity_max_rel_dev']:.3g} (relative) at step "
            f"{verdict['parity_worst_step']}, tolerance {rtol:g} ({len(compared)} steps compared, "
            f"{compared[0]}-{compared[-1]})",
        )


if __name__ == "__main__":
    raise SystemExit(main())
