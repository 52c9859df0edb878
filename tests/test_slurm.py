"""A real SLURM cluster of one node (this machine) in a temporary folder: munged, slurmctld and slurmd from
Debian's slurm-wlm and munge (`make slurm` installs them as root; otherwise these tests skip and say why).

- a 2-point sweep through `hydra/launcher=slurm` (hydra_plugins/xbench_slurm): both records carry their
  SLURM_JOB_ID, and the submitter prints each point's status, figure and record path;
- a request no node can hold is refused before submission, with the partition's limits;
- a job that ends without a result is reported with its log's path;
- a 2-task job runs DDP across SLURM tasks (srun + torch's env:// rendezvous, launch/slurm_ranks.py): one
  record of world size 2, whose contention figures do not count the sibling rank as another process.
The daemons stop when the module's tests are done (jobs cancelled first: no slurmstepd left behind).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hydra_plugins.xbench_slurm.submitit_launcher import Partition, fit_request, minutes
from tests.conftest import FAST, REPO, cli_env
from tests.jobs import Jobs
from xbench.launch import slurm_ranks

DAEMONS = ("munged", "slurmctld", "slurmd")
TINY = ("model=mlp", "data=synthetic_mnist", "data.batch_size=16", "platform=cpu")
START_TIMEOUT_S = 60

_missing = [d for d in (*DAEMONS, "sbatch", "sinfo") if shutil.which(d, path=os.environ.get("PATH", "") +
                                                                   ":/usr/sbin:/sbin") is None]
NEEDS_CLUSTER = (
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing), reason=f"no SLURM here ({', '.join(_missing)} missing): `make slurm` "
                       "installs slurm-wlm and munge (root, apt-get)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd runs jobs as their users only as root: not root here"),
)


def needs_cluster(test):
    for mark in NEEDS_CLUSTER:
        test = mark(test)
    return test


def _bin(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> str:
    """This machine as SLURM sees it (`slurmd -C`: CPUs, sockets, cores, real memory), minus its uptime."""
    out = subprocess.run([_bin("slurmd"), "-C"], capture_output=True, text=True, timeout=60, check=True).stdout
    return next(line for line in out.splitlines() if line.startswith("NodeName="))


SLURM_CONF = """ClusterName=xbenchtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerType=sched/backfill
InactiveLimit=0
KillWait=5
MinJobAge=300
{node} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.env = cli_env(SLURM_CONF=str(root / "slurm.conf"))
        self.timings: dict[str, float] = {}

    def start(self) -> None:
        t0 = time.monotonic()
        d = self.root
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        node = _node_line()
        host = node.split()[0].removeprefix("NodeName=")
        (d / "slurm.conf").write_text(SLURM_CONF.format(host=host, ctld_port=_free_port(), d_port=_free_port(),
                                                        d=d, node=node))
        self._spawn("munged", "-F", "-f", f"--socket={d}/munge.socket", f"--key-file={key}",
                    f"--pid-file={d}/munged.pid", f"--log-file={d}/log/munged.log", f"--seed-file={d}/munged.seed")
        self._wait_for(lambda: (d / "munge.socket").exists(), "munged's socket")
        self._spawn("slurmctld", "-D", "-i")
        self._spawn("slurmd", "-D")
        self._wait_for(lambda: self.sh("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", "the node idle in sinfo")
        self.timings["cluster_start_s"] = time.monotonic() - t0

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen([_bin(name), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in (self.root / "log").iterdir())
                raise RuntimeError(f"SLURM did not come up ({what}; exited: {dead}):\n{logs}")
            time.sleep(0.2)

    def sh(self, *cmd: str, timeout: int = 60) -> subprocess.CompletedProcess:
        return subprocess.run([_bin(cmd[0]), *cmd[1:]], env=self.env, capture_output=True, text=True, timeout=timeout)

    def _steps(self) -> list:
        """This cluster's slurmstepd processes (they inherit slurmd's SLURM_CONF; they exit after their job)."""
        import psutil

        out = []
        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"] == "slurmstepd" and proc.environ().get("SLURM_CONF") == self.env["SLURM_CONF"]:
                    out.append(proc)
            except psutil.Error:
                continue
        return out

    def _wait_steps(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self._steps() and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in self._steps():  # still there after their job: stopped, so none outlives the tests
            proc.kill()

    def stop(self) -> None:
        """Cancel every job, wait for the queue to drain and each job's slurmstepd to exit, stop the daemons."""
        if any(p.poll() is None for p in self.procs):
            self.sh("scancel", "--full", "-u", "root")
            deadline = time.monotonic() + 30
            while self.sh("squeue", "-h").stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.5)
        self._wait_steps()
        for p in reversed(self.procs):  # slurmd, slurmctld, then munged
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
            p.stdout and p.stdout.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
        print(f"\nSLURM timings: {json.dumps({k: round(v, 1) for k, v in c.timings.items()})}")


def _records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(store.glob("*/record.json"))]


def _xbench(cluster, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    flags = [a for a in args if a.startswith("-")]
    cmd = [sys.executable, "-m", "xbench", *flags, *[a for a in args if a not in flags]]
    return subprocess.run(cmd, cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=timeout)


def _sweep(cluster, root):
    store = root / "store"
    t0 = time.monotonic()
    # one CPU and 1 GB each: both points run at once on the 2-CPU node
    p = _xbench(cluster, "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={root / 'sweep'}", f"store.root={store}",
                "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", *FAST, *TINY, "data.batch_size=8,16")
    cluster.timings["sweep_s"] = time.monotonic() - t0
    return p


def _refused(cluster, root):
    """The refused request, and the queue right after it (nothing else submitted yet)."""
    p = _xbench(cluster, "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={root / 'sweep'}",
                f"store.root={root / 'store'}", "hydra.launcher.cpus_per_task=64", "hydra.launcher.mem_gb=100000",
                *FAST, *TINY)
    return p, cluster.sh("squeue", "-h").stdout.strip()


def _dies(cluster, root):
    return _xbench(cluster, "-m", "hydra/launcher=slurm", f"hydra.sweep.dir={root / 'sweep'}",
                   f"store.root={root / 'store'}", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
                   "+hydra.launcher.setup=[exit 3]", *FAST, *TINY, timeout=300)  # it may queue behind the others


DDP_JOB = """#!/bin/bash
srun {python} -m xbench store.root={store} {args} parallel=ddp parallel.world_size=2
"""


def _ddp(cluster, root):
    store = root / "store"
    script = root / "ddp.sh"
    script.write_text(DDP_JOB.format(python=sys.executable, store=store, args=" ".join((*FAST, *TINY))))
    t0 = time.monotonic()
    p = cluster.sh("sbatch", "--wait", "--ntasks=2", "--cpus-per-task=1", "--mem=2000", f"--chdir={REPO}",
                   f"--output={root / 'ddp.log'}", str(script), timeout=300)
    cluster.timings["ddp_s"] = time.monotonic() - t0
    return p


SWEEP = "test_sweep_through_the_slurm_launcher_leaves_both_records"
REFUSED = "test_request_larger_than_the_partition_is_refused_before_submission"
DIES = "test_job_that_dies_without_a_result_is_reported_with_its_log"
DDP = "test_two_task_job_runs_ddp_across_slurm_tasks"


@pytest.fixture(scope="module")
def runs(request, cluster, tmp_path_factory):
    """The refused request first, alone (the queue must be empty after it); then the sweep, the dying job and
    the DDP job submitted together (tests/jobs.py): SLURM queues what the 2-CPU node cannot hold yet."""
    roots = {name: tmp_path_factory.mktemp(name) for name in ("sweep", "refused", "dies", "ddp")}
    with Jobs(request) as jobs:
        jobs.submit("refused", _refused, cluster, roots["refused"], tests=(REFUSED,))
        if REFUSED in {getattr(i, "originalname", i.name) for i in request.session.items}:
            jobs["refused"]  # done before anything reaches the queue
        jobs.submit("sweep", _sweep, cluster, roots["sweep"], tests=(SWEEP,))
        jobs.submit("dies", _dies, cluster, roots["dies"], tests=(DIES,))
        jobs.submit("ddp", _ddp, cluster, roots["ddp"], tests=(DDP,))
        yield jobs, roots


@needs_cluster
def test_sweep_through_the_slurm_launcher_leaves_both_records(runs):
    started, roots = runs
    p, store = started["sweep"], roots["sweep"] / "store"
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    recs = _records(store)
    assert sorted(r["config"]["data"]["batch_size"] for r in recs) == [8, 16]
    assert all(r["status"] == "ok" for r in recs)
    jobs = {r["env"]["environ"]["SLURM_JOB_ID"] for r in recs}
    assert len(jobs) == 2 and all(j.isdigit() for j in jobs)
    err = p.stderr
    assert "xbench: SLURM: submitted 2 job(s)" in err
    assert all(re.search(rf"job \d+_{i} \(point #{i}\) RUNNING, on \S+", err) for i in (0, 1))  # seen while waiting
    for r in recs:  # the submitter's closing lines: status, figure, record path
        line = next(x for x in err.splitlines() if r["run_id"] in x)
        assert " ok: " in line and "samples/s" in line and line.rstrip().endswith("record.json")


@needs_cluster
def test_request_larger_than_the_partition_is_refused_before_submission(runs):
    jobs, roots = runs
    p, queue = jobs["refused"]
    assert p.returncode == 1
    assert "nothing submitted: the request cannot run on partition debug" in p.stderr
    assert "hydra.launcher.cpus_per_task=64" in p.stderr and "set hydra.launcher.cpus_per_task<=" in p.stderr
    assert "set hydra.launcher.mem_gb<=" in p.stderr
    assert queue == ""  # nothing reached the queue
    assert not (roots["refused"] / "store").exists()


@needs_cluster
def test_job_that_dies_without_a_result_is_reported_with_its_log(runs):
    jobs, roots = runs
    p = jobs["dies"]
    assert p.returncode == 1
    line = next(x for x in p.stderr.splitlines() if "point #0 FAILED" in x)
    assert "ended without a result" in line
    log = Path(line.rsplit("; log ", 1)[1])
    assert log.is_file() and log.is_relative_to(roots["dies"] / "sweep")


@needs_cluster
def test_two_task_job_runs_ddp_across_slurm_tasks(runs):
    jobs, roots = runs
    p, tmp_path = jobs["ddp"], roots["ddp"]
    store = tmp_path / "store"
    log = (tmp_path / "ddp.log").read_text() if (tmp_path / "ddp.log").exists() else ""
    assert p.returncode == 0, p.stderr + log[-4000:]
    [rec] = _records(store)
    assert rec["status"] == "ok", rec.get("reason")
    m = rec["measurements"]
    assert m["world_size"] == 2 and len(rec["ranks"]) == 2
    assert rec["env"]["environ"]["SLURM_JOB_ID"] == p.stdout.split()[-1]
    assert {r["local_rank"] for r in rec["ranks"]} == {0, 1}
    siblings = {r["pid"] for r in rec["ranks"]}
    listed = {t["pid"] for t in m.get("other_top_processes_during") or []}
    assert not siblings & listed  # rank 1 is this run's, not "another process"


# Without a cluster: the rules the tests above exercise end to end.

def test_srun_task_becomes_a_torch_rank_and_other_processes_do_not():
    """slurm_ranks.torch_variables answers (the environment is read, not written; launch/torchrun.launch applies
    them while the rank runs: tests/test_pure_checks.py)."""
    step = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "1234",
            "SLURM_STEP_NODELIST": "nodeA"}
    given = dict(step)
    got = slurm_ranks.torch_variables(step)
    assert step == given
    assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_RANK"], got["LOCAL_WORLD_SIZE"]) == ("3", "4", "1", "2")
    assert got["MASTER_ADDR"] == "nodeA" and got["MASTER_PORT"] == str(29500 + 1234 % 2000)
    mine = {**step, "MASTER_PORT": "40000", "RANK": "3"}
    assert "MASTER_PORT" not in slurm_ranks.torch_variables(mine)  # the user's choice stays
    batch = {"SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_JOB_ID": "1"}  # the batch script: no step
    one = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}  # hydra-submitit-launcher's one-task job
    assert slurm_ranks.torch_variables(batch) == {} and slurm_ranks.torch_variables(one) == {}
    assert slurm_ranks.tasks_on_node("2(x3),1", 3) == 1 and slurm_ranks.tasks_on_node("4,2", 1) == 2


def test_request_is_fitted_to_the_partition_or_refused_with_its_limits():
    part = Partition("cpu", cpus=2, max_cpus=4, mem_mb=24105, time_limit_min=minutes("1-00:00:00"))
    assert part.time_limit_min == 1440 and minutes("30:00") == 30 and minutes("infinite") is None
    fitted, problems = fit_request({"cpus_per_task": None, "tasks_per_node": 2, "mem_gb": None, "timeout_min": 60},
                                   part)
    assert fitted["cpus_per_task"] == 1 and not problems  # the smallest node, shared by its 2 tasks
    _, problems = fit_request({"cpus_per_task": 8, "tasks_per_node": 1, "mem_gb": 32, "timeout_min": 2000}, part)
    assert len(problems) == 3
    assert "at most 4 (set hydra.launcher.cpus_per_task<=4" in problems[0]
    assert "23.5 GB; set hydra.launcher.mem_gb<=23" in problems[1]
    assert "hydra.launcher.timeout_min<=1440" in problems[2]
