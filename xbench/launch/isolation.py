"""Which process a run's rank work runs in, and what belongs to the run alone (`bench.isolation`).

A sweep (`python -m xbench -m ...`) runs its points one after another in one Hydra process. Sharing
that process, a point inherits what ran before it: `xla_compile` after `xla` found its graphs in the
in-process cache and reported 0 compilations and 0 s compile time (2 and 0.49 s alone); start-up was
counted from the process's start (three 0.6-s points reported 21.9, 22.6 and 23.2 s); memory peaks
(`ru_maxrss`) and the allocator's state carry over. So, as optimum-benchmark does, every point runs
its rank work in a fresh spawned interpreter:

- `bench.isolation=auto` (default): a fresh process for each point of a --multirun sweep; a single
  run stays in its own process (which is fresh anyway);
- `process`: always a fresh process; `shared`: never (the old behaviour, and the cheaper one when a
  sweep does not measure what a process carries: tests, a quick look);
- `spawn`: always a freshly spawned interpreter, never one forked from the warm template (below): each
  point then pays Python's and torch's start-up again, as a single run does.

The fresh process of an inline rank is forked from the sweep's warm template where that is safe
(launch/template.py: started once per sweep process, it has imported torch and the rank wing and
nothing more), else spawned; the record's `env.point.process` says which.

Launchers other than `inline` start fresh processes anyway. The runner calls `begin_point` first
thing, so each point's start-up is counted from its own start (`point_started_at`), and its record
holds the point's Hydra job number and overrides (`point_facts`).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import time

from xbench.launch import template
from xbench.rank import POINT_ENV, point_started_at, process_started_at  # noqa: F401 (a rank reads it too)
from xbench.records.redact import redact_argv

_POINTS_SEEN: list[int] = []  # points begun in this process


def hydra_job() -> dict | None:
    """The Hydra job this process is running (None outside Hydra, e.g. the Python API or a spawned rank)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        return {"multirun": hc.mode == RunMode.MULTIRUN, "job_num": hc.job.get("num"),
                "overrides": OmegaConf.to_container(hc.overrides.task, resolve=False)}
    except Exception:  # Hydra internals differ by version: the run goes on without the facts
        return None


def isolated(cfg) -> bool:
    """Whether this run's inline rank work goes to a fresh process."""
    mode = cfg.bench.isolation
    if mode in ("process", "spawn"):
        return True
    if mode == "shared":
        return False
    job = hydra_job()
    return bool(job and job["multirun"])


def begin_point() -> float:
    """Mark the start of a run (a sweep point) in this process: the first point starts with the process
    (its start-up includes Python, imports and Hydra, as a single run's does), a later one now. The start
    and this process's pid go to the environment, so the ranks it starts count from there too."""
    started = process_started_at() if not _POINTS_SEEN else time.time()
    _POINTS_SEEN.append(1)
    os.environ[POINT_ENV] = f"{os.getpid()}:{started!r}"
    return started


def xbench_version() -> str | None:
    try:
        return md.version("xbench")
    except md.PackageNotFoundError:
        return None


def point_facts(cfg) -> dict:
    """For the record's env: xbench's version and, in a sweep, the point's job number, its overrides
    (secret values redacted), whether it ran isolated and, if so, how its process started (forked from
    the sweep's template, with the template's pid, or spawned, and why: launch/template.py)."""
    job = hydra_job()
    facts = {
        "xbench_version": xbench_version(),
        "point": {"isolation": cfg.bench.isolation, "isolated": isolated(cfg), "runner_pid": os.getpid()},
    }
    if facts["point"]["isolated"]:
        facts["point"].update(template.decide(cfg))
    if job is not None:
        facts["point"].update(multirun=job["multirun"], job_num=job["job_num"],
                              overrides=redact_argv(job["overrides"]))
    return facts
