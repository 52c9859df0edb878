"""Fault drill: run each fault against the real CLI and print what happened.

    scripts/fault_drill.sh [--short] [--jobs N] [--json rows.json] [--keep DIR]

Each row is one fault: the status the run must end with, the status its record shows, and whether the
record is complete (valid, with the figures that status must carry). `--short` runs the subset used by
the test suite. Exit status: 0 when every row matches, 1 otherwise. Runs are tiny (a small model, a
few steps); out-of-memory is provoked safely by capping the CLI's address space (RLIMIT_AS), never by
filling the machine's memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from xbench.records.record import RunRecord  # noqa: E402
from xbench.records.store import load_records  # noqa: E402

# A tiny run: warm-up is exactly 3 steps (cv tolerance wide open), then 5 timed steps.
FAST = ("bench.steps=5", "bench.warmup_max_steps=6", "bench.warmup_min_steps=2", "bench.warmup_stable_steps=2",
        "bench.warmup_cv_tol=10", "bench.threads=1", "logger=none", "logger.progress=false", "data.batch_size=8")
WARMUP_STEPS = 3
# torch (CUDA build) maps ~4.5 GiB of address space on import; 7 GiB leaves room for a small run and
# makes any multi-GiB allocation fail at once, without using that memory.
ADDRESS_CAP_GIB = 7.0
# Fake secrets: distinctive values searched for in every file a run leaves and on its console.
SECRETS = {"MY_API_KEY": "drill-sk-4f1e9a77c0", "HF_TOKEN": "drill-hf-93b2e1d5aa", "DB_PASSWORD": "drill-pw-7c3d11e8f0",
           "WANDB_API_KEY": "drill" + "0" * 35}
CLI_SECRET = "drill-cli-5e5e0b1c2d"


@dataclass
class Row:
    fault: str
    expected: str
    observed: str = "?"
    complete: str = "no"  # yes | no | n/a (no record expected)
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.observed == self.expected and self.complete in ("yes", "n/a")


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    e.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", WANDB_SILENT="true", WANDB_MODE="offline",
             TORCHINDUCTOR_CACHE_DIR="/tmp/xbench-inductor-drill")
    e.update(extra)
    return e


def cap_address_space(gib: float = ADDRESS_CAP_GIB):
    def pre():
        lim = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    return pre


def cmd(store: Path, *args: str) -> list[str]:
    flags = [a for a in args if a.startswith("-")]
    return [sys.executable, "-m", "xbench", *flags, f"store.root={store}", *[a for a in args if a not in flags]]


def cli(store: Path, *args: str, timeout=300, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", env())
    return subprocess.run(cmd(store, *args), capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw)


class Watched:
    """A CLI process whose stderr is read line by line (tqdm's \\r-redraws count as lines), so a test
    can wait for "the timed window has started" before it sends a signal."""

    def __init__(self, store: Path, *args: str, **kw):
        kw.setdefault("env", env())
        self.p = subprocess.Popen(cmd(store, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                                  **kw)
        self.err: list[str] = []
        self.out: list[str] = []
        self.pending = {"err": "", "out": ""}  # the line being drawn (tqdm redraws without a newline)
        self.cond = threading.Condition()
        for stream, sink, name in ((self.p.stderr, self.err, "err"), (self.p.stdout, self.out, "out")):
            threading.Thread(target=self._pump, args=(stream, sink, name), daemon=True).start()

    def _pump(self, stream, sink, name):
        buf = b""
        while chunk := stream.read1(4096):
            buf += chunk
            *parts, buf = buf.replace(b"\r", b"\n").split(b"\n")
            with self.cond:
                sink.extend(x.decode(errors="replace") for x in parts)
                self.pending[name] = buf.decode(errors="replace")
                self.cond.notify_all()
        with self.cond:
            sink.append(buf.decode(errors="replace"))
            self.cond.notify_all()

    def _seen(self, text: str) -> bool:
        return text in self.pending["err"] or any(text in line for line in self.err)

    def wait_for(self, text: str, timeout: float = 240) -> bool:
        end = time.monotonic() + timeout
        with self.cond:
            while not self._seen(text):
                if self.p.poll() is not None or time.monotonic() > end:
                    return self._seen(text)
                self.cond.wait(0.2)
        return True

    def finish(self, timeout: float = 240) -> int:
        rc = self.p.wait(timeout)
        time.sleep(0.2)  # let the pumps drain
        return rc


# ---- record checks ---------------------------------------------------------------------------------

def one_record(store: Path) -> tuple[dict | None, str]:
    recs = sorted(Path(store).glob("*/record.json"))
    if len(recs) != 1:
        return None, f"{len(recs)} records"
    return json.loads(recs[0].read_text()), ""


def missing(rec: dict, *keys: str) -> list[str]:
    m = rec.get("measurements", {})
    return [k for k in keys if m.get(k) is None]


def judge(row: Row, rec: dict | None, need=(), extra_problems=()) -> Row:
    """Fill observed/complete from a record: valid (RunRecord), reason present, needed figures present."""
    if rec is None:
        row.observed, row.complete = "no record", "no"
        return row
    row.observed = rec["status"]
    problems = list(extra_problems)
    try:
        RunRecord.from_dict(rec)
    except ValueError as e:
        problems.append(str(e))
    problems += [f"missing {k}" for k in missing(rec, *need)]
    if not rec.get("env", {}).get("cpu") or not rec.get("config"):
        problems.append("no env/config")
    row.complete = "no" if problems else "yes"
    row.detail = "; ".join(problems) or row.detail or (rec.get("reason") or "")[:70]
    return row


# ---- the faults ------------------------------------------------------------------------------------

def compose_error(name: str, override: str, must_say: tuple[str, ...]):
    def case(tmp: Path) -> list[Row]:
        store = tmp / "s"
        p = cli(store, *FAST, override, timeout=120)
        said = [s for s in must_say if s not in p.stderr]
        row = Row(name, "rejected")
        row.observed = "rejected" if p.returncode != 0 else f"exit {p.returncode}"
        row.complete = "n/a" if not list(store.glob("*/record.json")) and not said else "no"
        row.detail = f"exit {p.returncode}; " + (f"message lacks {said}" if said else "message names it and what is allowed")
        return [row]
    return case


def bad_values(name: str, overrides: tuple[str, ...], must_say: tuple[str, ...]):
    def case(tmp: Path) -> list[Row]:
        store = tmp / "s"
        p = cli(store, *FAST, *overrides, timeout=180)
        rec, why = one_record(store)
        problems = [f"reason lacks {s!r}" for s in must_say if rec and s not in (rec.get("reason") or "")]
        if p.returncode == 0:
            problems.append("exit 0")
        if rec and rec.get("measurements"):
            problems.append("measured something: device work happened")
        return [judge(Row(name, "failed", detail=why), rec, extra_problems=problems)]
    return case


def exceptions_and_nan(tmp: Path) -> list[Row]:
    """One sweep, four points: an exception and a NaN loss, in warm-up (step 1) and in the timed window."""
    store = tmp / "s"
    p = cli(store, "-m", *FAST, "fault.kind=exception,nan_loss", f"fault.at_step=1,{WARMUP_STEPS + 1}", timeout=400)
    by = {(r.config["fault"]["kind"], r.config["fault"]["at_step"]): r.to_dict() for r in load_records(store)}
    rows = []
    for kind, step, label in (("exception", 1, "exception in warm-up"), ("exception", WARMUP_STEPS + 1, "exception in timed window"),
                              ("nan_loss", 1, "NaN loss in warm-up"), ("nan_loss", WARMUP_STEPS + 1, "NaN loss in timed window")):
        rec = by.get((kind, step))
        if kind == "exception":
            extra = [] if rec and (store / rec["run_id"] / "traceback.txt").is_file() else ["no traceback.txt"]
            rows.append(judge(Row(label, "failed"), rec, extra_problems=extra))
        else:
            phase = "warmup" if step < WARMUP_STEPS else "timed"
            m = (rec or {}).get("measurements", {})
            extra = [] if (m.get("diverged_at_step"), m.get("diverged_phase")) == (step, phase) else \
                [f"diverged_at_step={m.get('diverged_at_step')} phase={m.get('diverged_phase')}, expected {step} {phase}"]
            r = judge(Row(label, "diverged"), rec, extra_problems=extra)
            if r.complete == "yes":
                r.detail = f"stopped, diverged_at_step={step} ({phase})"
            rows.append(r)
    if p.returncode != 1:
        rows[0].complete, rows[0].detail = "no", f"sweep exit {p.returncode}, expected 1"
    return rows


def oom_sweep(tmp: Path) -> list[Row]:
    """Batch 4M of MNIST-sized inputs (12 GiB per batch) under a 7 GiB address-space cap, then batch 8."""
    store = tmp / "s"
    huge = 1 << 22
    p = cli(store, "-m", *FAST, "model=mlp", "data=synthetic_mnist", f"data.batch_size={huge},8", timeout=300,
            preexec_fn=cap_address_space())
    by = {r.config["data"]["batch_size"]: r.to_dict() for r in load_records(store)}
    r1 = judge(Row("out of memory (batch 4194304)", "oom"), by.get(huge),
               need=("batch_size_per_device", "host_peak_rss_gib", "host_rss_gib", "host_address_space_limit_gib"))
    if r1.complete == "yes":
        m = by[huge]["measurements"]
        r1.detail = (f"batch {m['batch_size_per_device']}, peak RSS {m['host_peak_rss_gib']:.2f} GiB, "
                     f"cap {m['host_address_space_limit_gib']:.1f} GiB")
    r2 = judge(Row("next sweep point after the OOM", "ok"), by.get(8), need=("throughput_samples_per_s",))
    if r2.complete == "yes":
        r2.detail = f"batch 8 ran after it: {by[8]['measurements']['throughput_samples_per_s']:.0f} samples/s"
    if p.returncode != 1:
        r2.complete, r2.detail = "no", f"sweep exit {p.returncode}, expected 1 (a point failed)"
    return [r1, r2]


def baseline_vm_gib() -> float:
    """Address space a process maps once torch and the worker are imported (~4.4 GiB for the CUDA build)."""
    code = "import psutil, xbench.bench.worker; print(psutil.Process().memory_info().vms / 2**30)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env(), cwd=REPO)
    return float(p.stdout.strip().splitlines()[-1])


def find_max_batch(tmp: Path) -> list[Row]:
    """The explicit search under a cap of (baseline + 0.5 GiB), so that the trials stay small: a wide
    one-layer MLP over 4 features, whose activations (not its data or weights) grow with the batch."""
    store = tmp / "s"
    cap = baseline_vm_gib() + 0.5
    p = cli(store, *FAST, "bench.mode=find_max_batch", "model=mlp", "model.options.hidden=8192", "model.options.depth=1",
            "data.modality=features", "data.num_features=4", "data.num_classes=2", "data.synthetic_batches=1",
            "data.batch_size=256", "bench.max_batch_rtol=0.25", timeout=400, preexec_fn=cap_address_space(cap))
    rec, why = one_record(store)
    row = judge(Row("find_max_batch (explicit search)", "ok", detail=why), rec,
                need=("max_batch_size_per_device", "min_failing_batch_size_per_device", "batch_search_trials"))
    if rec and row.complete == "yes":
        m = rec["measurements"]
        t = m["batch_search_trials"]
        fits = {x["batch_size"]: x["fits"] for x in t}
        problems = []
        if not (fits.get(m["max_batch_size_per_device"]) and fits.get(m["min_failing_batch_size_per_device"]) is False):
            problems.append("best/first-failing trials disagree with the result")
        if any(f and b > m["max_batch_size_per_device"] for b, f in fits.items()):
            problems.append("a larger batch fitted")
        if rec["config"]["data"]["batch_size"] != 256:
            problems.append("the configured batch changed")
        row.complete = "no" if problems else "yes"
        row.detail = "; ".join(problems) or (f"max {m['max_batch_size_per_device']}, fails at "
                                             f"{m['min_failing_batch_size_per_device']}, {len(t)} trials, "
                                             f"{m['batch_search_s']:.0f} s")
    if p.returncode != 0 and row.complete == "yes":
        row.complete, row.detail = "no", f"exit {p.returncode}"
    return [row]


def sigterm_warmup(tmp: Path) -> list[Row]:
    """SIGTERM (a preempted spot machine) at warm-up step 1, W&B offline: interrupted + W&B preempted."""
    from xbench.sinks.wandb_files import read_offline_run

    store = tmp / "s"
    args = [a for a in FAST if a != "logger=none"] + ["logger=wandb", "fault.kind=sigterm", "fault.at_step=1"]
    p = cli(store, *args, timeout=300)
    rec, why = one_record(store)
    extra = [] if p.returncode == 130 else [f"exit {p.returncode}, expected 130"]
    if rec:
        m = rec["measurements"]
        if m.get("phase") != "warmup" or m.get("warmup_steps") != 2:
            extra.append(f"phase={m.get('phase')} warmup_steps={m.get('warmup_steps')}, expected warmup 2")
        try:
            run = read_offline_run(rec["artifacts"]["wandb_offline_dir"])
            if not run["preempting"] or run["exit_code"] != 255 or run["summary"].get("status") != "interrupted":
                extra.append(f"W&B run: preempting={run['preempting']} exit_code={run['exit_code']}")
        except Exception as e:
            extra.append(f"W&B offline run unreadable: {e}")
    row = judge(Row("SIGTERM in warm-up (W&B offline)", "interrupted", detail=why), rec, extra_problems=extra)
    if row.complete == "yes":
        row.detail = "phase warmup, 2 steps kept; W&B run marked preempted, exit 255"
    return [row]


def sigint_timed(tmp: Path) -> list[Row]:
    """SIGINT from outside once the timed window is running (its progress bar has appeared)."""
    store = tmp / "s"
    args = [a for a in FAST if not a.startswith(("bench.steps=", "logger.progress="))] + ["bench.steps=100000"]
    w = Watched(store, *args)
    started = w.wait_for("timed steps")
    w.p.send_signal(signal.SIGINT)
    rc = w.finish()
    rec, why = one_record(store)
    extra = [] if started else ["the timed window never started"]
    extra += [] if rc == 130 else [f"exit {rc}, expected 130"]
    if rec and rec["measurements"].get("phase") != "timed":
        extra.append(f"phase={rec['measurements'].get('phase')}")
    row = judge(Row("SIGINT in timed window", "interrupted", detail=why), rec,
                need=("timed_steps", "warmup_steps", "throughput_samples_per_s_partial", "timed_step_times_s"),
                extra_problems=extra)
    if row.complete == "yes":
        m = rec["measurements"]
        row.detail = f"{m['timed_steps']} timed steps kept, {m['throughput_samples_per_s_partial']:.0f} samples/s so far"
    return [row]


def hang_args(at_step: int, *extra: str) -> list[str]:
    """The CLI overrides of a run whose step `at_step` hangs (no progress bar: its output is watched)."""
    return [a for a in FAST if not a.startswith("logger.progress=")] + ["fault.kind=hang", f"fault.at_step={at_step}",
                                                                       *extra]


def sigterm_until_exit(w: Watched) -> tuple[int, float]:
    """SIGTERM to the run, then its exit status and the seconds it took to exit."""
    t0 = time.monotonic()
    w.p.send_signal(signal.SIGTERM)
    rc = w.finish(60)
    return rc, time.monotonic() - t0


def second_signal(tmp: Path) -> list[Row]:
    """A step that hangs; SIGTERM once (the run waits for the step), then again: it exits at once."""
    store = tmp / "s"
    w = Watched(store, *hang_args(WARMUP_STEPS + 1, "bench.stop_grace_s=600"))
    started = w.wait_for("timed steps")
    time.sleep(0.5)
    w.p.send_signal(signal.SIGTERM)
    got_first = w.wait_for("SIGTERM received", 60)
    rc, dt = sigterm_until_exit(w)
    rec, why = one_record(store)
    extra = [x for x, bad in (("the timed window never started", not started),
                              ("no message after the first signal", not got_first),
                              (f"exit {rc}, expected 143", rc != 143),
                              (f"took {dt:.1f} s to exit", dt > 10)) if bad]
    if rec and "second SIGTERM" not in (rec.get("reason") or ""):
        extra.append(f"reason {rec.get('reason')!r}")
    row = judge(Row("second signal during a hung step", "interrupted", detail=why), rec, extra_problems=extra)
    if row.complete == "yes":
        row.detail = f"exited {dt:.2f} s after the second SIGTERM (exit 143)"
    return [row]


def hung_step_grace(tmp: Path) -> list[Row]:
    """A hung step and ONE SIGTERM: after bench.stop_grace_s the record is written and the run exits."""
    store = tmp / "s"
    w = Watched(store, *hang_args(1, "bench.stop_grace_s=2"))
    started = w.wait_for("warm-up")
    time.sleep(0.5)
    rc, dt = sigterm_until_exit(w)
    rec, why = one_record(store)
    extra = [x for x, bad in (("warm-up never started", not started), (f"exit {rc}, expected 143", rc != 143),
                              (f"took {dt:.1f} s, grace is 2 s", not 1.5 < dt < 15)) if bad]
    row = judge(Row("hung step, one SIGTERM (grace 2 s)", "interrupted", detail=why), rec, extra_problems=extra)
    if row.complete == "yes":
        row.detail = f"exited {dt:.1f} s after SIGTERM"
    return [row]


def killed(tmp: Path) -> list[Row]:
    """SIGKILL cannot be caught: the record written at start stays, readable, status running."""
    store = tmp / "s"
    w = Watched(store, *hang_args(1))
    w.wait_for("warm-up")
    w.p.kill()
    w.finish(60)
    rec, why = one_record(store)
    row = judge(Row("SIGKILL (cannot be caught)", "running", detail=why), rec)
    if row.complete == "yes":
        row.detail = "the record written at start remains, valid, status running"
    return [row]


def wandb_outage(tmp: Path) -> list[Row]:
    """Online mode, service unreachable (a closed local port), fake key: offline within the timeout."""
    from xbench.sinks.wandb_files import read_offline_run

    store = tmp / "s"
    with socket.socket() as s:  # a port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    timeout_s = 3
    args = [a for a in FAST if a != "logger=none"] + ["logger=wandb", "logger.wandb.mode=online",
                                                      f"logger.wandb.init_timeout_s={timeout_s}"]
    p = cli(store, *args, timeout=300, env=env(WANDB_MODE="online", WANDB_BASE_URL=f"http://127.0.0.1:{port}",
                                                 WANDB_API_KEY="x" * 40))
    rec, why = one_record(store)
    extra = [] if p.returncode == 0 else [f"exit {p.returncode}"]
    extra += [] if "wandb sync" in p.stderr else ["no `wandb sync` hint on the console"]
    fb = None
    if rec:
        a = rec["artifacts"]
        fb = a.get("wandb_online_fallback_s")
        if a.get("wandb_mode") != "offline" or fb is None or fb > timeout_s + 10:
            extra.append(f"wandb_mode={a.get('wandb_mode')} fallback_s={fb}")
        try:
            run = read_offline_run(a["wandb_offline_dir"])
            if len(run["history"]) != len(rec["series"].get("step", [])):
                extra.append("offline run lacks the series")
        except Exception as e:
            extra.append(f"offline run unreadable: {e}")
    row = judge(Row("W&B unreachable (online mode)", "ok", detail=why), rec,
                need=("throughput_samples_per_s",), extra_problems=extra)
    if row.complete == "yes":
        row.detail = f"offline after {fb:.1f} s (init_timeout_s={timeout_s}); sync hint printed"
    return [row]


def secrets(tmp: Path) -> list[Row]:
    """Fake secrets in the environment and on the command line; a failing point of a sweep (traceback),
    W&B offline; then every file under the store and the console are searched for the values."""
    store = tmp / "s"
    args = [a for a in FAST if a != "logger=none"] + ["logger=wandb", f"+db_password={CLI_SECRET}",
                                                      "fault.kind=exception", "fault.at_step=1"]
    p = cli(store, "-m", *args, timeout=300, env=env(**SECRETS))
    rec, why = one_record(store)
    values = [*SECRETS.values(), CLI_SECRET]
    leaks, files = [], 0
    for f in sorted(Path(store).rglob("*")):
        if f.is_file():
            files += 1
            data = f.read_bytes()
            leaks += [f"{f.relative_to(store)}" for v in values if v.encode() in data]
    leaks += [f"console: {v[:10]}..." for v in values if v in p.stdout + p.stderr]
    extra = [f"leaks: {', '.join(sorted(set(leaks)))}"] if leaks else []
    if rec and not (store / rec["run_id"] / "traceback.txt").is_file():
        extra.append("no traceback to search")
    if rec and not rec["artifacts"].get("wandb_offline_dir"):
        extra.append("no W&B files to search")
    if rec and rec["config"].get("db_password") != "<redacted>":
        extra.append("the secret override is not marked <redacted> in the record")
    row = judge(Row("secrets planted (env + override)", "failed", detail=why), rec, extra_problems=extra)
    if row.complete == "yes":
        row.detail = f"0 leaks in {files} files + console"
    return [row]


def concurrency(tmp: Path) -> list[Row]:
    """Three CLI processes at once into one store, and a reader loading the store all the while."""
    store = tmp / "s"
    procs = [subprocess.Popen(cmd(store, *FAST, f"bench.seed={i}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env(), cwd=REPO) for i in range(3)]
    reads, errors = 0, []
    while any(p.poll() is None for p in procs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                load_records(store, on_error="warn")
                reads += 1
            except Exception as e:
                errors.append(repr(e))
            errors += [str(w.message) for w in caught]
        time.sleep(0.05)
    for p in procs:
        p.communicate()
    recs = [r.to_dict() for r in load_records(store)]
    statuses = sorted({r["status"] for r in recs})
    row = Row("3 runs at once into one store + a reader", "ok")
    row.observed = statuses[0] if len(statuses) == 1 else "/".join(statuses)
    ids = {r["run_id"] for r in recs}
    problems = [x for x, bad in ((f"{len(recs)} records", len(recs) != 3), ("duplicate run ids", len(ids) != len(recs)),
                                 (f"reader errors: {errors[:2]}", bool(errors)),
                                 ("a process failed", any(p.returncode for p in procs))) if bad]
    row.complete = "no" if problems else "yes"
    row.detail = "; ".join(problems) or f"3 distinct run ids; {reads} clean reads during the runs"
    return [row]


DDP_TIMEOUT_S = 15


def distributed_faults(tmp: Path) -> list[Row]:
    """Two gloo ranks; rank 1 raises, or hangs, at its 3rd step. Either way the whole job ends within
    a bound (the collective timeout plus the launcher's teardown) with the failure in the record."""
    rows = []
    for kind, label in (("exception", "rank 1 dies (DDP, 2 ranks)"), ("hang", "rank 1 hangs (DDP, 2 ranks)")):
        store = tmp / kind
        t0 = time.monotonic()
        p = cli(store, *FAST, "parallel=ddp", "parallel.world_size=2", f"parallel.timeout_s={DDP_TIMEOUT_S}",
                f"fault.kind={kind}", "fault.rank=1", "fault.at_step=2", timeout=300)
        took = time.monotonic() - t0
        rec, why = one_record(store)
        bound = DDP_TIMEOUT_S + 120  # collective timeout + start-up and teardown of two ranks
        problems = [] if p.returncode == 1 else [f"exit {p.returncode}"]
        if took > bound:
            problems.append(f"took {took:.0f} s > {bound} s")
        if rec and not rec.get("ranks"):
            problems.append("no per-rank failure in the record")
        row = judge(Row(label, "failed", detail=why), rec, extra_problems=problems)
        if row.complete == "yes":
            row.detail = f"ended in {took:.0f} s (bound {bound} s): {(rec.get('reason') or '')[:60]}"
        rows.append(row)
    return rows


def corrupt_store(tmp: Path) -> list[Row]:
    """A truncated record and a stray temp file in a store: readers skip them with a warning."""
    store = tmp / "s"
    (store / "a").mkdir(parents=True)
    (store / "a" / "record.json").write_text('{"run_id": "a", "status": "o')
    (store / "b").mkdir()
    (store / "b" / ".record.json.x.tmp").write_text("{")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = load_records(store)
    row = Row("truncated record in the store", "skipped")
    row.observed = "skipped" if not recs and any("a/record.json" in str(w.message) for w in caught) else "read"
    row.complete = "n/a"
    row.detail = f"{len(caught)} warning naming the file; 0 records"
    return [row]


CASES = [  # (case, in --short)
    (compose_error("unknown group option (model=nosuch)", "model=nosuch", ("nosuch", "Available options", "cnn_small")), True),
    (compose_error("misspelled key (data.batchsize)", "data.batchsize=3", ("batchsize", "did you mean 'data.batch_size'")), True),
    (compose_error("wrong type (data.batch_size=abc)", "data.batch_size=abc", ("abc", "takes a whole number")), False),
    (compose_error("unknown platform (platform=nosuch)", "platform=nosuch", ("platform/nosuch", "tpu_v3_8")), False),
    (bad_values("negative batch size", ("data.batch_size=-4",), ("data.batch_size must be a positive",)), False),
    (bad_values("fp16 on CPU", ("precision=amp_fp16", "platform=cpu"), ("amp_fp16", "needs a CUDA GPU", "amp_bf16")), False),
    (bad_values("missing data path", ("data.path=/nonexistent/cifar",), ("/nonexistent/cifar", "does not exist")), False),
    (bad_values("bad values together (batch -4, fp16 on CPU, missing path)",
                ("data.batch_size=-4", "precision=amp_fp16", "platform=cpu", "data.path=/nonexistent/cifar"),
                ("data.batch_size must be a positive", "needs a CUDA GPU", "does not exist")), True),
    (exceptions_and_nan, True),
    (oom_sweep, True),
    (find_max_batch, True),
    (sigterm_warmup, True),
    (sigint_timed, True),
    (second_signal, True),
    (hung_step_grace, False),
    (killed, False),
    (wandb_outage, True),
    (secrets, True),
    (concurrency, True),
    (distributed_faults, False),
    (corrupt_store, True),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="the subset run by the test suite")
    ap.add_argument("--jobs", type=int, default=2, help="faults run side by side")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--keep", type=Path, help="keep each fault's store under this folder")
    ap.add_argument("--only", help="run only the cases whose function name contains this")
    a = ap.parse_args()
    cases = [c for c, short in CASES if (short or not a.short) and (not a.only or a.only in c.__name__)]
    base = Path(a.keep or tempfile.mkdtemp(prefix="xbench-drill-"))
    t0 = time.monotonic()

    def go(i_case):
        i, case = i_case
        tmp = base / f"{i:02d}-{case.__name__}"
        tmp.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        try:
            rows = case(tmp)
        except Exception as e:  # a drill bug or a hang is a failed row, not a crashed drill
            rows = [Row(case.__name__, "?", f"drill error: {type(e).__name__}", "no", str(e)[:100])]
        for r in rows:
            r.seconds = time.monotonic() - t  # the whole case (a sweep gives several rows)
        return rows

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = [r for rs in pool.map(go, enumerate(cases)) for r in rs]
    w = max(len(r.fault) for r in rows)
    print(f"\n{'fault':<{w}}  {'expected':<11} {'observed':<11} {'complete':<8} {'case s':>6}  detail")
    print("-" * (w + 53))
    for r in rows:
        mark = "" if r.ok else "   <-- MISMATCH"
        print(f"{r.fault:<{w}}  {r.expected:<11} {r.observed:<11} {r.complete:<8} {r.seconds:6.0f}  {r.detail}{mark}")
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} faults behaved as expected in {time.monotonic() - t0:.0f} s"
          + (f" (stores kept under {base})" if a.keep else ""))
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps([{**r.__dict__, "ok": r.ok} for r in rows], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
