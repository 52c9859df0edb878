"""xbench's version: one place (pyproject reads it; `xbench --version`, every record and W&B config show
it)."""

__version__ = "0.1.0"
