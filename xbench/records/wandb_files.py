"""Read an offline W&B run back from its run files (for tests and for checking what was logged).

Uses `wandb leet inspect --json`, which prints the records of a `.wandb` transaction log as JSON lines
(wandb >= 0.31; the old `wandb.sdk.internal.datastore` reader is gone).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path


def _wandb_cli() -> list[str]:
    exe = Path(sys.executable).with_name("wandb")
    return [str(exe)] if exe.exists() else [shutil.which("wandb") or "wandb"]


def read_offline_run(path: str | Path) -> dict:
    """-> {"config", "group", "tags", "name", "job_type", "history": [rows], "summary": {...}, "exit_code",
    "preempting" (the run was marked preempted: an interrupted record), "artifacts": [{name, type, paths}],
    "system_samples" (W&B's own system metrics records)}"""
    path = Path(path)
    files = [path] if path.suffix == ".wandb" else sorted(path.glob("**/run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"no .wandb file under {path}")
    out = subprocess.run(_wandb_cli() + ["leet", "inspect", "--json", str(files[-1])],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    run: dict = {
        "config": {},
        "history": [],
        "summary": {},
        "group": None,
        "tags": [],
        "name": None,
        "job_type": None,
        "exit_code": None,
        "preempting": False,
        "artifacts": [],
        "system_samples": 0,
    }
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        kind = rec.get("type")
        if kind == "run":
            r = rec["run"]
            run["config"].update((r.get("config") or {}).get("update", {}))
            run.update(group=r.get("run_group"), tags=r.get("tags", []), name=r.get("display_name"),
                       job_type=r.get("job_type"))
        elif kind == "config":
            run["config"].update(rec["config"].get("update", {}))
        elif kind == "history":
            run["history"].append(rec["history"]["item"])
        elif kind == "summary":
            run["summary"].update(rec["summary"].get("update", {}))
        elif kind == "artifact":  # logged artifacts: name, type and the paths inside
            art = rec["artifact"]
            run["artifacts"].append(
                {
                    "name": art.get("name"),
                    "type": art.get("type"),
                    "paths": [c["path"] for c in (art.get("manifest") or {}).get("contents", [])],
                }
            )
        elif kind == "stats":  # W&B's own system sampling (xbench turns it off)
            run["system_samples"] += 1
        elif kind == "preempting":
            run["preempting"] = True
        elif kind == "exit":
            run["exit_code"] = rec["exit"].get("exit_code", 0)
    run["config"].pop("_wandb", None)
    return run
