"""Start-up, itemised: the record's `startup_phases_s` (rank.startup_phase marks, summed to the first step's end),
the console's start-up line, a clock that reads a process's start to the tick, and `--help`'s group listing
without a copy of Hydra's repository per option."""

from __future__ import annotations

import copy
import io
import subprocess
import sys

import pytest

from tests.conftest import FAST, REPO, records, run_cli
from xbench import rank
from xbench.hydra_guard import install_listing, install_mode_shortcut
from xbench.sinks import console


def _marks(monkeypatch, start: float, marks: list[tuple[str, float]]) -> None:
    monkeypatch.setenv(rank.POINT_ENV, f"1:{start!r}")
    monkeypatch.setenv(rank.STARTUP_ENV, ";".join(f"{n}@{t!r}" for n, t in marks))


def test_phases_run_from_the_start_to_the_first_steps_end_and_sum_to_it(monkeypatch):
    """Each phase lasts until the next mark, the first (`imports`) from the point's start; a name marked twice
    (a wait for W&B inside the build) adds up; marks from before the start (an earlier point) are not this run's."""
    _marks(monkeypatch, 100.0, [("first_step", 90.0), ("compose", 101.0), ("checks", 103.5), ("build", 104.0),
                                ("wandb_start", 105.0), ("build", 105.25), ("first_step", 106.0)])
    phases = rank.startup_phases(107.0)
    assert phases == {"imports": 1.0, "compose": 2.5, "checks": 0.5, "build": 1.75, "wandb_start": 0.25,
                      "first_step": 1.0}
    assert list(phases) == ["imports", "compose", "checks", "build", "wandb_start", "first_step"]
    assert sum(phases.values()) == pytest.approx(7.0, abs=1e-12)


def test_a_later_points_phases_start_at_its_first_mark_and_drop_the_earlier_points(monkeypatch):
    """A sweep's second point in the same process: its start is its runner's mark, under 1 ms before its first
    phase (no `imports` of its own); marking a phase drops the marks of the points before."""
    _marks(monkeypatch, 50.0, [("compose", 10.0), ("first_step", 20.0), ("record", 50.0005), ("checks", 51.0)])
    assert rank.startup_phases(52.0) == {"record": pytest.approx(1.0), "checks": pytest.approx(1.0)}
    monkeypatch.setenv(rank.POINT_ENV, f"1:{1e12!r}")  # a point that starts now-ish: every mark above is older
    rank.startup_phase("record")
    assert [n for n, _ in rank._marks()] == ["record"]


