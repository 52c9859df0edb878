"""Data parallelism for real: DDP over 2 gloo processes on this CPU (self-launched and under torchrun),
a crashing rank, DataParallel's refusal without GPUs, the thread sweep, scaling efficiency from the store."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench.analysis.baseline import normalised_rows
from xbench.analysis.frame import flatten, load, parse_query, to_frame
from xbench.analysis.rows import NoData
from xbench.analysis.scaling import scaling_rows
from xbench.analysis.workload import WORKLOAD, key
from xbench.config import XBenchConfig
from xbench.platforms.detect import HostFacts
from xbench.records.record import RunRecord
from xbench.records.store import write_record

TINY = ("model=mlp", "data=synthetic_mnist", "data.batch_size=16", "platform=cpu")


def _check(cfg):
    from xbench import compat

    return compat.check(cfg, HostFacts(logical_cores=2, torch_version="2.9.0"))


# ---------- pure units: compat, scaling ----------

def test_dataparallel_without_gpus_says_why():
    cfg = XBenchConfig()
    cfg.model.name, cfg.data.name, cfg.platform.name, cfg.runtime.name = "mlp", "x", "local", "eager"
    cfg.precision.name, cfg.logger.name, cfg.data.modality = "fp32", "none", "features"
    cfg.parallel.name, cfg.parallel.world_size = "dataparallel", 2
    [reason] = _check(cfg)
    assert "2 CUDA GPUs" in reason and "silently" in reason and "parallel=ddp" in reason


def test_ddp_config_errors_are_caught_before_work():
    cfg = XBenchConfig()
    cfg.model.name, cfg.data.name, cfg.platform.name, cfg.runtime.name = "mlp", "x", "local", "eager"
    cfg.precision.name, cfg.logger.name, cfg.data.modality = "fp32", "none", "features"
    cfg.parallel.name, cfg.parallel.world_size, cfg.parallel.nnodes = "ddp", 3, 2
    cfg.parallel.backend, cfg.parallel.timeout_s = "nccl", 0
    text = " | ".join(_check(cfg))
    for part in ("multiple of parallel.nnodes", "rdzv_endpoint", "nccl needs CUDA", "timeout_s=0 is out of range"):
        assert part in text, part


def _rec(run_id, strategy, devices, tp, batch=16, platform="cpu", price=None, threads=1, **cfg_extra):
    cfg = {"model": {"name": "mlp", "options": {}}, "data": {"name": "synthetic_mnist", "batch_size": batch},
           "precision": {"name": "fp32"}, "runtime": {"name": "eager", "backend": "inductor", "mode": None},
           "parallel": {"name": strategy, "world_size": devices}, "platform": {"name": platform},
           "bench": {"threads": threads}, **cfg_extra}
    derived = {"usd_per_million_samples": price / 3600 / tp * 1e6, "samples_per_s_per_usd_per_hour": tp / price} \
        if price else {}
    return RunRecord(run_id=run_id, status="ok", config=cfg, derived=derived,
                     measurements={"throughput_samples_per_s": tp, "devices": devices, "device": "cpu",
                                   "threads_intra": threads})


def test_scaling_efficiency_from_stored_records(tmp_path):
    for r in (_rec("a", "single", 1, 100.0), _rec("b", "ddp", 1, 90.0), _rec("c", "ddp", 2, 180.0),
              _rec("d", "ddp", 4, 300.0), _rec("e", "ddp", 4, 320.0),
              _rec("f", "ddp", 2, 150.0, batch=32)):  # another workload: its own group, no 1-device base
        write_record(tmp_path, r)
    rows = scaling_rows(load([tmp_path], progress=False).frame)
    by = {(r["parallel"], r["devices"], r["batch_size_per_device"]): r for r in rows}
    assert by[("ddp", 2, 16)]["scaling_efficiency"] == pytest.approx(180 / (2 * 100))  # base = single
    assert by[("ddp", 4, 16)]["scaling_efficiency"] == pytest.approx(310 / (4 * 100))  # median of two
    assert by[("ddp", 4, 16)]["runs"] == 2
    assert by[("ddp", 1, 16)]["speedup"] == pytest.approx(0.9)  # DDP world 1 overhead vs single
    assert ("ddp", 2, 32) not in by  # no 1-device run of that workload: no efficiency
    no_single = scaling_rows(to_frame([_rec("b", "ddp", 1, 90.0), _rec("c", "ddp", 2, 180.0)]))
    assert {r["devices"]: r["scaling_efficiency"] for r in no_single}[2] == pytest.approx(1.0)
    assert key(flatten(_rec("x", "ddp", 1, 1.0)), WORKLOAD) != key(flatten(_rec("x", "ddp", 1, 1.0, batch=8)), WORKLOAD)


def test_time_and_cost_relative_to_a_baseline_record():
    recs = [_rec("gpu", "single", 1, 1000.0, platform="gpu_t4", price=0.75),
            _rec("cpu1", "single", 1, 100.0, price=0.5), _rec("cpu2", "single", 1, 180.0, price=0.5, threads=2)]
    rows = {(r["platform"], r["threads"]): r for r in normalised_rows(to_frame(recs), parse_query("platform=gpu_t4"))}
    cpu1, cpu2, gpu = rows[("cpu", 1)], rows[("cpu", 2)], rows[("gpu_t4", 1)]
    assert cpu1["normalised_time"] == pytest.approx(10.0)
    assert cpu1["normalised_cost"] == pytest.approx((0.5 / 100) / (0.75 / 1000))
    assert cpu2["normalised_time"] == pytest.approx(1000 / 180) and gpu["normalised_time"] == 1.0
    with pytest.raises(NoData, match="no ok run matches"):
        normalised_rows(to_frame(recs), parse_query("platform=tpu"))


# ---------- for real: processes, records ----------

def _ddp_checks(rec: dict, world: int):
    RunRecord.from_dict(rec)
    m, ranks = rec["measurements"], rec["ranks"]
    assert rec["status"] == "ok", rec["reason"]
    assert m["world_size"] == world and len(ranks) == world  # no silent world of one
    assert [r["rank"] for r in ranks] == list(range(world))
    assert all(r["process_group_world_size"] == world and r["process_group_backend"] == "gloo" for r in ranks)
    # replicas identical after training on different data per rank: gradients were all-reduced
    assert len({r["params_sha256"] for r in ranks}) == 1
    assert m["loss_first"] != m["loss_last"]  # it trained
    # global throughput: every rank's samples over the common (slowest) window, not a mean of ranks
    common = max(r["window_s"][0] for r in ranks)
    assert m["throughput_samples_per_s"] == pytest.approx(sum(r["samples_per_window"] for r in ranks) / common)
    assert m["global_batch_size"] == 16 * world
    assert all(r["threads_intra"] >= 1 and "threads_policy" in r for r in ranks)
    assert all(r["util_samples"] >= 1 and r["cpu_util_percent_mean"] is not None for r in ranks)


# DistributedDataParallel's options (tests/test_ddp_options.py): passed in the scaling sweep, read back from its
# 2-rank record (one 2-rank run for both claims; the scaling figures do not depend on the bucket sizes).
DDP_OPTIONS = ("parallel.bucket_cap_mb=0.5", "parallel.gradient_as_bucket_view=true", "parallel.static_graph=true",
               "parallel.broadcast_buffers=false")
SCALING = ("test_scaling_experiment_runs_ddp_1_and_2_gloo_processes",
           "test_ddp_run_passes_and_records_its_options_and_needs_two_cores")


def _torchrun(store):
    import subprocess

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", "-m", "xbench", f"store.root={store}",
           *FAST, *TINY, "parallel=ddp"]
    return subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], env=cli_env(), capture_output=True,
                          text=True, timeout=900)  # wide: the module's other runs share the cores


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """The module's CLI runs, started together (tests/jobs.py): each test checks its own, in its own store."""
    root = tmp_path_factory.mktemp("parallel")
    with Jobs(request) as jobs:
        jobs.submit("scaling", run_cli, "-m", *FAST, *TINY, "+experiment=scaling", "parallel=ddp", *DDP_OPTIONS,
                    store=root / "scaling", tests=SCALING)
        jobs.submit("crash", run_cli, *FAST, *TINY, "parallel=ddp", "parallel.timeout_s=60", "fault.kind=exception",
                    "fault.rank=1", "fault.at_step=3", store=root / "crash", timeout=900,
                    tests=("test_crashing_rank_fails_the_run_with_its_error",))
        jobs.submit("torchrun", _torchrun, root / "torchrun",
                    tests=("test_under_torchrun_ranks_join_and_rank_0_writes_one_record",))
        jobs.submit("threads", run_cli, "-m", *FAST, *TINY, "+experiment=cpu_threads", "bench.threads=1,2",
                    store=root / "threads", tests=("test_cpu_threads_sweep_records_threads_in_force",))
        jobs.submit("dataparallel", run_cli, *FAST, *TINY, "parallel=dataparallel", store=root / "dataparallel",
                    tests=("test_dataparallel_experiment_on_cpu_stops_with_its_reason",))
        yield jobs, root


