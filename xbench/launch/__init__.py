"""Launchers start the ranks a parallel strategy needs, run the work they are handed on every rank,
and gather the ranks' results. They know how to start ranks, never what a rank does.

`run(work)` picks the launcher the work's plan names (xbench/plan.py: the strategy's registry line):
- inline: this process is the only rank (or, with `fresh=True`, one freshly spawned process);
- torchrun: one process per rank through torch.distributed's elastic launcher, or joined when the
  `torchrun` command already started this process as a rank (launch/torchrun.py);
- xla: a fresh process for SPMD, or torch_xla.launch's processes on a TPU (launch/xla.py).

`work` is a picklable callable `work(ctx, on_step, stop) -> RankResult` (bench/windows.ThroughputWork,
bench/training.TargetWork) carrying the run's `plan`, with a `bar()` method that gives the totals of the bar a
launched rank 0 draws itself. Every launcher runs a rank through `preamble.run_rank`, so the rank's facts,
warnings and progress are handled once.
Add a launcher: a module with `launch(work, on_step, stop, fresh)` and a line in LAUNCHERS.
"""

from __future__ import annotations

import importlib

from xbench import env_vars, parallel
from xbench.launch import template
from xbench.launch.isolation import isolated
from xbench.launch.torchrun import global_rank, under_torchrun
from xbench.launch.xla import host_index
from xbench.rank import LaunchResult

LAUNCHERS = {
    "inline": "xbench.launch.inline:launch",
    "torchrun": "xbench.launch.torchrun:launch",
    "xla": "xbench.launch.xla:launch",
}


def launcher(cfg) -> str:
    return parallel.get(cfg.parallel.name).launcher


def writes_record(cfg) -> bool:
    """False in a process whose run's record is written by another: a rank > 0 under the torchrun
    command (or a srun task > 0), a node > 0 of a multi-node run, a host > 0 of a TPU pod slice. Like every
    question here (`launcher`, `process_environment`), it reads the environment and writes none: `run`
    applies."""
    if under_torchrun():
        return global_rank() == 0
    if launcher(cfg) == "xla":
        return host_index() == 0
    return cfg.parallel.node_rank == 0


def process_environment(bench) -> dict[str, str]:
    """Settings torch reads once, when it starts (`bench`: the plan's bench section): a run that asks for
    one runs in fresh processes started with it (the rank records what was in force)."""
    cap = bench.cpu_capability
    return {"ATEN_CPU_CAPABILITY": cap} if cap else {}


def run(work, on_step=None, stop=None, fresh: bool | None = None) -> LaunchResult | None:
    """Every rank's results (rank 0 first), or None in a process that does not write the record.

    `fresh`: run even an inline rank in a freshly spawned process (whole-process repeats, or settings
    torch reads at start); None: as `bench.isolation` says (launch/isolation.py: a sweep's points are
    isolated by default, each in a process forked from the sweep's warm template where that is safe:
    launch/template.py). The other launchers start fresh processes anyway."""
    plan = work.plan
    module, fn = LAUNCHERS[plan.launcher].split(":")
    env = process_environment(plan.bench)
    if fresh is None:
        fresh = isolated(plan) and (template.FORK if template.usable(plan) else True)
    with env_vars.temporarily(env):  # fresh processes inherit it at exec, before torch
        return getattr(importlib.import_module(module), fn)(work, on_step, stop, fresh or bool(env))
