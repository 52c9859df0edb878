"""Model registry: name -> builder. Add a model with `@register("name", task=...)` and a conf/model YAML.

A builder takes an `InputSpec` (shapes from the data config) plus its own keyword options, and returns
an `nn.Module` mapping one batch's inputs to logits. `task` picks the loss (see xbench.training.step).

Names with a family prefix are the open zoo (xbench/models/zoo.py): `torchvision/<name>`,
`timm/<name>`, `hf/<architecture or model type>`, resolved when first asked for, no YAML needed.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from xbench.data.spec import InputSpec


@dataclass(frozen=True)
class ModelEntry:
    name: str
    builder: Callable
    task: str  # classify | lm (next-token) | mlm (masked tokens)
    modalities: tuple[str, ...]  # data modalities it accepts
    packages: tuple[str, ...] = ()  # optional packages the builder imports (compat names their extra)
    # Zoo families: (spec, options) -> why they cannot be built, from a build on the meta device (compat).
    probe: Callable | None = None

    def option_names(self) -> list[str] | None:
        """The builder's keyword options; None for a zoo model (its constructor's keywords: see `probe`)."""
        if self.probe is not None:
            return None
        params = list(inspect.signature(self.builder).parameters.values())[1:]  # skip the InputSpec
        return [p.name for p in params]


REGISTRY: dict[str, ModelEntry] = {}


def register(name: str, task: str = "classify", modalities: tuple[str, ...] = ("image",),
             packages: tuple[str, ...] = ()):
    def deco(fn):
        REGISTRY[name] = ModelEntry(name, fn, task, modalities, packages)
        return fn

    return deco


def get(name: str) -> ModelEntry:
    """The entry of a built-in model or a zoo name; KeyError (a one-line reason, with close matches or
    the extra to install) otherwise."""
    _load_builtin()
    if name in REGISTRY:
        return REGISTRY[name]
    if "/" in name:
        from xbench.models import zoo

        return zoo.resolve(name)
    near = difflib.get_close_matches(name, REGISTRY, n=3)
    raise KeyError(f"unknown model {name!r}; " + (f"did you mean {', '.join(near)}? " if near else "")
                   + f"registered: {', '.join(sorted(REGISTRY))}; or a zoo name: torchvision/<name>, "
                   "timm/<name>, hf/<architecture>")


def names() -> list[str]:
    _load_builtin()
    return sorted(REGISTRY)


def build(name: str, spec: InputSpec, options: dict):
    return get(name).builder(spec, **options)


def _load_builtin() -> None:
    # Imported lazily so `xbench.models` (and compat checks) stay cheap; each module registers itself.
    from xbench.models import decoder, text, vision  # noqa: F401
