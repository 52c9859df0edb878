"""`hydra/sweeper=xbench`: the grid of Hydra's basic sweeper, composed lazily, with progress.

Hydra's BasicSweeper builds the grid (the product of each swept key's values: the config's
`hydra.sweeper.params` first, the command line winning on the same key) and composes every point of a batch
(`validate_batch_is_legal`) before the first one runs: a 2,000-point sweep said nothing for minutes. This
sweeper makes the same points in the same order, and:

- **Up front, from the parsed overrides only** (nothing composed): a swept key that lists one value twice, as
  Hydra's grammar reads the values (`1`, `1.0` and `1e0` are one number, `'x'` and `x` one string,
  `range(0,3)` is `0,1,2`), is refused with exit 2 and nothing run (one line a key): every point with one of
  them would repeat
  a point with the other. The point count and the `sweep_max_points` refusal are the Hydra callback's
  (xbench/hydra_guard.py), which runs before this sweeper is built.
- **The local launcher** (Hydra's basic launcher) is handed one point at a time: point 1 starts after
  composing point 1 only, announced as `xbench: point i/N (#num): <the swept overrides>` in place of Hydra's
  two lines per launch. What the parsed overrides cannot show (a preset that sets the key a sweep varies)
  is checked as the points run: a point whose composed config (resolved, Hydra's node aside) equals an
  earlier point's is not run, named with the earlier point and the overrides that changed nothing; the
  other points run, and the sweep exits 2 at the end.
- **At the end** of a local sweep (also one a stop ended): a table of the points that ran (status, warnings
  count, headline figure, the swept values), the `python -m xbench.report` command for their store, and one
  `wandb sync` line for every offline W&B run of the sweep (xbench/sinks/sweep.py; a point says none).
- **A batch launcher** (`hydra/launcher=slurm` fits the whole batch to a partition and submits it as one
  job array) gets each batch (`max_batch_size` points; the whole sweep by default) composed and checked
  whole before it is handed over, as Hydra's basic sweeper does, saying how far it is every 5 s; a point
  that repeats another refuses the batch (exit 2, nothing of it submitted).

multirun.yaml is written redacted, atomically, without following a link (xbench.hydra_guard.save_sweep_file).
This is xbench's one "sweep points must differ" check: the studies ask it of a command's points too
(xbench/studies/sweep.py, `distinct_points`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import QuotedString, Transformer
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, open_dict

PROGRESS_EVERY_S = 5.0  # a batch being composed says how far it is this often
EXIT_REFUSED = 2  # refused before it ran (xbench/__main__.py's exit statuses)
REPEATS = "this sweep repeats configs"


def say(text: str) -> None:
    print(f"xbench: {text}", file=sys.stderr, flush=True)


def grid_axes(overrides: list) -> dict[str, list]:
    """Each key's choices as (`key=value`, the value as parsed), in the order and with the precedence of
    Hydra's basic sweeper (`BasicSweeper.split_arguments`): a later override of a key replaces the earlier
    one, in its place."""
    axes: dict[str, list] = {}
    for o in overrides:
        key = o.get_key_element()
        if not o.is_sweep_override():
            axes[key] = [(f"{key}={o.get_value_element_as_str()}", o.value())]
        elif o.is_discrete_sweep():
            try:
                axes[key] = [(f"{key}={Transformer.str(v)}", v) for v in o.sweep_iterator()]
            # range(0,3,0), a range of strings: one line, not a traceback
            except (ValueError, TypeError) as e:
                raise HydraException(f"the sweep over {key}: {e}") from None
        else:
            raise HydraException(f"the xbench sweeper takes lists, range() and choice(), not "
                                 f"{o.value_type.name} ({key}=...)")
    return axes


def normal(value: Any) -> Any:
    """A parsed value made comparable as the config will hold it: 1, 1.0 and 1e0 are one number, a quoted
    string is its text; True is not 1, and '1' is not 1 (a typed field may still make them equal: the lazy
    check sees that)."""
    if isinstance(value, QuotedString):
        return ("str", value.text)
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, float):
        if math.isnan(value):
            return ("number", "nan")
        return ("number", int(value) if math.isfinite(value) and value.is_integer() else value)
    if isinstance(value, int):
        return ("number", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", tuple(normal(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), normal(v)) for k, v in value.items())))
    return (type(value).__name__, repr(value))


def repeated_values(axes: dict[str, list]) -> list[str]:
    """Problems (empty: none): each swept key that lists a value twice. Nothing is composed."""
    problems = []
    for key, choices in axes.items():
        seen: dict = {}
        for text, value in choices:
            first = seen.setdefault(normal(value), text)
            if first is not text:
                what = (f"{text.split('=', 1)[1]} twice" if first == text else
                        f"{first.split('=', 1)[1]} and {text.split('=', 1)[1]}, one value")
                problems.append(
                    f"{key} lists {what}: the points with one and those with the other compose to the "
                    "same config; the sweep would measure one config twice under two names"
                )
                break
    return problems


def config_key(cfg: DictConfig) -> str:
    """A digest of a point's config, resolved, without Hydra's node (what the run reads)."""
    task = copy.deepcopy(cfg)
    with open_dict(task):
        task.pop("hydra", None)
    try:
        tree = OmegaConf.to_container(task, resolve=True)
    except Exception:  # an interpolation that fails to resolve: the run says so; compare what is written
        tree = OmegaConf.to_container(task, resolve=False)
    return hashlib.sha256(json.dumps(tree, sort_keys=True, default=str).encode()).hexdigest()


class Seen:
    """The configs of the points so far: which earlier point a config repeats, and why, in words."""

    def __init__(self, total: int, swept: list[str]):
        self.total, self.swept = total, swept
        self.first: dict[str, tuple[int, list[str]]] = {}
        self.repeats: list[str] = []

    def shown(self, job: list[str]) -> str:
        """A point's swept overrides (what tells it from the others); all of them when nothing is swept."""
        return " ".join([o for o in job if o.split("=", 1)[0] in self.swept] or job)

    def repeat(self, cfg: DictConfig, num: int, job: list[str]) -> str | None:
        first_num, first_job = self.first.setdefault(config_key(cfg), (num, job))
        if first_num == num:
            return None
        idle = [o for o in job if o not in first_job]
        why = (
            f"{', '.join(idle)} changes nothing (a preset or a later override sets the same keys, or the "
            "field's type makes the values equal)"
            if idle
            else "the sweep lists the same values twice"
        )
        line = (
            f"point {num + 1}/{self.total:,} (#{num}) [{self.shown(job)}] and point {first_num + 1} "
            f"(#{first_num}) [{self.shown(first_job)}] compose to the same config: {why}; point {num + 1} "
            "is not run"
        )
        self.repeats.append(line)
        return line