def test_a_process_start_reads_to_the_clock_tick():
    """point_started_at without a runner's mark is this process's start. It was psutil's create_time, which adds
    /proc/stat's boot time rounded down to whole seconds: 0.98 s early on the VM this was written on (every
    startup_to_first_step_s read that much long)."""
    code = (f"import time; t = time.time(); import sys; sys.path.insert(0, {str(REPO)!r}); from xbench.rank import "
            "point_started_at; print(t - point_started_at())")
    env = {"PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert 0.0 <= float(p.stdout) < 0.3  # the interpreter's own start (-S: no site) is well under that


def test_the_console_shows_each_startup_phase_on_one_line_gone_when_the_steps_begin(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(console.STARTUP_LINE, "enabled", True)
    bar = console.Progress(3, 5)
    console.enter_startup_phase("torch_import")
    bar("startup", -1, startup_phase="build")  # an inline rank's phase, through its progress
    assert "xbench: start-up: importing torch" in err.getvalue()
    assert "xbench: start-up: building the model and data" in err.getvalue()
    assert console.STARTUP_LINE.bar is not None and "\n" not in err.getvalue()  # one line, rewritten
    bar("warmup", 0)
    assert console.STARTUP_LINE.bar is None  # the warm-up bar replaces it
    bar.close()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    console.Progress(3, 5, enabled=False)("startup", -1, startup_phase="build")  # logger.progress=false
    monkeypatch.setattr(console.STARTUP_LINE, "enabled", False)
    console.enter_startup_phase("checks")
    assert quiet.getvalue() == ""


def test_help_lists_the_groups_without_copying_hydras_repository_per_option(monkeypatch):
    """`xbench --help` lists every group and its options (Hydra's format_config_groups). Hydra answered each
    option question through a deep copy of its whole repository (ConfigStore included): 620,000 deepcopy
    calls and ~1 s of --help's ~1.5 s before; now none per question, and the same answers."""
    from hydra import initialize_config_dir
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.global_hydra import GlobalHydra

    from xbench.config import config_dir, register_configs

    register_configs()
    install_listing()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        calls = [0]
        deepcopy = copy.deepcopy

        def counted(*args, **kwargs):
            calls[0] += 1
            return deepcopy(*args, **kwargs)

        monkeypatch.setattr(copy, "deepcopy", counted)
        listing = hydra.format_config_groups(lambda g: not g.startswith("hydra"))
        monkeypatch.setattr(copy, "deepcopy", deepcopy)
        lines = dict(line.split(": ", 1) for line in listing.splitlines())
        assert {"model", "data", "runtime", "parallel", "precision", "platform", "logger", "experiment"} <= set(lines)
        assert calls[0] < 1000, calls[0]
        hydras_own = CachingConfigRepository(hydra.config_loader.repository)  # the copy Hydra made per question
        for group in ("model", "runtime", "platform"):
            assert lines[group] == ", ".join(hydras_own.get_group_options(group))
        assert "resnet18" in lines["model"].split(", ")


@pytest.mark.slow
def test_a_sweeps_records_itemise_their_startup_and_wandb_s_start_is_its_own_phase(tmp_path):
    """Two points in one process, W&B offline, the console's bar on: each record's startup_phases_s sums to its
    startup_to_first_step_s; the first point's start-up has the interpreter and compose, the second's starts at
    its runner; W&B's wait is its own phase and its live logging still works; the console named the phases."""
    store = tmp_path / "results"
    p = run_cli("-m", *FAST, "model=mlp", "data=synthetic_mnist", "data.batch_size=8,16", "bench.threads=1",
                "logger=wandb", "logger.progress=true", store=store, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = sorted(records(store), key=lambda r: r["config"]["data"]["batch_size"])
    assert [r["status"] for r in recs] == ["ok", "ok"]
    for r in recs:
        m = r["measurements"]
        assert sum(m["startup_phases_s"].values()) == pytest.approx(m["startup_to_first_step_s"], abs=1e-6)
        assert all(v >= 0 for v in m["startup_phases_s"].values())
        assert {"record", "checks", "launch", "build", "first_step", "wandb_start"} <= set(m["startup_phases_s"])
        assert r["artifacts"]["wandb_mode"] == "offline" and r["artifacts"].get("wandb_windows_logged_live") == 1
        assert "wandb_error" not in r["artifacts"]  # the offline file read back whole (a thread's start cut it)
    first, second = (r["measurements"]["startup_phases_s"] for r in recs)
    assert list(first)[:3] == ["imports", "compose", "record"] and first["imports"] > 0.05
    assert "imports" not in second and "compose" not in second and "torch_import" in second
    assert "xbench: start-up: building the model and data" in p.stderr
    assert "xbench: start-up: waiting for W&B to start" in p.stderr


def test_wandbs_summary_asks_no_pandas_import():
    """W&B asks of every summary value that is not a plain scalar (None, a list) whether it is a DataFrame and
    imported pandas to ask: 0.45 s of every W&B run's end (publish 0.58 s, profiled) before; now answered from
    the type's name while pandas is not imported, with W&B's own answer for a real DataFrame unchanged."""
    code = ("import sys; import wandb.util as u; from xbench.sinks.wandb import _no_pandas_probe\n"
            "with _no_pandas_probe():\n    asked = [u.is_pandas_data_frame(v) for v in (None, [1.0, 2.0])]\n"
            "print(asked, 'pandas' in sys.modules, u.pd_available)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["[False,", "False]", "False", "True"]


def test_make_bench_prints_the_ratio_and_wandbs_cost_beside_their_goals(capsys):
    """scripts/bench_process.py's start-up lines: the ratio against its goal (<= 1.25), W&B's cost per pair (the
    W&B run over the one without, of the same pair) against its goal (< 0.5 s), and the phases of the W&B runs
    and of the bare script beside xbench's. Before: W&B's cost was the difference of two medians, no goals."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_process", REPO / "scripts" / "bench_process.py")
    bp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bp)
    assert bp.medians([{"a": 1.0, "b": 4.0}, {"a": 3.0}, {"a": 2.0, "b": 2.0}]) == {"a": 2.0, "b": 2.0}
    phases = {"imports": 0.5, "build": 2.0}
    r = {"pairs": 2, "record_clock_skew_s": 0.0, "bare_s_median": 4.0, "xbench_s_median": 4.8, "ratios": [1.2, 1.2],
         "ratio_median": 1.2, "ratio_goal": bp.STARTUP_GOAL, "ratio_goal_met": True, "xbench_wandb_s_median": 5.5,
         "run_s_median": 5.0, "run_wandb_s_median": 5.7, "wandb_adds_s": [0.6, 0.8], "wandb_adds_s_median": 0.7,
         "wandb_goal_s": bp.WANDB_GOAL_S, "wandb_goal_met": False, "wandb_start_s_median": 0.3,
         "wandb_end_s_median": 0.1, "wandb_parts_s_median": 0.4, "phases_s_median": phases,
         "wandb_phases_s_median": {**phases, "wandb_start": 0.4}, "bare_phases_s_median": {"torch_import": 2.0},
         "help_s": [0.9], "help_s_median": 0.9}
    bp.print_startup(r)
    out = capsys.readouterr().out
    assert "ratio 1.20" in out and "goal <= 1.25: met" in out
    assert "W&B adds +0.70 s" in out and "+0.60, +0.80" in out and "goal < 0.5 s: NOT met" in out
    assert "W&B's own parts: start 0.30 s + end +0.10 s = 0.40 s (met)" in out
    assert "with W&B offline: imports 0.50, build 2.00, wandb_start 0.40" in out
    assert "the bare script's phases (median s): torch_import 2.00" in out


@pytest.mark.slow
def test_the_bare_scripts_first_step_is_itemised_too():
    """scripts/hand_train.py --first-step (make bench's bare side) splits its launch-to-first-step into phases that
    sum to it, so the bench can set xbench's phases beside the bare script's."""
    import json

    p = subprocess.run([sys.executable, str(REPO / "scripts" / "hand_train.py"), "--first-step", "--batch", "4",
                        "--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    phases = out["startup_phases_s"]
    assert list(phases) == ["torch_import", "torchvision_import", "build", "first_step"]
    assert all(v >= 0 for v in phases.values()) and phases["torch_import"] > 0.05
    assert sum(phases.values()) == pytest.approx(out["startup_to_first_step_s"], abs=1e-6)


def test_the_flop_count_waits_for_the_record_not_the_first_step():
    """The FLOP count (a second, meta-device build of the model and a counted step: 0.2-0.5 s) is made when
    the record asks for it, after the timed windows, not in the build before the first step; once, and the same
    figure as counting straight away. Before: build_workload counted first."""
    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench.flops import flops_per_sample
    from xbench.bench.worker import build_workload
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["model=mlp", "model.options.hidden=32", "data=synthetic_mnist",
                                       "platform=cpu", "logger=none"]))
    plan = resolve(cfg, host_facts())
    w = build_workload(plan, RankContext())
    assert "flops" not in vars(w)  # not counted yet
    first = w.flops
    assert w.flops is first and first == flops_per_sample("mlp", plan.spec, dict(plan.model.options))
    # backward: the weights' gradients and the inputs' but the first layer's
    assert 2 * first["forward"] < first["train"] <= 3 * first["forward"]


def test_a_run_composes_its_config_once_and_the_mode_is_hydras_answer(tmp_path):
    """Hydra composed the whole config once only to read `hydra.mode` (get_mode), then again for the run: 0.15 s
    of every command. The shortcut answers null without composing where the command line and the option files
    it names cannot set it, and that answer is Hydra's own for every experiment, sweeps and hydra overrides
    included (where it is unsure, Hydra's get_mode answers). conf/config.yaml's defaults leave the mode null."""
    from pathlib import Path

    from hydra import initialize_config_dir
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra

    from xbench.config import config_dir, register_configs

    register_configs()
    install_mode_shortcut()
    hydras_own = Hydra.get_mode.__wrapped__
    experiments = sorted(p.stem for p in (Path(config_dir()) / "experiment").glob("*.yaml"))
    cases = [[], ["model=resnet18", "data.batch_size=32", "bench.threads=1"], ["data.batch_size=8,16"],
             ["model=resnet18,cnn_small"], ["hydra.mode=MULTIRUN"], ["hydra/sweeper=basic"],
             ["model=no_such_model"], *([f"+experiment={e}"] for e in experiments)]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        composed = [0]
        compose = hydra.compose_config

        def counted(*args, **kwargs):
            composed[0] += 1
            return compose(*args, **kwargs)

        hydra.compose_config = counted
        answered_alone = []
        for overrides in cases:
            composed[0] = 0
            assert hydra.get_mode("config", list(overrides)) == hydras_own(hydra, "config", list(overrides)), overrides
            if composed[0] == 1:  # only Hydra's own answer composed
                answered_alone.append(overrides)
        assert hydras_own(hydra, "config", []) is None
        # the plain run, a value's sweep (no value sets the mode) and the experiments whose files and their
        # defaults name no hydra node; never a group's sweep, a hydra override or a default it cannot read
        # (resnet50_tpu's xla_spmd names `/runtime@_global_.runtime`)
        assert answered_alone[:3] == cases[:3]
        assert {o[0] for o in answered_alone[3:]} == {"+experiment=bert_mlm", "+experiment=digits_to_target",
                                                     "+experiment=gpu_clouds"}
        assert hydra.get_mode("config", ["+experiment=cpu_vs_gpu_zoo"]) is not None  # its file says MULTIRUN

