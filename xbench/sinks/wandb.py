"""Weights & Biases sink: config (with hardware, versions and the environment), figures as they are measured,
the per-step series, the summary, and the record itself as an artifact.

Every mode opens its W&B run before measuring (`start`) and logs as it goes, never inside a timed window:
a throughput run logs each window once it has closed (`log_window`, fed from rank 0's windows file, which
waits for the line to be logged before its next window), a train-to-target run each evaluation point
(`log_point`, from its curve file, outside any training segment). W&B's own system sampling is off
(`x_disable_stats`): it would take the cores being measured; xbench samples utilisation itself and logs it.
`publish` then logs the per-step series, the summary (status, reason, warnings, CIs, per-GPU utilisation,
every scalar figure), uploads `record.json` (and `mlperf.log`, the profile) as artifacts and finishes. Never
fails a run: any W&B error becomes one console line and a note in the record, and the local record is already
on disk by then.

Modes: `auto` is online when credentials are present, else offline (`wandb sync` uploads later);
online with the service unreachable falls back to offline after `init_timeout_s`. That costs bounded
time once: W&B's own error reporting (which would retry the dead host for ~24 s at exit) is off during
the online attempt unless WANDB_ERROR_REPORTING is set, and a host that did not answer is remembered,
so the later points of a sweep go offline at once.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from pathlib import Path

from xbench.analysis.frame import flatten
from xbench.analysis.wandb_source import wandb_records
from xbench.analysis.workload import CONFIGURATION, configuration_label
from xbench.extras import message
from xbench.metrics import utilisation
from xbench.records import batch_trials
from xbench.records.record import SAMPLE_LISTS, RunRecord
from xbench.records.redact import redact, redact_argv
from xbench.sinks import sweep
from xbench.wandb_env import has_credentials

# console off: W&B would copy this process's console output into the run files; stats off: its system
# sampling would run beside the timed windows (xbench samples utilisation itself and logs it); requirements
# off: W&B would parse every installed package's metadata for its pip list at init (0.1-0.4 s), and the
# record's env (W&B config `env.packages`) already has the versions that matter.
SETTINGS = {"console": "off", "x_disable_stats": True, "x_save_requirements": False}
# What the record's status means to W&B's run state.
_EXIT_CODES = {"ok": 0, "failed": 1, "oom": 1, "diverged": 1, "interrupted": 255}
GROUP_MAX = 128
# A closed window's per-step rows are logged while rank 0 waits for the line's ack (at most 2 s,
# modes/throughput.py window_log) before its next window: past this budget the rest go at the end.
LIVE_STEPS_BUDGET_S = 1.0
# W&B hosts that did not answer in this process (base URL -> what happened): not tried again.
_UNREACHABLE: dict[str, str] = {}


def _base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai"


@contextlib.contextmanager
def _no_error_reports():
    """W&B reports its own errors to the same host at exit (two HTTP posts, 10 s timeout each): off for
    the online attempt, unless the user set WANDB_ERROR_REPORTING."""
    if "WANDB_ERROR_REPORTING" in os.environ:
        yield
        return
    os.environ["WANDB_ERROR_REPORTING"] = "false"
    try:
        yield
    finally:
        os.environ.pop("WANDB_ERROR_REPORTING", None)


def resolve_mode(mode: str) -> str:
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled", "dryrun"):
        return "offline" if env == "dryrun" else env
    if mode == "auto":
        return "online" if has_credentials() else "offline"
    return mode


def run_name(record: RunRecord) -> str:
    """What the run is, as its W&B name: model, platform, runtime, precision, strategy and batch per device
    (`resnet50 aws_p3_8xlarge compile amp_fp16 ddp x4 b64`); the run id stays in the config and summary."""
    c = record.config
    names = [
        str((c.get(k) or {}).get("name")) for k in ("model", "platform", "runtime", "precision", "parallel")
    ]
    world = (c.get("parallel") or {}).get("world_size") or 1
    return (
        " ".join(names) + (f" x{world}" if world > 1 else "") + f" b{(c.get('data') or {}).get('batch_size')}"
    )


def sweep_group() -> str | None:
    """The Hydra sweep this run is a point of, by its folder (hydra.sweep.dir: one per `-m` command, shared by
    its points, also in SLURM jobs); None outside a sweep."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return f"sweep {HydraConfig.get().sweep.dir}"[-GROUP_MAX:]  # W&B takes up to 128 characters
    except Exception:  # Hydra absent (the Python API) or its internals differ: no sweep group
        return None
    return None


