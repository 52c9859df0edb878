"""Environment variables set for the length of a `with` block and restored after it (torch-free, any layer):
the variables fresh processes inherit (launch/child.py), XLA's dump flags (bench/profile.py), HF's switch
off torch_xla (models/zoo.py)."""

from __future__ import annotations

import os
from contextlib import contextmanager


@contextmanager
def temporarily(env: dict[str, str]):
    """`env` in this process's environment inside the block; each variable back to its value (or unset) after."""
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
