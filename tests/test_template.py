"""The warm template a sweep's isolated points are forked from (xbench/launch/template.py): where it is refused.

The fork itself, its pids and start-up, and the sweep's end table are checked on a real sweep
(tests/test_cli.py::test_sweep_points_are_forked_from_one_warm_template)."""

from __future__ import annotations

import sys

from xbench.config import XBenchConfig
from xbench.launch import template


def _cfg(**sections) -> XBenchConfig:
    cfg = XBenchConfig()
    cfg.parallel.name, cfg.runtime.name, cfg.bench.isolation = "single", "eager", "auto"
    for key, value in sections.items():
        section, field = key.split("__")
        setattr(getattr(cfg, section), field, value)
    return cfg


def test_points_that_cannot_be_forked_safely_are_spawned_with_the_reason():
    """JAX's and torch_xla's threads, a setting torch reads when it starts, or the user's word: spawned, and why
    (each said once per sweep); a strategy with a launcher of its own is left to it. Before, every point spawned."""
    assert template.refusal(_cfg()) is None if sys.platform.startswith("linux") else True
    assert "JAX" in template.refusal(_cfg(runtime__name="torchax"))
    assert "torch_xla" in template.refusal(_cfg(runtime__name="xla_compile"))
    assert "ATEN_CPU_CAPABILITY" in template.refusal(_cfg(bench__cpu_capability="avx2"))
    assert template.refusal(_cfg(bench__isolation="spawn")) == "bench.isolation=spawn"
    assert template.decide(_cfg(parallel__name="ddp")) == {"process": "torchrun launcher"}
    said = template._SAID.copy()
    try:
        template._SAID.clear()
        for _ in range(2):
            assert template.decide(_cfg(runtime__name="torchax"))["process"] == "spawn"
        assert len(template._SAID) == 1
    finally:
        template._SAID.clear()
        template._SAID.update(said)
