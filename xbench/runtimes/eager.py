"""Plain eager PyTorch: the baseline."""

from __future__ import annotations

from xbench.runtimes.base import Runtime


class EagerRuntime(Runtime):
    name = "eager"
