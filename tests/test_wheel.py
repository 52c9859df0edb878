"""The wheel, as a new user gets it: built once from this checkout (its licence and metadata checked), then
installed into a fresh virtual environment with only its declared dependencies (resolved against requirements/dev.lock as constraints, from uv's
cache when it is warm), then run from an unrelated folder: a throughput run, a train-to-target run and
a report (first without the report extra: one line saying what to install; then with it, through its
console script `xbench-report`).

Measured here (2 cores, warm uv cache): build ~1.5 s, fresh venv ~0.1 s, install ~4 s (uv hard-links
torch out of its cache), the three runs ~35 s (the two runs at once); the whole test ~45 s. A cold cache downloads torch.
"""

from __future__ import annotations

import configparser
import json
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from email.parser import Parser
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, Started, cli_env
from xbench.tools import SCRIPTS

UV = shutil.which("uv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed (these tests build the wheel with it)")
# installs and runs that hold no timing: first in the session, beside the drill (tests/conftest.py)
pytestmark = pytest.mark.side_by_side


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout, once for the module (~2 s)."""
    dist = tmp_path_factory.mktemp("dist")
    p = subprocess.run([UV, "build", "--wheel", "--out-dir", str(dist), str(REPO)], cwd=dist, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    [whl] = dist.glob("xbench-*.whl")
    return whl


@pytest.mark.slow  # over 3 s (building the wheel): make test-fast's budget
@needs_uv
def test_wheel_carries_the_licence_and_the_metadata_an_index_shows(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [info] = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        licence = z.read(f"{info}/licenses/LICENSE").decode()
        meta = Parser().parsestr(z.read(f"{info}/METADATA").decode())
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert (REPO / "LICENSE").read_text() == licence  # the repository's file, not another text
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier")
    for c in ("Topic :: System :: Benchmark", "Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux"):
        assert c in classifiers, classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression, not a classifier
    assert meta["Requires-Python"] == ">=3.10" and meta["Author"]
    # the long description is the README: how a CPU-only machine gets torch's CPU build, what [all] pulls
    readme = meta.get_payload()
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "pip install 'xbench[all]'" in readme
    # every tool is a console script of the wheel (xbench/tools.py): xbench, xbench-report, -studies, -cost, -parity
    scripts = configparser.ConfigParser(delimiters=("=",))
    scripts.read_string(entry_points)
    assert set(scripts["console_scripts"]) == set(SCRIPTS) and scripts["console_scripts"]["xbench-cost"] == "xbench.cost:main"


@pytest.mark.slow
@needs_uv
def test_wheel_in_a_fresh_venv_runs_every_mode_and_the_report_from_anywhere(tmp_path, wheel):
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = elsewhere / "results"
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    timings: dict[str, float] = {}

    def step(name, cmd, ok=True, cwd=elsewhere):
        t0 = time.perf_counter()
        p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        timings[name] = round(time.perf_counter() - t0, 1)
        if ok:
            assert p.returncode == 0, f"{name}: {p.stderr[-3000:]}"
        return p

    lock = REPO / "requirements" / "dev.lock"
    step("venv", [UV, "venv", "-q", venv, "--python", sys.executable], cwd=tmp_path)
    py, xbench = venv / "bin" / "python", venv / "bin" / "xbench"
    step("install", [UV, "pip", "install", "-q", "--python", py, f"{wheel}[data]", "-c", lock], cwd=tmp_path)

    where = step("where", [py, "-c", "import xbench; print(xbench.__file__)"])
    assert where.stdout.strip().startswith(str(venv)), where.stdout  # the installed package, not the checkout
    assert step("version", [xbench, "--version"]).stdout.startswith("xbench ")

    with ThreadPoolExecutor(2) as pool:  # two runs at once: each is mostly one busy thread (2 cores here)
        throughput = pool.submit(step, "throughput", [xbench, f"store.root={store}", *FAST, "data.batch_size=8"])
        target = pool.submit(step, "train_to_target", [xbench, "+experiment=digits_to_target", f"store.root={store}",
                                                       "logger=none"])
        throughput.result()
        target = target.result()
    assert "epoch 1/20" in target.stderr and "top1 0." in target.stderr  # the bar: epoch and latest evaluation
    recs = {r["config"]["bench"]["mode"]: r for r in map(json.loads, map(Path.read_text, store.glob("*/record.json")))}
    assert recs["throughput"]["status"] == "ok" and recs["throughput"]["measurements"]["throughput_samples_per_s"] > 0
    assert recs["train_to_target"]["status"] == "ok" and recs["train_to_target"]["measurements"]["target_reached"]
    assert recs["train_to_target"]["artifacts"]["mlperf_log"]  # mlperf-logging came with the core install

    bare = step("report_without_extra", [py, "-m", "xbench.report", store, "--out", elsewhere / "report"], ok=False)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr
    assert bare.stderr.strip() == ("xbench.report: python -m xbench.report needs matplotlib, which is not installed "
                                   "here: pip install 'xbench[report]'")
    step("install_report", [UV, "pip", "install", "-q", "--python", py, f"{wheel}[data,report]", "-c", lock],
         cwd=tmp_path)
    step("report", [venv / "bin" / "xbench-report", store, "--out", elsewhere / "report"])  # its console script
    assert (elsewhere / "report" / "report.html").is_file()
    print(f"\nwheel test timings (s): {timings}")


def _readme_install_lines() -> dict[str, str]:
    """The README's `pip install 'xbench[all]'` and `uv pip install 'xbench[all]'` lines, as written there."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Install"):text.index("**A CPU-only machine**")]
    lines = [ln.split("#")[0].strip() for ln in block.splitlines() if "install 'xbench[all]'" in ln]
    return {("uv" if ln.startswith("uv ") else "pip"): ln for ln in lines}


