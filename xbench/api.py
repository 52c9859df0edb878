"""The Python API, for notebooks and scripts: `xbench.run(overrides) -> RunRecord` and
`xbench.load(stores) -> pandas.DataFrame` (docs/api.md).

`run` composes the same Hydra config the CLI composes (the same overrides, the same errors and
hints, the same refusals: xbench.hints.refusals) and goes through the same runner, so a record made here is
indistinguishable from one made by `xbench OVERRIDES`. `load` is the report's tidy table
(xbench/analysis/frame.py): one row per run. Both import what they need when called: `import xbench` stays
cheap.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from xbench.records.record import RunRecord


def _as_overrides(overrides) -> list[str]:
    """A list of `key=value` strings, one string of them separated by spaces, or a {key: value} dict."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return overrides.split()
    if isinstance(overrides, Mapping):
        return [f"{k}={_override_value(v)}" for k, v in _dotted(overrides)]
    if isinstance(overrides, Iterable):
        out = list(overrides)
        if bad := [o for o in out if not isinstance(o, str)]:
            raise TypeError(
                f"overrides must be 'key=value' strings; got {bad[0]!r} ({type(bad[0]).__name__})"
            )
        return out
    raise TypeError(f"overrides must be a list of 'key=value' strings, one such string or a dict, "
                    f"not {type(overrides).__name__}")


def _override_value(v) -> str:
    """A value as Hydra's grammar spells it: None is null, a bool is true/false."""
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else f"{v}"


def _dotted(d: Mapping, prefix: str = ""):
    """{'data': {'batch_size': 8}} -> ('data.batch_size', 8): a nested dict is a set of dotted overrides."""
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            yield from _dotted(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _one_line(e: Exception) -> str:
    """Hydra's refusal without its pointer to the grammar's docs and the blank lines (said once, shorter)."""
    lines = [
        x
        for x in str(e).splitlines()
        if x.strip() and not x.startswith(("See https://", "Set the environment"))
    ]
    return " ".join(x.strip() for x in lines) + (" (the override grammar: https://hydra.cc/docs/advanced/"
                                                 "override_grammar/basic)" if "grammar" in str(e) else "")


def compose(overrides=(), config_dir: str | os.PathLike | None = None):
    """The composed config (an OmegaConf DictConfig) the CLI would run for these overrides.

    `config_dir`: a folder of your own config groups (platform/, model/, experiment/ ...), searched
    after xbench's own, as `xbench --config-dir DIR`. Raises ValueError with xbench's hints when Hydra
    refuses the overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from xbench.config import config_dir as package_conf
    from xbench.config import register_configs, register_model_choices
    from xbench.hints import compose_hints, moved_key_problems, refusals, resume_ignored
    from xbench.records.redact import argv_secret_values, redact_text, remember

    args = _as_overrides(overrides)
    sweeps = [a for a in args if a in ("-m", "--multirun")]
    if sweeps:
        raise ValueError(
            "xbench.run runs one configuration; for a sweep, call it in a loop (one record each)"
        )
    if config_dir is not None:
        if not isinstance(config_dir, (str, os.PathLike)):
            raise TypeError(
                f"config_dir must be a folder path (str or os.PathLike), not {type(config_dir).__name__}"
            )
        where = Path(config_dir).expanduser().resolve()
        if not where.is_dir():
            raise ValueError(f"config_dir={str(config_dir)!r} is not a folder (checked from {Path.cwd()})")
        args.append(f"hydra.searchpath=[file://{where}]")
    # as the CLI's console does: these values are redacted wherever they go
    remember(argv_secret_values(args))
    if moved := moved_key_problems(args):  # an old spelling: named with its new one, before Hydra
        raise ValueError("\n".join(moved))
    register_configs()
    register_model_choices(args)
    try:
        with initialize_config_dir(config_dir=package_conf(), version_base="1.3", job_name="xbench"):
            dcfg = hydra_compose(config_name="config", overrides=args)
    except (HydraException, OmegaConfBaseException) as e:
        raise ValueError(redact_text("\n".join([_one_line(e), *compose_hints(args)]))) from None
    given = [a for a in args if not a.startswith("hydra.searchpath=")]
    for line in resume_ignored(given):
        warnings.warn(f"xbench: {line}", stacklevel=3)
    problems = refusals(dcfg, given)
    if problems:  # what the CLI refuses (exit 2), in the same words
        raise ValueError(redact_text("\n".join(problems)))
    return dcfg


def run(overrides=(), config_dir: str | os.PathLike | None = None) -> RunRecord:
    """One benchmark run, as `xbench OVERRIDES` runs it; returns its RunRecord (also stored under
    `store.root`, default ./results). A run that does not succeed still returns its record: look at
    `record.status` and `record.reason` (a config problem raises ValueError before any run, a bad
    `resume=`/`baseline=` runner.Refused; both messages redacted as the CLI's console is)."""
    from xbench import runner
    from xbench.records.redact import redact_text

    dcfg = compose(overrides, config_dir)
    try:
        record = runner.run(dcfg)
    except runner.Refused as e:  # a bad resume=, baseline= or run name: nothing written
        raise runner.Refused(redact_text(str(e))) from None
    if record is None:  # only a rank > 0 under torchrun gets here, and a notebook is never one
        raise RuntimeError("this process is not rank 0: rank 0 writes the record")
    return record


def load(
    stores: str | os.PathLike | Iterable[str | os.PathLike] = "results", progress: bool = False
) -> pd.DataFrame:
    """Every readable run record under the store folder(s) as the report's tidy table: one row per run,
    measurements and derived figures as unit-suffixed columns (docs/report.md). An unreadable record
    file is skipped with a warning naming it."""
    from xbench.extras import require

    require("xbench.load()", "pandas")
    from xbench.analysis.frame import load as load_frame

    folders = [stores] if isinstance(stores, (str, os.PathLike)) else list(stores) \
        if isinstance(stores, Iterable) else None
    if folders is None or not all(isinstance(f, (str, os.PathLike)) for f in folders):
        bad = stores if folders is None else next(f for f in folders if not isinstance(f, (str, os.PathLike)))
        raise TypeError(f"xbench.load: stores must be a folder path (str or os.PathLike) or a list of them, "
                        f"not {type(bad).__name__} ({bad!r})")
    loaded = load_frame(folders, progress=progress)
    for s in loaded.skipped:
        warnings.warn(f"xbench.load: {s}", stacklevel=2)
    return loaded.frame
