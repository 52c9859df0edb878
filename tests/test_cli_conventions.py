"""The CLI behaves like the ecosystem's: --help says what xbench is, --version is xbench's, the preset
hints agree with Hydra, --config-dir adds a user's platform (with its price) and model, tab completion
answers, and the console prints numbers people read (separators, fixed decimals, no exponents)."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from tests.conftest import FAST, REPO, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench import __version__
from xbench.bench.flops import flops_per_sample
from xbench.data.spec import InputSpec
from xbench.hints import compose_hints, preset_hints
from xbench.records.record import RunRecord
from xbench.sinks.console import Progress, human, summary


def _xbench(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "xbench", *args], cwd=REPO, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def _my_config_dir(root):
    """A user's --config-dir: a priced platform and a zoo model, one YAML each, no xbench edit."""
    mine = root / "my_xbench"
    (mine / "platform").mkdir(parents=True)
    (mine / "model").mkdir()
    (mine / "platform" / "my_box.yaml").write_text(
        "name: my_box\ndevice: cpu\nprovider: home\nprice:\n  - {name: machine, amount: 0.36, unit: hour}\n")
    (mine / "model" / "my_resnet.yaml").write_text("name: torchvision/resnet18\n")  # one YAML, no xbench edit
    return mine


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's fresh processes, started together (tests/jobs.py): each test checks its own."""
    root = tmp_path_factory.mktemp("conventions")
    mine = _my_config_dir(root)
    with Jobs(request) as jobs:
        jobs.submit("help", _xbench, "--help", tests=("test_help_says_what_xbench_is_with_examples_groups_and_presets",))
        jobs.submit("version", _xbench, "--version", tests=("test_version_is_xbenchs",))
        jobs.submit("workload", run_cli, "workload=cnn_mnist", store=root / "workload",
                    tests=("test_cli_agrees_with_hydra_on_a_workload_without_plus",))
        completion = ("test_shell_completion_answers_for_groups",)
        jobs.submit("query", _xbench, "-sc", "query=bash",
                    env=cli_env(COMP_LINE="xbench model=resn", COMP_POINT="18"), tests=completion)
        jobs.submit("install", _xbench, "-sc", "install=bash", tests=completion)
        jobs.submit("config_dir", run_cli, f"--config-dir={mine}", *FAST, "platform=my_box", "model=my_resnet",
                    "data.image_size=16", "data.batch_size=2", store=root / "config_dir",
                    tests=("test_config_dir_adds_a_priced_platform_and_a_zoo_model",))
        yield jobs, root


def test_help_says_what_xbench_is_with_examples_groups_and_presets(runs):
    p = runs[0]["help"]
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("xbench: benchmark deep-learning training across hardware")
    assert "powered by Hydra" not in out and "__main__" not in out
    examples = out[out.index("Examples:"):out.index("Presets need")].splitlines()[1:]
    assert len([e for e in examples if e.startswith("  xbench")]) == 5
    assert "Presets need a +: +experiment=NAME" in out
    groups = dict(line.split(": ", 1) for line in out.splitlines()
                  if re.match(r"^(model|platform|runtime|experiment|workload): ", line))
    assert "resnet50" in groups["model"] and "h200" in groups["platform"] and "xla" in groups["runtime"]
    assert "digits_to_target" in groups["experiment"] and "cnn_mnist" in groups["workload"]
    assert "--config-dir DIR" in out and 'eval "$(xbench -sc install=bash)"' in out
    assert "Any key: key=value (data.batch_size=32" in out and "<redacted>" not in out  # help is not redacted


def test_group_option_typos_get_the_closest_options():
    from xbench.hints import group_hints

    assert group_hints(["model=resnet5"]) == ["model=resnet5 is not an option of model/: did you mean "
                                              "model=resnet50 or model=resnet18?"]
    assert "+experiment=digits_to_target?" in group_hints(["+experiment=digits_to_targe"])[0]
    assert group_hints(["runtime=eager,compil"])[0].startswith("runtime=compil is not an option")
    assert group_hints(["model=resnet50", "model=timm/convnext_atto", "data.batch_size=3"]) == []
    assert group_hints(["model=", "~model", "hydra/launcher=nosuch", "nosuchgroup=x", "model=tv/x,"]) == []


