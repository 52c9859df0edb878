"""The torchrun launcher: one process per rank, results gathered to global rank 0.

Two ways in, one code path per rank (`rank_main`):
- `python -m xbench parallel=ddp parallel.world_size=N`: this process is not a rank. It starts N ranks
  through torch.distributed's elastic launcher API (what the `torchrun` command runs), waits, and
  gets rank 0's gathered results back as the function's return value. If a rank fails, the launcher
  stops the others and raises ChildFailedError carrying each failed rank's error and traceback.
- `torchrun --nproc_per_node=N -m xbench parallel=ddp`: every process is a rank already (detected from
  the environment torchrun sets). Rank 0 runs __main__'s record path; the others only run their rank.

Every rank runs the work it was handed (launch/preamble.run_rank); the RankResults are gathered to rank 0 with
gather_object. Collectives time out after parallel.timeout_s, so a dead rank ends the run instead of hanging
it (a compiled run: after at least COMPILE_TIMEOUT_S, which its first steps' compiles must fit in).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from datetime import timedelta

from xbench import env_vars
from xbench.env_vars import launched_rank
from xbench.launch import child, slurm_ranks
from xbench.launch.gathered import RankLost, results_of, stopped_of
from xbench.launch.preamble import process_stop, run_rank, threads_asked, world_size_warning
from xbench.rank import STOP_SIGNALS, LaunchResult, RankContext, StopRequested


class RankFailed(Exception):
    """One or more ranks failed; `ranks` holds each failure (rank, error, traceback, exit code)."""

    def __init__(self, failures: list[dict]):
        first = failures[0]
        super().__init__(f"rank {first['rank']} failed: {first['error']}")
        self.ranks = failures


def under_torchrun() -> bool:
    """True in a process that torchrun (or any elastic agent) started as a rank, or a task of a srun step
    of several tasks (env_vars.launched_rank, the one rule). A question: it sets nothing (`launch` gives a
    srun task torch's variables, launch/slurm_ranks.py, while its rank runs)."""
    return launched_rank()


def global_rank() -> int:
    """This process's rank in its world, as its launcher numbered it: RANK, or a srun task's SLURM_PROCID."""
    return int(os.environ.get("RANK") or slurm_ranks.torch_variables().get("RANK", "0"))


def _threads_for_rank(plan, dev_type: str, local_world: int) -> dict:
    """Fair CPU timings: without bench.threads, each rank gets its share of the cores (torchrun itself
    would set OMP_NUM_THREADS=1; torch's default would oversubscribe)."""
    return threads_asked(plan, local_world if dev_type == "cpu" else 1)


# A compiled run's first steps compile (torch.compile of the step, or FSDP's per-block compile: 77-125 s a
# step on 2 CPU cores for the tiny decoder, minutes for an 8B on a GPU) between its collectives, and a rank
# that finishes first waits for the slowest in the next one: parallel.timeout_s (120 s), which is there to end
# a run with a dead rank, would end a healthy run that is compiling. A compiled run's collectives therefore
# wait at least this long, for the whole run (recompiles come after the first step too); a dead rank or hung
# collective then ends it within this, and a signal still stops it at once.
COMPILE_TIMEOUT_S = 1800.0


def process_group_timeout_s(plan) -> float:
    """The process group's collective timeout: parallel.timeout_s, at least COMPILE_TIMEOUT_S when the run
    compiles (runtime=compile, or parallel.compile_blocks)."""
    compiles = plan.runtime.name == "compile" or bool(plan.parallel.compile_blocks)
    return max(plan.parallel.timeout_s, COMPILE_TIMEOUT_S) if compiles else plan.parallel.timeout_s


def rank_main(work, on_step=None, stop=None, process: str = ""):
    """One rank: process group -> the work -> gather. Returns the RankResults on rank 0, else None.
    `process`: how the launcher started this rank's process (the record's rank_process)."""
    import torch
    import torch.distributed as dist

    from xbench.parallel.ddp import resolve_backend

    plan, dev_type = work.plan, work.plan.device_type

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    ctx = RankContext(rank, world, local_rank, local_world, **_threads_for_rank(plan, dev_type, local_world),
                      warnings=world_size_warning(plan, world, f"torchrun started {world} ranks"),
                      process=process)
    if dev_type == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(resolve_backend(plan.parallel.backend, dev_type),
                            timeout=timedelta(seconds=process_group_timeout_s(plan)))
    if dist.get_world_size() != world:  # silent fallbacks to a world of one exist (GOTCHAS)
        raise RuntimeError(f"process group has {dist.get_world_size()} ranks, expected {world}")
    try:
        result = run_rank(work, ctx, on_step, stop)
    except StopRequested as e:
        e.partial.setdefault("rank", rank)  # which rank's figures these are, wherever they end up
        if not e.partial.get("ranks_agreed"):
            raise
        # Every rank stopped at the same step (train_to_target's control points, throughput's window edges,
        # bench/loop.py rule 10): gather as usual. The signal's name, on the ranks that got it.
        if stop is not None and stop.reason:
            e.partial.setdefault("stop_reason", stop.reason)
        result = e
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    dist.destroy_process_group()
    return gathered


STOPPING = "stopping"  # in the exchange folder: the launcher got a stop signal (its agent is shutting down)


@contextlib.contextmanager
def _marks_stopping(exchange: str):
    """While the elastic agent runs: its signal handler (torch's `_terminate_process_handler`, looked up when
    the agent starts the ranks) first marks the exchange folder, so the ranks know that nobody will collect
    their return values and exit as soon as they have left them. Without that handler (another torch), the
    ranks are still stopped, only later (torch's 30 s, or bench.stop_grace_s)."""
    from torch.distributed.elastic.multiprocessing import api as mp_api

    original = getattr(mp_api, "_terminate_process_handler", None)
    if original is None:
        yield
        return

    def handler(signum, frame):
        with contextlib.suppress(OSError):
            os.close(os.open(os.path.join(exchange, STOPPING), os.O_WRONLY | os.O_CREAT, 0o600))
        original(signum, frame)

    mp_api._terminate_process_handler = handler
    try:
        yield
    finally:
        mp_api._terminate_process_handler = original


def _leave(exchange: str | None, rank: int, obj) -> None:
    """A rank's result (rank 0: every rank's, gathered) or its stop, left in the launcher's private folder:
    what the launcher reads when the elastic agent, shutting down on a signal, returns nothing."""
    if not exchange:
        return
    with contextlib.suppress(Exception):
        tmp = os.path.join(exchange, f".rank-{rank}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(obj, f)
        os.replace(tmp, os.path.join(exchange, f"rank-{rank}.pkl"))


def _left(exchange: str) -> dict:
    """What the ranks left (rank -> gathered list, RankResult or StopRequested); the launcher's own folder."""
    out = {}
    for name in os.listdir(exchange):
        if name.startswith("rank-") and name.endswith(".pkl"):
            with contextlib.suppress(Exception), open(os.path.join(exchange, name), "rb") as f:
                out[int(name[5:-4])] = pickle.load(f)
    return out


def _spawned_rank(work, exchange: str | None = None, runner: tuple[int, dict] | None = None):
    """Entry point of a rank started by elastic_launch (picklable: a module-level function). Its console is
    EPIPE-proof and redacted, it dies with its parent, and a stop signal stops it after the step (it exits
    at the latest bench.stop_grace_s later); a stopped rank leaves what it measured for the launcher.
    `runner`: (the launcher's pid, its environment) when the rank was forked from the warm template."""
    if runner is not None:
        from xbench.launch import template

        # before anything else: signals, environment, seeds, death with the runner
        template.adopt_rank(*runner)
    stop = process_stop(work.plan.bench)  # also: die_with_parent, EPIPE-proof redacting streams, the grace
    rank = int(os.environ.get("RANK", "0"))
    # Working until what it measured is left: the agent terminates a survivor the moment its peer's process
    # ends, which is also when the survivor's collective fails; a stop signal that ended it at once there
    # (the work had raised, so nothing was running) lost its figures (once in CI: the record had no ranks).
    with child.working(stop):
        try:
            with child.reason_on_stop(stop):
                out = rank_main(work, None, stop, "template fork" if runner is not None else "spawn")
        except StopRequested as e:
            _leave(exchange, rank, e)
            raise
        except Exception as e:
            partial = getattr(e, "xbench_partial", None)  # bench/windows.py: the windows this rank had closed
            if partial is not None:
                _leave(exchange, rank, RankLost(f"{type(e).__name__}: {e}", dict(partial, rank=rank),
                                                traceback.format_exc()))
            if _peer_lost(e):
                # The agent reports the first failed rank its poll finds, the lower one of two that died
                # together; this one failed because its peer did, so it leaves a few polls later and the peer
                # is the cause. (A spawned rank's interpreter teardown used to give that margin by chance.)
                time.sleep(PEER_LOST_EXIT_DELAY_S)
            raise
        # read once: a signal after this reading must not skip the leaving and still take the exit below
        stopped = stop.requested
        if stopped:
            _leave(exchange, rank, out)
    if stopped and exchange and os.path.exists(os.path.join(exchange, STOPPING)):
        # The launcher was signalled: its agent is shutting down and collects no return value (it would
        # wait 30 s for this process to exit); what it needs is left in the exchange.
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)
    return out


def _ranks_here(parallel) -> int:
    """The ranks this launcher starts (global ranks 0..n-1 on node 0, which holds the record)."""
    return parallel.world_size // parallel.nnodes


def _launch_config(parallel, start_method: str = "spawn"):
    from torch.distributed.launcher.api import LaunchConfig

    p = parallel
    per_node = _ranks_here(p)
    if p.nnodes == 1:  # what `torchrun --standalone` does: a local c10d store on a free port
        rdzv = {"rdzv_backend": "c10d", "rdzv_endpoint": "localhost:0", "run_id": uuid.uuid4().hex}
        rdzv_configs = {"timeout": int(p.timeout_s)}
    else:  # static rendezvous: node_rank fixes global ranks, so node 0 holds rank 0 (the writer)
        rdzv = {"rdzv_backend": "static", "rdzv_endpoint": p.rdzv_endpoint, "run_id": "xbench"}
        rdzv_configs = {"rank": p.node_rank, "timeout": int(p.timeout_s)}
    return LaunchConfig(min_nodes=p.nnodes, max_nodes=p.nnodes, nproc_per_node=per_node,
                        rdzv_configs=rdzv_configs, max_restarts=0, monitor_interval=0.1,
                        start_method=start_method, **rdzv)


# what gloo and NCCL say in a rank whose peer process has gone
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing",
             "remote process exited")


