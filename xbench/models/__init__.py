"""Model registry: name -> builder. Add a model with `@register("name", task=...)` and a conf/model YAML.

A builder takes an `InputSpec` (shapes from the data config) plus its own keyword options, and returns
an `nn.Module` mapping one batch's inputs to logits. `task` picks the loss (see xbench.training.step).
"""

from __future__ import annotations

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

    def option_names(self) -> list[str]:
        params = list(inspect.signature(self.builder).parameters.values())[1:]  # skip the InputSpec
        return [p.name for p in params]


REGISTRY: dict[str, ModelEntry] = {}


def register(name: str, task: str = "classify", modalities: tuple[str, ...] = ("image",)):
    def deco(fn):
        REGISTRY[name] = ModelEntry(name, fn, task, modalities)
        return fn

    return deco


def get(name: str) -> ModelEntry:
    _load_builtin()
    if name not in REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def names() -> list[str]:
    _load_builtin()
    return sorted(REGISTRY)


def build(name: str, spec: InputSpec, options: dict):
    return get(name).builder(spec, **options)


def _load_builtin() -> None:
    # Imported lazily so `xbench.models` (and compat checks) stay cheap; each module registers itself.
    from xbench.models import text, vision  # noqa: F401
