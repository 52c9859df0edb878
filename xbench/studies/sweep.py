"""A study's sweep points, as `python -m xbench -m ...` makes them, and the CLI's check that they differ.

`python -m xbench -m ...` runs one job per point of the grid xbench's sweeper (hydra_plugins/xbench_sweeper)
builds from the config's `hydra.sweeper.params` and the command line. When a preset overrides a group the
sweep varies (the old `cpu_vs_gpu`: `+workload=...` applied before `+experiment=cpu_vs_gpu`, whose `override
/model: mlp` won), several points are one config measured again under another name. The sweeper refuses that,
and this module asks the sweeper's own grid and check (`grid_axes`, `repeated_values`, `Seen`):
`distinct_points` composes every point up front and returns the lines the CLI would say. No torch import.

    from xbench.studies.sweep import distinct_points
    distinct_points("conf", ["+experiment=cpu_vs_gpu"])   # [] when every point differs

The studies' tests call it on every study command and preset.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from hydra_plugins.xbench_sweeper.sweeper import PROGRESS_EVERY_S, Seen, grid_axes, repeated_values
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


def _axes(overrides: list[str]) -> dict[str, list]:
    """The sweeper's axes: the config's sweeper params first, the command line winning on the same key."""
    parser = OverridesParser.create()
    fixed = [
        o for o, p in zip(overrides, parser.parse_overrides(list(overrides))) if not p.is_sweep_override()
    ]
    params = (
        compose(config_name="config", overrides=fixed, return_hydra_config=True).hydra.sweeper.params or {}
    )
    return grid_axes(parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + list(overrides)))


def _jobs(axes: dict[str, list]) -> list[list[str]]:
    return [[text for text, _ in point] for point in itertools.product(*axes.values())]


def expand(config_dir: str | Path | None, overrides: list[str]) -> list[list[str]]:
    """The jobs `python -m xbench -m <overrides>` runs, each as its list of overrides, in the sweeper's order
    (Hydra's basic sweeper's: the config's sweeper params first, then the command line)."""
    with _hydra(config_dir):
        return _jobs(_axes(overrides))


def compose_point(config_dir: str | Path | None, job: list[str]) -> DictConfig:
    """One job's config (no hydra node), as `python -m xbench` composes it."""
    with _hydra(config_dir):
        return compose(config_name="config", overrides=list(job))


def distinct_points(config_dir: str | Path | None, overrides: list[str]) -> list[str]:
    """Problems (empty: none), as the CLI's sweeper says them: a swept key that lists a value twice (nothing
    composed), else each point that composes to an earlier point's config, with the overrides that did not
    change it."""
    with _hydra(config_dir):
        axes = _axes(overrides)
        if problems := repeated_values(axes):
            return problems
        jobs = _jobs(axes)
        seen = Seen(len(jobs), [k for k, v in axes.items() if len(v) > 1])
        said = time.monotonic()
        for i, job in enumerate(jobs):
            if time.monotonic() - said > PROGRESS_EVERY_S:  # a big sweep: say how far the check is
                print(f"xbench: sweep: checked {i:,} of {len(jobs):,} points", file=sys.stderr, flush=True)
                said = time.monotonic()
            seen.repeat(compose(config_name="config", overrides=list(job)), i, job)
    return seen.repeats
