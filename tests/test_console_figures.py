"""The console says what the record says: figures to the digits they support, each beside its target and unit,
and a SLURM point's end line with the kinds of its record's warnings.

- numbers: `by_spread` rounds at the leading digit of the half-interval, `granular` shows counts at their step;
- the SLURM launcher's end-line figure (hydra_plugins/xbench_slurm `headline`) of records that carry warnings,
  throughput rounded by its CI, a train-to-target point with its target;
- the summary of records that did not reach their target, or carry several;
- a real train-to-target run (+experiment=digits_to_target): the metric to 4 significant digits beside its target,
  epochs whole, or at the evaluation's granularity (goal.eval_every_steps), never a float's repr;
- a real SLURM point (a one-node cluster, tests/test_slurm.py's): its end line carries its record's warnings.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from hydra_plugins.xbench_slurm.submitit_launcher import headline
from tests.conftest import FAST, records, run_cli
from tests.test_slurm import TINY, _xbench, cluster, needs_cluster  # noqa: F401  (cluster: the fixture)
from xbench.metrics.numbers import by_spread, granular
from xbench.records.record import RunRecord
from xbench.sinks.console import summary, warning_kind

RAW_FLOAT = re.compile(r"\d\.\d{7,}")  # a float's repr (0.9722222222222222), never a figure people read

# Warnings as the record carries them (modes/throughput.py, bench/windows.py: the slower point of a sweep).
SLOW_WARNINGS = [
    "oversubscribed: 2 threads (bench.threads), but only 1 of 2 physical cores were free (1.0 busy with other "
    "processes); the timings include waiting for cores (bench.threads, or leave it unset for the free cores)",
    "noisy: spread above bench.noisy_cv=0.05 (throughput_cv=0.131)",
    "contended: other processes kept 1.43 of 2 cores busy while this run needed 2 (busiest: python[301] 0.48)",
]


def _throughput_record(tp: float, ci: list[float], warnings: list[str]) -> dict:
    return {"status": "ok", "config": {"platform": {"name": "cpu"}}, "warnings": warnings,
            "measurements": {"throughput_samples_per_s": tp, "throughput_ci95_samples_per_s": ci,
                             "global_batch_size": 16}, "derived": {}}


def test_figures_round_to_their_spread_and_counts_to_their_step():
    assert [by_spread(v, hw) for v, hw in ((223.7, 12), (46.11, 0.3), (24150.3, 3), (24150.3, 800), (99.7, 5))] == \
        ["220", "46.1", "24,150", "24,200", "100"]
    assert by_spread(46.11, None) == "46.11" and by_spread(0.012345, 0.0004) == "0.0123"
    # epochs: whole ones as integers, evaluations every 20 of 50 steps (0.4 epoch) at one decimal, steps at two
    assert [granular(4.0, 1), granular(2.8, 0.4), granular(2.84, 1 / 50), granular(3, None)] == ["4", "2.8", "2.84",
                                                                                                   "3"]


def test_slurm_end_line_figure_carries_the_records_warnings_and_its_spread():
    slow = _throughput_record(46.1134, [40.31, 52.42], SLOW_WARNINGS)  # +-6.06: the units digit is the last
    fast = _throughput_record(223.712, [221.07, 226.18], [])  # +-2.6: likewise
    assert headline(slow) == "46 samples/s [oversubscribed, noisy, contended]"
    assert headline(fast) == "224 samples/s"
    tight = _throughput_record(223.712, [223.61, 223.82], [])  # +-0.105: one decimal
    assert headline(tight) == "223.7 samples/s"
    target = {"status": "ok", "config": {"goal": {"eval_every_epochs": 1}}, "warnings": [SLOW_WARNINGS[2]],
              "measurements": {"goal_metric": "top1", "metric_final": 0.9722222222222222, "goal_target": 0.95,
                               "goal_targets": [0.95], "target_reached": True, "epochs_to_target": 4.0,
                               "steps_per_epoch": 50, "wall_time_to_target_s": 16.0734,
                               "throughput_samples_per_s": 14685.2}, "derived": {}}
    assert headline(target) == "top1 0.9722 (target 0.95: reached at epoch 4) in 16.07 s wall [contended]"


def test_every_warning_reads_as_its_kind():
    said = {  # texts as xbench writes them (bench/windows.py, bench/training.py, metrics/gates.py, modes/)
        "warm-up did not stabilise within 200 steps (compilations or step times still changing); the timed": "warm-up unstable",
        "3 compilation(s) during a timed window: not steady state": "compiled while timed",
        "target top1 >= 0.99 not reached (max_epochs: 20 epochs, 8.1 s training); best top1 0.97": "target not reached",
        "stalled window measured again: 2 step(s) over 5x the median took 0.3 s extra of its 2 s": "stalled window "
                                                                                                   "measured again",
        "input-bound: 41% of the timed window waited for data (data.source=real, num_workers=0); this": "input-bound",
        "bench.cpu_capability=avx512, but ATen runs avx2 kernels (this CPU lacks avx512)": "bench.cpu_capability=avx512",
        "throughput fell from 120 to 80 samples/s when the batch grew from 8 to 16: check": "throughput fell with batch",
    }
    assert {w: warning_kind(w) for w in said} == said
    assert warning_kind("something new happened to this run today, said at length") == "something new happened to..."


def test_summary_shows_each_figure_beside_its_target():
    cfg = {"platform": {"name": "cpu"}, "goal": {"eval_every_steps": 20}}
    m = {"goal_metric": "top1", "metric_final": 0.9411764705882353, "goal_target": 0.99, "goal_targets": [0.99],
         "target_reached": False, "target_status": "max_epochs", "epochs_to_target": None, "steps_per_epoch": 56,
         "epochs_done": 3.0, "train_time_s": 1.23456789}
    text = summary(RunRecord("r1", status="ok", config=cfg, measurements=m), "record.json")
    assert re.search(r"final metric\s+top1 0\.9412 \(target 0\.99: not reached\)$", text, re.M), text
    assert re.search(r"training \(all\)\s+1\.235 s over 3 epochs$", text, re.M), text
    several = {**m, "goal_target": 0.95, "goal_targets": [0.9, 0.95], "targets_reached": 1, "target_reached": False,
               "target_reached_0p9": True, "epochs_to_target_0p9": 20 / 56 * 5, "target_reached_0p95": False,
               "epochs_to_target_0p95": None, "train_time_to_target_0p9_s": 0.5, "wall_time_to_target_0p9_s": 2.0}
    text = summary(RunRecord("r2", status="ok", config=cfg, measurements=several), "record.json")
    assert "top1 0.9412 (targets 0.9, 0.95: 1 reached)" in text
    assert re.search(r"to 0\.9\s+1\.8 epochs, 0\.5000 / 2\.000 s train / wall", text), text  # 100 steps of 56
    assert not RAW_FLOAT.search(text)


def _summary_line(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(label))


@pytest.mark.slow
@pytest.mark.parametrize("every", [None, 20])
def test_train_to_target_console_shows_the_rounded_metric_beside_its_target(store, every):
    """Evaluated after each epoch (whole epochs), or every 20 of its 50 steps (epochs to 0.4: one decimal)."""
    extra = (f"goal.eval_every_steps={every}",) if every else ()
    p = run_cli("+experiment=digits_to_target", "logger=none", "logger.progress=false", *extra, store=store,
                timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    m = rec["measurements"]
    assert m["target_reached"] is True and m["goal_target"] == 0.95
    # The record keeps the full value; the console shows it to 4 significant digits (top-1 below 1: 4 decimals)
    shown = f"{m['metric_final']:.4f}" if m["metric_final"] < 1 else "1.000"
    e = m["epochs_to_target"]
    if every is None:
        assert e == int(e)
        at = str(int(e))
    else:  # evaluations every 20 / steps_per_epoch epochs: 0.4 for digits' 50 steps, one decimal
        assert m["steps_per_epoch"] == 50
        at = str(int(e)) if e == int(e) else f"{e:.1f}"
    line = _summary_line(p.stdout, "final metric")
    assert line.split(None, 2)[2] == f"top1 {shown} (target 0.95: reached at epoch {at})", p.stdout
    assert _summary_line(p.stdout, "epochs to target").split()[-1] == at
    assert re.search(rf"over {re.escape(granular(m['epochs_done'], 1 / 50))} epochs$",
                     _summary_line(p.stdout, "training (all)")), p.stdout
    assert not RAW_FLOAT.search(p.stdout), p.stdout


@needs_cluster
def test_real_slurm_point_end_line_names_its_warnings(cluster, tmp_path):  # noqa: F811  (the fixture)
    """One point through hydra/launcher=slurm with bench.noisy_cv tiny: its record is noisy, and the end line says
    so, with its throughput to the digits the record's own interval supports."""
    store = tmp_path / "store"
    t0 = time.monotonic()
    p = _xbench(cluster, "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"store.root={store}",
                "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", *FAST, *TINY, "bench.repeats=3",
                "bench.noisy_cv=0.000001")
    cluster.timings["end_line_sweep_s"] = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    [path] = store.glob("*/record.json")
    rec = json.loads(path.read_text())
    assert any(w.startswith("noisy:") for w in rec["warnings"]), rec["warnings"]
    line = next(x for x in p.stderr.splitlines() if rec["run_id"] in x)
    kinds = re.search(r"\[([^\]]+)\]; record ", line)
    assert kinds and "noisy" in kinds.group(1).split(", "), line
    assert kinds.group(1).split(", ") == list(dict.fromkeys(warning_kind(w) for w in rec["warnings"])), line
    tp, (lo, hi) = rec["measurements"]["throughput_samples_per_s"], rec["measurements"]["throughput_ci95_samples_per_s"]
    assert f" ok: {by_spread(tp, (hi - lo) / 2)} samples/s [" in line, line


def test_throughput_spread_prefers_processes_then_windows_then_step_times():
    from xbench.sinks.console import throughput_spread

    base = {"throughput_samples_per_s": 100.0, "global_batch_size": 100, "step_time_s_p10": 0.5,
            "step_time_s_p90": 2.0}
    assert throughput_spread(base) == (200 - 50) / 2 / 100
    assert throughput_spread({**base, "throughput_ci95_samples_per_s": [90, 110]}) == 0.1
    assert throughput_spread({**base, "throughput_ci95_samples_per_s": [90, 110],
                              "throughput_process_ci95_samples_per_s": [80, 120]}) == 0.2
    assert throughput_spread({**base, "throughput_ci95_samples_per_s": [90, None]}) == 0.75
    assert throughput_spread({**base, "step_time_s_p10": 0}) is None
    assert throughput_spread({**base, "throughput_samples_per_s": 0}) is None
    assert throughput_spread({"throughput_samples_per_s": float("nan")}) is None
