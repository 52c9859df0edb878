"""Parity compares two runs' losses at the same optimizer step, so its verdict does not depend on the machine's
load: warm-up ends on evidence and a stalled window is measured again (its steps trained, not kept), so two runs
keep different steps. The record's series counts optimizer steps (bench/windows._series), xbench.parity aligns
the two runs by it. Real runs: a 32-unit MLP on synthetic MNIST, in this process (the inline launcher)."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest
import torch

from tests.conftest import FAST, cli_env, records, run_cli
from xbench import parity
from xbench.bench import loop
from xbench.bench.windows import WindowPlan, _series, _timed_windows
from xbench.config import XBenchConfig
from xbench.metrics.parity import compare_losses
from xbench.records.wandb_files import read_offline_run

# serial: alone, never beside another test (the steps two runs share depend on how long each warmed up)
pytestmark = pytest.mark.serial

TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "data.batch_size=16", "bench.threads=1",
        "bench.contention_probe_s=0", "optim.lr=0.05")
# Every window of run A stalls: any step over 1.0001 x its window's median counts, for any time at all; so A's
# first timed window is measured again (bench.stall_remeasure=1), whatever the machine's load.
STALL_EVERY_WINDOW = "bench.stall_factor=1.0001 bench.stall_fraction=1e-9 bench.stall_remeasure=1"


def _counting_rank(stall_at: int, step_s: float = 0.002, pause_s: float = 0.4):
    """A rank whose loss is the optimizer step's own index (a counter in the step), pausing at one step."""
    w, x = torch.randn(32, 32), torch.randn(8, 32)
    counter = [0]

    def step(a, b):
        i = counter[0]
        counter[0] += 1
        (a @ w).sum()
        time.sleep(pause_s if i == stall_at else step_s)
        return float(i)

    hooks = loop.Hooks(step=step, next_batch=lambda: (x, None), sync=lambda: None,
                       read_losses=lambda ls: [float(v) for v in ls])
    work = SimpleNamespace(runtime=SimpleNamespace(device=torch.device("cpu")))
    return SimpleNamespace(work=work, hooks=hooks, threads={"threads_intra": 1}, samples_per_step=8,
                           devices_per_rank=1, ranks_on_host=1)


def test_the_series_counts_optimizer_steps_across_a_remeasured_window():
    """Warm-up of 3 steps, then windows of 10: the first stalls (a 0.4 s step) and is measured again. Each
    loss is its step's index, counted by the step itself: the series' `step` must say the same, so the
    re-measured window's steps are a gap. Before: steps 0..22 in a row, the kept window's losses (13, 14, ...)
    at steps 3, 4, ..."""
    p = _counting_rank(stall_at=5)
    wu = loop.warmup(p.hooks, 3, 3, 1, 10.0)
    plan = WindowPlan(3, 3, 1, 10.0, steps=10, repeats=2, stall_remeasure=1)
    windows, fig = _timed_windows(XBenchConfig(), p, plan, wu, [], steps=10)
    s = _series(wu, windows)
    assert wu.steps == 3 and fig["stalled_windows_remeasured"] >= 1
    assert s["step"] == [int(v) for v in s["loss"]]  # the step's own count, an independent witness
    assert s["step"][:4] == [0, 1, 2, 13] and len(s["step"]) == 3 + 20 and 3 not in s["step"]
    assert s["phase"] == ["warmup"] * 3 + ["timed"] * 20
    assert [w.first_step for w in windows] == [13, 23]


def test_compare_losses_aligns_by_step_and_refuses_too_few_in_common():
    a = {0: 2.3, 1: 2.1, 2: 2.0, 8: 1.5, 9: 1.4}  # a run whose steps 3-7 were a re-measured window
    b = {s: v for s, v in enumerate([2.3, 2.1, 2.0, 1.9, 1.8, 1.7, 1.6, 1.55, 1.5, 1.4])}
    v = compare_losses(a, b, 5, 1e-3)
    assert v["parity_passed"] and v["parity_max_rel_dev"] == 0.0
    assert (v["parity_steps_compared"], v["parity_step_first"], v["parity_step_last"]) == (5, 0, 9)
    worse = compare_losses({**a, 9: 1.0}, b, 5, 1e-3)
    assert not worse["parity_passed"] and worse["parity_worst_step"] == 9  # the optimizer step, not the place (4)
    with pytest.raises(ValueError, match="needs 6 losses at the same optimizer steps of both runs; they have 5 in"):
        compare_losses(a, b, 6, 1e-3)


def _parity(store, *args: str) -> tuple[int, dict, dict]:
    """(exit status, the verdict record, {run id: run record}) of `python -m xbench.parity` in this process."""
    code = parity.main([*args, *TINY, *FAST, f"store.root={store}"])
    recs = records(store)
    verdict = next(r for r in recs if r["experiment"] == "parity")
    return code, verdict, {r["run_id"]: r for r in recs if r["experiment"] != "parity"}