def _supported_torch() -> tuple[tuple[int, int], tuple[int, int]]:
    """pyproject's torch range, `torch>=A.B,<C.D`, as ((A, B), (C, D))."""
    import re

    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if d.startswith("torch")]
    a, b, c, d = map(int, re.fullmatch(r"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)", spec).groups())
    return (a, b), (c, d)


def _torch_in_range(version: str) -> bool:
    lo, hi = _supported_torch()
    return lo <= tuple(int(x) for x in version.split("+")[0].split(".")[:2]) < hi


@pytest.fixture(scope="module", autouse=True)
def pip_line(request, tmp_path_factory):
    """The README's pip line resolving in the background from the module's first test on (~30 s of one core, most
    of it pip's own resolver) when the test below is selected: the other tests of the module install and train
    meanwhile. Yields (the started command, the --report file) or None."""
    if UV is None or not any(i.originalname == PIP_LINE_TEST for i in request.session.items):
        yield None
        return
    wheel = request.getfixturevalue("wheel")
    line = _readme_install_lines()["pip"]
    assert line == "pip install 'xbench[all]'", line
    root = tmp_path_factory.mktemp("pip_line")
    venv, report = root / "venv", root / "report.json"
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # pip as a user has it (venv --upgrade-deps: the index's newest; Python 3.11's bundled 23.2 resolved the
    # same 115 packages in 29 s against 12 s)
    script = (f"{shlex.quote(sys.executable)} -m venv --upgrade-deps {shlex.quote(str(venv))} && "
              f"{shlex.quote(str(venv / 'bin' / 'python'))} -m pip install -q --dry-run --ignore-installed "
              f"--report {shlex.quote(str(report))} {shlex.quote(str(wheel) + '[all]')}")
    job = Started(["bash", "-c", script], root, env)
    yield job, report
    job.kill()


PIP_LINE_TEST = "test_the_readmes_pip_line_resolves_to_a_supported_torch_with_torchax"


@pytest.mark.slow
@needs_uv
def test_the_readmes_pip_line_resolves_to_a_supported_torch_with_torchax(pip_line):
    """The README's pip line, as written (the package name replaced by this checkout's wheel: xbench is not on the
    index here), resolved by the newest pip in a fresh venv (`--dry-run --report`: what pip would install). Installing it for
    real copies ~5.5 GB of CUDA wheels, over 15 minutes here; the uv line below installs and runs. pip on this machine
    may be capped by the machine's own constraints (/etc/xdg/pip) at a torch that lies on disk."""
    job, report = pip_line
    code, console = job.wait(1500)
    assert code == 0, console[-3000:]
    got = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert _torch_in_range(got["torch"]), got["torch"]
    assert {"torchax", "jax", "optax", "torchvision", "wandb", "accelerate"} <= set(got)
    assert "torch-xla" not in got  # [all] is every extra but xla


@pytest.mark.slow
@needs_uv
def test_the_readmes_uv_line_installs_and_trains_eager_and_torchax(tmp_path, wheel):
    """The README's uv line, as written (the wheel for the name), into a fresh venv with nothing else: torch lands in
    the supported range (uv takes the index's newest), torchax imports beside it, and eager and `runtime=torchax`
    each train."""
    line = _readme_install_lines()["uv"]
    assert line == "uv pip install 'xbench[all]'", line
    venv = tmp_path / "venv"
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([UV, "venv", "-q", str(venv), "--python", sys.executable], check=True, env=env)
    py = str(venv / "bin" / "python")
    p = subprocess.run([UV, "pip", "install", "-q", "--python", py, f"{wheel}[all]"], capture_output=True, text=True,
                       timeout=1200, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = subprocess.run([py, "-c", "import torch, torchax, xbench; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=300, env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    assert _torch_in_range(got.stdout.strip()), got.stdout
    store = tmp_path / "results"

    def train(runtime):
        return subprocess.run([py, "-m", "xbench", f"store.root={store}", f"runtime={runtime}", "model=mlp",
                               "data=synthetic_mnist", *FAST], capture_output=True, text=True, timeout=600,
                              cwd=tmp_path, env=env)

    with ThreadPoolExecutor(2) as pool:  # side by side: each is mostly one busy thread (2 cores here)
        for run in pool.map(train, ("eager", "torchax")):
            assert run.returncode == 0, run.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in store.glob("*/record.json")]
    assert sorted(r["config"]["runtime"]["name"] for r in recs if r["status"] == "ok") == ["eager", "torchax"]
