"""The `xla` launcher: the processes torch-xla data parallelism needs, and which one writes the record.

- parallel=xla_spmd: ONE fresh process (multiprocessing spawn) runs the rank. SPMD must be switched on
  before any XLA tensor and cannot be switched off, and PJRT reads the CPU device count
  (`CPU_NUM_DEVICES`) once, when its client starts; a fresh process makes both hold for every run,
  sweep points included, whatever this process did before (a sweep's preload of torch_xla, an
  earlier non-SPMD XLA point). The child sets the environment, then imports torch_xla.
- parallel=xla_mp: `torch_xla.launch` starts one process per local chip (TPU v4+), or one process whose
  threads are the replicas (one per device: TPU v2/v3 cores, PJRT CPU devices). Each replica runs the
  rank; the results are gathered to global ordinal 0, which hands them back through a file, since
  torch_xla.launch returns nothing. On a pod slice every host runs the same command; host 0
  writes the record. A stop the replicas agreed on (at a window's edge) is gathered the same way, so the
  record keeps every replica's partial figures (launch/gathered.py), as for torchrun's ranks.

Errors, interruptions and divergence in the child come back as the same exceptions (pickled), so the
record says what happened exactly as for an inline run.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from xbench.launch import child
from xbench.launch.gathered import results_of
from xbench.launch.preamble import process_stop, run_rank, threads_asked, world_size_warning
from xbench.rank import LaunchResult, RankContext, StopRequested
from xbench.runtimes import default_pjrt_device, xla_environment, xla_module


def xla_env(plan) -> dict:
    """Environment the XLA processes need before torch_xla is imported (runtimes.xla_environment, which reads
    the plan's platform device and parallel section, as it reads the root config's); for
    xla_mp replicas on PJRT CPU, one CPU device per replica and no parameter aliasing: a donated
    buffer's release waits for the step that uses it while holding the GIL, and that step's all-reduce
    waits for the other replica thread, which needs the GIL to launch its half (a deadlock, seen here)."""
    env, par = xla_environment(plan), plan.parallel
    if par.name == "xla_mp" and env["PJRT_DEVICE"] == "CPU" and par.world_size > 1:
        env.update(CPU_NUM_DEVICES=str(par.world_size), XLA_ENABLE_PARAM_ALIASING="false")
    return env


# What torch_xla reads as the host's index when it takes the TPU's facts from the environment (GKE,
# multislice).
HOST_INDEX_VARS = ("CLOUD_TPU_TASK_ID", "TPU_WORKER_ID")


def host_index() -> int:
    """This host's index in a TPU slice; 0 off TPU. From HOST_INDEX_VARS when one is set (an answer: nothing
    imported or written); else torch_xla's, from the TPU VM's metadata (importing torch_xla sets its own
    variables, GRPC_VERBOSITY, XLA_FLAGS ...: only on a TPU host, whose run is about to use it)."""
    if default_pjrt_device() != "TPU":
        return 0
    for key in HOST_INDEX_VARS:
        if os.environ.get(key, "").strip().isdigit():
            return int(os.environ[key])
    return xla_module().tpu_worker_id()


# ---------- xla_spmd ----------

def _spmd_process(work, env: dict):
    """Entry point of the fresh SPMD process (module level: picklable)."""
    plan = work.plan
    os.environ.update(env)
    rx = xla_module()
    stop = process_stop()
    devices = rx.enable_spmd()
    # The mesh spans every device PJRT gives (all chips of a slice); the run is what it is.
    ctx = RankContext(
        devices_per_rank=devices,
        **threads_asked(plan),
        warnings=world_size_warning(
            plan, devices, f"the SPMD mesh spans all {devices} XLA devices ({env['PJRT_DEVICE']})"
        ),
    )
    process_index, process_count = rx.process()
    with child.reason_on_stop(stop):
        result = run_rank(work, ctx, None, stop, draw=process_index == 0)
    result.measurements.update({"xla_process_index": process_index, "xla_process_count": process_count})
    return result, process_index


def _run_spmd(work, stop) -> LaunchResult | None:
    result, process_index = child.in_fresh_process(_spmd_process, (work, xla_env(work.plan)), stop,
                                                   "the XLA process")
    if process_index != 0:  # another host of a pod slice: host 0 holds the record
        return None
    return LaunchResult.of([result])


# ---------- xla_mp ----------

def _mp_process(index, work, out_path: str):
    """One replica of torch_xla.launch: run the work, gather every replica's result to ordinal 0.

    A replica runs in a worker thread (torch_xla runs each replica of a process in a thread, one per
    device it addresses), so it takes its process's stop flag rather than installing one."""
    rx = xla_module()
    plan = work.plan
    ordinal, world, local = rx.replica()
    ctx = RankContext(ordinal, world, local, **threads_asked(plan),
                      warnings=world_size_warning(plan, world, f"torch_xla.launch started {world} replicas "
                                                              "(one per chip)"))
    if rx.replicas_are_threads_on_cpu():  # XLA:CPU's collectives need it (runtimes/xla.py says why)
        rx.serialise_graph_launches()
    stop = process_stop()
    try:
        with child.reason_on_stop(stop):
            result = run_rank(work, ctx, None, stop)
    except StopRequested as e:
        e.partial.setdefault("rank", ordinal)
        if not e.partial.get("ranks_agreed"):
            rx.abandon_exchange()
            raise
        # every replica stopped at the same window edge (bench/loop.py rule 10): gathered as a result
        result = e
    except BaseException:
        rx.abandon_exchange()  # the other replicas' gathers fail at once instead of waiting for this one
        raise
    gathered = [pickle.loads(b) for b in rx.gather_bytes("xbench_results", pickle.dumps(result))]
    if ordinal == 0:  # atomic: the parent reads a whole file or none
        tmp = Path(out_path + ".tmp")
        tmp.write_bytes(pickle.dumps(gathered))
        tmp.replace(out_path)