@pytest.mark.slow
def test_scaling_experiment_runs_ddp_1_and_2_gloo_processes(runs):
    jobs, root = runs
    p, store = jobs["scaling"], root / "scaling"
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["measurements"]["world_size"]: r for r in records(store)}
    assert sorted(recs) == [1, 2]  # one record per run, written by rank 0 only
    _ddp_checks(recs[2], 2)
    assert recs[1]["ranks"] == []
    assert all(r["threads_intra"] == 1 for r in recs[2]["ranks"])  # bench.threads=1
    [row] = [r for r in scaling_rows(load([store], progress=False).frame) if r["devices"] == 2]
    tp1, tp2 = (recs[n]["measurements"]["throughput_samples_per_s"] for n in (1, 2))
    assert row["scaling_efficiency"] == pytest.approx(tp2 / (2 * tp1))


@pytest.mark.slow
def test_ddp_run_passes_and_records_its_options_and_needs_two_cores(runs):
    """parallel.bucket_cap_mb, gradient_as_bucket_view, static_graph, broadcast_buffers reach each rank's
    DistributedDataParallel and are read back from it (the scaling sweep's 2-rank run, bench.threads=1)."""
    jobs, root = runs
    p = jobs["scaling"]
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = [r for r in records(root / "scaling") if r["config"]["parallel"]["world_size"] == 2]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["config"]["parallel"]["bucket_cap_mb"] == 0.5 and rec["config"]["parallel"]["static_graph"] is True
    ranks = rec["ranks"]
    assert len(ranks) == 2 and len({r["params_sha256"] for r in ranks}) == 1  # trained in step
    for r in ranks:  # read back from each rank's DistributedDataParallel object
        assert (r["ddp_bucket_cap_mb"], r["ddp_gradient_as_bucket_view"], r["ddp_static_graph"],
                r["ddp_broadcast_buffers"], r["ddp_find_unused_parameters"]) == (0.5, True, True, False, False)
        assert r["threads_intra"] == 1 and r["local_world_size"] == 2
        assert r["cpu_cores_needed"] == 2  # 2 ranks x 1 thread on this host, not one rank's 1
        assert r["optimizer_impl"] == "fused"


