"""Which of the project's modules a test session never imported: `make test-fast` runs pytest with
`--every-module`, and the session fails when one of xbench's (or hydra_plugins') modules is not in sys.modules
at its end, naming each one. Modules are listed from the source files (nothing imported to list them), so a
new module without a fast test fails the next `make test-fast`.

The check only means something for the whole selection: a run narrowed by `-k`, by test paths or by
`--lf`/`--deselect` skips it and says so (conftest.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("xbench", "hydra_plugins")


def project_modules(repo: Path = REPO) -> list[str]:
    """Every importable module of PACKAGES, by dotted name, from the .py files under each."""
    out = []
    for package in PACKAGES:
        for path in sorted((repo / package).rglob("*.py")):
            parts = path.relative_to(repo).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(out)


def never_imported(loaded, repo: Path = REPO) -> list[str]:
    """The project's modules that are not keys of `loaded` (sys.modules at the end of a session)."""
    return [m for m in project_modules(repo) if m not in loaded]
