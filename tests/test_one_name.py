"""One name, one concept: no two classes of xbench share a name (two `Progress` classes stood for the
console's bar and train-to-target's resumable state)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

XBENCH = Path(__file__).resolve().parents[1] / "xbench"


def test_no_two_classes_of_xbench_share_a_name():
    where = defaultdict(list)
    for path in sorted(XBENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(XBENCH.parent)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
