"""Compose each override list once per test session: a Hydra compose of conf/ costs ~0.15 s on a quiet core, and
the config tests compose the same points many times (each study command's points for its facts and again in
`distinct_points`, each preset's sweep in test_config and test_studies). The real compose runs the first time;
later calls get a fresh copy of its result (unpickled: ~10 ms), so a caller that changes its config changes no one
else's.

Only compositions whose search path is the repo's conf/ (which no test writes) are kept: a test that composes
a config folder of its own (tmp_path) composes it for real every time. A failing compose is never kept (it
raises again). Opt in per test module with `pytestmark = pytest.mark.usefixtures("cached_compose")`."""

from __future__ import annotations

import contextlib
import pickle
from pathlib import Path

from hydra._internal.hydra import Hydra

CONF = Path(__file__).resolve().parents[1] / "conf"
_KEPT: dict[tuple, bytes] = {}  # the pickled config


def _key(hydra: Hydra, config_name, overrides, run_mode, from_shell, validate_sweep_overrides) -> tuple | None:
    files = [e.path for e in hydra.config_loader.get_search_path().get_path() if e.provider == "main"]
    if files != [str(CONF)]:
        return None
    return (config_name, tuple(overrides), run_mode, from_shell, validate_sweep_overrides)


@contextlib.contextmanager
def composing_once():
    """While inside: Hydra.compose_config (under hydra.compose and the sweeper's expand alike) keeps its results."""
    real = Hydra.compose_config

    def compose_config(self, config_name, overrides, run_mode, with_log_configuration=False, from_shell=True,
                       validate_sweep_overrides=True):
        key = None if with_log_configuration else _key(self, config_name, overrides, run_mode, from_shell,
                                                       validate_sweep_overrides)
        if key is None:
            return real(self, config_name, overrides, run_mode, with_log_configuration, from_shell,
                        validate_sweep_overrides)
        if key not in _KEPT:
            cfg = real(self, config_name, overrides, run_mode, False, from_shell, validate_sweep_overrides)
            _KEPT[key] = pickle.dumps(cfg)
            return cfg
        return pickle.loads(_KEPT[key])

    Hydra.compose_config = compose_config
    try:
        yield _KEPT
    finally:
        Hydra.compose_config = real
