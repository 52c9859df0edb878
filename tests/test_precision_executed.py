"""The record states the precision the hardware executed, read back in the rank: the autocast and parameter dtypes,
TF32 on CUDA and torch_xla's matmul precision. fp32 on XLA must run at `highest` (torch_xla's `default` is one bf16
pass per matmul on a TPU); checked against XLA's own HLO dump of the step's graphs, not only the record."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.conftest import CONF, FAST, REPO, cli_env, records, run_cli
from tests.jobs import Jobs
from xbench.config import register_configs

TINY = ("model=mlp", "model.options.hidden=32", "data=synthetic_mnist", "data.batch_size=16", "bench.threads=1",
        "optim.lr=0.05")
XLA_RUN = ("runtime=xla", *TINY, *FAST, "bench.profile=xla")  # profile=xla: XLA dumps every graph's HLO
DOT = re.compile(r"= (\S+) (?:dot|convolution)\((.*)$", re.M)  # a matmul or convolution: its type, operands


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("precision_executed")
    xla = cli_env(PJRT_DEVICE="CPU")
    with Jobs(request, workers=3) as jobs:  # three independent processes, mostly one thread each
        jobs.submit("xla_fp32", run_cli, *XLA_RUN, "precision=fp32", store=root / "xla_fp32", env=xla,
                    tests=("test_fp32_on_xla_runs_every_matmul_at_highest",))
        jobs.submit("xla_amp_bf16", run_cli, *XLA_RUN, "precision=amp_bf16", store=root / "xla_amp_bf16", env=xla,
                    tests=("test_amp_bf16_on_xla_records_default_and_multiplies_in_bf16",))
        jobs.submit("eager", run_cli, "-m", "runtime=eager", "precision=fp32,amp_bf16", *TINY, *FAST,
                    store=root / "eager", tests=("test_an_eager_cpu_run_records_what_it_executed",))
        yield jobs, root


def _record(runs, key: str) -> tuple[dict, Path]:
    jobs, root = runs
    p = jobs[key]
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = records(root / key)
    return rec, next((root / key).glob("*/record.json")).parent


def _dots(run_dir: Path) -> list[tuple[str, str]]:
    """(result type, operands and attributes) of every dot/convolution in the HLO XLA was handed (before its own
    optimisations) for this run's graphs."""
    files = sorted(run_dir.glob("profile/xla/dump/*before_optimizations.txt"))
    assert files, f"no HLO dump under {run_dir}/profile/xla/dump"
    return [m.groups() for f in files for m in DOT.finditer(f.read_text())]


@pytest.mark.xla
def test_fp32_on_xla_runs_every_matmul_at_highest(runs):
    rec, run_dir = _record(runs, "xla_fp32")
    dots = _dots(run_dir)  # what XLA was given to compile: the independent evidence
    assert len(dots) >= 6, dots  # the MLP's two layers: forward, and both gradients of each
    slow = [d for d in dots if "operand_precision={highest,highest}" not in d[1]]
    assert not slow, f"matmuls lowered below highest under precision=fp32: {slow[:3]}"
    assert all(t.startswith("f32[") for t, _ in dots)
    m = rec["measurements"]
    # read back from torch_xla inside the rank, after the run (not copied from the config)
    assert m["xla_mat_mul_precision"] == "highest"
    assert (m["autocast_dtype"], m["param_dtype"], m["compute_dtype"]) == (None, "float32", "fp32")


@pytest.mark.xla
def test_amp_bf16_on_xla_records_default_and_multiplies_in_bf16(runs):
    rec, run_dir = _record(runs, "xla_amp_bf16")
    m = rec["measurements"]
    assert m["xla_mat_mul_precision"] == "default"
    assert (m["autocast_dtype"], m["param_dtype"], m["compute_dtype"]) == ("bfloat16", "float32", "bf16")
    dots = _dots(run_dir)
    assert dots and not [d for d in dots if "highest" in d[1]]
    assert all(t.startswith("bf16[") for t, _ in dots), [t for t, _ in dots]  # autocast reached every matmul


@pytest.mark.slow  # over 3 s: make test-fast's budget
def test_an_eager_cpu_run_records_what_it_executed(runs):
    jobs, root = runs
    p = jobs["eager"]
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["config"]["precision"]["name"]: r["measurements"] for r in records(root / "eager")}
    assert set(recs) == {"fp32", "amp_bf16"}
    assert (recs["fp32"]["autocast_dtype"], recs["fp32"]["param_dtype"]) == (None, "float32")
    assert (recs["amp_bf16"]["autocast_dtype"], recs["amp_bf16"]["param_dtype"]) == ("bfloat16", "float32")
    for m in recs.values():  # no XLA matmul precision nor CUDA TF32 on the CPU: nothing claimed that did not run
        assert not {"xla_mat_mul_precision", "cuda_matmul_tf32", "cudnn_conv_tf32"} & set(m)
    # The same seed and batches: bf16 autocast moves the first loss (bf16 keeps ~3 digits), fp32 would not.
    first = recs["fp32"]["loss_first"], recs["amp_bf16"]["loss_first"]
    assert 1e-6 < abs(first[0] - first[1]) < 0.05 * first[0], first


TF32_READBACK = """
import json, torch
from xbench.precision import resolve, tf32_in_force
out = {}
for name in ("tf32", "fp32", "tf32"):  # torch's state as each policy leaves it, read back from torch itself
    p = resolve(name, "cuda")
    out.setdefault(name, []).append({**tf32_in_force(), "record": p.executed()})
print(json.dumps(out))
"""


def test_tf32_on_cuda_is_read_back_from_torch_state():
    """set_tf32 writes torch's per-backend state; the record reads that state back (a CPU build keeps it too)."""
    p = subprocess.run([sys.executable, "-c", TF32_READBACK], cwd=REPO, env=cli_env(), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    keys = ("cuda_matmul_tf32", "cudnn_conv_tf32", "cudnn_rnn_tf32")
    for name, on in (("tf32", True), ("fp32", False)):
        for read in out[name]:
            assert all(read[k] is on for k in keys), (name, read)
            assert all(read["record"][k] is on for k in keys), (name, read["record"])
            assert read["record"]["autocast_dtype"] is None and read["record"]["tf32_api"]


def test_resnet50_tpu_runs_study_1s_tpu_precision():
    """The TPU preset trains as study 1's TPU side did (mixed bf16), in its small command and its full one."""
    manifest = yaml.safe_load((REPO / "xbench" / "studies" / "studies.yaml").read_text())
    studies = {s["id"]: s for s in manifest["studies"]}
    study1 = {e["id"]: e for e in studies["tpu_vs_gpu"]["full_scale"]}["tpu_synthetic"]["expect"]["precision"]
    assert study1 == "amp_bf16"
    tpu = studies["resnet50_tpu"]
    register_configs()
    for command in (tpu["small"]["command"], *(e["command"] for e in tpu["full_scale"])):
        overrides = command.split("python -m xbench", 1)[1].split()
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = OmegaConf.to_object(compose(config_name="config", overrides=overrides))
        assert cfg.precision.name == study1, command
