"""The GPU check (scripts/device_check.sh / .py) brings its answers back: within the device tool's limits
(at most 8 files, none over 2 folders below $OUT), a table with every row written after every run, an
overall deadline that skips what is left and says so (a skipped row fails the check), and rows that name a
missing figure, never crash.

The dry run (CPU in CUDA's place, tiny sizes) runs the real CLI per run and judges every row; the tests that do
are marked slow: the default list (DRY_RUNS, ~213 s at load 15 on 2 cores) and --more's. The others read the
script's pieces in this process, on records shaped as xbench writes them on a GPU and on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env, early, started_early

SCRIPT = REPO / "scripts" / "device_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


dc = load_script()
ROW_NAMES = [c.name for c in dc.CHECKS if c.run in {r.name for r in dc.RUNS}] + [u[0] for u in dc.UNVERIFIED]
MORE_ROW_NAMES = [c.name for c in dc.CHECKS if c.run in {r.name for r in dc.selected(True, set())}]
# The default dry run the slow test drives runs every run of the 6-minute list (python, xbench and the overhead
# script's kinds); --more's runs are driven by a second slow test.
DRY_RUNS = tuple(r.name for r in dc.RUNS)


def run_script(out, *args, timeout=900):
    env = cli_env(OUT=str(out), PYTHON=sys.executable, DEVICE_CHECK_WHEELS="0")  # this venv's packages
    return subprocess.run(["bash", "scripts/device_check.sh", "--dry-run", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def table_rows(out) -> dict:
    """row name -> (verdict, why), from table.md as it came back."""
    rows = {}
    for line in (out / "table.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 6 and cells[4].startswith("**"):
            rows[cells[0]] = (cells[4].strip("*"), cells[5])
    return rows


def assert_within_tool_limits(out):
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files
    assert all(len(p.relative_to(out).parts) - 1 <= 2 for p in files), files
    assert dc.out_problems(out) == []


@pytest.mark.slow
@pytest.mark.side_by_side  # holds no timing row: the GPU-only ones are shown, not held
def test_dry_run_judges_every_row_within_the_tools_limits(tmp_path):
    """The dry run replaces CUDA by the CPU at tiny sizes and judges every row on the real record: none skipped,
    none unjudged (was: every GPU-only row 'skipped' and exit 0 all the same)."""
    t0 = time.time()
    p = run_script(tmp_path, "--deadline-s", "840")  # past the 360-s default: on a loaded machine runs slow down
    wall_s = time.time() - t0
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert_within_tool_limits(tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["log.txt", "records.jsonl", "rows.jsonl", "table.md"]
    rows = table_rows(tmp_path)
    assert list(rows) == ROW_NAMES
    for c in dc.CHECKS:
        if c.run in DRY_RUNS:
            assert rows[c.name][0] == "pass", (c.name, rows[c.name])
            # a GPU-only target is computed on the CPU's figure and shown, not held
            assert not c.gpu_only or rows[c.name][1].startswith("dry run: "), (c.name, rows[c.name])
    assert "the GPU's verdict here would be" in rows["ResNet-50 AMP fp16 channels_last (NVIDIA recipe, like for like)"][1]
    assert {rows[u[0]][0] for u in dc.UNVERIFIED} == {"unverified"}
    runs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["run"] for r in runs] == list(DRY_RUNS)
    assert {r["status"] for r in runs} == {"ok"}, [(r["run"], r.get("reason")) for r in runs]
    assert "Rows of runs not in this check (--more, --only): " + ", ".join(r.name for r in dc.MORE) in \
        (tmp_path / "table.md").read_text()
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == len(ROW_NAMES)
    print(f"default dry run: {wall_s:.0f} s wall, load {os.getloadavg()[0]:.1f}")


def _more_dry_run(folder: Path) -> tuple[list[str], dict]:
    out = folder / "out"
    out.mkdir()
    return (["bash", "scripts/device_check.sh", "--dry-run", "--more", "--deadline-s", "840"],
            cli_env(OUT=str(out), PYTHON=sys.executable, DEVICE_CHECK_WHEELS="0"))


@pytest.mark.slow
@started_early("device_check_more", _more_dry_run)  # ~2 minutes: from the start, beside the first tests
def test_the_more_dry_run_judges_its_rows_too():
    folder, code, console = early("device_check_more", timeout_s=900)
    assert code == 0, console[-6000:]
    out = folder / "out"
    assert_within_tool_limits(out)
    rows = table_rows(out)
    assert list(rows) == MORE_ROW_NAMES + [u[0] for u in dc.UNVERIFIED]
    assert {rows[n][0] for n in MORE_ROW_NAMES} == {"pass"}, {n: rows[n] for n in MORE_ROW_NAMES}
    runs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    max_batch = next(r for r in runs if r["run"] == "max_batch")["measurements"]
    assert [t["batch_size"] for t in max_batch["batch_search_trials"]] == [4, 8, 16]


def test_a_deadline_skips_what_is_left_and_the_table_says_so(tmp_path):
    p = run_script(tmp_path, "--deadline-s", "0", timeout=300)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]  # a skipped row fails the check, dry run too
    assert_within_tool_limits(tmp_path)
    rows = table_rows(tmp_path)
    assert list(rows) == ROW_NAMES
    for c in (c for c in dc.CHECKS if c.run in DRY_RUNS):
        verdict, why = rows[c.name]
        assert verdict == "skipped" and why.startswith("deadline: 0 s left of 0 s"), (c.name, rows[c.name])
    assert "finished after" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "records.jsonl").read_text() == ""  # nothing ran


@pytest.mark.slow
def test_a_run_stopped_by_a_signal_still_leaves_the_table(tmp_path):
    """The device tool stops a command at its limit: the rows so far are on disk, the running one says so."""
    env = cli_env(OUT=str(tmp_path), PYTHON=sys.executable, DEVICE_CHECK_WHEELS="0")
    proc = subprocess.Popen(["bash", "scripts/device_check.sh", "--dry-run", "--only", "wandb_import,digits"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.startswith("device_check: digits"):
            break
    time.sleep(1.0)  # the digits run has started (its python is importing)
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, rest  # the stopped run's row is skipped: the check did not answer it
    rows = table_rows(tmp_path)
    assert rows["W&B importable from the carried files"][0] == "pass"
    assert rows["real data (digits) on the device"] == ("skipped", "running now (stopped before it finished)")
    assert "fp16 scaler: syncs per step" not in rows  # the rows of runs not asked for are left out
    assert_within_tool_limits(tmp_path)


def test_a_missing_figure_fails_its_row_by_name_on_the_gpu_and_never_crashes():
    rec = {"status": "ok", "measurements": {"throughput_samples_per_s": 3100.0, "step_time_s_median": 0.08,
                                            "step_time_source": "cuda_events"}, "derived": {}}
    recs = {"r50_fp16_recipe": rec}
    by = {c.name: c for c in dc.CHECKS}
    assert dc.evaluate(by["ResNet-50 AMP fp16 channels_last (NVIDIA recipe, like for like)"], recs, gpu=True)[0] == "pass"
    verdict, figure, why = dc.evaluate(by["fp16 scaler: syncs per step"], recs, gpu=True)
    assert verdict == "fail" and figure == "figure missing from the record: scaler_syncs_per_step"
    verdict, figure, _ = dc.evaluate(by["device time per step vs CUDA-event step time"], recs, gpu=True)
    assert verdict == "fail" and "device_s_per_step" in figure
    rec["measurements"].update(device_s_per_step=0.16)  # counted twice: 2x the step
    verdict, figure, why = dc.evaluate(by["device time per step vs CUDA-event step time"], recs, gpu=True)
    assert verdict == "fail" and "= 2.000" in figure
    rec["measurements"].update(device_s_per_step=0.078)
    assert dc.evaluate(by["device time per step vs CUDA-event step time"], recs, gpu=True)[0] == "pass"
    # the comparison row needs a run that did not happen: skipped, saying which
    verdict, _, why = dc.evaluate(by["DDP world_size=1 (NCCL) / single"], recs, gpu=True)
    assert verdict == "skipped" and "ddp_ws1" in why
    # a failed run: its rows fail with the record's reason
    recs["r50_fp16_recipe"] = {"status": "failed", "reason": "precision amp_fp16 needs a CUDA GPU"}
    verdict, _, why = dc.evaluate(by["fp16 scaler: syncs per step"], recs, gpu=True)
    assert verdict == "fail" and "amp_fp16 needs a CUDA GPU" in why


def test_the_oom_rows_read_the_search_trials():
    trials = [{"batch_size": 1024, "fits": True, "device_peak_allocated_gib": 60.0},
              {"batch_size": 2048, "fits": False, "device_peak_allocated_gib": 139.0},
              {"batch_size": 1536, "fits": True, "device_peak_allocated_gib": 95.0}]
    recs = {"max_batch": {"status": "ok", "measurements": {"batch_search_trials": trials,
                                                           "max_batch_size_per_device": 1536,
                                                           "min_failing_batch_size_per_device": 2048}}}
    by = {c.name: c for c in dc.CHECKS}
    assert dc.evaluate(by["find_max_batch reaches an OOM"], recs, gpu=True)[0] == "pass"
    verdict, figure, _ = dc.evaluate(by["find_max_batch: memory freed after the OOM"], recs, gpu=True)
    assert verdict == "pass" and "OOM at batch 2048" in figure and "batch 1536) fits" in figure
    trials[2]["fits"] = False  # the memory of the OOM was not given back: the smaller batch fails too
    assert dc.evaluate(by["find_max_batch: memory freed after the OOM"], recs, gpu=True)[0] == "fail"


def test_the_file_limits_are_the_device_tools(tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "record.json").write_text("{}")
    (tmp_path / "odd name.txt").write_text("x")
    problems = dc.out_problems(tmp_path)
    assert any("11 files (at most 8)" in p for p in problems), problems
    assert any("a/b/c/record.json: 3 folders down" in p for p in problems), problems
    assert any("odd name.txt: a name" in p for p in problems), problems


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_a_run_past_its_time_is_killed_with_its_children():
    """xbench may start processes of its own: the whole process group goes at the limit."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print('child', flush=True); time.sleep(60)"
    t0 = time.time()
    log, timed_out = dc.run_process([sys.executable, "-c", code], 3.0, dict(os.environ))
    assert timed_out and "killed after 3 s" in log
    assert time.time() - t0 < 30
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"], capture_output=True, text=True).stdout.split()
    assert left == [], left


