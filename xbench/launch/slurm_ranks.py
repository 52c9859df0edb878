"""Ranks that srun started: a SLURM step of several tasks is a torch world, one rank per task.

`srun --ntasks=N python -m xbench parallel=ddp parallel.world_size=N` starts N processes, each with SLURM's
facts and none of torch's. `torch_variables()` answers what torch's env:// rendezvous and the torchrun
launcher read (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), taken from SLURM's
(SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, the step's tasks on this node, its first node); it writes
nothing. The one place that applies them is launch/torchrun.launch, while the rank runs: from then on the
process is a rank like one the `torchrun` command started (rank 0 writes the record). A variable already set
(MASTER_PORT, or torchrun under srun setting them all) is left alone. A batch script itself (no SLURM_STEP_ID)
and a step of one task (hydra-submitit-launcher's jobs) get none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from xbench.env_vars import srun_step_tasks

PORT_BASE = 29500  # MASTER_PORT = PORT_BASE + job id % PORT_SPAN: two jobs on one node rarely collide
PORT_SPAN = 2000


def tasks_on_node(tasks_per_node: str, node: int) -> int:
    """This node's tasks from SLURM's compressed list: "2", "2(x3),1", "4,2"."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m:
            counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node] if 0 <= node < len(counts) else 1


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list ("gpu[03-05,07]" -> gpu03), by scontrol when present."""
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                                 timeout=30, check=True).stdout.split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass
    m = re.match(r"([^\[,]+)(?:\[([^\],-]+))?", nodelist)
    return (m.group(1) + (m.group(2) or "")) if m else nodelist


def torch_variables(env=os.environ) -> dict[str, str]:
    """The variables torch needs that this srun task lacks, from SLURM's; {} outside a step of several tasks.
    An answer: `env` is read, never written."""
    world = srun_step_tasks(env)
    if world < 2:
        return {}
    node = int(env.get("SLURM_NODEID", "0"))
    facts = {
        "RANK": env.get("SLURM_PROCID", "0"),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": str(tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE", str(world)), node)),
        "MASTER_PORT": str(PORT_BASE + int(env.get("SLURM_JOB_ID", "0") or 0) % PORT_SPAN),
    }
    out = {k: v for k, v in facts.items() if k not in env}
    if "MASTER_ADDR" not in env:
        out["MASTER_ADDR"] = first_host(
            env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "localhost")
        )
    return out
