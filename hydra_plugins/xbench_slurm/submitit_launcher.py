"""`hydra/launcher=slurm`: hydra-submitit-launcher's SLURM launcher, telling the user what happens.

One SLURM job per sweep point, as hydra-submitit-launcher submits them (a job array), plus:
- Before submission, the request is checked against what the partition offers (`sinfo`: CPUs and memory
  of its nodes, its time limit). `cpus_per_task: null` (the default) asks for a whole node of the
  partition's smallest nodes (its CPUs / tasks_per_node): one point per node, as a benchmark wants;
  `mem_gb: null` leaves memory to SLURM's default. A request no node can hold is refused with the
  partition's limits and the keys to set (it would stay pending forever, reason PartitionConfig).
- While waiting: each job's state as it changes, with SLURM's reason for a pending one (`squeue %r`).
  The wait reads `squeue` and the result files, not `sacct`: it works without SLURM's accounting, and a
  job that died without a result is seen as ended (submitit would wait on it forever without sacct).
- When the jobs end: each point's status, headline figure (as the console's summary rounds it, with the kinds
  of the record's warnings: `[noisy, contended]`) and record path (found in the store by the
  record's SLURM_JOB_ID), and for a job that failed or a run that did not succeed, its log's path. A point
  that did not succeed makes the sweep exit non-zero (Hydra reports the first).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from hydra.core.utils import JobReturn, JobStatus

try:  # the xbench[slurm] extra; without it `hydra/launcher=slurm` fails on its submitit_slurm default
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher as submitit_plugin

    Base = submitit_plugin.SlurmLauncher
except ImportError:  # Hydra imports every plugin module at start-up: this one must not fail there
    Base = object

POLL_S = 2.0  # squeue and the result files are read this often while jobs run (a sleep, never a busy loop)
GONE_GRACE_S = 10.0  # a job gone from squeue without a result: waited this long for its files to land
SINFO_TIMEOUT_S = 10.0  # sinfo answers in well under a second when SLURM's controller is up


def say(line: str) -> None:
    print(f"xbench: SLURM: {line}", file=sys.stderr, flush=True)


class Partition(NamedTuple):  # not a dataclass: Hydra's plugin scan runs this module outside sys.modules
    name: str
    cpus: int  # CPUs of its smallest node
    max_cpus: int  # and of its largest
    mem_mb: int  # memory of its largest node
    time_limit_min: float | None  # None: no limit


def minutes(limit: str) -> float | None:
    """SLURM's time format ("infinite", "30:00", "1-12:00:00", "45") in minutes; None: unlimited."""
    if limit in ("infinite", "UNLIMITED", "n/a", ""):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    h, m, s = ([0.0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0.0, parts[0], 0.0)
    return (float(days or 0) * 24 + h) * 60 + m + s / 60


def partition(name: str | None) -> Partition:
    """What `sinfo` says of the partition (its default when none named)."""
    try:  # a hung slurmctld: a short bound, then one line (was 60 s and a traceback)
        out = subprocess.run(["sinfo", "-h", "-o", "%P|%c|%m|%l"], capture_output=True, text=True,
                             timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"sinfo did not answer within {SINFO_TIMEOUT_S:g} s: is SLURM's controller up "
                           "(scontrol ping)?") from None
    except OSError as e:
        raise RuntimeError(
            f"sinfo could not be run ({e.strerror or e}): is this a SLURM login node?"
        ) from None
    if out.returncode != 0:
        raise RuntimeError(
            f"sinfo failed ({out.stderr.strip() or out.returncode}): is this a SLURM login node?"
        )
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3]
    mine = [r for r in rows if (r[0].rstrip("*") == name if name else r[0].endswith("*"))]
    if not mine:
        names = sorted({r[0].rstrip("*") for r in rows})
        raise ValueError(
            f"SLURM has no partition {name!r} (partitions: {', '.join(names)}; hydra.launcher.partition=NAME)"
            if name
            else f"SLURM has no default partition: set hydra.launcher.partition (one of {', '.join(names)})"
        )
    cpus = [int(re.sub(r"\D", "", r[1]) or 0) for r in mine]
    mem = [int(re.sub(r"\D", "", r[2]) or 0) for r in mine]
    return Partition(mine[0][0].rstrip("*"), min(cpus), max(cpus), max(mem), minutes(mine[0][3]))


