"""What may name a run's folder directly under a store (a run name or a run id).

Its own module so that config validation (imported by every rank) can ask it without importing the
store's writer: a rank never publishes (the import contract in pyproject.toml).
"""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")


def name_problem(name: str, what: str) -> str | None:
    """Why `name` cannot name a folder directly under the store (a run name or id), or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        return (f"{what}={name!r} names a folder directly under store.root: use letters, digits, '.', '_' "
                "and '-' (no '/', no '..', not starting with '.' or '-')")
    return None
