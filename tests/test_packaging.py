"""Packaging: every optional dependency is declared in an extra and named in one line with its install
command; torch and torch-xla must be a matching pair; the version has one source; `import xbench`
stays cheap. (The built wheel in a fresh environment: tests/test_wheel.py.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env
from tests.jobs import Jobs
from xbench import __version__, extras
from xbench.compat import xla_pair_problem

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_every_optional_package_is_in_the_extra_its_message_names():
    for module, (dist, extra) in extras.EXTRAS.items():
        assert extra in OPTIONAL, f"{module}: extra {extra!r} is not declared in pyproject.toml"
        assert dist.lower() in _names(OPTIONAL[extra]), f"{module}: {dist} is not in xbench[{extra}]"


def test_all_is_every_extra_but_the_xla_pin():
    [all_req] = OPTIONAL["all"]
    bundled = set(all_req[all_req.index("[") + 1:all_req.index("]")].split(","))
    assert bundled == set(OPTIONAL) - {"all", "xla"}


def test_xla_extra_pins_a_working_pair_and_compat_names_the_same_pair():
    pins = {n: r.split("==")[1] for r in OPTIONAL["xla"] for n in [r.split("==")[0]] if "==" in r}
    assert set(pins) >= {"torch", "torch-xla"}
    assert xla_pair_problem(pins["torch"], pins["torch-xla"]) is None
    said = xla_pair_problem("2.10.0+cu128", pins["torch-xla"])
    assert f"torch {pins['torch']} + torch-xla {pins['torch-xla']}" in said and "xbench[xla]" in said


@pytest.mark.parametrize("torch_v,xla_v,ok", [("2.9.0+cu128", "2.9.0", True), ("2.9.1", "2.9.0", True),
                                              ("2.10.0", "2.9.0", False), ("2.8.0+cpu", "2.9.0", False),
                                              ("2.9.0", None, True)])
def test_torch_and_torch_xla_must_share_a_release(torch_v, xla_v, ok):
    problem = xla_pair_problem(torch_v, xla_v)
    assert (problem is None) == ok
    if not ok:
        assert torch_v in problem and xla_v in problem


@pytest.mark.xla
def test_this_environment_has_a_matching_pair():
    import importlib.metadata as md

    import torch

    assert xla_pair_problem(torch.__version__, md.version("torch-xla")) is None


def test_a_missing_package_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # how Python reports a package that is not there
    line = extras.missing("model 'timm/resnet18'", "timm")
    assert line == "model 'timm/resnet18' needs timm, which is not installed here: pip install 'xbench[timm]'"
    with pytest.raises(extras.MissingDependency, match=r"pip install 'xbench\[timm\]'"):
        extras.require("model 'timm/resnet18'", "timm")
    assert extras.missing("the report", "json") is None  # there: nothing to say
    assert extras.install_command("matplotlib", "pandas") == "pip install 'xbench[report]'"


def test_report_without_the_report_extra_says_what_to_install(monkeypatch, tmp_path, capsys):
    from xbench.report.__main__ import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["xbench.report: python -m xbench.report needs matplotlib, which is not installed here: "
                   "pip install 'xbench[report]'"]


def test_digits_without_scikit_learn_is_a_compat_reason(monkeypatch):
    from xbench.data import loaders

    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert loaders.missing_reasons("digits", None) == [
        "data.source=digits needs scikit-learn, which is not installed here: pip install 'xbench[data]'"]


def test_slurm_launcher_without_its_plugin_names_the_extra(monkeypatch):
    from xbench.hints import compose_hints

    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_submitit_launcher", None)
    hints = compose_hints(["-m", "hydra/launcher=slurm", "+experiment=cpu_threads"])
    assert "hydra/launcher=slurm needs hydra-submitit-launcher, which is not installed here: " \
           "pip install 'xbench[slurm]'" in hints


def test_version_has_one_source():
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "xbench/version.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=cli_env(), capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test (tests/jobs.py)
def fresh(request):
    """Two fresh interpreters, started together: what `import xbench` loads, and what dir(xbench) lists."""
    with Jobs(request) as jobs:
        jobs.submit("import", _fresh_python, "import sys, xbench; xbench.__version__; from xbench import run, load; "
                    "print(sorted(m for m in ('torch', 'pandas', 'hydra', 'xbench.runner') if m in sys.modules))",
                    tests=("test_import_xbench_is_cheap",))
        jobs.submit("dir", _fresh_python,
                    "import sys, xbench; print('run' in dir(xbench), 'load' in dir(xbench), 'torch' in sys.modules)",
                    tests=("test_dir_xbench_shows_the_lazy_run_and_load",))
        yield jobs


def test_import_xbench_is_cheap(fresh):
    p = fresh["import"]
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"  # run and load import the run path / pandas when called


def test_dir_xbench_shows_the_lazy_run_and_load(fresh):
    p = fresh["dir"]
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True", "False"]  # listed, still not imported