def study_of(preset: str | None) -> str | None:
    """The study (1-5) a preset reruns, from studies.yaml; None for the presets that are not studies."""
    if not preset:
        return None
    try:
        from xbench import studies

        return next(
            (str(s["study"]) for s in studies.all_studies() if s.get("preset") == preset and s.get("study")),
            None,
        )
    except Exception:  # the manifest is the analysis side's: a tag is never worth failing a run
        return None


def group_and_tags(record: RunRecord, wcfg: dict) -> tuple[str, list[str]]:
    """The W&B group (logger.group, else the sweep's folder, else the preset, else model-data) and the tags:
    each config choice, the preset and its study, the mode, and the user's (logger.tags, the config's
    tags)."""
    c = record.config
    group = (wcfg.get("group") or sweep_group() or record.experiment
             or f"{c['model']['name']}-{c['data']['name']}")
    tags = [f"{k}:{c[k]['name']}" for k in ("platform", "runtime", "precision", "parallel", "model", "data")]
    tags.append(f"mode:{(c.get('bench') or {}).get('mode', 'throughput')}")
    if record.experiment:
        tags.append(f"preset:{record.experiment}")
        study = study_of(record.experiment)
        if study:
            tags.append(f"study:{study}")
    tags += list(wcfg.get("tags") or []) + list(c.get("tags") or [])
    return group, tags


@contextlib.contextmanager
def _no_pandas_probe():
    """W&B asks of every summary value that is not a plain scalar (None, a list) whether it is a pandas
    DataFrame, importing pandas to ask: 0.45 s of every run's end here. With pandas not imported no value can
    be one, so the question is answered from the type's name, without the import."""
    util = sys.modules.get("wandb.util")
    if util is None or "pandas" in sys.modules or not getattr(util, "pd_available", False):
        yield
        return
    util.pd_available = False
    try:
        yield
    finally:
        util.pd_available = True


@contextlib.contextmanager
def _no_field_docstrings():
    """W&B's settings and artifacts are pydantic models that read each field's docstring from their source
    (use_attribute_docstrings), and pydantic finds a class's source with inspect.getmodule, which walks every
    loaded module per class: with torch's thousands loaded, 1.2-1.9 s of a run's `import wandb` (2.1-3.4 ->
    0.95-1.5 s without, at load 10 on 2 cores), for help texts a run never shows. While W&B is imported and
    its run opened here, no field docstrings are read (they are read again after)."""
    try:
        from pydantic._internal import _fields
    except ImportError:  # no pydantic (no W&B either), or another layout: nothing to skip
        yield
        return
    read = getattr(_fields, "extract_docstrings_from_cls", None)
    if read is None:
        yield
        return
    _fields.extract_docstrings_from_cls = lambda cls, use_inspect=False: {}
    try:
        yield
    finally:
        _fields.extract_docstrings_from_cls = read


SERVICE_POLL_S = 0.005  # how often the wandb-core start is looked for (W&B's own: every 0.2 s)


@contextlib.contextmanager
def _quick_service_poll():
    """W&B starts its service process (wandb-core) and reads the port file it writes, looking every 0.2 s:
    wandb-core listens 2-10 ms after its start here, so every run waited ~0.2 s for the next look. While the
    run is opened here, it looks every SERVICE_POLL_S (W&B's own hook for the sleep, which its tests replace
    too)."""
    try:
        from wandb.sdk.lib.service import service_port_file as port_file
    except ImportError:  # another layout: W&B's own pace
        yield
        return
    sleep = getattr(port_file, "_SLEEP", None)
    if sleep is None:
        yield
        return
    port_file._SLEEP = lambda s: sleep(min(s, SERVICE_POLL_S))
    try:
        yield
    finally:
        port_file._SLEEP = sleep