@pytest.mark.slow
def test_crashing_rank_fails_the_run_with_its_error(runs):
    jobs, root = runs
    p, store = jobs["crash"], root / "crash"
    assert p.returncode == 1
    [rec] = records(store)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("RankFailed: rank 1 failed: RuntimeError: injected fault at step 3")
    failed = rec["ranks"][0]
    assert failed["rank"] == 1 and "injected fault" in failed["error"]
    assert "_inject_fault" in failed["traceback"] or "faulty" in failed["traceback"]
    assert "injected fault" in (store / rec["run_id"] / "traceback.txt").read_text()


@pytest.mark.slow
def test_under_torchrun_ranks_join_and_rank_0_writes_one_record(runs):
    jobs, root = runs
    p, store = jobs["torchrun"], root / "torchrun"
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(store)
    _ddp_checks(rec, 2)
    assert all(r["omp_num_threads_env"] == "1" for r in rec["ranks"])  # torchrun's, overridden:
    assert all(r["threads_intra"] == 1 for r in rec["ranks"])  # 2 cores // 2 ranks here


@pytest.mark.slow
def test_cpu_threads_sweep_records_threads_in_force(runs):
    jobs, root = runs
    p, store = jobs["threads"], root / "threads"
    assert p.returncode == 0, p.stderr[-3000:]
    recs = records(store)
    assert sorted(r["measurements"]["threads_intra"] for r in recs) == [1, 2]
    assert all(r["measurements"]["threads_interop"] == 1 for r in recs)
    assert all(r["measurements"]["cpu_util_percent_mean"] is not None for r in recs)
    rows = normalised_rows(load([store], progress=False).frame, parse_query("experiment=cpu_threads&threads=1"))
    assert {r["threads"]: r["normalised_time"] for r in rows}[1] == 1.0


@pytest.mark.slow
def test_dataparallel_experiment_on_cpu_stops_with_its_reason(runs):
    jobs, root = runs
    p, store = jobs["dataparallel"], root / "dataparallel"
    assert p.returncode == 1
    [rec] = records(store)
    assert rec["status"] == "failed" and "nn.DataParallel without CUDA" in rec["reason"]
    assert rec["measurements"] == {}


def test_slurm_launcher_config_composes_on_submitit():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from tests.conftest import CONF
    from xbench.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        c = compose(config_name="config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                    return_hydra_config=True)
    assert c.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert c.hydra.launcher.partition == "gpu" and c.hydra.launcher.tasks_per_node == 1
