"""The GPU check (scripts/device_check.sh / .py) brings its answers back: within the device tool's limits
(at most 8 files, none over 2 folders below $OUT), a table with every row written after every run, an
overall deadline that skips what is left and says so, and rows that name a missing figure, never crash.

The dry run (CPU, tiny sizes) runs the real CLI per run; the tests that do are marked slow. The slow test drives
a subset of it (DRY_RUNS, `--only`) that holds every row kind and every run kind; the dry overrides of the runs it
leaves out are checked to compose and pass compat here. The others read the script's pieces in this process, on
records shaped as xbench writes them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env

SCRIPT = REPO / "scripts" / "device_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


dc = load_script()
ROW_NAMES = [c.name for c in dc.CHECKS] + [u[0] for u in dc.UNVERIFIED]
# The dry run the slow test drives: each row kind (judged on the CPU: pass; GPU-only: skipped with the CPU's figure;
# not asked for; unverified), each run kind (python, xbench, the overhead script) and the OOM search's trials. The
# runs left out (self_check, tf32, ddp_ws1, bert_mfu: ~8 s each, their rows GPU-only) train elsewhere in the suite
# (test_trust, test_models, test_recipes); here their dry overrides compose and pass compat on this host.
DRY_RUNS = ("wandb_import", "r50_fp16_recipe", "compile_graphs", "max_batch", "digits", "graphs_step", "overhead")


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
def test_dry_run_returns_every_row_within_the_tools_limits(tmp_path):
    # a deadline past the 480 s default (short of the 900 s test timeout): on a loaded machine the runs slow down,
    # and the deadline has a test of its own
    p = run_script(tmp_path, "--only", ",".join(DRY_RUNS), "--deadline-s", "840")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert_within_tool_limits(tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["log.txt", "records.jsonl", "rows.jsonl", "table.md"]
    rows = table_rows(tmp_path)
    assert list(rows) == ROW_NAMES
    # judged here: the rows whose target holds on a CPU too
    for name in ("W&B importable from the carried files", "W&B offline run written",
                 "compile + CUDA graphs: recompiles after warm-up", "real data (digits) on the device",
                 "graphs_step: recompiles after warm-up"):
        assert rows[name][0] == "pass", (name, rows[name])
    assert {v for n, (v, _) in rows.items() if n in [c.name for c in dc.CHECKS if c.gpu_only]} == {"skipped"}
    assert {rows[u[0]][0] for u in dc.UNVERIFIED} == {"unverified"}
    runs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["run"] for r in runs] == [r.name for r in dc.RUNS if r.name in DRY_RUNS]
    assert {r["status"] for r in runs} == {"ok"}, [(r["run"], r.get("reason")) for r in runs]
    left_out = {c.name for c in dc.CHECKS if c.run not in DRY_RUNS}
    assert left_out and all(rows[n] == ("skipped", "not asked for (--only)") for n in left_out), left_out
    max_batch = next(r for r in runs if r["run"] == "max_batch")["measurements"]
    assert [t["batch_size"] for t in max_batch["batch_search_trials"]] == [4, 8, 16]
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == len(ROW_NAMES)


def test_a_deadline_skips_what_is_left_and_the_table_says_so(tmp_path):
    p = run_script(tmp_path, "--deadline-s", "0", timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert_within_tool_limits(tmp_path)
    rows = table_rows(tmp_path)
    assert list(rows) == ROW_NAMES
    for c in dc.CHECKS:
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
    assert proc.returncode == 0, rest
    rows = table_rows(tmp_path)
    assert rows["W&B importable from the carried files"][0] == "pass"
    assert rows["real data (digits) on the device"] == ("skipped", "running now (stopped before it finished)")
    assert "not asked for (--only)" in rows["fp16 scaler: syncs per step"][1]
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


def test_the_dry_runs_the_slow_test_leaves_out_compose_and_pass_compat_here():
    """Their dry overrides as the script composes them (DRY_COMMON first): no compat reason on this host."""
    from omegaconf import OmegaConf

    from tests.conftest import CONF
    from xbench import compat
    from xbench.platforms.detect import host_facts
    from xbench.studies.sweep import compose_point

    here = host_facts()
    left_out = [r for r in dc.RUNS if r.name not in DRY_RUNS]
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
    for run in dc.RUNS:
        if run.kind != "xbench":
            continue
        cfg = OmegaConf.to_object(compose_point(CONF, [*dc.GPU_COMMON, *run.gpu]))
        assert compat.check(cfg, h200) == [], run.name
    r50 = OmegaConf.to_object(compose_point(CONF, [*dc.GPU_COMMON, *next(r for r in dc.RUNS
                                                                         if r.name == "r50_fp16_recipe").gpu]))
    assert (r50.model.name, r50.model.channels_last, r50.precision.name, r50.data.batch_size) == \
        ("resnet50", True, "amp_fp16", 256)


def test_every_row_judges_the_record_shapes_a_gpu_run_writes():
    """On a GPU the meters write per-GPU dicts (the utilisation meter: {"0": 93.1} keyed by CUDA ordinal): the NVML
    row compared that dict with `> 0` and raised, failing on every healthy GPU. Each row here gets a record shaped
    as the meters write it on one H200 and gives a verdict, none an error."""
    ms = {"throughput_samples_per_s": 3100.0, "gpu_util_percent_mean": {"0": 93.1}, "gpu_util_source": "nvml",
          "gpu_mem_used_gib_max": {"0": 41.2}, "energy_j": 5200.0, "energy_source": "nvml",
          "energy_j_per_sample": 0.1, "scaler_syncs_per_step": 0, "contended": False, "stalled": False,
          "device_s_per_step": 0.081, "step_time_s_median": 0.082, "step_time_source": "cuda_events",
          "peak_device_allocated_gib": 40.0, "device_total_gib": 139.8}
    recs = {"r50_fp16_recipe": {"status": "ok", "measurements": ms, "derived": {},
                                "artifacts": {"wandb_mode": "offline"}},
            "compile_r50": {"status": "ok", "measurements": {"throughput_samples_per_s": 3400.0}},
            "llm": {"status": "ok", "measurements": {}, "derived": {"tokens_per_s": 21000.0, "mfu": 0.38}},
            "torchax": {"status": "ok", "measurements": {"throughput_samples_per_s": 2500.0}},
            "overhead": {"status": "ok", "_result": {"ratio_median": 0.995, "goal": 0.99, "ratio_ci95_text": "-"}}}
    by = {c.name: c for c in dc.CHECKS}
    for name in ("harness vs hand-written loop (ResNet-50 amp_bf16)",
                 "ResNet-50 AMP fp16 channels_last (NVIDIA recipe, like for like)",
                 "compile speed-up on the recipe's work", "Llama 3 (1B shapes, 8,192 tokens, amp_bf16): tokens/s and MFU",
                 "study 4's XLA side on the GPU (runtime=torchax)", "NVML utilisation present", "NVML energy present",
                 "fp16 scaler: syncs per step", "device time per step vs CUDA-event step time", "peak device memory"):
        verdict, figure, why = dc.evaluate(by[name], recs, gpu=True)
        assert verdict == "pass", (name, figure, why)
    ms["gpu_util_percent_mean"] = {"0": 93.1, "1": None}  # a GPU the meter read nothing from
    assert dc.evaluate(by["NVML utilisation present"], recs, gpu=True)[0] == "fail"


def test_the_rows_that_matter_most_come_first_and_fit_the_deadline():
    assert [c.run for c in dc.CHECKS[:7]] == ["overhead", "r50_fp16_recipe", "compile_r50", "llm", "torchax",
                                              "r50_fp16_recipe", "r50_fp16_recipe"]
    assert [r.name for r in dc.RUNS[:5]] == ["overhead", "r50_fp16_recipe", "compile_r50", "llm", "torchax"]
    assert dc.DEADLINE_S <= 360 and sum(r.est_s for r in dc.RUNS[:5]) <= dc.DEADLINE_S
    torchax = next(r for r in dc.RUNS if r.name == "torchax")
    assert "runtime=torchax" in torchax.gpu