@contextlib.contextmanager
def _no_launch_probe():
    """wandb.init asks W&B Launch for job inputs staged for the run, importing wandb.sdk.launch to ask (its
    agent, the public API, their pydantic models: 0.4-0.8 s of every run's init here). Inputs are staged only
    by code that imported wandb.sdk.launch; with it not imported there are none, so the question is
    skipped."""
    from wandb.sdk import wandb_run

    ask = getattr(wandb_run.Run, "_detect_and_apply_job_inputs", None)
    if ask is None or "wandb.sdk.launch" in sys.modules:
        yield
        return
    wandb_run.Run._detect_and_apply_job_inputs = lambda self: None
    try:
        yield
    finally:
        wandb_run.Run._detect_and_apply_job_inputs = ask


def _offline_process(wandb) -> None:
    """An offline run's log() still reports W&B's own telemetry (encode times) through the process's W&B
    settings, which say online unless WANDB_MODE does: the first log built OpenTelemetry exporters for
    api.wandb.ai (0.1-0.2 s, inside the first window's logging) and the exit sent to it. xbench's offline
    runs send nothing: the process's W&B settings say offline too (an online run later still says so
    itself)."""
    if os.environ.get("WANDB_MODE") not in ("offline", "dryrun"):
        wandb.setup(wandb.Settings(mode="offline"))


@contextlib.contextmanager
def redacted_argv():
    """W&B copies sys.argv into the run's metadata ("args"): let it see the redacted command line."""
    saved = sys.argv
    sys.argv = redact_argv(saved)
    try:
        yield
    finally:
        sys.argv = saved


def comparison(row: dict) -> str:
    """The config key the W&B Report's bars group by (`comparison`): the configuration the HTML report's
    tables group runs by (analysis/workload.py CONFIGURATION) of a tidy row, every column in order ("-":
    none), so two runs share a bar exactly when they share a table row: "FAKE / cnn_small / - /
    synthetic_cifar10 / ... / 16/device / batch 16 / 1 device / 2 threads"."""
    return " / ".join(configuration_label({k: row.get(k)}, [k], "-") for k in CONFIGURATION)


def bar_key(record: RunRecord) -> str:
    """The record's `comparison`, from the tidy row the report makes of it (analysis/frame.py flatten)."""
    return redact(comparison(flatten(record)))


def env_summary(env: dict) -> dict:
    """Hardware, versions and the environment of a record (record.env) as the W&B config's `env`."""
    cpu, git, t = env.get("cpu") or {}, env.get("git") or {}, env.get("torch") or {}
    acc = t.get("accelerators") or []
    return {
        k: v
        for k, v in {
            "hostname": env.get("hostname"),
            "os": env.get("os"),
            "python": env.get("python"),
            "xbench_version": env.get("xbench_version"),
            "cpu_model": cpu.get("model"),
            "cpu_logical_cores": cpu.get("logical_cores"),
            "cpu_physical_cores": cpu.get("physical_cores"),
            "cpu_affinity_cores": cpu.get("affinity_cores"),
            "memory_gib": cpu.get("memory_gib"),
            "cpu_flags": " ".join(cpu.get("flags") or []) or None,
            "git_revision": git.get("revision"),
            "git_dirty": git.get("dirty"),
            "torch": t.get("torch"),
            "cuda_runtime": t.get("cuda_runtime"),
            "cudnn": t.get("cudnn"),
            "nvidia_driver": t.get("driver"),
            "cpu_capability": t.get("cpu_capability"),
            "accelerators": "; ".join(f"{a.get('index')}: {a.get('name')}" for a in acc) or None,
            "accelerator_count": len(acc),
            "packages": {k: v for k, v in (env.get("packages") or {}).items() if v},
            "environ": env.get("environ") or None,
        }.items()
        if v is not None
    }


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flat_summary(record: RunRecord) -> dict:
    """Every scalar figure, plus what a comparison needs and the record holds as lists: status and reason,
    the warnings, the CIs as low/high, per-GPU utilisation over every rank (`gpu_util_percent/<gpu>`)."""
    out = {"status": record.status, "reason": record.reason, "run_id": record.run_id,
           "warnings": "; ".join(record.warnings) or None, "n_warnings": len(record.warnings)}
    for src in (record.measurements, record.derived):
        for k, v in src.items():
            if isinstance(v, (int, float, str, bool)) or v is None:
                out[k] = v
            elif k in SAMPLE_LISTS and isinstance(v, list) and all(map(_number, v)):
                out[k] = v  # a ratio's or scaling's CI is computed from these (analysis/frame.py)
            elif (
                k.endswith("_ci95_samples_per_s")
                and isinstance(v, list)
                and len(v) == 2
                and all(map(_number, v))
            ):
                stem = k.removesuffix("_ci95_samples_per_s")
                out[f"{stem}_ci95_low_samples_per_s"], out[f"{stem}_ci95_high_samples_per_s"] = v
    by_gpu = utilisation.gpu_util_by_device(record.measurements, record.ranks)
    out.update({f"gpu_util_percent/{d}": v for d, v in by_gpu.items()}, **utilisation.summary(by_gpu))
    return out


