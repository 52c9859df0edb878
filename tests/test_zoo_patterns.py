"""Model sweeps by pattern over a zoo family (`-m 'model=timm/convnext_*'`): expanded to the family's matching
names before Hydra reads the command line, listed before anything runs, bounded by XBENCH_MAX_PATTERN_MODELS
(refused above it with the count and the setting), and refused with what to do when it cannot be a sweep."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, cli_env, records, run_cli
from xbench import extras
from xbench.models import patterns, zoo

needs_timm = pytest.mark.skipif(not extras.installed("timm"), reason="timm is not installed (pip install 'xbench[timm]')")
needs_tv = pytest.mark.skipif(not extras.installed("torchvision"),
                              reason="torchvision is not installed (pip install 'xbench[vision]')")


@pytest.mark.slow  # importing timm takes ~13 s on a busy 2-core machine
@needs_timm
def test_a_pattern_becomes_the_sorted_names_it_matches_and_is_listed():
    import timm

    args, said = patterns.expand(["-m", "model=timm/convnext_a*", "data.batch_size=2"])
    names = [f"timm/{n}" for n in sorted(timm.list_models("convnext_a*"))]
    assert len(names) >= 2
    assert args == ["-m", f"model={','.join(names)}", "data.batch_size=2"]
    assert said == [f"model=timm/convnext_a* matches {len(names)} models: {', '.join(names)}"]


@needs_tv
def test_patterns_and_plain_names_mix_and_other_arguments_pass_untouched():
    args, said = patterns.expand(["--multirun", "model=torchvision/resnet1*,mlp", "data=synthetic_cifar10"])
    assert args == ["--multirun", "model=torchvision/resnet101,torchvision/resnet152,torchvision/resnet18,mlp",
                    "data=synthetic_cifar10"]
    assert len(said) == 1 and said[0].startswith("model=torchvision/resnet1* matches 3 models")
    assert patterns.expand(["model=torchvision/resnet18", "bench.steps=5"]) == (
        ["model=torchvision/resnet18", "bench.steps=5"], [])


@needs_tv
def test_a_pattern_over_the_limit_is_refused_with_the_count_and_the_setting(monkeypatch):
    monkeypatch.setenv(patterns.LIMIT_ENV, "2")
    with pytest.raises(ValueError) as e:
        patterns.expand(["-m", "model=torchvision/resnet1*"])
    assert str(e.value) == ("model=torchvision/resnet1* matches 3 models, more than the limit of 2 "
                            "(XBENCH_MAX_PATTERN_MODELS=2): narrow the pattern, or set "
                            "XBENCH_MAX_PATTERN_MODELS=3 to run them all")
    monkeypatch.setenv(patterns.LIMIT_ENV, "3")
    assert len(patterns.expand(["-m", "model=torchvision/resnet1*"])[1]) == 1
    monkeypatch.setenv(patterns.LIMIT_ENV, "many")
    with pytest.raises(ValueError, match="XBENCH_MAX_PATTERN_MODELS='many' must be a whole number >= 1"):
        patterns.expand(["-m", "model=torchvision/resnet1*"])


@needs_tv
@pytest.mark.parametrize("args,said", [
    (["model=torchvision/resnet1*"], "model=torchvision/resnet1* is a sweep of 3 models: add -m (--multirun)"),
    (["-m", "model=torchvision/nothing_like_it*"], "the pattern matches none of the"),
    (["-m", "model=timx/convnext_*"], "unknown zoo family 'timx'; did you mean timm/convnext_*?"),
    (["-m", "model=choice(torchvision/resnet1*)"], "not in Hydra's choice()/glob()"),
])
def test_a_pattern_that_cannot_be_swept_is_refused_saying_what_to_do(args, said):
    with pytest.raises(ValueError) as e:
        patterns.expand(args)
    assert said in str(e.value)


def test_a_pattern_that_reaches_the_zoo_is_refused_as_not_a_model():
    with pytest.raises(KeyError, match="is a pattern, not a model: sweep it from the command line"):
        zoo.resolve("timm/convnext_*")


@pytest.mark.slow
@needs_timm
def test_cli_sweeps_a_family_by_pattern_and_lists_it_first(store):
    p = run_cli("-m", "model=timm/convnext_zepto_rms*", *FAST, "data.batch_size=2", store=store)
    assert p.returncode == 0, p.stderr[-3000:]
    listed = "xbench: model=timm/convnext_zepto_rms* matches 2 models: timm/convnext_zepto_rms, " \
             "timm/convnext_zepto_rms_ols"
    assert listed in p.stderr
    recs = records(store)
    assert sorted(r["config"]["model"]["name"] for r in recs) == ["timm/convnext_zepto_rms",
                                                                  "timm/convnext_zepto_rms_ols"]
    assert all(r["status"] == "ok" for r in recs)
    # refused before Hydra starts: nothing is run or stored
    over = run_cli("-m", "model=timm/convnext_zepto_rms*", *FAST, store=store / "over",
                   env=cli_env(**{patterns.LIMIT_ENV: "1"}))
    assert over.returncode == 2 and "matches 2 models, more than the limit of 1" in over.stderr
    assert not (store / "over").exists()
