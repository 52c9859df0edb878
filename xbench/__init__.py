"""xbench: benchmark deep-learning training across hardware and execution frameworks.

`python -m xbench +experiment=...` runs one benchmark and leaves a run record; `python -m xbench.report`
compares records. See docs/architecture.md for where each concern lives.
"""

__version__ = "0.1.0"