RECORD_FILES = ("record.json", "mlperf.log")  # the run's own files, uploaded as its `run-record` artifact


def upload_record(run, record: RunRecord, run_dir: Path) -> None:
    """record.json (as written before W&B added its own keys to it) and mlperf.log, when present, as one
    artifact of type `run-record`: a team that reads runs from W&B gets the whole record."""
    paths = [Path(run_dir) / name for name in RECORD_FILES if (Path(run_dir) / name).is_file()]
    if not paths:
        return
    import wandb  # optional: only reached with a W&B run open

    artifact = wandb.Artifact(f"record-{record.run_id}", type="run-record",
                              metadata={"status": record.status, "schema_version": record.schema_version})
    for p in paths:
        artifact.add_file(str(p), name=p.name)
    run.log_artifact(artifact)


def upload_profile(run, record: RunRecord, run_dir: Path) -> None:
    """The profile files the record names (`profile_*` in record.artifacts, bench.profile) as one W&B
    artifact of type `profile`, laid out as in the run folder."""
    paths = [Path(run_dir) / rel for key, rel in record.artifacts.items() if key.startswith("profile_")]
    paths = [p for p in paths if p.exists()]
    if not paths:
        return
    import wandb  # optional: only reached with a W&B run open

    artifact = wandb.Artifact(f"profile-{record.run_id}", type="profile")
    for p in paths:
        (artifact.add_dir if p.is_dir() else artifact.add_file)(str(p), name=str(p.relative_to(run_dir)))
    run.log_artifact(artifact)


