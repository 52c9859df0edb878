"""The `xla` launcher: the processes torch-xla data parallelism needs, and which one writes the record.

- parallel=xla_spmd: ONE fresh process (multiprocessing spawn) runs the rank. SPMD must be switched on
  before any XLA tensor and cannot be switched off, and PJRT reads the CPU device count
  (`CPU_NUM_DEVICES`) once, when its client starts; a fresh process makes both hold for every run,
  sweep points included, whatever this process did before (a sweep's preload of torch_xla, an
  earlier non-SPMD XLA point). The child sets the environment, then imports torch_xla.
- parallel=xla_mp: `torch_xla.launch` starts one process per local chip (TPU). Each runs the rank; the
  results are gathered to global ordinal 0 (xm.rendezvous), which hands them back through a file,
  since torch_xla.launch returns nothing. On a pod slice every host runs the same command; host 0
  writes the record.

Errors, interruptions and divergence in the child come back as the same exceptions (pickled), so the
record says what happened exactly as for an inline run.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

from xbench.launch import LaunchResult
from xbench.launch.child import progress, reason_on_stop, stop_on_signals, wait
from xbench.runtimes import default_pjrt_device


def xla_env(cfg) -> dict:
    """Environment the XLA processes need before torch_xla is imported (N CPU devices for PJRT CPU)."""
    env = {"PJRT_DEVICE": default_pjrt_device()}
    if env["PJRT_DEVICE"] == "CPU" and cfg.parallel.name == "xla_spmd":
        env["CPU_NUM_DEVICES"] = str(cfg.parallel.world_size)
    return env


def host_index() -> int:
    """This host's index in a TPU slice; 0 off TPU (no torch_xla import there)."""
    if default_pjrt_device() != "TPU":
        return 0
    from xbench.runtimes import xla as rx

    return rx.tpu_worker_id()


def writes_record(cfg) -> bool:
    return host_index() == 0


# ---------- xla_spmd ----------

def _spmd_process(cfg, facts, env: dict):
    """Entry point of the fresh SPMD process (module level: picklable)."""
    os.environ.update(env)
    from xbench.bench.worker import RankContext, run_rank
    from xbench.runtimes import xla as rx

    stop = stop_on_signals()
    devices = rx.enable_spmd()
    warnings = []
    if devices != cfg.parallel.world_size:
        # The mesh spans every device PJRT gives (all chips of a slice); the run is what it is.
        warnings.append(f"parallel.world_size={cfg.parallel.world_size}, but the SPMD mesh spans all {devices} "
                        f"XLA devices ({env['PJRT_DEVICE']}): the run used {devices} (measurements.devices)")
        cfg = replace(cfg, parallel=replace(cfg.parallel, world_size=devices))
    process_index, process_count = rx.process()
    on_step = progress(cfg, process_index)
    with reason_on_stop(stop):
        result = run_rank(cfg, facts, RankContext(0, 1, 0), on_step=on_step, stop=stop)
    if hasattr(on_step, "close"):
        on_step.close()
    result.warnings = warnings + result.warnings
    result.measurements.update({"xla_process_index": process_index, "xla_process_count": process_count,
                                "pid": os.getpid()})
    return result, process_index


def _run_spmd(cfg, facts, stop) -> LaunchResult | None:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        result, process_index = wait(pool.submit(_spmd_process, cfg, facts, xla_env(cfg)), stop, "the XLA process")
    if process_index != 0:  # another host of a pod slice: host 0 holds the record
        return None
    return LaunchResult([result], list(result.warnings))


# ---------- xla_mp ----------

def _mp_process(index, cfg, facts, out_path: str):
    """One replica of torch_xla.launch: run the rank, gather every replica's result to ordinal 0."""
    from xbench.bench.worker import RankContext, run_rank
    from xbench.runtimes import xla as rx

    ordinal, world, local = rx.replica()
    warnings = []
    if world != cfg.parallel.world_size:
        warnings.append(f"parallel.world_size={cfg.parallel.world_size}, but torch_xla.launch started {world} "
                        f"replicas (one per chip): the run used {world} (measurements.world_size)")
        cfg = replace(cfg, parallel=replace(cfg.parallel, world_size=world))
    on_step = progress(cfg, ordinal)
    stop = stop_on_signals()
    with reason_on_stop(stop):
        result = run_rank(cfg, facts, RankContext(ordinal, world, local), on_step=on_step, stop=stop)
    if hasattr(on_step, "close"):
        on_step.close()
    result.warnings = warnings + result.warnings
    result.measurements.update({"local_rank": local, "hostname": os.uname().nodename, "pid": os.getpid()})
    gathered = [pickle.loads(b) for b in rx.gather_bytes("xbench_results", pickle.dumps(result))]
    if ordinal == 0:  # atomic: the parent reads a whole file or none
        tmp = Path(out_path + ".tmp")
        tmp.write_bytes(pickle.dumps(gathered))
        tmp.replace(out_path)


def _mp_parent(cfg, facts, out_path: str, env: dict):
    """The process torch_xla.launch runs in (the environment set before torch_xla is imported)."""
    os.environ.update(env)
    for sig in (signal.SIGINT, signal.SIGTERM):  # the replicas handle stops and return their results
        signal.signal(sig, signal.SIG_IGN)
    from xbench.runtimes import xla as rx

    rx.launch_processes(_mp_process, (cfg, facts, out_path), single_process=cfg.parallel.world_size == 1)


def _run_mp(cfg, facts, stop) -> LaunchResult | None:
    with tempfile.TemporaryDirectory(prefix="xbench-xla-mp-") as tmp:
        out = str(Path(tmp) / "ranks.pkl")
        # torch_xla.launch needs an uninitialised XLA runtime in its process: a fresh one, as for SPMD.
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            wait(pool.submit(_mp_parent, cfg, facts, out, xla_env(cfg)), stop, "the XLA process")
        if not Path(out).exists():  # ordinal 0 lives on another host of the slice
            return None
        gathered = pickle.loads(Path(out).read_bytes())
    return LaunchResult(gathered, [w for r in gathered for w in r.warnings])


def run_xla(cfg, facts, on_step=None, stop=None) -> LaunchResult | None:
    """Progress is drawn by the launched process itself (`on_step` cannot cross into it)."""
    if cfg.parallel.name == "xla_spmd":
        return _run_spmd(cfg, facts, stop)
    if cfg.parallel.name == "xla_mp":
        return _run_mp(cfg, facts, stop)
    raise ValueError(f"launcher xla runs parallel=xla_spmd or xla_mp, not {cfg.parallel.name!r}")
