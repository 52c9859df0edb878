"""What is allowed, said after Hydra refuses a command line (it names the problem but, for a misspelled
key or a wrong type, not the alternatives). Reads the dataclass schema in xbench.config; no torch.

Hydra already lists the options of a config group (`model=foo`), so group choices are left to it.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

from xbench.config import XBenchConfig

_SCALARS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}


def _fields(cls) -> dict[str, dataclasses.Field]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _scalar(tp):
    """The scalar type of `int`, `int | None`, `float`..., else None (dicts, lists, dataclasses)."""
    if tp in _SCALARS:
        return tp
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and args[0] in _SCALARS else None


def _parses(value: str, tp) -> bool:
    if value.lower() in ("null", "none", "~") or tp is str:
        return True
    if tp is bool:
        return value.lower() in ("true", "false", "yes", "no", "on", "off", "1", "0")
    try:
        tp(value)
        return True
    except ValueError:
        return False


def hint_for(override: str) -> str | None:
    """One override `a.b=value` checked against the schema: a hint, or None when it looks fine."""
    if "=" not in override or override[0] in "+~-" or override.startswith("hydra"):
        return None
    key, _, value = override.partition("=")
    parts = key.split(".")
    cls, path = XBenchConfig, []
    for i, part in enumerate(parts):
        fields = _fields(cls)
        if part not in fields:
            where = ".".join(path) or "the top level"
            near = difflib.get_close_matches(part, fields, n=1)
            guess = f"did you mean {'.'.join(path + [near[0]])!r}? " if near else ""
            return f"{key!r} is not a config key; {guess}keys of {where}: {', '.join(sorted(fields))}"
        tp, path = fields[part], path + [part]
        if dataclasses.is_dataclass(tp):
            if i == len(parts) - 1:
                return None  # a group choice (model=foo): Hydra lists the options
            cls = tp
            continue
        scalar = _scalar(tp)
        if i < len(parts) - 1:
            return None if scalar is None else f"{'.'.join(path)!r} is a value, it has no sub-key {parts[i + 1]!r}"
        sweep = "," in value or "(" in value  # a multirun sweep (a,b / range(...)): Hydra parses it
        if scalar is not None and not sweep and not _parses(value, scalar):
            return f"{key} takes {_SCALARS[scalar]}, got {value!r}"
        return None
    return None


def compose_hints(argv: list[str]) -> list[str]:
    return [h for h in (hint_for(a) for a in argv) if h]