def curve_row(point: dict) -> dict:
    """The numbers of one evaluation point, as W&B history takes them."""
    return {k: v for k, v in point.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


OFFLINE_SETTLE_S = 2.0  # a cut file is one that stopped growing this long without its end


def offline_cut_short(folder: Path, settle_s: float = OFFLINE_SETTLE_S, poll_s: float = 0.05) -> str | None:
    """Why a finished offline run's file is not whole (None: it is): a W&B folder that filled up or stopped
    taking writes cuts the file where the write failed, and wandb-core says nothing (it went on; `wandb sync`
    would upload the part). A whole file ends with the run's exit record. run.finish() can return before
    wandb-core has written the file out (header only, or the history without the end: 1 of 3 sweeps on a
    loaded 2-core machine), so a file without its end is read again until it is whole or has stopped growing
    for `settle_s`."""
    last, still_since = None, time.monotonic()
    while True:
        files = sorted(Path(folder).glob("run-*.wandb"))
        try:
            kinds = [r.WhichOneof("record_type") for r in wandb_records(files[-1])] if files else []
        except Exception as e:  # an unreadable file is not whole either (a half-written record, or worse)
            kinds = [f"unreadable ({type(e).__name__}: {e})"]
        if "exit" in kinds:
            return None
        size = files[-1].stat().st_size if files else 0
        if size != last:
            last, still_since = size, time.monotonic()
        elif time.monotonic() - still_since >= settle_s:
            break
        time.sleep(poll_s)
    return (
        f"the offline run {folder} is cut short ({len(kinds)} records, {size:,} bytes, no end: its folder "
        "filled up or stopped taking writes); `wandb sync` would upload only that part"
    )


class WandbSink:
    def __init__(self, wcfg: dict, say=print):
        self.wcfg = wcfg
        self.say = say
        self.fallback_s: float | None = None  # seconds lost to an unreachable online service
        self.skipped_online: str | None = None  # online not tried: the host failed earlier in this process
        self.run = None  # opened by `start` (live logging) or by `publish`
        self.mode_used: str | None = None
        self.logged_evals: set[int] = set()  # curve points already logged live
        self.windows_logged = 0  # timed windows logged as they closed (throughput)
        self.steps_logged = 0  # per-step rows logged live (throughput): the series' steps below this index
        self.steps_live = True  # off once a window's steps took more than LIVE_STEPS_BUDGET_S to log
        self.live_log_s_max = 0.0  # the longest a closed window's logging took (the rank waits for it)
        self.per_sample: int | None = None  # the global batch, for each step's throughput
        self.tried = False  # a run was opened, or W&B was found off or missing (said once)
        self.live_error: str | None = None

    def start(self, record: RunRecord, run_dir: Path) -> bool:
        """Open the W&B run now, to log as the run goes; False when W&B is off or could not start."""
        try:
            with redacted_argv():
                self.run = self._open(record, run_dir)
        except Exception as e:  # W&B trouble never fails a run
            self.live_error = f"{type(e).__name__}: {e}"
            self.say(f"W&B: could not start a run ({self.live_error}); the local record is complete")
            return False
        return self.run is not None

    def log_point(self, point: dict) -> None:
        """One evaluation point (step = its index on the curve); a failure stops live logging, once."""
        if self.run is None or self.live_error is not None or point.get("eval") in self.logged_evals:
            return
        try:
            self.run.log(curve_row(point), step=int(point["eval"]))
            self.logged_evals.add(int(point["eval"]))
        except Exception as e:
            self.live_error = f"{type(e).__name__}: {e}"
            self.say(f"W&B: live logging stopped ({self.live_error}); the rest is logged at the end")

    def log_window(self, point: dict) -> None:
        """One timed window once it has closed (rank 0's line: window index, its throughput, step time, loss),
        after its steps (and, with the first window, warm-up's) as per-step history rows."""
        if self.run is None or self.live_error is not None:
            return
        try:
            first, timed_from = point.get("steps_first"), point.get("steps_timed_from")
            tp, wall, n = (
                point.get(k) for k in ("window_throughput_samples_per_s", "window_s", "window_steps")
            )
            # the global batch: the window's samples per step
            if self.per_sample is None and tp and wall and n:
                self.per_sample = round(tp * wall / n)
            t0 = time.perf_counter()
            if first is not None and self.steps_live and first == self.steps_logged:
                # each row's optimizer step (a re-measured window is a gap)
                at = point.get("steps_step") or []
                for k, (t, loss) in enumerate(
                    zip(point.get("steps_time_s") or [], point.get("steps_loss") or [])
                ):
                    self.run.log(self._step_row(at[k] if k < len(at) else first + k, loss, t,
                                                timed=first + k >= timed_from))
                    self.steps_logged = first + k + 1
                    if time.perf_counter() - t0 > LIVE_STEPS_BUDGET_S:  # the rest at the end, in order
                        self.steps_live = False
                        break
            self.run.log(curve_row({k: v for k, v in point.items() if not k.startswith("steps_")}))
            self.windows_logged += 1
            self.live_log_s_max = max(self.live_log_s_max, time.perf_counter() - t0)
        except Exception as e:
            self.live_error = f"{type(e).__name__}: {e}"
            self.say(f"W&B: live logging stopped ({self.live_error}); the rest is logged at the end")

    def publish(self, record: RunRecord, run_dir: Path) -> dict:
        """Log the record; return what to keep in record.artifacts (mode, run path, offline dir)."""
        try:
            with redacted_argv():
                return self._publish(record, run_dir)
        except Exception as e:  # W&B trouble never fails a run
            self.say(f"W&B: skipped ({type(e).__name__}: {e}); the local record is complete")
            return {"wandb_mode": "error", "wandb_error": f"{type(e).__name__}: {e}"}

    def _open(self, record: RunRecord, run_dir: Path):
        """A new W&B run for the record (None: W&B disabled or not installed, and said why)."""
        self.tried = True
        mode = resolve_mode(self.wcfg.get("mode", "auto"))
        self.mode_used = mode
        if mode == "disabled":
            return None
        try:
            with _no_field_docstrings():
                import wandb
        except ImportError:
            self.mode_used = "unavailable"
            self.say(f"W&B: skipped, the local record is complete ({message('logging to W&B', 'wandb')}; "
                     "or logger=none)")
            return None
        os.environ.setdefault("WANDB_SILENT", "true")
        wdir = self.wdir = self._dir(run_dir)
        group, tags = group_and_tags(record, self.wcfg)
        config = {
            **redact(record.config),
            "run_id": record.run_id,
            "xbench_version": record.env.get("xbench_version"),
            "comparison": bar_key(record),
            "env": redact(env_summary(record.env)),
        }
        kwargs = dict(project=self.wcfg.get("project", "xbench"), entity=self.wcfg.get("entity"),
                      group=group, tags=tags, name=run_name(record), config=config,
                      dir=str(wdir), job_type=record.config.get("bench", {}).get("mode", "throughput"),
                      reinit="create_new")
        with _no_field_docstrings(), _quick_service_poll():
            run = self._init(wandb, mode, kwargs)
        # Each series against its own x: per-step figures against `step`, windows against `window`.
        run.define_metric("step")
        run.define_metric("window")
        for key in ("loss", "step_time_s", "phase_timed", "step_throughput_samples_per_s"):
            run.define_metric(key, step_metric="step")
        run.define_metric("window_*", step_metric="window")
        return run

    def _dir(self, run_dir: Path) -> Path:
        """Where W&B writes its files: logger.wandb.dir, else the run's folder. One W&B cannot write (its own
        test, os.access: a read-only mount fails it even for root) turns W&B off for the run with the reason:
        W&B itself would put the run in the system's shared temp folder without a word
        (wandb_init.try_create_root_dir)."""
        asked = self.wcfg.get("dir")
        d = Path(asked or run_dir)
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK | os.R_OK):
            raise PermissionError(
                f"{'logger.wandb.dir=' if asked else 'the run folder '}{d} is not writable; W&B is "
                "off for this run (never the system's shared temp folder)"
            )
        return d

    def _log_series(self, run, record: RunRecord) -> None:
        s = record.series
        for row in batch_trials.to_history(record.measurements.get("batch_search_trials")):
            run.log(row)  # find_max_batch: one row per batch tried
        if "phase" not in s:  # a train-to-target curve: the points not logged live, in order
            for i in range(len(s.get("eval", []))):
                self.log_point({k: v[i] for k, v in s.items() if isinstance(v, list) and i < len(v)})
            return
        self.per_sample = record.measurements.get("global_batch_size") or self.per_sample
        for i, step in enumerate(s.get("step", [])):  # the steps not logged live, after those that were
            if i < self.steps_logged:  # counted in the series' rows: its steps skip a re-measured window's
                continue
            run.log(
                self._step_row(
                    step,
                    s["loss"][i] if "loss" in s else None,
                    s["step_time_s"][i] if "step_time_s" in s else None,
                    s["phase"][i] == "timed",
                )
            )

    def _step_row(self, step: int, loss, step_time_s, timed: bool) -> dict:
        row = {"step": step, "phase_timed": int(timed)}
        if loss is not None:
            row["loss"] = loss
        if step_time_s is not None:
            row["step_time_s"] = step_time_s
            if self.per_sample and step_time_s > 0:
                row["step_throughput_samples_per_s"] = self.per_sample / step_time_s
        return row

    def _publish(self, record: RunRecord, run_dir: Path) -> dict:
        run = self.run
        if run is None:
            if self.live_error is not None:  # start() already failed and said so
                return {"wandb_mode": self.mode_used, "wandb_error": self.live_error}
            # start() found W&B off, and said so
            if self.tried and self.mode_used in ("disabled", "unavailable"):
                return {"wandb_mode": self.mode_used,
                        **({"wandb_error": "wandb not installed"} if self.mode_used == "unavailable" else {})}
            try:
                run = self.run = self._open(record, run_dir)
            except Exception as e:  # W&B trouble never fails a run
                self.say(
                    f"W&B: could not start a run ({type(e).__name__}: {e}); the local record is complete"
                )
                return {"wandb_mode": self.mode_used, "wandb_error": f"{type(e).__name__}: {e}"}
            if run is None:
                return {"wandb_mode": self.mode_used,
                        **({"wandb_error": "wandb not installed"} if self.mode_used == "unavailable" else {})}
        self.live_error = None  # what live logging missed is logged now
        live = len(self.logged_evals)
        try:
            self._log_series(run, record)
            if self.live_error is not None:
                raise RuntimeError(self.live_error)
            with _no_pandas_probe():
                run.summary.update(redact(flat_summary(record)))
            # The bar key again from the final record: its measured threads and devices are in
            # the configuration.
            run.config.update({"comparison": bar_key(record)}, allow_val_change=True)
            upload_record(run, record, run_dir)
            upload_profile(run, record, run_dir)
            if record.status == "interrupted":
                with contextlib.suppress(Exception):
                    run.mark_preempting()
            run.finish(exit_code=_EXIT_CODES.get(record.status, 1))
        except Exception as e:
            self.say(f"W&B: logging failed ({type(e).__name__}: {e}); the local record is complete")
            return {"wandb_mode": self.mode_used, "wandb_error": f"{type(e).__name__}: {e}"}
        out = {"wandb_mode": self.mode_used, "wandb_run_path": f"{run.entity}/{run.project}/{run.id}"
               if self.mode_used == "online" else None}
        if self.fallback_s is not None:
            out["wandb_online_fallback_s"] = round(self.fallback_s, 2)
        if self.skipped_online is not None:
            out["wandb_online_skipped"] = self.skipped_online
        if "eval" in record.series:  # train-to-target: how many points went to W&B as they happened
            out["wandb_points_logged_live"] = live
        if self.windows_logged:  # throughput: the windows logged as each closed
            out["wandb_windows_logged_live"] = self.windows_logged
        if self.steps_logged:  # and the per-step rows with them
            out["wandb_steps_logged_live"] = self.steps_logged
        if self.windows_logged:  # the longest wait a window's logging cost between two windows
            out["wandb_live_log_s_max"] = round(self.live_log_s_max, 4)
        offline = sorted(self.wdir.glob(f"wandb/offline-run-*-{run.id}"))
        if offline:
            out["wandb_offline_dir"] = str(offline[-1])
            if (cut := offline_cut_short(offline[-1])) is not None:
                out["wandb_error"] = cut
                self.say(f"W&B: {cut}; the local record is complete")
            elif not sweep.active():  # a sweep says one line for all its points (sinks/sweep.py)
                self.say(f"W&B: offline (no credentials, no network or WANDB_MODE=offline); "
                         f"upload later with: wandb sync {offline[-1]}")
        return out

    def _init(self, wandb, mode: str, kwargs: dict):
        timeout = float(self.wcfg.get("init_timeout_s", 30))
        # console="off": W&B would otherwise copy this process's console output into the run files.
        if mode == "online" and _base_url() in _UNREACHABLE:
            self.skipped_online = _UNREACHABLE[_base_url()]
            self.say(
                f"W&B: {_base_url()} did not answer earlier in this process ({self.skipped_online}); offline"
            )
        elif mode == "online":
            t0 = time.monotonic()
            try:
                with contextlib.redirect_stderr(io.StringIO()), _no_error_reports(), _no_launch_probe():
                    run = wandb.init(mode="online", settings=wandb.Settings(init_timeout=timeout, **SETTINGS),
                                     **kwargs)
                self.mode_used = "online"
                return run
            except Exception as e:
                self.fallback_s = time.monotonic() - t0
                _UNREACHABLE[_base_url()] = f"init failed after {self.fallback_s:.1f} s: {type(e).__name__}"
                self.say(
                    f"W&B: online init failed after {self.fallback_s:.1f} s (init_timeout_s={timeout:g}; "
                    f"{type(e).__name__}); falling back to offline"
                )
        _offline_process(wandb)
        with _no_launch_probe():
            run = wandb.init(mode="offline", settings=wandb.Settings(**SETTINGS), **kwargs)
        self.mode_used = "offline"
        return run
