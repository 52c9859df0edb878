"""Which of the project's modules a test session never imported: `make test-fast` runs pytest with
`--every-module`, and the session fails when one of xbench's (or hydra_plugins') modules is not in sys.modules
at its end, naming each one. Modules are listed from the source files (nothing imported to list them), so a
new module without a fast test fails the next `make test-fast`. make test-fast runs its tests in two passes (the
`serial` ones, then the rest under pytest-xdist): the second checks the modules of both, each of its workers'
and those the first left in `--modules-seen` (conftest.py).

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


# Modules that cannot be imported without torch-xla (runtimes/xla.py raises ImportError by design): in the default
# environment (torch 2.15, no torch-xla) make test-fast cannot import them; make test-xla's tests do, in .venv-xla.
NEEDS_TORCH_XLA = ("xbench.runtimes.xla",)


def never_imported(loaded, repo: Path = REPO) -> list[str]:
    """The project's modules that are not keys of `loaded` (sys.modules at the end of a session), but for those
    that need torch-xla where it is not installed."""
    import importlib.util

    exempt = () if importlib.util.find_spec("torch_xla") is not None else NEEDS_TORCH_XLA
    return [m for m in project_modules(repo) if m not in loaded and m not in exempt]
