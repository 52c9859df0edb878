"""Weights & Biases sink: config, per-step series and summary, with group and tags.

Called after the measurement (never during a timed window: W&B's service process would compete for
the cores being measured). Never fails a run: any W&B error becomes one console line and a note in
the record, and the local record is already on disk by then.

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

from xbench.extras import message
from xbench.records.record import RunRecord
from xbench.records.redact import redact, redact_argv
from xbench.wandb_env import has_credentials

# What the record's status means to W&B's run state.
_EXIT_CODES = {"ok": 0, "failed": 1, "oom": 1, "diverged": 1, "interrupted": 255}
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


def group_and_tags(record: RunRecord, wcfg: dict) -> tuple[str, list[str]]:
    c = record.config
    group = wcfg.get("group") or record.experiment or f"{c['model']['name']}-{c['data']['name']}"
    tags = [f"{k}:{c[k]['name']}" for k in ("platform", "runtime", "precision", "parallel", "model", "data")]
    tags += list(wcfg.get("tags") or []) + list(c.get("tags") or [])
    return group, tags


@contextlib.contextmanager
def redacted_argv():
    """W&B copies sys.argv into the run's metadata ("args"): let it see the redacted command line."""
    saved = sys.argv
    sys.argv = redact_argv(saved)
    try:
        yield
    finally:
        sys.argv = saved


def flat_summary(record: RunRecord) -> dict:
    out = {"status": record.status, "reason": record.reason, "run_id": record.run_id}
    for src in (record.measurements, record.derived):
        for k, v in src.items():
            if isinstance(v, (int, float, str, bool)) or v is None:
                out[k] = v
    return out


def upload_profile(wandb, run, record: RunRecord, run_dir: Path) -> None:
    """The profile files the record names (`profile_*` in record.artifacts, bench.profile) as one W&B
    artifact of type `profile`, laid out as in the run folder."""
    paths = [Path(run_dir) / rel for key, rel in record.artifacts.items() if key.startswith("profile_")]
    paths = [p for p in paths if p.exists()]
    if not paths:
        return
    artifact = wandb.Artifact(f"profile-{record.run_id}", type="profile")
    for p in paths:
        (artifact.add_dir if p.is_dir() else artifact.add_file)(str(p), name=str(p.relative_to(run_dir)))
    run.log_artifact(artifact)


class WandbSink:
    def __init__(self, wcfg: dict, say=print):
        self.wcfg = wcfg
        self.say = say
        self.fallback_s: float | None = None  # seconds lost to an unreachable online service
        self.skipped_online: str | None = None  # online not tried: the host failed earlier in this process

    def publish(self, record: RunRecord, run_dir: Path) -> dict:
        """Log the record; return what to keep in record.artifacts (mode, run path, offline dir)."""
        try:
            with redacted_argv():
                return self._publish(record, run_dir)
        except Exception as e:  # W&B trouble never fails a run
            self.say(f"W&B: skipped ({type(e).__name__}: {e}); the local record is complete")
            return {"wandb_mode": "error", "wandb_error": f"{type(e).__name__}: {e}"}

    def _publish(self, record: RunRecord, run_dir: Path) -> dict:
        mode = resolve_mode(self.wcfg.get("mode", "auto"))
        if mode == "disabled":
            return {"wandb_mode": "disabled"}
        try:
            import wandb
        except ImportError:
            self.say(f"W&B: skipped, the local record is complete ({message('logging to W&B', 'wandb')}; "
                     "or logger=none)")
            return {"wandb_mode": "unavailable", "wandb_error": "wandb not installed"}
        os.environ.setdefault("WANDB_SILENT", "true")
        wdir = Path(self.wcfg.get("dir") or run_dir)
        wdir.mkdir(parents=True, exist_ok=True)
        group, tags = group_and_tags(record, self.wcfg)
        kwargs = dict(project=self.wcfg.get("project", "xbench"), entity=self.wcfg.get("entity"),
                      group=group, tags=tags, name=record.run_id,
                      config={**redact(record.config), "xbench_version": record.env.get("xbench_version")},
                      dir=str(wdir), job_type=record.config.get("bench", {}).get("mode", "throughput"),
                      reinit="create_new")
        try:
            run = self._init(wandb, mode, kwargs)
        except Exception as e:  # W&B trouble never fails a run
            self.say(f"W&B: could not start a run ({type(e).__name__}: {e}); the local record is complete")
            return {"wandb_mode": mode, "wandb_error": f"{type(e).__name__}: {e}"}
        try:
            s = record.series
            per_sample = record.measurements.get("global_batch_size")
            for i, step in enumerate(s.get("step", [])):
                row = {k: s[k][i] for k in ("loss", "step_time_s") if k in s}
                row["phase_timed"] = int(s["phase"][i] == "timed")
                if per_sample and row.get("step_time_s"):
                    row["step_throughput_samples_per_s"] = per_sample / row["step_time_s"]
                run.log(row, step=step)
            run.summary.update(redact(flat_summary(record)))
            upload_profile(wandb, run, record, run_dir)
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
        offline = sorted(wdir.glob(f"wandb/offline-run-*-{run.id}"))
        if offline:
            out["wandb_offline_dir"] = str(offline[-1])
            self.say(f"W&B: offline (no credentials, no network or WANDB_MODE=offline); "
                     f"upload later with: wandb sync {offline[-1]}")
        return out

    def _init(self, wandb, mode: str, kwargs: dict):
        timeout = float(self.wcfg.get("init_timeout_s", 30))
        # console="off": W&B would otherwise copy this process's console output into the run files.
        if mode == "online" and _base_url() in _UNREACHABLE:
            self.skipped_online = _UNREACHABLE[_base_url()]
            self.say(f"W&B: {_base_url()} did not answer earlier in this process ({self.skipped_online}); offline")
        elif mode == "online":
            t0 = time.monotonic()
            try:
                with contextlib.redirect_stderr(io.StringIO()), _no_error_reports():
                    run = wandb.init(mode="online", settings=wandb.Settings(init_timeout=timeout, console="off"),
                                     **kwargs)
                self.mode_used = "online"
                return run
            except Exception as e:
                self.fallback_s = time.monotonic() - t0
                _UNREACHABLE[_base_url()] = f"init failed after {self.fallback_s:.1f} s: {type(e).__name__}"
                self.say(f"W&B: online init failed after {self.fallback_s:.1f} s (init_timeout_s={timeout:g}; "
                         f"{type(e).__name__}); falling back to offline")
        run = wandb.init(mode="offline", settings=wandb.Settings(console="off"), **kwargs)
        self.mode_used = "offline"
        return run
