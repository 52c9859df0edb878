"""Every setting has one owner: its field in xbench/config/<group>.py, with its range or choices beside it (`knob`),
read by one validator. A numeric field without a range fails here; so does a bound restated anywhere else."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import xbench.config as config
from xbench.config import XBenchConfig, knob, range_problems
from xbench.config.knobs import schema_fields

REPO = Path(__file__).resolve().parents[1]


def _numeric(tp) -> bool:
    """int, float, their optionals, and lists or mappings of them (betas, peak_tflops)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    inner = [tp, *args, *(x for a in args for x in typing.get_args(a))]
    return any(a in (int, float) for a in inner) and tp is not bool


def unranged(schema) -> list[str]:
    """The numeric fields of `schema` (nested sections included) whose knob gives no closed-or-open range."""
    out = []
    for key, f, tp in schema_fields(schema):
        k = f.metadata.get("knob")
        if _numeric(tp) and (k is None or not k.numeric or None in ((k.ge, k.gt)[k.ge is None],
                                                                    (k.le, k.lt)[k.le is None])):
            out.append(key)
    return out


def test_every_numeric_field_of_every_schema_declares_its_range():
    assert unranged(XBenchConfig) == [], "give these fields a range beside them: knob(default, ge=.., le=..)"


@dataclasses.dataclass
class _Section:
    ranged: int = knob(1, ge=1, le=10)
    half: float = knob(0.5, ge=0)  # no upper bound
    bare: int | None = None
    name: str = "x"


@dataclasses.dataclass
class _Root:
    section: _Section = dataclasses.field(default_factory=_Section)
    sizes: list[float] = dataclasses.field(default_factory=list)


def test_a_numeric_field_without_a_range_is_found():
    assert unranged(_Root) == ["section.half", "section.bare", "sizes"]


def test_every_default_lies_in_its_range_and_choices():
    cfg = XBenchConfig()
    cfg.model.name = cfg.data.name = cfg.platform.name = "x"
    cfg.runtime.name, cfg.parallel.name, cfg.precision.name, cfg.logger.name = "eager", "single", "fp32", "none"
    assert range_problems(cfg) == []


def test_the_old_range_table_and_message_filter_are_gone():
    assert not hasattr(config, "RANGES") and not hasattr(config, "in_range")
    compat = (REPO / "xbench" / "compat.py").read_text()
    for gone in ("_key_of", "positive_numbers", "re.match"):
        assert gone not in compat, gone


def test_no_bound_is_restated_outside_its_field():
    """A message 'data.eval_fraction must be in (0, 1)' anywhere but the knob is a second copy of the bound."""
    keys = [key for key, f, tp in schema_fields(XBenchConfig) if f.metadata.get("knob") is not None]
    alternatives = "|".join(re.escape(k) for k in keys)
    said = re.compile("(" + alternatives + r")(=\{[^}]*\})? must be (>|<|in [\[(]|a positive|between|a number)")
    config_dir = REPO / "xbench" / "config"
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in (REPO / "xbench").rglob("*.py")
             if config_dir not in p.parents for m in said.finditer(p.read_text())]
    assert found == []


def test_the_price_fields_hold_the_billing_models_bounds():
    """metrics/cost.py holds any platform dict (a record's, a price file's) to the same bounds the schema's fields
    declare: one copy, read by both."""
    from xbench.config import PlatformConfig, PriceConfig
    from xbench.metrics.cost import PLATFORM_BOUNDS, PRICE_BOUNDS

    for cls, bounds in ((PlatformConfig, PLATFORM_BOUNDS), (PriceConfig, PRICE_BOUNDS)):
        fields = {f.name: f.metadata["knob"] for f in dataclasses.fields(cls) if f.name in bounds}
        assert fields == bounds


@pytest.mark.parametrize("override,said", [
    ("data.batch_size=0", "data.batch_size=0 is out of range; allowed: [1, 2147483647]"),
    ("data.eval_fraction=1.0", "data.eval_fraction=1.0 is out of range; allowed: (0, 1)"),
    ("bench.isolation=thread", "bench.isolation='thread' is unknown; allowed: auto, process, shared, spawn"),
    ("fault.kind=boom", "fault.kind='boom' is unknown; allowed: null, exception, nan_loss, sigterm, hang, signal"),
    ("goal.max_epochs=0", "goal.max_epochs=0 is out of range; allowed: [1, 1000000]"),
    ("optim.schedule.gamma=1.5", "optim.schedule.gamma=1.5 is out of range; allowed: (0, 1)"),
    ("parallel.timeout_s=0", "parallel.timeout_s=0.0 is out of range; allowed: (0, 86400]"),
    ("platform.utilisation=2", "platform.utilisation=2.0 is out of range; allowed: (0, 1]"),
])
def test_compat_says_each_bad_value_once_in_the_validators_words(override, said):
    """The validator's message and nothing else for one bad value: no rule restates it."""
    from omegaconf import OmegaConf

    from xbench import compat
    from xbench.api import compose
    from xbench.platforms.detect import HostFacts

    cfg = OmegaConf.to_object(compose(["model=mlp", "data=synthetic_mnist", "logger=none", override]))
    assert compat.check(cfg, HostFacts(logical_cores=2, torch_version="2.9.0")) == [said]


def test_fsdp_options_are_typed_fields_of_parallel():
    from omegaconf import OmegaConf

    from xbench.api import compose

    cfg = OmegaConf.to_object(compose(["parallel=fsdp", "parallel.reshard_after_forward=false",
                                       "parallel.shard_size=1", "logger=none"]))
    assert cfg.parallel.reshard_after_forward is False and cfg.parallel.shard_size == 1
    with pytest.raises(ValueError, match=r"^parallel.options.shard_size is now parallel.shard_size: "
                                         r"write parallel.shard_size=2$"):
        compose(["parallel=fsdp", "parallel.options.shard_size=2"])


@pytest.mark.slow
def test_the_cli_refuses_bad_values_and_an_old_spelling_before_any_device_work(tmp_path):
    """data.batch_size=0 on the real CLI: a failed record naming the range, one console line, no rank ran;
    parallel.options.X: one line naming parallel.X, nothing written."""
    run = [sys.executable, "-m", "xbench", f"store.root={tmp_path}", "logger=none", "logger.progress=false"]
    bad = subprocess.run([*run, "data.batch_size=0", "bench.repeats=0"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert bad.returncode != 0
    [line] = [x for x in bad.stdout.splitlines() if "FAILED" in x]
    assert ("data.batch_size=0 is out of range; allowed: [1, 2147483647]; bench.repeats=0 is out of range; "
            "allowed: [1, 100000]") in line
    import json

    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("*/record.json")]
    assert record["status"] == "failed" and not record.get("ranks")
    old = subprocess.run([*run, "parallel=fsdp", "parallel.options.reshard_after_forward=false"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert old.returncode != 0 and old.stderr.strip().splitlines()[-1] == (
        "xbench: parallel.options.reshard_after_forward is now parallel.reshard_after_forward: write "
        "parallel.reshard_after_forward=false")
    assert len(list(tmp_path.glob("*/record.json"))) == 1