PEER_LOST_EXIT_DELAY_S = 0.5  # five of the agent's polls (monitor_interval 0.1 s)


def _peer_lost(error) -> bool:
    return any(s in str(error) for s in PEER_LOST)


def _failures(err, left: dict | None = None) -> list[dict]:
    """ChildFailedError -> one dict per failed rank, the earliest (the root cause) first; with the figures a
    rank measured before it failed (`left`: a RankLost it left), e.g. a survivor of a killed peer."""
    out = []
    for rank, f in err.failures.items():
        msg, tb = f.message, None
        if isinstance(msg, dict):
            tb = (msg.get("extraInfo") or {}).get("py_callstack")
            msg = msg.get("message")
        out.append({"rank": rank, "error": msg, "traceback": tb, "exitcode": f.exitcode,
                    "timestamp": f.timestamp})
        lost = (left or {}).get(rank)
        if isinstance(lost, RankLost):
            out[-1]["figures"] = lost.partial
    # The agent reports the first failed rank its poll found (two ranks that died together: the lower one);
    # another that failed too is known by what it left, kept with its own error and traceback.
    out += [{"rank": rank, "error": lost.error, "traceback": lost.traceback, "figures": lost.partial}
            for rank, lost in sorted((left or {}).items())
            if isinstance(lost, RankLost) and rank not in err.failures]
    # A rank whose collective lost its peer failed because that peer did: never the cause while another
    # failure is known; then the earliest (torch stamps failures to the second).
    out.sort(key=lambda d: (_peer_lost(d["error"]), d.get("timestamp") or float("inf"), d["rank"]))
    return out


