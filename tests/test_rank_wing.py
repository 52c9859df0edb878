"""The process boundary as a folder boundary: the plan resolved once on the record side and carried down
in the rank work, one place a launcher installs a rank's stop flag, one meaning of `samples_per_step`."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from xbench.api import compose

PACKAGE = Path(__file__).resolve().parent.parent / "xbench"


@pytest.fixture(scope="module")
def cfg():
    return OmegaConf.to_object(compose(["model=mlp", "data=synthetic_mnist", "platform=cpu", "logger=none",
                                        "data.batch_size=8", "optim.accumulate_steps=2"]))


def test_the_plan_is_resolved_once_frozen_and_pickles_without_the_host_facts(cfg):
    """What a rank reads is resolved on the record side: the device type, the strategy's launcher, the
    precision, the data's shapes. The work a launcher pickles into a rank carries the plan and no HostFacts."""
    from xbench.bench.training import TargetWork
    from xbench.bench.windows import ThroughputWork
    from xbench.data.spec import InputSpec
    from xbench.plan import Plan, resolve
    from xbench.platforms.detect import HostFacts, host_facts

    facts = host_facts()
    plan = resolve(cfg, facts)
    assert (plan.device_type, plan.launcher, plan.strategy, plan.runtime.name) == ("cpu", "inline", "single", "eager")
    assert plan.spec == InputSpec.from_data(plan.data) and plan.precision == cfg.precision.name
    ddp = copy.deepcopy(cfg)
    ddp.parallel.name = "ddp"
    assert resolve(ddp, facts).launcher == "torchrun" and plan.launcher == "inline"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.device_type = "cuda"
    for work in (ThroughputWork(plan), TargetWork(plan, "/nonexistent")):
        assert pickle.loads(pickle.dumps(work)).plan == plan
        assert not any(isinstance(getattr(work, f.name), HostFacts) for f in dataclasses.fields(work))
        assert b"HostFacts" not in pickle.dumps(work)
    assert Plan.__dataclass_params__.frozen


def test_the_plan_carries_the_sections_a_rank_applies_and_never_the_root_config(cfg):
    """The plan's sections are the config's own typed ones under their names (a rank reads `plan.bench.seed`);
    the root config, the store, the logger's W&B settings and the platform's prices never cross into a rank:
    the pickled work names none of their classes. Before: `Plan.cfg` was the whole XBenchConfig."""
    from xbench.bench.windows import ThroughputWork
    from xbench.plan import SECTIONS, PlatformName, resolve
    from xbench.platforms.detect import host_facts

    plan = resolve(cfg, host_facts())
    assert not hasattr(plan, "cfg") and {f.name for f in dataclasses.fields(plan)} >= set(SECTIONS)
    for name in SECTIONS:
        assert getattr(plan, name) == getattr(cfg, name), name
    assert plan.platform == PlatformName(cfg.platform.name, cfg.platform.device)
    assert plan.progress is cfg.logger.progress
    sent = pickle.dumps(ThroughputWork(plan))
    for kept_back in (b"XBenchConfig", b"StoreConfig", b"LoggerConfig", b"WandbConfig", b"PlatformConfig",
                      b"PriceConfig", b"PrecisionConfig"):
        assert kept_back not in sent, kept_back
    assert b"BenchConfig" in sent and b"OptimConfig" in sent  # the check can see a class name when it is there


def test_only_the_preamble_installs_a_launched_process_stop_flag():
    """launch/child.stop_on_signals is called in one place (launch/preamble.process_stop), which the inline,
    torchrun and xla launchers (torch_xla's replica threads included) and run_rank call."""
    callers, process_stop_users = set(), set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                rel = str(path.relative_to(PACKAGE.parent))
                if name == "stop_on_signals":
                    callers.add(rel)
                if name == "process_stop":
                    process_stop_users.add(rel)
    assert callers == {"xbench/launch/preamble.py"}
    assert {"xbench/launch/inline.py", "xbench/launch/torchrun.py", "xbench/launch/xla.py",
            "xbench/launch/preamble.py"} <= process_stop_users


def test_samples_per_step_is_one_ranks_samples_of_one_optimizer_step(cfg):
    """Both loops report it through bench/figures.py: the batch per device over the rank's devices and the
    step's micro-batches (before: the global batch in train_to_target's figures, per rank in throughput's)."""
    from xbench.bench.figures import build_figures
    from xbench.bench.worker import prepare_rank
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    p = prepare_rank(resolve(cfg, host_facts()), RankContext(threads=1))
    fig = build_figures(0, p.work, p.batch_size, p.accumulate, p.threads, p.cpu_capability)
    assert p.samples_per_step == fig["samples_per_step"] == 16
    assert fig["batch_size_per_device"] == 8 and fig["devices_per_rank"] == 1
    x, _ = p.hooks.next_batch()
    assert x.shape[0] == 16  # what one step of this rank actually takes