def fit_request(params: dict, part: Partition) -> tuple[dict, list[str]]:
    """(the request with its defaults filled from the partition, the problems that would keep it pending)."""
    p = dict(params)
    tasks = int(p.get("tasks_per_node") or 1)
    if p.get("cpus_per_task") is None:
        p["cpus_per_task"] = max(1, part.cpus // tasks)
    problems = []
    if p["cpus_per_task"] * tasks > part.max_cpus:
        problems.append(f"hydra.launcher.cpus_per_task={p['cpus_per_task']} x tasks_per_node={tasks} asks "
                        f"{p['cpus_per_task'] * tasks} CPUs per node; partition {part.name}'s nodes have "
                        f"at most {part.max_cpus} (set hydra.launcher.cpus_per_task<="
                        f"{part.max_cpus // tasks}, or null for a whole node)")
    if p.get("mem_gb") is not None and p["mem_gb"] * 1024 > part.mem_mb:
        problems.append(
            f"hydra.launcher.mem_gb={p['mem_gb']} is more than partition {part.name}'s largest node "
            f"has ({part.mem_mb / 1024:.1f} GB; set hydra.launcher.mem_gb<={part.mem_mb // 1024}, "
            "or null for SLURM's default)"
        )
    if part.time_limit_min is not None and p.get("timeout_min", 0) > part.time_limit_min:
        problems.append(f"hydra.launcher.timeout_min={p['timeout_min']} is over partition {part.name}'s time "
                        f"limit ({part.time_limit_min:g} min; set hydra.launcher.timeout_min<="
                        f"{int(part.time_limit_min)})")
    return p, problems


def queue(job_ids: list[str]) -> dict[str, tuple[str, str, str]] | None:
    """squeue's view of the jobs still known to it: job id -> (state, reason, nodes); None when squeue
    failed (slurmctld busy or restarting: nothing is concluded from it)."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i|%T|%r|%N"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    rows = (line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3)
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def find_record(store: Path, slurm_job_id: str, since: float) -> Path | None:
    """The record a SLURM job wrote: a run folder touched since the job started whose record's environment
    names the job (record.env.environ.SLURM_JOB_ID)."""
    try:
        folders = [d for d in os.scandir(store) if d.is_dir() and d.stat().st_mtime >= since - 5]
    except OSError:
        return None
    for d in sorted(folders, key=lambda d: -d.stat().st_mtime):
        path = Path(d.path) / "record.json"
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if str(((rec.get("env") or {}).get("environ") or {}).get("SLURM_JOB_ID")) == slurm_job_id:
            return path
    return None


def headline(record: dict) -> str:
    """A point's figure as the console's summary shows it, with the kinds of its warnings: "46 samples/s
    [oversubscribed, noisy, contended]" (xbench/sinks/console.py owns the rounding and the kinds)."""
    from xbench.sinks.console import headline as summed  # here: Hydra imports this module at every start-up

    return summed(record)


class SlurmLauncher(Base):  # type: ignore[misc,valid-type]
    """hydra-submitit-launcher's SlurmLauncher: the request fitted to the partition, the queue reported, each
    point summed up."""

    def __call__(self, *args, **kwargs) -> JobReturn:
        """In the job: run the point, then name the record it left (the submitter prints it)."""
        started = time.time()
        ret = super().__call__(*args, **kwargs)
        store = (
            Path(str(ret.cfg.store.root)).resolve() if ret.cfg is not None and "store" in ret.cfg else None
        )
        job = os.environ.get("SLURM_JOB_ID", "")
        found = find_record(store, job, started) if store and job else None
        # pickled back with ret
        ret.xbench_record = str(found) if found else None  # type: ignore[attr-defined]
        return ret

    def launch(self, job_overrides, initial_job_idx):
        try:
            part = partition(self.params.get("partition"))
        except (RuntimeError, ValueError) as e:  # sinfo failed, hung or names no such partition: one line
            say(f"nothing submitted: {e}")
            raise SystemExit(1) from None
        fitted, problems = fit_request(self.params, part)
        if problems:  # it would stay pending for ever (PartitionConfig): nothing is submitted
            say(f"nothing submitted: the request cannot run on partition {part.name}")
            for line in problems:
                say(f"  {line}")
            raise SystemExit(1)
        if fitted.get("cpus_per_task") != self.params.get("cpus_per_task"):
            say(
                f"cpus_per_task={fitted['cpus_per_task']} (a whole node of partition {part.name}: "
                f"{part.cpus} CPUs / {fitted.get('tasks_per_node') or 1} task(s); "
                "hydra.launcher.cpus_per_task=N to ask less)"
            )
        self.params = fitted
        try:
            jobs = self._submit(job_overrides, initial_job_idx)
        except Exception as e:  # sbatch refused or failed (submitit raises with its output): one line
            said = " ".join(str(e).split())[:300]
            say(f"nothing submitted: sbatch failed ({type(e).__name__}: {said}); see `sbatch --test-only`")
            raise SystemExit(1) from None
        try:
            return self._wait(jobs, initial_job_idx)
        except BaseException:  # Ctrl-C twice, a kill: this process stops waiting, SLURM keeps the jobs
            say(
                "stopped waiting; the jobs go on "
                f"(scancel {' '.join(sorted({j.job_id.split('_')[0] for j in jobs}))} stops them)"
            )
            raise

    def _submit(self, job_overrides, initial_job_idx):
        """SlurmLauncher.launch up to its blocking wait (it calls results() on each job in turn): submit the
        array and hand back the jobs."""
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(cluster="slurm", folder=self.params["submitit_folder"],
                                         slurm_max_num_timeout=self.params.get("max_num_timeout", 0))
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in self.params.items()
                                      if k not in init_keys})
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        args = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            say(f"point #{idx}: {' '.join(filter_overrides(overrides))}")
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return executor.map_array(self, *zip(*args))

    def _wait(self, jobs, first: int) -> list[JobReturn]:
        ids = [j.job_id for j in jobs]
        say(f"submitted {len(jobs)} job(s): {', '.join(ids)} (logs in {Path(jobs[0].paths.folder).parent})")
        shown: dict[str, tuple] = {}
        gone: dict[str, float] = {}
        left = set(ids)
        while left:
            seen = queue(sorted(left))
            for j in jobs:
                if j.job_id not in left:
                    continue
                if j.paths.result_pickle.exists():
                    left.discard(j.job_id)
                    continue
                if seen is None:  # squeue did not answer this time: wait for the next look
                    continue
                if j.job_id in seen:
                    state, reason, nodes = seen[j.job_id]
                    now = (state, reason if state == "PENDING" else nodes)
                    if shown.get(j.job_id) != now:
                        shown[j.job_id] = now
                        point = first + ids.index(j.job_id)
                        where = (f"waiting: {reason}" if state == "PENDING" and reason not in ("None", "")
                                 else f"on {nodes}" if state != "PENDING" and nodes else "")
                        say(f"job {j.job_id} (point #{point}) {state}" + (f", {where}" if where else ""))
                    gone.pop(j.job_id, None)
                elif time.monotonic() - gone.setdefault(j.job_id, time.monotonic()) > GONE_GRACE_S:
                    left.discard(j.job_id)  # ended without a result: it failed before writing one
            if left:
                time.sleep(POLL_S)
        return [self._report(j, first + i) for i, j in enumerate(jobs)]

    def _report(self, job, point: int) -> JobReturn:
        log = job.paths.stderr if job.paths.stderr.exists() else job.paths.stdout
        ret: JobReturn | None = None
        error = None
        if not job.paths.result_pickle.exists():
            error = f"job {job.job_id} ended without a result (cancelled, out of time or memory, or killed)"
        else:
            try:
                ret = job.results()[0]
            except Exception as e:  # the job's Python raised: submitit hands back its traceback
                last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                error = f"job {job.job_id} failed: {last}"
        record_path = getattr(ret, "xbench_record", None)
        if error is None and record_path:
            rec = json.loads(Path(record_path).read_text())
            status = rec.get("status", "?")
            line = f"point #{point} {status}: {headline(rec)}; record {record_path}"
            if status != "ok":
                line += f" ({rec.get('reason')}); log {log}"
                error = (
                    f"point #{point} (SLURM job {job.job_id}) did not succeed: {status} ({rec.get('reason')})"
                )
            say(line)
        elif error is None:
            say(f"point #{point}: no record found for job {job.job_id}; log {log}")
        else:
            say(f"point #{point} FAILED: {error}; log {log}")
        if ret is None:
            ret = JobReturn(overrides=None, status=JobStatus.UNKNOWN)
        if error is not None:
            ret.status, ret.return_value = JobStatus.FAILED, RuntimeError(f"{error}; log {log}")
        return ret