class RepeatedPoint(Exception):
    """A point composes to an earlier point's config: it is not run (the sweep goes on, and exits 2)."""


class DistinctPoints:
    """The task function, run only for a point whose config no earlier point had (the local launcher's
    points, one at a time: the launcher composes each, this sees it before the run does)."""

    def __init__(self, task_function, seen: Seen):
        self.task_function = task_function
        self.seen = seen

    def __call__(self, cfg: DictConfig) -> Any:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get()
        line = self.seen.repeat(cfg, int(hydra.job.num), [o for o in hydra.overrides.task])
        if line:
            say(line)
            raise RepeatedPoint(line)
        from xbench.launch import isolation, template

        if isolation.isolated(cfg):  # the template's imports go on beside the point's own start (once)
            template.start_early(cfg)
        return self.task_function(cfg)


class XbenchSweeper(Sweeper):
    """Hydra's basic sweeper's grid, composed lazily (see the module's docstring)."""

    def __init__(self, max_batch_size: int | None = None, params: dict | None = None):
        super().__init__()
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(
                f"hydra.sweeper.max_batch_size={max_batch_size}: allowed: null (the whole sweep) "
                "or a whole number >= 1"
            )
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context = None
        self.config: DictConfig | None = None
        self.launcher = None
        self.task_function = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config, self.task_function = hydra_context, config, task_function
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def local(self) -> bool:
        """Hydra's basic launcher: points run in this process, one after another."""
        from xbench.hydra_guard import is_local_launcher

        return is_local_launcher(self.launcher)

    def sweep(self, arguments: list[str]) -> Any:
        from xbench.hydra_guard import save_sweep_file

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        args = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        axes = grid_axes(parser.parse_overrides(args))
        problems = repeated_values(axes)
        for problem in problems:  # one line each, whole: the refusal and its reason
            say(f"{REPEATS}, nothing was composed or run: {problem}")
        if problems:
            raise SystemExit(EXIT_REFUSED)
        total = math.prod(len(v) for v in axes.values())
        save_sweep_file(self.config, Path(str(self.config.hydra.sweep.dir)) / "multirun.yaml")
        jobs = ([text for text, _ in point] for point in itertools.product(*axes.values()))
        seen = Seen(total, [k for k, v in axes.items() if len(v) > 1])
        returns = self._one_by_one(jobs, seen) if self.local() else self._batches(jobs, seen)
        if seen.repeats:
            say(f"{REPEATS}: {len(seen.repeats)} of {total:,} points were not run (each named above with the "
                "point it repeats); the others ran (one that did not succeed says so above)")
            raise SystemExit(EXIT_REFUSED)
        return returns

    def _one_by_one(self, jobs, seen: Seen) -> list:
        from xbench.hydra_guard import job_raised, quiet_local_launches
        from xbench.sinks import sweep

        self.launcher.setup(hydra_context=self.hydra_context, config=self.config,
                            task_function=DistinctPoints(self.task_function, seen))
        returns = []
        sweep.begin()  # the points' rows, for the table at the end (also after a stop: what did run)
        try:
            with quiet_local_launches():
                for num, job in enumerate(jobs):
                    say(f"point {num + 1}/{seen.total:,} (#{num}): {seen.shown(job)}")
                    [ret] = self.launcher.launch([job], initial_job_idx=num)
                    if isinstance(job_raised(ret), RepeatedPoint):
                        continue
                    _ = ret.return_value  # a point that raised ends the sweep, as with Hydra's basic sweeper
                    ret.cfg = ret.hydra_cfg = None  # nothing reads them after the point: 2,000 configs held
                    returns.append([ret])
        finally:
            for line in sweep.end_lines(seen.swept):  # the table's rows as they are, the rest as said lines
                print(line, file=sys.stderr, flush=True) if line.startswith("  ") else say(line)
        return returns

    def _batches(self, jobs, seen: Seen) -> list:
        loader = self.hydra_context.config_loader
        size = self.max_batch_size or seen.total
        returns, first = [], 0
        said = time.monotonic()
        while batch := list(itertools.islice(jobs, size)):
            repeats = []
            for i, job in enumerate(batch):
                if time.monotonic() - said > PROGRESS_EVERY_S:
                    say(f"sweep: composed {first + i:,} of {seen.total:,} points")
                    said = time.monotonic()
                line = seen.repeat(loader.load_sweep_config(self.config, list(job)), first + i, job)
                if line:
                    repeats.append(line)
            if repeats:
                say(f"{REPEATS}, nothing of points {first + 1}-{first + len(batch)} was submitted:\n  "
                    + "\n  ".join(repeats))
                raise SystemExit(EXIT_REFUSED)
            results = self.launcher.launch(batch, initial_job_idx=first)
            for r in results:
                _ = r.return_value  # a failed point ends the sweep, as with Hydra's basic sweeper
            returns.append(results)
            first += len(batch)
        return returns
