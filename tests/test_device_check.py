"""The GPU check script's dry run on the CPU: it runs the real CLI per row and prints its table last."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env

pytestmark = pytest.mark.slow


def test_device_check_dry_run_prints_its_table(tmp_path):
    env = cli_env(OUT=str(tmp_path), PYTHON=sys.executable)
    p = subprocess.run(["bash", "scripts/device_check.sh", "--dry-run", "--only",
                        "tf32 eager,single (ddp baseline),ddp world_size=1,overhead"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("configuration"))
    rows = {line.split("  ")[0].strip(): line for line in lines[header + 1:] if line and not line.startswith(" ")}
    assert rows["tf32 eager"].split()[2] == "skipped"  # CUDA only
    for name in ("single (ddp baseline)", "ddp world_size=1"):
        assert " ok " in rows[name], rows[name]
        assert float(rows[name].split()[-8]) > 0  # samples/s
    ratio = next(line for line in lines if line.startswith("DDP(world 1) / single throughput:"))
    assert float(ratio.split(":")[1]) > 0
    overhead = next(line for line in lines if line.startswith("overhead xbench/hand, mlp fp32 (cpu): "))
    assert float(overhead.split(": ")[1].split()[0]) > 0 and "goal >= 0.98" in overhead, overhead
    assert (tmp_path / "device_check.txt").read_text().startswith("configuration")
    assert len(list((tmp_path / "results").glob("*/*/record.json"))) == 2
