"""Shared helpers: run the real CLI in a subprocess against a temporary store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_SILENT="true", WANDB_MODE="offline", PYTHONUNBUFFERED="1",
               TORCHINDUCTOR_CACHE_DIR=os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/xbench-inductor-tests"))
    env.update(extra)
    return env


def run_cli(*args: str, store: Path, cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
            module: str = "xbench") -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]  # Hydra's flags (-m) must come before overrides
    cmd = [sys.executable, "-m", module, *flags, f"store.root={store}", *[a for a in args if a not in flags]]
    return subprocess.run(cmd, cwd=cwd or REPO, env=env or cli_env(), capture_output=True, text=True,
                          timeout=timeout)


def records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(store).glob("*/record.json"))]


# Keep every CLI run small: a few steps, no W&B unless the test asks. Windows of exactly bench.steps
# (not sized by time), one of them, and a sweep's points in one process: a test that is about window
# sizing, repeats or isolation says so after FAST (a later override wins).
FAST = ("bench.steps=5", "bench.min_window_s=0", "bench.repeats=1", "bench.isolation=shared",
        "bench.warmup_max_steps=6", "bench.warmup_min_steps=2", "bench.warmup_stable_steps=2",
        "bench.warmup_cv_tol=10", "logger=none", "logger.progress=false")


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "results"