def test_version_is_xbenchs(runs):
    p = runs[0]["version"]
    assert p.returncode == 0 and p.stdout.startswith(f"xbench {__version__} (Hydra ")


@pytest.mark.parametrize("argv,said", [
    (["workload=cnn_mnist"], "+workload=cnn_mnist adds one"),  # a plain run: Hydra's advice, said again
    (["+experiment=resnet50_tpu", "+workload=cnn_mnist"], "workload=cnn_mnist (without +) replaces it"),
    (["experiment=digits_to_target"], "presets are added, not replaced: +experiment=digits_to_target"),
])
def test_preset_hints_match_what_composes(argv, said):
    [hint] = preset_hints(argv)
    assert said in hint
    assert not any("not a config key" in h for h in compose_hints(argv))  # the old, contradicting hint


def test_no_preset_hint_for_forms_that_compose():
    assert preset_hints(["+workload=cnn_mnist"]) == []
    assert preset_hints(["+experiment=resnet50_tpu", "workload=resnet50_imagenet_synthetic_32px"]) == []


@pytest.mark.slow
def test_cli_agrees_with_hydra_on_a_workload_without_plus(runs):
    p = runs[0]["workload"]
    assert p.returncode != 0
    assert "To append to your default list use +workload=cnn_mnist" in p.stderr  # Hydra
    assert "xbench: this run selects no workload to replace: +workload=cnn_mnist adds one" in p.stderr


def test_shell_completion_answers_for_groups(runs):
    p = runs[0]["query"]
    assert p.returncode == 0, p.stderr
    assert {"model=resnet18", "model=resnet50"} <= set(p.stdout.split())
    install = runs[0]["install"]
    assert "hydra_bash_completion" in install.stdout and "complete -o nospace" in install.stdout


@pytest.mark.slow
def test_config_dir_adds_a_priced_platform_and_a_zoo_model(runs):
    jobs, root = runs
    p = jobs["config_dir"]
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(root / "config_dir")
    assert rec["config"]["platform"]["name"] == "my_box" and rec["config"]["model"]["name"] == "torchvision/resnet18"
    m, d = rec["measurements"], rec["derived"]
    assert d["usd_per_hour"] == pytest.approx(0.36)
    assert d["usd_per_million_samples"] == pytest.approx(0.36 / 3600 / m["throughput_samples_per_s"] * 1e6)
    # the same network as the built-in resnet18 (torchvision's), at the data's 16 px
    same = flops_per_sample("resnet18", InputSpec("image", num_classes=10, image_size=16), {})
    assert m["flops_per_sample_train"] == same["train"] > 0
    assert rec["env"]["xbench_version"] == __version__


def test_numbers_on_the_console_are_read_by_people():
    assert [human(v) for v in (24150.3, 1234567, 241.5, 2.415, 0.02415, 0.0, 3)] == \
        ["24,150", "1,234,567", "241.5", "2.415", "0.02415", "0", "3"]
    rec = RunRecord("r1", status="ok", config={"model": {"name": "mlp"}, "platform": {"name": "local"}},
                    measurements={"throughput_samples_per_s": 24150.3, "step_time_s_median": 0.002652,
                                  "warmup_steps": 12, "warmup_s": 1.5},
                    derived={"achieved_tflops": 0.0001234, "usd_per_million_samples": 1234.5678})
    text = summary(rec, "results/r1/record.json")
    assert "throughput                     24,150 samples/s" in text
    assert "2.652 ms" in text and "1,235 USD per 1M samples" in text and "12 steps in 1.500 s" in text
    assert not re.search(r"\de[+-]\d", text)


def test_train_to_target_bar_shows_epoch_step_and_latest_evaluation(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = Progress(warmup_max=50, timed_total=100)
    for epoch, value in ((0, None), (1, 0.9412)):
        for batch in range(1, 5):
            bar("train", epoch * 4 + batch, epoch=epoch, epochs=10, batch=batch, batches=4, metric="top1",
                value=value)
    bar.close()
    text = err.getvalue()
    assert "epoch 1/10" in text and "epoch 2/10" in text and "4/4" in text
    assert "top1 0.9412" in text and "timed steps" not in text and "/100" not in text