def _mp_parent(work, out_path: str, env: dict):
    """The process torch_xla.launch runs in (the environment set before torch_xla is imported).

    Its main thread installs the stop flag once; the replicas share it: as threads of this process
    (one replica: debug_single_process), or of the process torch_xla starts, forked so that it
    inherits the handlers and the flag (replicas are threads there too, where signal.signal raises)."""
    os.environ.update(env)
    stop = process_stop()
    rx = xla_module()
    with child.reason_on_stop(stop):
        rx.launch_processes(_mp_process, (work, out_path), single_process=work.plan.parallel.world_size == 1,
                            start_method="fork")


def _run_mp(work, stop) -> LaunchResult | None:
    with tempfile.TemporaryDirectory(prefix="xbench-xla-mp-") as tmp:
        out = str(Path(tmp) / "ranks.pkl")
        # torch_xla.launch needs an uninitialised XLA runtime in its process: a fresh one, as for SPMD.
        child.in_fresh_process(_mp_parent, (work, out, xla_env(work.plan)), stop, "the XLA process")
        if not Path(out).exists():  # ordinal 0 lives on another host of the slice
            return None
        gathered = pickle.loads(Path(out).read_bytes())
    return results_of(gathered, stop)  # an agreed stop: every replica's partial figures


def launch(work, on_step=None, stop=None, fresh: bool = False) -> LaunchResult | None:
    """Progress is drawn by the launched process itself (`on_step` cannot cross into it); every XLA
    run is in a fresh process anyway."""
    strategy = work.plan.strategy
    if strategy in ("xla_spmd", "xla_fsdp"):  # one SPMD process; xla_fsdp also shards the parameters
        return _run_spmd(work, stop)
    if strategy == "xla_mp":
        return _run_mp(work, stop)
    raise ValueError(f"launcher xla runs parallel=xla_spmd, xla_fsdp or xla_mp, not {strategy!r}")
