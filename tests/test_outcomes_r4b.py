"""A run's outcome says what happened (R4 5/7 items 4 and 5b): a stop signal in a sweep point's start-up is
`interrupted` (was "failed: a crash in native code"), a finite blow-up while training to a target is `diverged`
(was `ok`, "target not reached"), a full store during train-to-target is one line, not a traceback per MLPerf
line. Real CLI runs (mlp on digits), real signals, a real full filesystem (tmpfs in a private mount namespace)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import FAST, REPO, cli_env, drill_test, records

PY = sys.executable
TINY_TARGET = ("+experiment=digits_to_target", "logger=none", "logger.progress=false")


def _can_mount() -> bool:
    if not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True, timeout=30)
    return p.returncode == 0


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # gone, or a zombie not yet reaped
        return ""


# ---- 1. a stop signal in a sweep point's start-up ---------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("to", ["the sweep", "its process group"])
def test_sigterm_in_a_sweep_points_start_up_is_interrupted(tmp_path, to):
    """A sweep point's rank work runs in a fresh spawned process (bench.isolation=auto). SIGTERM while that
    process is still importing (no handler of its own yet: the signal's default action ends it) is an
    interruption naming the signal, exit 130; it was "failed: RuntimeError: ... died without a result
    (killed, or a crash in native code)". `the sweep`: the parent forwards the stop; `its process group`: a
    preemption (Slurm, a container stop) signals every process at once."""
    store = tmp_path / "s"
    # spawn: a point forked from the warm template (auto) has no import start-up left to stop in
    fast = [a for a in FAST if not a.startswith("bench.isolation")] + ["bench.isolation=spawn"]
    cmd = [PY, "-m", "xbench", "-m", f"store.root={store}", *fast, "model=mlp", "data=digits", "bench.seed=0,1"]
    p = subprocess.Popen(cmd, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        end, kids = time.monotonic() + 240, []
        while not kids and p.poll() is None and time.monotonic() < end:
            kids = [c for c in psutil.Process(p.pid).children(recursive=True) if "spawn_main" in _cmdline(c)]
            time.sleep(0.05)
        assert kids, "the point's fresh process never started"
        time.sleep(0.3)  # it is importing torch (seconds): still in start-up
        if to == "the sweep":
            p.send_signal(signal.SIGTERM)
        else:
            os.killpg(p.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err[-3000:]
    [rec] = records(store)  # the second point never started
    assert (rec["status"], rec["reason"]) == ("interrupted", "SIGTERM during start-up"), rec["reason"]
    assert not (store / rec["run_id"] / "traceback.txt").exists()


# ---- 5. a finite blow-up while training to a target ----------------------------------------------------------

@drill_test("blowup_to_target")
def test_a_finite_blow_up_to_target_is_diverged_with_its_figures(drill):
    """AdamW at lr 1e6 on digits: the loss goes from 2.3 to 1e22 at the second step, top-1 stays at chance.
    It was `ok`, "target not reached" after 20 epochs of nonsense (train loss 4.2e20 at the first evaluation);
    now the throughput loop's rule (bench.diverge_loss_factor x the first loss, loop.py rule 9) ends it
    `diverged` at the step, and the record keeps the evaluation made before (evaluated every step here). The
    drill's blowup_to_target run, read from its folder."""
    folder = drill.folder("blowup_to_target")
    [rec] = records(folder / "s")
    stdout = (folder / "stdout").read_text()
    assert rec["config"]["optim"]["name"] == "adamw" and rec["config"]["goal"]["eval_every_steps"] == 1
    assert rec["status"] == "diverged", (rec["status"], rec["reason"], stdout[-2000:])
    m, curve = rec["measurements"], rec["series"]
    first = curve["train_loss"][0]
    assert 1.5 < first < 3.5  # ~ln(10): the evaluation after step 0, before the blow-up
    assert m["diverged_at_step"] == 1 and m["diverged_phase"] == "train"
    assert m["diverged_loss"] > 1000 * first and f"loss became {m['diverged_loss']}" in rec["reason"]
    assert m["evals"] == len(curve["top1"]) == 1 and m["metric_final"] == curve["top1"][0] < 0.5
    assert m["goal_metric"] == "top1" and rec["artifacts"]["curve"] == "curve.jsonl"
    assert "DIVERGED" in stdout


@pytest.mark.slow
def test_a_run_that_learns_is_not_taken_for_a_blow_up(tmp_path):
    """The rule's other side: the experiment as shipped (lr 3e-3) still reaches its target, ok."""
    store = tmp_path / "s"
    p = subprocess.run([PY, "-m", "xbench", f"store.root={store}", *TINY_TARGET, "goal.max_epochs=6",
                        "goal.target=0.9"], capture_output=True, text=True, timeout=600, cwd=REPO, env=cli_env())
    [rec] = records(store)
    assert rec["status"] == "ok" and rec["measurements"]["target_reached"], (rec["reason"], p.stderr[-2000:])


# ---- 2. a full store during train-to-target -----------------------------------------------------------------

@drill_test("full_store_to_target")
def test_a_full_store_during_train_to_target_is_one_line(drill):
    """The store (a real 4 MiB tmpfs) fills after the second evaluation; 28 more epochs write ~140 MLPerf lines.
    It was one logging traceback per line ('--- Logging error ---', 135 here); now one line names the log
    and the full disk, the run trains on to its end, its record (in the fallback folder: the store is full)
    says the log is incomplete. The drill's full_store_to_target run, read from its folder."""
    out = drill.folder("full_store_to_target")
    if not (out / "rc").exists():
        pytest.skip("no private mount namespace here (unshare -rm): no real full store")
    err = (out / "stderr").read_text()
    assert "Logging error" not in err and "Traceback" not in err, err[-3000:]
    said = [ln for ln in err.splitlines() if "mlperf.log" in ln]
    assert len(said) == 1 and "stopped (OSError: [Errno 28] No space left on device)" in said[0], said
    assert int((out / "rc").read_text()) == 74  # the record could not go to the store: the fallback has it
    [path] = (out / "fallback").glob("*/record.json")
    rec = json.loads(path.read_text())
    assert rec["status"] == "ok" and rec["measurements"]["epochs_done"] == 30  # the run went on to its end
    assert "mlperf.log is incomplete: a write failed (OSError: [Errno 28] No space left on device)" in rec["warnings"]


def test_the_mlperf_log_stops_at_a_failed_write_with_one_line(tmp_path, capfd):
    """The same in-process, on a file the process may not grow (RLIMIT_FSIZE: EFBIG, as a quota does): the
    lines before the limit are whole (the last may be cut at the limit), one line says why the rest is missing, `close` does not raise."""
    from xbench.bench.mlperf_log import MLPerfLog

    code = ("import resource, sys; from pathlib import Path; from xbench.bench.mlperf_log import MLPerfLog\n"
            "log = MLPerfLog(Path(sys.argv[1]))\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))\n"
            "for i in range(200):\n    log.eval_stop(i + 1.0, 'top1', 0.5, 100 * i)\n"
            "log.close(); print('problem:', log.problem)\n")
    path = tmp_path / "mlperf.log"
    p = subprocess.run([PY, "-c", code, str(path)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Logging error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.stderr.count("\n") == 1 and "File too large" in p.stderr and str(path) in p.stderr
    assert "problem: OSError: [Errno 27] File too large" in p.stdout
    lines = path.read_text().splitlines()
    assert 0 < len(lines) < 200 and all(ln.startswith(":::MLLOG {") and ln.endswith("}") for ln in lines[:-1])
    assert MLPerfLog(tmp_path / "ok.log").problem is None  # a log that writes has none


# ---- 4. a read-only logger.wandb.dir ------------------------------------------------------------------------

@drill_test("read_only_wandb_dir")
def test_a_read_only_wandb_dir_is_said_and_never_the_shared_temp_folder(drill):
    """logger.wandb.dir on a read-only filesystem (root writes through chmod, not through a read-only mount).
    W&B put the run in the system's temp folder ($TMPDIR/wandb) without a word; now one line says so, W&B is off
    for the run with the reason in the record (as for a folder that cannot be created), the run is ok. The
    drill's read_only_wandb_dir run (the digits MLP), read from its folder."""
    folder = drill.folder("read_only_wandb_dir")
    if not (folder / "rc").exists():
        pytest.skip("no private mount namespace here (unshare -rm): no real read-only folder")
    ro, systmp = folder / "ro", folder / "systmp"
    out, err = (folder / "stdout").read_text(), (folder / "stderr").read_text()
    assert (folder / "rc").read_text().strip() == "0", err[-2000:]
    assert not (systmp / "wandb").exists()  # was: the whole offline run there
    [rec] = records(folder / "s")
    assert rec["config"]["model"]["name"] == "mlp"
    said = [ln for ln in (out + err).splitlines() if "logger.wandb.dir" in ln]
    assert len(said) == 1 and f"logger.wandb.dir={ro} is not writable; W&B is off" in said[0], err[-2000:]
    assert rec["status"] == "ok" and "is not writable" in rec["artifacts"]["wandb_error"]
    assert "wandb_offline_dir" not in rec["artifacts"]


DRILL_CASES = ("sigterm_point_startup", "blowup_to_target", "full_store_to_target", "read_only_wandb_dir",
               "wandb_folder_fills")


@drill_test(*DRILL_CASES)
def test_drill_rows_of_round_4_outcomes(drill):
    rows = [r for case in DRILL_CASES for r in drill.rows_of(case)]
    assert len(rows) == 5 and all(r["verdict"] == "ok" or r["observed"] == "skipped" for r in rows), rows


# ---- 6. the wandb-offline: report source reads runs in-process ------------------------------------------------

@pytest.mark.slow
def test_offline_wandb_runs_are_read_in_process_as_the_cli_reads_them(tmp_path):
    """Real offline runs (a sweep of 3 points and one train-to-target run, W&B offline) read by the in-process
    reader (wandb_source.read_wandb_file) and by `wandb leet inspect` (records/wandb_files.read_offline_run):
    the same config, summary, history, name, group, tags, job type, exit code. In-process is a fraction of a
    second a run (the CLI: ~1-2 s each, 504 s for 200 runs), with a progress line, and imports no torch."""
    from xbench.analysis.wandb_source import read_wandb_file
    from xbench.records.wandb_files import read_offline_run

    store = tmp_path / "s"
    fast = [a for a in FAST if a != "logger=none"]
    for flags, args in ((["-m"], [*fast, "model=mlp", "data=digits", "bench.seed=0,1,2"]),
                        ([], [*TINY_TARGET[:1], "logger.progress=false", "goal.max_epochs=2", "goal.target=null"])):
        p = subprocess.run([PY, "-m", "xbench", *flags, f"store.root={store}", "logger=wandb", *args],
                           capture_output=True, text=True, timeout=600, cwd=REPO, env=cli_env())
        assert p.returncode == 0, p.stderr[-2000:]
    files = sorted(store.glob("*/wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 4
    cli_s = in_s = 0.0
    for f in files:
        t = time.perf_counter()
        cli = read_offline_run(f)
        cli_s += time.perf_counter() - t
        t = time.perf_counter()
        mine = read_wandb_file(f)
        in_s += time.perf_counter() - t
        assert mine == {k: cli[k] for k in mine}, f
        assert mine["history"] and mine["summary"]["status"] == "ok" and mine["exit_code"] == 0
    print(f"per run: wandb leet inspect {cli_s / len(files):.3f} s, in-process {in_s / len(files):.4f} s")
    code = ("import sys, time; from xbench.analysis.wandb_source import offline_records\n"
            f"t = time.perf_counter(); recs, skipped = offline_records({str(store)!r}); dt = time.perf_counter() - t\n"
            "assert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')], 'torch imported'\n"
            "print(len(recs), len(skipped), sorted(r.status for r in recs), f'{dt:.3f}')\n")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout.split()
    assert out[:2] == ["4", "0"] and "read 4/4 offline W&B runs" in p.stderr, (p.stdout, p.stderr)
    assert float(out[-1]) < 0.5 * len(files) + 2  # the import of wandb's protobufs (~1 s) once, then ms a run


# ---- 3. a W&B folder that stops taking writes ---------------------------------------------------------------

@pytest.mark.slow
def test_a_wandb_folder_that_takes_every_write_says_upload_later_and_keeps_no_error(tmp_path):
    """The other side of the drill's wandb_folder_fills (W&B offline under a 150 KiB RLIMIT_FSIZE: one line says
    the offline run is cut short, the record keeps why, the run is ok; test_drill_rows_of_round_4_outcomes reads
    it): the same run without the cap says "upload later" once and the record has no wandb_error."""
    store = tmp_path / "s"
    fast = [a for a in FAST if not a.startswith("logger=")]
    p = subprocess.run([PY, "-m", "xbench", f"store.root={store}", *fast, "model=mlp", "data=digits", "logger=wandb"],
                       capture_output=True, text=True, timeout=600, cwd=REPO, env=cli_env())
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    [rec] = records(store)
    said = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("W&B:")]
    assert rec["status"] == "ok" and len(said) == 1, said
    assert "upload later with: wandb sync" in said[0] and "wandb_error" not in rec["artifacts"]
