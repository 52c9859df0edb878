"""Every config in conf/ composes against its schema; typos and unknown options fail at compose time."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from tests.conftest import CONF
from xbench.config import XBenchConfig, register_configs

pytestmark = pytest.mark.usefixtures("cached_compose")  # each override list composed once (compose_cache.py)
GROUPS = ("model", "data", "platform", "runtime", "parallel", "precision", "logger")


def _compose(overrides):
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_group_option_composes_to_typed_config(group, option):
    cfg = _compose([f"{group}={option}"])
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, XBenchConfig)
    assert getattr(obj, group).name  # every option names itself


@pytest.mark.parametrize("name", _options("experiment"))
def test_every_experiment_composes(name):
    cfg = _compose([f"+experiment={name}"])
    obj = OmegaConf.to_object(cfg)
    assert obj.experiment == name, "an experiment sets `experiment:` to its own name"


def test_every_yaml_starts_with_a_comment():
    for path in CONF.rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("#"), f"{path} must start with a comment saying what it is for"


def test_experiment_header_names_its_command():
    for path in (CONF / "experiment").glob("*.yaml"):
        head = path.read_text().splitlines()[:6]
        assert any("python -m xbench" in line for line in head), f"{path}: header must give the command"


def test_default_is_small_cnn_on_synthetic_cifar_eager_fp32():
    c = OmegaConf.to_object(_compose([]))
    assert (c.model.name, c.data.name, c.runtime.name, c.precision.name, c.parallel.name) == (
        "cnn_small", "synthetic_cifar10", "eager", "fp32", "single")
    assert (c.data.image_size, c.data.num_classes) == (32, 10)


def test_misspelled_key_fails_at_compose():
    with pytest.raises(ConfigCompositionException) as e:
        _compose(["data.batchsize=3"])
    assert "batchsize" in str(e.value.__cause__ or e.value)


def test_wrong_type_fails_at_compose():
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        _compose(["data.batch_size=many"])
    msg = str(e.value.__cause__ or e.value)
    assert "data.batch_size" in msg and "many" in msg


def test_unknown_group_option_lists_allowed():
    with pytest.raises(ConfigCompositionException) as e:
        _compose(["runtime=warp_drive"])
    msg = str(e.value)
    assert "warp_drive" in msg and "eager" in msg  # Hydra lists the available options


def test_key_added_to_schema_node_is_rejected():
    cfg = OmegaConf.structured(XBenchConfig)
    with pytest.raises((ConfigAttributeError, ConfigKeyError)):
        cfg.bench.stepz = 3


@pytest.mark.parametrize("name", _options("experiment"))
def test_every_sweep_point_of_every_experiment_composes(name):
    """`python -m xbench -m +experiment=NAME`: each point of its sweeper grid composes to a typed config."""
    import itertools

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        params = compose(config_name="config", overrides=[f"+experiment={name}"],
                         return_hydra_config=True).hydra.sweeper.params or {}
    grid = [[f"{k}={v.strip()}" for v in str(vals).split(",")] for k, vals in params.items()]
    for point in itertools.product(*grid):
        cfg = _compose([*point, f"+experiment={name}"])  # the sweeper's order: its params, then the command line
        assert isinstance(OmegaConf.to_object(cfg), XBenchConfig)
        for override in point:  # the point's values are in force (a parallel option selecting its runtime too)
            key, value = override.split("=", 1)
            node = OmegaConf.select(cfg, key)
            if key.lstrip("+") == "workload":  # a package-global group (workload presets): no node of its own
                continue
            assert str(node.name if hasattr(node, "name") else node) == value, (name, override)


# ---- every knob's range, checked at compose time (tests/test_config_fields.py: every number has one) ------

@pytest.mark.parametrize("override,said", [
    ("optim.lr=nan", "optim.lr=nan is out of range; allowed: (0, 1e6] (a finite number)"),
    ("bench.noisy_cv=-1", "bench.noisy_cv=-1.0 is out of range; allowed: (0, 100]"),
    ("bench.max_window_steps=0", "bench.max_window_steps=0 is out of range; allowed: [1, "),
    ("bench.stall_factor=inf", "bench.stall_factor=inf is out of range; allowed: (1, 1e6]"),
    ("store.root=''", "store.root='' names no folder"),
    ("data.num_classes=0", "data.num_classes=0 is out of range; allowed: [2, "),
    (f"bench.seed={2**70}", f"bench.seed={2**70} is out of range; allowed: [0, {2**32 - 1}]"),
    ("model.options.width=-4", "model.options.width=-4 is out of range; allowed: a whole number >= 1"),
    ("bench.contention_probe_s=1e9", "bench.contention_probe_s=1000000000.0 is out of range; allowed: [0, 60]"),
    ("bench.max_batch_search_s=0", "bench.max_batch_search_s=0.0 is out of range; allowed: (0, 604800]"),
    ("optim.betas=[0.9,1.5]", "optim.betas[1]=1.5 is out of range; allowed: [0, 1)"),
    ("platform.price=[{amount:inf}]", "platform.price[0].amount=inf is out of range"),
    ("store.run_name=" + "r" * 100, "its run ids (125) would not name a folder: at most 95 characters"),
    ("resume=''", "resume='' names no run"),
])
def test_out_of_range_knobs_are_refused_at_compose_time_with_the_range(override, said):
    from xbench.config import knob_problems

    problems = knob_problems(_compose([override]))
    assert len(problems) == 1 and said in problems[0], problems


def test_the_default_config_and_every_preset_are_in_range():
    from xbench.config import knob_problems

    assert knob_problems(_compose([])) == []
    for group in ("experiment", "workload"):
        for option in _options(group):
            assert knob_problems(_compose([f"+{group}={option}"])) == [], option


def test_knob_values_are_found_at_every_depth():
    from xbench.config.knobs import _values

    plain = {"platform": {"peak_tflops": {"bf16": 1.0, "fp32": 2.0}, "price": [{"amount": 3}, {"x": 1}]},
             "optim": {"betas": [0.9, 0.99], "lr": 0.1}}
    assert list(_values(plain, "platform.peak_tflops")) == [(".platform.peak_tflops.bf16", 1.0),
                                                           (".platform.peak_tflops.fp32", 2.0)]
    assert list(_values(plain, "platform.price.amount")) == [(".platform.price[0].amount", 3)]
    assert list(_values(plain, "optim.betas")) == [(".optim.betas[0]", 0.9), (".optim.betas[1]", 0.99)]
    assert list(_values(plain, "optim.lr")) == [(".optim.lr", 0.1)]
    assert list(_values(plain, "optim.nosuch")) == [] and list(_values({"optim": 3}, "optim.lr")) == []
