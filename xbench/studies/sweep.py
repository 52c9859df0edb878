"""A sweep whose points compose to the same config is an error, not a silent repeat.

`python -m xbench -m ...` runs one job per point of the grid Hydra's basic sweeper builds from the config's
`hydra.sweeper.params` and the command line. When a preset overrides a group the sweep varies (the old
`cpu_vs_gpu`: `+workload=...` applied before `+experiment=cpu_vs_gpu`, whose `override /model: mlp` won),
several points are one config measured again under another name. `distinct_points` composes every point
and names the parameters that change nothing. No torch import: it runs at the start of a multirun.

    from xbench.studies.sweep import distinct_points
    distinct_points("conf", ["+experiment=cpu_vs_gpu"])   # [] when every point differs

The studies' tests call it on every study command and preset. The CLI's sweeper (hydra_plugins/xbench_sweeper)
checks the same as the points run, without composing them all first; `DistinctSweep` (a Hydra callback that
runs this before any job) is no longer wired by default.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from xbench.config import register_configs


@contextlib.contextmanager
def _hydra(config_dir: str | Path | None):
    """Compose against `config_dir`, or against the running Hydra app's search path (config_dir None)."""
    register_configs()
    if config_dir is None:
        if not GlobalHydra.instance().is_initialized():
            raise ValueError("config_dir is needed outside a running Hydra app")
        yield
        return
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
        yield


def _expand(overrides: list[str]) -> list[list[str]]:
    parser = OverridesParser.create()
    fixed = [o for o, p in zip(overrides, parser.parse_overrides(list(overrides))) if not p.is_sweep_override()]
    params = compose(config_name="config", overrides=fixed, return_hydra_config=True).hydra.sweeper.params or {}
    args = [f"{k}={v}" for k, v in params.items()] + list(overrides)  # the command line wins on the same key
    return BasicSweeper.split_arguments(parser.parse_overrides(args), None)[0]


def expand(config_dir: str | Path | None, overrides: list[str]) -> list[list[str]]:
    """The jobs `python -m xbench -m <overrides>` runs, each as its list of overrides, in the order and
    with the precedence of Hydra's basic sweeper (the config's sweeper params first, then the command line)."""
    with _hydra(config_dir):
        return _expand(overrides)


def compose_point(config_dir: str | Path | None, job: list[str]) -> DictConfig:
    """One job's config (no hydra node), as `python -m xbench` composes it."""
    with _hydra(config_dir):
        return compose(config_name="config", overrides=list(job))


def distinct_points(config_dir: str | Path | None, overrides: list[str]) -> list[str]:
    """Problems (empty: none): each pair of sweep points that compose to the same resolved config, and the
    overrides that did not change it."""
    problems, seen = [], {}
    with _hydra(config_dir):
        jobs = _expand(overrides)
        said = time.monotonic()
        for i, job in enumerate(jobs):
            if time.monotonic() - said > 5:  # a big sweep: say how far the check is (xbench/hydra_guard.py bounds it)
                print(f"xbench: sweep: checked {i:,} of {len(jobs):,} points", file=sys.stderr, flush=True)
                said = time.monotonic()
            cfg = compose(config_name="config", overrides=list(job))
            key = json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True, default=str)
            first = seen.setdefault(key, job)
            if first is job:
                continue
            idle = [o for o in job if o not in first]
            why = (f"{', '.join(idle)} changes nothing (the preset or a later override sets the same keys)" if idle
                   else "the sweep lists the same values twice")
            problems.append(f"sweep points [{' '.join(first)}] and [{' '.join(job)}] compose to the same config: "
                            f"{why}; the sweep would measure one config twice under two names")
    return problems


class DistinctSweep(Callback):
    """Hydra callback: refuse a multirun whose points are not all distinct, before any job runs (exit 2).

    Wire it in conf/config.yaml:  hydra.callbacks.distinct_sweep._target_: xbench.studies.sweep.DistinctSweep
    (or on the command line: +hydra.callbacks.distinct_sweep._target_=xbench.studies.sweep.DistinctSweep).
    Hydra turns a callback's exceptions into warnings and goes on, so it exits with SystemExit instead.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        overrides = [o for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False) if not o.lstrip("+~").startswith("hydra")]
        problems = distinct_points(None, overrides)
        if problems:
            print("xbench: this sweep repeats configs, nothing was run:\n  " + "\n  ".join(problems),
                  file=sys.stderr, flush=True)
            raise SystemExit(2)