def test_the_more_runs_dry_overrides_compose_and_pass_compat_here():
    """Their dry overrides as the script composes them (DRY_COMMON first): no compat reason on this host."""
    from omegaconf import OmegaConf

    from tests.conftest import CONF
    from xbench import compat
    from xbench.platforms.detect import host_facts
    from xbench.studies.sweep import compose_point

    here = host_facts()
    left_out = [r for r in dc.ALL_RUNS if r.name not in DRY_RUNS]
    assert {r.kind for r in left_out} == {"xbench"}
    for run in left_out:
        cfg = OmegaConf.to_object(compose_point(CONF, [*dc.DRY_COMMON, *run.dry]))
        assert compat.check(cfg, here) == [], run.name


def test_every_gpu_run_composes_and_passes_compat_on_an_h200():
    """Device time is scarce: each GPU run's overrides compose and pass every compat rule on a simulated
    H200 host (as host_facts() describes the lent machine: 'NVIDIA H200', 143771 MiB, 132 SMs)."""
    from omegaconf import OmegaConf

    from tests.conftest import CONF
    from xbench import compat
    from xbench.platforms.detect import HostFacts
    from xbench.studies.sweep import compose_point

    h200 = HostFacts(cuda_devices=["NVIDIA H200"], cuda_memory_gib=[140.4], cuda_sm_counts=[132], logical_cores=16,
                     torch_version="2.9.0", torch_xla=False, accelerate=True)
    for run in dc.ALL_RUNS:
        if run.kind != "xbench":
            continue
        cfg = OmegaConf.to_object(compose_point(CONF, [*dc.GPU_COMMON, *run.gpu]))
        assert compat.check(cfg, h200) == [], run.name
    r50 = OmegaConf.to_object(compose_point(CONF, [*dc.GPU_COMMON, *next(r for r in dc.RUNS
                                                                         if r.name == "r50_fp16_recipe").gpu]))
    assert (r50.model.name, r50.model.channels_last, r50.precision.name, r50.data.batch_size) == \
        ("resnet50", True, "amp_fp16", 256)