def launch(work, on_step=None, stop=None, fresh: bool = False) -> LaunchResult | None:
    """Run every rank (fresh processes in any case); rank 0's gathered results, or None on a process or
    node without rank 0."""
    if under_torchrun():
        # The one place a srun task gets torch's variables (RANK, MASTER_ADDR, ...): for as long as
        # its rank runs.
        with env_vars.temporarily(slurm_ranks.torch_variables()):
            gathered = rank_main(work, on_step, stop)
        return None if gathered is None else results_of(gathered, stop)

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from xbench.launch import template

    # the ranks forked from the warm template (its forkserver), as a sweep's points are, where that is safe
    forked = template.for_ranks(work.plan) is None
    runner = (os.getpid(), dict(os.environ)) if forked else None
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}  # the elastic agent replaces them for good
    exchange = tempfile.mkdtemp(prefix="xbench-ranks-")  # private (0700): where stopped ranks leave figures
    try:
        with _marks_stopping(exchange):
            config = _launch_config(work.plan.parallel, "forkserver" if forked else "spawn")
            out = elastic_launch(config, _spawned_rank)(work, exchange, runner)
        gathered = (out or {}).get(0)
        if gathered is None:  # rank 0 left its result instead of returning it (a stop only the ranks saw)
            gathered = _left(exchange).get(0)
    except ChildFailedError as e:
        left = _left(exchange)
        # the ranks were signalled, not the launcher
        if any(isinstance(r, StopRequested) for r in left.values()):
            raise stopped_of(left, stop, _ranks_here(work.plan.parallel)) from None
        raise RankFailed(_failures(e, left)) from e
    except SignalException as e:  # Ctrl-C / SIGTERM while the ranks ran: the launcher stopped them
        if stop is not None:
            stop.requested, stop.reason = True, e.sigval.name
        left = _left(exchange)
        gathered = left.get(0)
        if isinstance(gathered, list) and not any(isinstance(r, StopRequested) for r in gathered):
            return LaunchResult.of(gathered)  # every rank had finished: the result is whole
        raise stopped_of(left, stop, _ranks_here(work.plan.parallel)) from e
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
        shutil.rmtree(exchange, ignore_errors=True)
    if isinstance(gathered, StopRequested):
        raise stopped_of({0: gathered}, stop)
    if gathered is None:
        return None
    return results_of(gathered, stop)
