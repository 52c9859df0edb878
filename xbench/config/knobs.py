"""A setting's allowed values beside its field, and the one validator that reads them.

    batch_size: int = knob(64, ge=1, le=BIG)  # per device
    mode: str = knob("auto", choices=("auto", "online", "offline", "disabled"))

`knob` is a dataclass field whose metadata holds a `Knob` (bounds, choices); Hydra and OmegaConf ignore the
metadata, so the field composes as any other. `problems(schema, plain)` walks the schema's dataclasses and
reports every value outside its knob, in one message style: `<key>=<value> is out of range; allowed: [lo, hi]`
or `<key>=<value> is unknown; allowed: a, b, c`. A number must also be finite; an optional key may be null.
Rules that compare two fields are compat's (and the plugins' `rules`); a single field's bound is here only.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import field
from typing import Any

from xbench.metrics.bounds import BIG, Knob

__all__ = ["BIG", "Knob", "choices_of", "knob", "knob_of", "problems", "schema_fields"]


def knob(default: Any = dataclasses.MISSING, *, factory=None, ge=None, gt=None, le=None, lt=None,
         choices=None) -> Any:
    """A dataclass field with its allowed values beside it (`factory` for a list or dict default)."""
    meta = {"knob": Knob(ge, gt, le, lt, tuple(choices) if choices is not None else None)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def knob_of(f: dataclasses.Field) -> Knob | None:
    return f.metadata.get("knob")


def schema_fields(cls, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, type) of every leaf field of a schema, through nested sections and lists of
    sections (platform.price.amount)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], f"{prefix}{f.name}"
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        section = next((a for a in [tp, *inner] if dataclasses.is_dataclass(a)), None)
        if section is not None:
            yield from schema_fields(section, key + ".")
        else:
            yield key, f, tp


def choices_of(cls, name: str) -> tuple:
    """The closed set of one field of a section (`choices_of(BenchConfig, "profile")`)."""
    return knob_of(next(f for f in dataclasses.fields(cls) if f.name == name)).choices


def _values(node, path: str):
    """(where, value) of the values at `path` in a plain config: a scalar, a list's elements, a dict's values
    (platform.peak_tflops.bf16), and every element of a list of mappings (platform.price[i].amount)."""
    head, _, rest = path.partition(".")
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from ((f"[{i}]{p}", v) for p, v in _values(item, path))
        return
    if not isinstance(node, dict) or head not in node:
        return
    value = node[head]
    inner = _values(value, rest) if rest else _elements(value)
    yield from ((f".{head}{p}", v) for p, v in inner)


def _elements(value):
    """(where, value) below a field's value: a list's elements, a dict's values, else the value itself."""
    if isinstance(value, list):
        return ((f"[{i}]", v) for i, v in enumerate(value))
    if isinstance(value, dict):
        return ((f".{k}", v) for k, v in value.items())
    return [("", value)]


def problems(schema, plain: dict) -> list[str]:
    """Every value of `plain` (a config as plain dicts and lists, whole or in part) outside its field's
    knob."""
    out = []
    for key, f, _ in schema_fields(schema):
        k = knob_of(f)
        if k is None:
            continue
        for where, value in _values(plain, key):
            if (why := k.problem(where.lstrip("."), value)) is not None:
                out.append(why)
    return out
