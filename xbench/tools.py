"""xbench's command-line tools: each one's console script (pyproject.toml's [project.scripts] lists the same,
tests/test_console_scripts.py checks it) and its `python -m` module, and the name its --help shows. Torch-free
and import-free: the analysis side's tools use it too."""

from __future__ import annotations

import sys
from pathlib import Path

# console script -> the module `python -m` runs (its function in pyproject.toml)
SCRIPTS = {
    "xbench": "xbench",
    "xbench-report": "xbench.report",
    "xbench-studies": "xbench.studies",
    "xbench-cost": "xbench.cost",
    "xbench-parity": "xbench.parity",
}


def prog(module: str) -> str:
    """The tool's name as the user called it: its console script (`xbench-report`), else `python -m
    MODULE`."""
    script = Path(sys.argv[0]).name
    return script if SCRIPTS.get(script) == module else f"python -m {module}"