def gpu_records() -> dict:
    """Every run's record as the meters write it on one H200 (the utilisation and memory meters: per-GPU dicts keyed
    by CUDA ordinal, {"0": 93.1}), healthy: every row's target met."""
    timed = {"loss": [2.3, 2.29, 2.27, 2.26], "phase": ["timed"] * 4}
    trials = [{"batch_size": 1024, "fits": True, "device_peak_allocated_gib": 60.0},
              {"batch_size": 2048, "fits": False, "device_peak_allocated_gib": 139.0},
              {"batch_size": 1536, "fits": True, "device_peak_allocated_gib": 95.0}]
    ms = {"throughput_samples_per_s": 3100.0, "gpu_util_percent_mean": {"0": 93.1}, "gpu_util_source": "nvml",
          "gpu_mem_used_gib_max": {"0": 41.2}, "energy_j": 5200.0, "energy_source": "nvml",
          "energy_j_per_sample": 0.1, "scaler_syncs_per_step": 0, "contended": False, "stalled": False,
          "device_s_per_step": 0.081, "step_time_s_median": 0.082, "step_time_source": "cuda_events",
          "sync_wait_s_per_step": 0.0004, "peak_device_allocated_gib": 40.0, "device_total_gib": 139.8,
          "optimizer_impl": "fused"}
    compiled = {"throughput_samples_per_s": 41000.0, "compiles_timed": 0, "cudagraph_skips": 0,
                "dynamo_cache_limit_hits": 0, "dynamo_eager_frames": 0}
    return {
        "overhead": {"status": "ok", "_result": {"ratio_median": 0.995, "goal": 0.99, "ratio_ci95_text": "-"}},
        "r50_fp16_recipe": {"status": "ok", "measurements": ms, "derived": {},
                            "artifacts": {"wandb_mode": "offline", "wandb_offline_dir": "/tmp/w"}},
        "compile_r50": {"status": "ok", "measurements": {"throughput_samples_per_s": 3400.0}},
        "llm": {"status": "ok", "measurements": {"throughput_samples_per_s": 2.6},
                "derived": {"tokens_per_s": 21000.0, "mfu": 0.38}},
        "torchax": {"status": "ok", "measurements": {"throughput_samples_per_s": 2500.0}},
        "wandb_import": {"status": "ok", "_log": "IMPORTED wandb 0.31.0 hydra 1.3.2 omegaconf 2.3.0 from /tmp/site\n"},
        "compile_graphs": {"status": "ok", "measurements": compiled},
        "max_batch": {"status": "ok", "measurements": {"batch_search_trials": trials, "max_batch_size_per_device": 1536,
                                                       "min_failing_batch_size_per_device": 2048}},
        "digits": {"status": "ok", "measurements": {"data_source": "digits", "throughput_samples_per_s": 90000.0,
                                                    "data_wait_fraction": 0.01}},
        "self_check": {"status": "ok", "measurements": {"throughput_samples_per_s": 3050.0,
                                                        "self_check_batch_sizes": [128, 256],
                                                        "self_check_throughput_samples_per_s": [2900.0, 3050.0]},
                       "warnings": []},
        "graphs_step": {"status": "ok", "measurements": dict(compiled), "series": timed},
        "tf32": {"status": "ok", "measurements": {"tf32_api": "fp32_precision"}, "_log": "", "warnings": []},
        "ddp_ws1": {"status": "ok", "measurements": {"throughput_samples_per_s": 3080.0}},
        "bert_mfu": {"status": "ok", "measurements": {"throughput_samples_per_s": 1900.0}, "derived": {"mfu": 0.41}},
    }


