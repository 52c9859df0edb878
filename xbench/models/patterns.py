"""Sweeps over a zoo family by pattern: `-m 'model=timm/convnext_*'` is the sweep over every matching name.

The command line's `model=` value is expanded before Hydra reads it: each comma-separated item with a
glob character (`*`, `?`, `[`) becomes the sorted names of its family that match (torchvision's, timm's or
Hugging Face's lists, as models/zoo.py resolves them), listed before anything runs. A pattern that matches
more than the limit (`XBENCH_MAX_PATTERN_MODELS`, default 24) is refused with the count and that setting;
one that matches nothing, or a sweep without `-m`, is refused with what to do instead. Importing this module
is cheap: the family's library is imported only when a pattern names it.
"""

from __future__ import annotations

import fnmatch
import os

GLOB = "*?["
LIMIT_ENV = "XBENCH_MAX_PATTERN_MODELS"
DEFAULT_LIMIT = 24
MULTIRUN = ("-m", "--multirun")


def is_pattern(name: str) -> bool:
    return "/" in name and any(c in name for c in GLOB)


def limit() -> int:
    raw = os.environ.get(LIMIT_ENV, str(DEFAULT_LIMIT))
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{LIMIT_ENV}={raw!r} must be a whole number >= 1")
    return value


def matches(pattern: str) -> list[str]:
    """The zoo names `<family>/<glob>` matches, sorted; ValueError when it matches none."""
    from xbench.models import zoo

    family, _, glob = pattern.partition("/")
    try:
        known = zoo.known_names(family, pattern)
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    found = sorted(fnmatch.filter(known, glob))
    if not found:
        raise ValueError(f"model={pattern}: the pattern matches none of the {len(known)} {family} models "
                         f"({zoo.FAMILY_LISTS[family]})")
    return [f"{family}/{name}" for name in found]


def expand(args: list[str]) -> tuple[list[str], list[str]]:
    """(the arguments with each `model=` pattern replaced by its names, a line per pattern listing them).
    ValueError (one line: what was wrong and what to do) for a pattern that cannot be swept."""
    out, said = [], []
    for arg in args:
        prefix, eq, value = arg.partition("=")
        if prefix.lstrip("+~") != "model" or not eq or not any(is_pattern(v) for v in value.split(",")):
            out.append(arg)
            continue
        if value.startswith(("choice(", "range(", "glob(")):
            raise ValueError(f"{arg}: a zoo pattern goes in a plain list (model=timm/convnext_*,resnet18), "
                             "not in Hydra's choice()/glob()")
        items: list[str] = []
        for item in value.split(","):
            if not is_pattern(item):
                items.append(item)
                continue
            names = matches(item)
            cap = limit()
            if len(names) > cap:
                raise ValueError(f"model={item} matches {len(names)} models, more than the limit of {cap} "
                                 f"({LIMIT_ENV}={cap}): narrow the pattern, or set {LIMIT_ENV}={len(names)} "
                                 f"to run them all")
            said.append(f"model={item} matches {len(names)} models: {', '.join(names)}")
            items += names
        if len(items) > 1 and not any(a in MULTIRUN for a in args):
            raise ValueError(f"{arg} is a sweep of {len(items)} models: add -m (--multirun)")
        out.append(f"{prefix}={','.join(dict.fromkeys(items))}")
    return out, said
