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
    assert "batch_size" in str(e.value.__cause__ or e.value) or "many" in str(e.value.__cause__ or e.value)


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
        cfg = _compose([f"+experiment={name}", *point])
        assert isinstance(OmegaConf.to_object(cfg), XBenchConfig)
        for override in point:  # the point's values are in force (a parallel option selecting its runtime too)
            key, value = override.split("=", 1)
            node = OmegaConf.select(cfg, key)
            if key.lstrip("+") == "workload":  # a package-global group (workload presets): no node of its own
                continue
            assert str(node.name if hasattr(node, "name") else node) == value, (name, override)