def test_every_row_judges_the_record_shapes_a_gpu_run_writes():
    """On a GPU the meters write per-GPU dicts: the NVML row compared that dict with `> 0` and raised, failing on
    every healthy GPU. Every row gets the records the meters write on one H200 and passes, none an error."""
    recs = gpu_records()
    assert set(recs) == {r.name for r in dc.ALL_RUNS}
    for c in dc.CHECKS:
        verdict, figure, why = dc.evaluate(c, recs, gpu=True)
        assert verdict == "pass", (c.name, figure, why)
    recs["r50_fp16_recipe"]["measurements"]["gpu_util_percent_mean"] = {"0": 93.1, "1": None}  # a GPU read nothing
    by = {c.name: c for c in dc.CHECKS}
    assert dc.evaluate(by["NVML utilisation present"], recs, gpu=True)[0] == "fail"


def cpu_records() -> dict:
    """Every run's record as the dry run's CPU runs write it (the CPU's meters: machine busy share over the windows,
    no energy counter in this VM, host memory; amp_bf16, so no scaler; a loaded machine: contended)."""
    recs = gpu_records()
    r50 = recs["r50_fp16_recipe"]["measurements"]
    for k in ("gpu_util_percent_mean", "gpu_util_source", "gpu_mem_used_gib_max", "energy_j", "energy_source",
              "energy_j_per_sample", "scaler_syncs_per_step", "sync_wait_s_per_step", "peak_device_allocated_gib",
              "device_total_gib"):
        del r50[k]
    r50.update(throughput_samples_per_s=310.0, util_source="edges", cpu_util_percent_mean=100.0, gpu_util="unavailable",
               energy_unavailable="no RAPL domains under /sys/class/powercap", step_time_source="host",
               contended=True, peak_host_rss_gib=0.89)
    recs["overhead"]["_result"] = {"ratio_median": 0.93, "goal": 0.98, "ratio_ci95_text": "0.8-1.1"}
    recs["llm"]["derived"]["mfu"] = 0.003  # against the dry run's nominal CPU peak
    recs["max_batch"]["measurements"]["batch_search_trials"] = [{"batch_size": b, "fits": True} for b in (4, 8, 16)]
    del recs["tf32"]["measurements"]["tf32_api"]  # the CPU sets no TF32
    recs["compile_graphs"]["measurements"]["cudagraph_skips"] = 0
    return recs


