"""Workload presets compose, and a run on real-format files trains and one on a missing data set fails with its
record (through the Python API in this process: the CLI's runner; tests/test_cli.py has the CLI's exit statuses)."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

import xbench
from tests.conftest import CONF, FAST, records
from tests.test_config import _compose
from tests.test_loaders import _write_idx
from xbench.compat import check
from xbench.platforms.detect import host_facts


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "workload").glob("*.yaml")))
def test_every_workload_composes_and_passes_compat(name):
    cfg = OmegaConf.to_object(_compose([f"+workload={name}"]))
    assert check(cfg, host_facts()) == []


def test_cpu_vs_gpu_zoo_sweeps_the_studys_six_workloads():
    # The sweep lives in the file's hydra node (compose() leaves hydra out of the job config).
    six = ["bilstm_imdb", "char_lstm_nietzsche", "cnn_mnist", "fasttext_imdb", "mlp_mnist", "vgg_cifar10"]
    for preset in ("cpu_vs_gpu_zoo", "cpu_vs_gpu"):
        swept = OmegaConf.load(CONF / "experiment" / f"{preset}.yaml").hydra.sweeper.params["workload"]
        assert sorted(swept.split(",")) == six, preset


@pytest.mark.parametrize("data", ["imagenet", "cifar10", "mnist", "imdb", "sentiment140", "nietzsche"])
def test_real_data_config_with_missing_path_is_refused_before_device_work(data, tmp_path):
    model = {"imagenet": "resnet18", "cifar10": "vgg_cifar", "mnist": "mlp", "imdb": "bilstm",
             "sentiment140": "bilstm", "nietzsche": "char_lstm"}[data]
    missing = tmp_path / "absent"
    cfg = OmegaConf.to_object(_compose([f"model={model}", f"data={data}", f"data.path={missing}"]))
    [reason] = check(cfg, host_facts())
    assert str(missing) in reason and "expects" in reason


def test_model_task_must_match_the_real_data_targets(tmp_path):
    cfg = OmegaConf.to_object(_compose(["model=char_lstm", "data=imdb", f"data.path={tmp_path}"]))
    assert any("trains on lm targets" in r for r in check(cfg, host_facts()))


@pytest.mark.slow
def test_a_run_trains_on_real_mnist_files_and_reports_data_wait(store, tmp_path, capsys):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 64), ("t10k", 16)):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                   2051, True)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8), 2049, True)
    done = xbench.run([*FAST, "model=mlp", "model.options.hidden=32", "data=mnist", f"data.path={tmp_path}",
                       "data.batch_size=16", "data.num_workers=1", f"store.root={store}"])
    assert done.status == "ok", done.reason
    [rec] = records(store)
    m = rec["measurements"]
    assert rec["status"] == "ok"
    assert m["data_source"] == "mnist" and m["data_train_samples"] == 64 and m["data_eval_samples"] == 16
    # 4 batches per epoch, so the run crossed epochs; the wait for data is measured and reported.
    assert m["warmup_steps"] + 5 > 4
    assert 0 < m["data_wait_fraction"] < 1
    assert "waiting for data" in capsys.readouterr().out  # the console's summary line


@pytest.mark.slow
def test_a_missing_data_path_fails_the_run_with_a_record_naming_it(store, tmp_path):
    missing = tmp_path / "no_cifar_here"
    done = xbench.run([*FAST, "model=vgg_cifar", "data=cifar10", f"data.path={missing}", f"store.root={store}"])
    assert done.status == "failed"  # the CLI exits 1 on it
    [rec] = records(store)
    assert rec["status"] == "failed" and rec["measurements"] == {}
    assert str(missing) in rec["reason"] and "data_batch_1" in rec["reason"]
