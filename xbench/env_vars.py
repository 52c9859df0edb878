"""Environment variables set for the length of a `with` block and restored after it (torch-free, any layer):
the variables fresh processes inherit (launch/child.py), XLA's dump flags (bench/profile.py), a srun task's
torch variables while its rank runs (launch/torchrun.py), HF's switches while transformers loads
(models/zoo.py); and the one "started as a rank by an external launcher" rule (`launched_rank`), which
launch/torchrun.py and bench/meters/contention.py both read. Imports, checks and questions write no variable
(tests/test_pure_checks.py): what a run needs in its environment is applied where it launches, for that block
only."""

from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def temporarily(env: dict[str, str]):
    """`env` in this process's environment inside the block; each variable back to its value (or unset)
    after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def restored():
    """The whole environment back as it was after the block, whatever set it inside: for a third-party import
    that writes variables as it loads (torch._dynamo's TORCHINDUCTOR_CACHE_DIR under transformers' import), so
    that a question that imports one (compat's probe of a model) writes none."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for k in [k for k in os.environ if k not in saved]:
            os.environ.pop(k, None)
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def srun_step_tasks(env=os.environ) -> int:
    """Tasks of this srun step (1 outside a step: the batch script, a login shell)."""
    if "SLURM_STEP_ID" not in env:
        return 1
    n = env.get("SLURM_STEP_NUM_TASKS", "1")
    return int(n) if n.isdigit() else 1


def launched_rank(env=os.environ) -> bool:
    """True in a process an external launcher started as one rank of a world: torchrun or any elastic agent
    (TORCHELASTIC_RUN_ID; LOCAL_RANK with WORLD_SIZE), or a task of a srun step of several tasks. Its parent
    is then that launcher, and its siblings are the run's other ranks."""
    return (
        "TORCHELASTIC_RUN_ID" in env
        or ("LOCAL_RANK" in env and "WORLD_SIZE" in env)
        or srun_step_tasks(env) > 1
    )