def test_the_dry_run_judges_every_row_on_the_records_the_cpu_writes():
    """No row 'skipped' in the dry run (was: every GPU-only row, 20 of 29): each row's figure is read off the CPU's
    record (its stand-in where the CPU's meter writes another) and its verdict applied; a GPU-only target is shown,
    not held ('the GPU's verdict here would be fail'), so a loaded CPU's slow figures pass the dry run."""
    recs = cpu_records()
    for c in dc.CHECKS:
        verdict, figure, why = dc.evaluate(c, recs, gpu=False)
        assert verdict == "pass", (c.name, figure, why)
        assert not c.gpu_only or why.startswith("dry run: "), (c.name, why)
    by = {c.name: c for c in dc.CHECKS}
    _, figure, why = dc.evaluate(by["ResNet-50 AMP fp16 channels_last (NVIDIA recipe, like for like)"], recs, False)
    assert why == "dry run: the GPU's verdict here would be fail (310 < 2850)", why
    assert dc.evaluate(by["NVML utilisation present"], recs, False)[1].startswith("cpu_util_percent_mean = 100")
    # a figure the CPU's record lacks still fails the dry run, by name
    del recs["r50_fp16_recipe"]["measurements"]["peak_host_rss_gib"]
    assert dc.evaluate(by["peak device memory"], recs, False)[:2] == \
        ("fail", "figure missing from the record: peak_host_rss_gib")
    recs["tf32"]["_log"] = "UserWarning: Please use the new API settings to control TF32 behavior"
    assert dc.evaluate(by["tf32 on the image's torch"], recs, False)[0] == "fail"


def test_the_default_runs_answer_within_6_minutes_on_an_h200_and_more_holds_the_rest():
    assert [c.run for c in dc.CHECKS[:7]] == ["overhead", "r50_fp16_recipe", "compile_r50", "llm", "torchax",
                                              "r50_fp16_recipe", "r50_fp16_recipe"]
    assert [r.name for r in dc.RUNS[:5]] == ["overhead", "r50_fp16_recipe", "compile_r50", "llm", "torchax"]
    assert dc.DEADLINE_S <= 360 and dc.SETUP_S + sum(r.est_s for r in dc.RUNS) <= dc.DEADLINE_S
    more = dc.selected(True, set())
    assert [r.name for r in more] == ["r50_fp16_recipe", *(r.name for r in dc.MORE)]  # ddp_ws1 compares with it
    assert dc.DEADLINE_MORE_S <= 600 - 30 and dc.SETUP_S + sum(r.est_s for r in more) <= dc.DEADLINE_MORE_S
    assert [r.name for r in dc.selected(False, {"compile_r50"})] == ["r50_fp16_recipe", "compile_r50"]
    torchax = next(r for r in dc.RUNS if r.name == "torchax")
    assert "runtime=torchax" in torchax.gpu
