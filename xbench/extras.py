"""Optional dependencies: which `pip install 'xbench[EXTRA]'` brings each one, said in one line.

The extras themselves are declared in pyproject.toml ([project.optional-dependencies]); a test checks
that every line here names an extra that lists its distribution. Torch-free and import-free: whether a
package is there is asked of importlib's finder, nothing is imported.

**torch_xla stays out of a process until an XLA run is about to use it**, one way: importing it writes the
environment (PJRT_DEVICE, GRPC_VERBOSITY, XLA_FLAGS ...), picks a PJRT device once, starts runtime threads
that make a fork unsafe, and costs ~10 s. So:
- whether it is there is asked here (`installed("torch_xla")`, `torch_xla_loaded()`), never by importing it;
- the one door in is `xbench.runtimes.xla_module()` (PJRT_DEVICE set first, then runtimes/xla.py, the only
  module importing torch_xla: an import-linter contract); `runtimes.xla_lazy` is that door behind an attribute
  read, for the XLA strategies' module-level name; compat asks the XLA runtimes' rules of
  runtimes/xla_rules.py;
- libraries that import it whenever it is installed (accelerate, transformers through it) are told not to by
  `keep_torch_xla_out()`, the one writer of USE_TORCH_XLA (tests/test_import_env.py checks all of it).
"""

from __future__ import annotations

import importlib.util
import os
import sys

# import name -> (distribution on PyPI, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "torchvision": ("torchvision", "vision"),
    "torch_xla": ("torch-xla", "xla"),
    "accelerate": ("accelerate", "accelerate"),
    "torchax": ("torchax", "torchax"),
    "jax": ("jax", "torchax"),
    "optax": ("optax", "torchax"),
    "wandb": ("wandb", "wandb"),
    "wandb_workspaces": ("wandb-workspaces", "wandb"),
    "sklearn": ("scikit-learn", "data"),
    "pandas": ("pandas", "report"),
    "matplotlib": ("matplotlib", "report"),
    "pynvml": ("nvidia-ml-py", "gpu"),
    "hydra_plugins.hydra_submitit_launcher": ("hydra-submitit-launcher", "slurm"),
    "transformers": ("transformers", "hf"),
    "tokenizers": ("transformers", "hf"),  # data.source=text_bpe: xbench[hf]'s transformers brings it
    "timm": ("timm", "timm"),
}


class MissingDependency(ImportError):
    """An optional package a feature needs is not installed; the message is the one line to act on."""


def installed(module: str) -> bool:
    """Findable without importing it (a broken or hidden package counts as absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def install_command(*modules: str) -> str:
    extras = sorted({EXTRAS[m][1] for m in modules})
    return f"pip install 'xbench[{','.join(extras)}]'"


# How a package is known to its users, where that differs from its distribution's name.
NAMES = {"accelerate": "HF Accelerate", "transformers": "HF transformers", "sklearn": "scikit-learn",
         "tokenizers": "HF tokenizers"}


def message(what: str, *modules: str) -> str:
    """`<what> needs <package>, which is not installed here: pip install 'xbench[<extra>]'`."""
    dists = " and ".join(NAMES.get(m, EXTRAS[m][0]) for m in modules)
    return f"{what} needs {dists}, which {'is' if len(modules) == 1 else 'are'} not installed here: " \
           f"{install_command(*modules)}"


def missing(what: str, *modules: str) -> str | None:
    """The one line for the modules `what` needs that are absent; None when all are there."""
    absent = [m for m in modules if not installed(m)]
    return message(what, *absent) if absent else None


def require(what: str, *modules: str) -> None:
    """Raise MissingDependency (one line, with the install command) unless every module is there."""
    line = missing(what, *modules)
    if line:
        raise MissingDependency(line)


def torch_xla_loaded() -> bool:
    """torch_xla is imported in this process already (an XLA run, a sweep's or a parity pair's preload)."""
    return "torch_xla" in sys.modules


def keep_torch_xla_out(*, even_if_loaded: bool = False) -> None:
    """USE_TORCH_XLA=0 before importing accelerate or transformers, which import torch_xla whenever it is
    installed (and accelerate then picks the XLA device). Unless torch_xla is loaded already (an XLA run's
    model builds with it there); `even_if_loaded`: accelerate's runtime, the CPU/CUDA path whatever ran before
    in this process. The caller restores the environment where a check must leave it as it was."""
    if even_if_loaded or not torch_xla_loaded():
        os.environ["USE_TORCH_XLA"] = "0"
