"""Hydra's listing of config groups and options without a copy of its config repository per question.

Hydra (1.3) answers every `get_group_options` (what `--help` lists, shell completion, a `glob()` sweep) through
a fresh `CachingConfigRepository`, which deep-copies the whole repository first, ConfigStore's structured
configs included, to protect it from `initialize_sources`. A question with no primary config and no overrides
never initialises anything (no `hydra.searchpath` to add), so the copy buys nothing: `xbench --help` asked
103 of them for 10 groups and 150 options, 620,000 deepcopy calls and ~1 s of its ~1.5 s. Such a question
goes to the repository itself here; any other (a config name, overrides) goes to Hydra's own code as before.

No torch, nothing of the run path: installed by the CLI before Hydra starts (xbench/__main__.py).
"""

from __future__ import annotations

_MARK = "_xbench_listing"


def install() -> None:
    """Route Hydra's plain option listings to its repository (idempotent; Hydra's internals as they were if
    they changed shape)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.object_type import ObjectType
    except ImportError:  # another Hydra: its own listing
        return
    original = ConfigLoaderImpl.get_group_options
    if getattr(original, _MARK, False):
        return

    def get_group_options(self, group_name: str, results_filter=ObjectType.CONFIG, config_name=None,
                          overrides=None):
        repository = getattr(self, "repository", None)
        if config_name is None and not overrides and repository is not None:
            return repository.get_group_options(group_name, results_filter)
        return original(self, group_name, results_filter, config_name, overrides)

    setattr(get_group_options, _MARK, True)
    get_group_options.__doc__ = original.__doc__
    ConfigLoaderImpl.get_group_options = get_group_options
