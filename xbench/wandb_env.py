"""Whether this machine can reach W&B as a user: an API key in the environment or a wandb.ai login in
~/.netrc. Torch-free and dependency-free, so the run's W&B sink and the torch-free report's W&B
publisher ask the same question without the report importing the sinks."""

from __future__ import annotations

import os
from pathlib import Path


def has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False
