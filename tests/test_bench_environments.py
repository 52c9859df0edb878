"""`make bench` in a fresh checkout: each benchmark runs in the environment that has what it needs. torch-xla's
last release needs torch 2.9.0, so it lives in .venv-xla only; .venv has the newest torch and no torch-xla. A
benchmark's XLA case asked in .venv once ended make bench on a traceback before the other benchmarks ran."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env
from xbench.extras import installed

REPO = Path(__file__).resolve().parents[1]
XLA_SCRIPTS = ("bench_overhead.py", "bench_process.py")  # the benchmarks with an XLA:CPU case

pytestmark = pytest.mark.skipif(installed("torch_xla"),
                                reason="this environment has torch-xla: the case is the one without it")


@pytest.mark.parametrize("script", XLA_SCRIPTS)
def test_an_xla_benchmark_without_torch_xla_is_a_one_line_error_naming_its_environment(script):
    p = subprocess.run([sys.executable, f"scripts/{script}", "--runtime", "xla"], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "--runtime xla needs torch-xla" in last and ".venv-xla/bin/python" in last, last
    assert "RESULT" not in p.stdout  # refused before any measurement


def test_make_bench_runs_each_xla_case_in_the_xla_environment_and_nothing_else_asks_for_xla():
    """make's dry run (-n: the commands, nothing run): every benchmark with an XLA case is run with --runtime
    named, its XLA case by .venv-xla's python, everything else by .venv's."""
    p = subprocess.run(["make", "-n", "bench"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    runs = [(m.group(1), line) for line in p.stdout.splitlines()
            if (m := re.search(r"scripts/(bench_\w+\.py)", line))]
    assert {script for script, _ in runs} >= set(XLA_SCRIPTS)
    for script, line in runs:
        python = line.split()[0]
        if script in XLA_SCRIPTS:
            assert "--runtime eager" in line or "--runtime xla" in line, line  # never the default (both)
        assert python == (".venv-xla/bin/python" if "--runtime xla" in line else ".venv/bin/python"), line
