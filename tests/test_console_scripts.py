"""xbench's tools as console scripts beside `xbench`: `xbench-report`, `xbench-studies`, `xbench-cost` and
`xbench-parity` (pyproject.toml's [project.scripts], xbench/tools.py), each `--help` exiting 0 with what it does
under the name it was called by. Before: only `xbench` was a script; the others ran as `python -m xbench.X` only.
The wheel's entry points are checked in test_wheel.py (and its fresh install runs `xbench-report`)."""

from __future__ import annotations

import importlib
import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import REPO
from xbench import tools

# What each tool's --help must say it does (a phrase of its description).
DOES = {
    "xbench-report": "Comparison tables and plots from xbench run records",
    "xbench-studies": "The studies' commands",
    "xbench-cost": "recompute the cost figures of stored records under another platform's price",
    "xbench-parity": "Runs the same workload under two configs",
}


def _declared() -> dict[str, str]:
    import tomllib  # Python 3.11+ (the tests' Python)

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_pyproject_declares_every_tool_as_a_script_of_its_module():
    declared = _declared()
    assert set(declared) == set(tools.SCRIPTS) == {"xbench", *DOES}
    for script, target in declared.items():
        module = target.split(":")[0]
        assert module in (tools.SCRIPTS[script], f"{tools.SCRIPTS[script]}.__main__"), (script, target)


@pytest.mark.parametrize("script", sorted(DOES))
def test_each_scripts_function_answers_help_under_its_own_name(script, monkeypatch, capsys):
    module, fn = _declared()[script].split(":")
    main = getattr(importlib.import_module(module), fn)
    for argv0, shown in ((f"/venv/bin/{script}", script), ("/x/__main__.py", f"python -m {tools.SCRIPTS[script]}")):
        monkeypatch.setattr(sys, "argv", [argv0, "--help"])
        with pytest.raises(SystemExit) as done:
            main(["--help"])
        assert done.value.code == 0
        out = " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal's width
        assert out.startswith(f"usage: {shown} ") and DOES[script] in out, out[:400]


def test_the_installed_xbench_exposes_the_scripts_beside_its_python():
    """`make install` (an editable install, uv pip install -e .) puts each script beside the venv's python."""
    dist = metadata.distribution("xbench")
    installed = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert installed == _declared(), "re-run `make install` (pyproject.toml's scripts changed)"
    for script in tools.SCRIPTS:
        found = Path(sys.executable).parent / script
        assert found.is_file() or shutil.which(script), script
