"""Hydra's internals (`hydra._internal`, and the private names xbench patches or reads) are touched in one module,
xbench/hydra_guard.py, whose docstring says what each is and why: a Hydra upgrade that moves one breaks one
place. Read from the source's syntax trees, so an import inside a function counts too."""

from __future__ import annotations

import ast

from tests.conftest import REPO

THE_ONE = REPO / "xbench" / "hydra_guard.py"


def _internal_uses(path) -> list[str]:
    """Imports of hydra._internal (and `from hydra import _internal`), and strings naming it (a `_target_`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "hydra" else [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.startswith("hydra._internal") else []
        else:
            continue
        found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.startswith("hydra._internal")]
    return found


def test_only_hydra_guard_touches_hydras_internals():
    sources = sorted((REPO / "xbench").rglob("*.py")) + sorted((REPO / "hydra_plugins").rglob("*.py"))
    assert THE_ONE in sources
    assert _internal_uses(THE_ONE)  # the walk sees what it looks for
    assert [u for p in sources if p != THE_ONE for u in _internal_uses(p)] == []
    doc = ast.get_docstring(ast.parse(THE_ONE.read_text()))
    for private in ("ConfigLoaderImpl.get_group_options", "hydra.core.utils._save_config",
                    "basic_sweeper.OmegaConf", "BasicLauncher", "JobReturn._return_value"):
        assert private in doc, private
