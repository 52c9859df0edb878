"""xbench: benchmark deep-learning training across hardware and execution frameworks.

`xbench +experiment=...` (or `python -m xbench`) runs one benchmark and leaves a run record;
`python -m xbench.report` compares records. From Python (a notebook):

    import xbench
    record = xbench.run(["model=resnet18", "data.batch_size=32"])   # one run -> its RunRecord
    df = xbench.load("results")                                     # every stored run, one row each

See docs/api.md, and docs/architecture.md for where each concern lives. Importing xbench is cheap:
`run` and `load` import the run path (torch) or pandas only when first used.
"""

from xbench.version import __version__

__all__ = ["__version__", "load", "run"]


def __getattr__(name: str):
    if name in ("run", "load"):  # lazy: `import xbench` must not import torch or pandas
        from xbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'xbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazy names too: `dir(xbench)` and tab completion show run and load before their first use
    return sorted(set(globals()) | set(__all__))