def test_parity_passes_when_one_run_remeasures_a_window_and_the_other_warms_up_longer(tmp_path):
    """Run A: warm-up 3 steps, its first window (steps 3-7) stalls and is measured again; run B: warm-up 5 steps.
    The same config otherwise, so the losses at each optimizer step match, and parity says so over steps both
    kept. Before: "losses differ by 0.18 (relative) at step 3" (A's step 8 against B's step 3)."""
    code, verdict, runs = _parity(tmp_path, f"--a={STALL_EVERY_WINDOW}", "--b=bench.warmup_min_steps=5",
                                  "--steps=5")
    assert code == 0, verdict.get("reason")
    a, b = runs[verdict["measurements"]["run_a"]], runs[verdict["measurements"]["run_b"]]
    assert a["measurements"]["warmup_steps"] == 3 and b["measurements"]["warmup_steps"] == 5
    assert a["measurements"]["stalled_windows_remeasured"] == 1 and a["measurements"]["repeats"] == 2
    assert a["series"]["step"][:4] == [0, 1, 2, 8]  # steps 3-7 trained, not kept
    m = verdict["measurements"]
    assert verdict["status"] == "ok" and m["parity_passed"] and m["parity_max_rel_dev"] < 1e-6
    steps = verdict["series"]["step"]
    assert m["parity_steps_compared"] == len(steps) == 5 and steps[:3] == [0, 1, 2] and min(steps[3:]) >= 8
    for run, key in ((a, "loss_a"), (b, "loss_b")):  # each loss is its run's own at that step
        kept = dict(zip(run["series"]["step"], run["series"]["loss"]))
        assert verdict["series"][key] == [kept[s] for s in steps]


def test_parity_refuses_with_too_few_steps_in_common(tmp_path, capsys):
    """Run B keeps 3 steps (1 of warm-up, 2 windows of 1; A keeps 3 of warm-up, then 2 windows of 5): parity of
    5 steps is not checked, and says why."""
    code, verdict, _ = _parity(tmp_path, "--b=bench.steps=1 bench.warmup_min_steps=1 bench.warmup_max_steps=1",
                               "--steps=5")
    assert code == 1 and verdict["status"] == "failed"
    assert verdict["reason"] == ("parity not checked: parity needs 5 losses at the same optimizer steps of both "
                                 "runs; they have 3 in common (run a kept 13 steps, run b 3)")
    assert "parity_passed" not in verdict["measurements"] and verdict["reason"] in capsys.readouterr().err


@pytest.mark.slow
def test_wandb_logs_each_step_at_its_optimizer_step_across_a_remeasured_window(tmp_path):
    """The CLI with W&B offline, its first window re-measured: the per-step history, logged live as each window
    closes, holds the record's series at its optimizer steps (3-7 absent), every step of it live. Before: the
    live rows numbered the series' rows (steps 3-7 held the kept window), then the rows at the end were skipped
    or logged twice by comparing a step with a row count."""
    store = tmp_path / "results"
    p = run_cli(*TINY, *[a for a in FAST if not a.startswith("logger=")], "logger=wandb", "bench.repeats=2",
                *STALL_EVERY_WINDOW.split(), store=store, env=cli_env(WANDB_MODE="offline"))
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    m, series = rec["measurements"], rec["series"]
    assert m["stalled_windows_remeasured"] == 1 and m["warmup_steps"] == 3
    assert series["step"] == [0, 1, 2, *range(8, 18)]
    run = read_offline_run(rec["artifacts"]["wandb_offline_dir"])
    steps = [h for h in run["history"] if "loss" in h]
    assert [h["step"] for h in steps] == series["step"]
    assert [h["loss"] for h in steps] == pytest.approx(series["loss"])
    assert [h["phase_timed"] for h in steps] == [int(ph == "timed") for ph in series["phase"]]
    assert rec["artifacts"]["wandb_steps_logged_live"] == len(series["step"])


def _burners(n: int) -> list[subprocess.Popen]:
    """`n` processes spinning a core each (this 2-core machine, loaded past its cores)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.timeout(600)
def test_parity_beside_two_cpu_burners_passes_and_fails_on_a_different_learning_rate(tmp_path):
    """Two processes spinning while parity runs (and the machine's own load): eager against eager agrees at
    every compared step; a learning rate 4x larger does not, and the verdict names the optimizer step."""
    burners = _burners(2)
    try:
        time.sleep(0.3)  # spinning before the runs start
        cpu0 = sum(sum(psutil.Process(b.pid).cpu_times()[:2]) for b in burners)
        t0 = time.perf_counter()
        same = _parity(tmp_path / "same", "--a=runtime=eager", "--b=runtime=eager", "--steps=8")
        lr = _parity(tmp_path / "lr", "--a=optim.lr=0.05", "--b=optim.lr=0.2", "--steps=8")
        burner_cores = (sum(sum(psutil.Process(b.pid).cpu_times()[:2]) for b in burners) - cpu0) / (
            time.perf_counter() - t0)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    # The burners ran (their own clocks; on a machine already loaded they get less than their 2 cores).
    assert burner_cores > 0.05
    code, verdict, _ = same
    assert code == 0, verdict.get("reason")
    assert verdict["measurements"]["parity_passed"] and verdict["measurements"]["parity_steps_compared"] == 8
    code, verdict, _ = lr
    m = verdict["measurements"]
    assert code == 1 and not m["parity_passed"] and m["parity_max_rel_dev"] > 1e-3
    assert verdict["reason"].startswith("parity: losses differ by ")
    assert f"at step {m['parity_worst_step']}," in verdict["reason"] and m["parity_worst_step"] in verdict["series"]["step"]
    assert "(8 steps compared, " in verdict["reason"]
