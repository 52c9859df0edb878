"""Contention under an external launcher: the `torchrun` command's other ranks are this run's own processes,
never the "other processes" that make a record `contended` (a real 2-rank torchrun on this CPU)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# serial: alone, never beside another test (a run's own ranks must be the only busy processes it sees)
pytestmark = pytest.mark.serial

# Each rank writes its pid, waits for the other's, then spins a core for 1.5 s between two snapshots;
# rank 0 writes what the probe saw.
RANK_SCRIPT = """
import json, os, sys, time
from pathlib import Path
from xbench.bench.meters import contention

out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
(out / f"pid{rank}").write_text(str(os.getpid()))
while not (out / f"pid{1 - rank}").exists():
    time.sleep(0.01)
a = contention.snapshot()
t0 = time.perf_counter()
while time.perf_counter() - t0 < 1.5:
    pass
b = contention.snapshot()
if rank == 0:
    d = contention.between(a, b)
    (out / "seen.json").write_text(json.dumps({"own": sorted(b.own), "top": d["top"],
                                               "launcher": contention.launcher_pid()}))
"""


@pytest.mark.slow
def test_torchrun_sibling_rank_is_not_another_process(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    p = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    sibling = int((tmp_path / "pid1").read_text())
    assert sibling in seen["own"]  # rank 1 is this run's
    assert sibling not in {t["pid"] for t in seen["top"]}
    assert seen["launcher"] is not None and seen["launcher"] in seen["own"]  # the torchrun agent
