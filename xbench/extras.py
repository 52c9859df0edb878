"""Optional dependencies: which `pip install 'xbench[EXTRA]'` brings each one, said in one line.

The extras themselves are declared in pyproject.toml ([project.optional-dependencies]); a test checks
that every line here names an extra that lists its distribution. Torch-free and import-free: whether a
package is there is asked of importlib's finder, nothing is imported.
"""

from __future__ import annotations

import importlib.util

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
