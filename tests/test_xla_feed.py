"""Real data onto XLA devices, for real on PJRT CPU: through torch-xla's MpDeviceLoader (background
host-to-device transfer), and under SPMD transferred already split over the mesh's `data` axis (each
device receives only its shard; before, the whole batch went replicated and `place_batch` resharded it
on every step). Synthetic data keeps its path: generated on the host once, moved, annotated once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FAST, REPO, records
from tests.jobs import Jobs
from tests.test_xla_parallel import _ended, _xla_env
from tests.xla_runs import shared_runs, spmd_feed_lines  # noqa: F401  (the fixture: PIECES' printed lines)

pytestmark = pytest.mark.xla  # torch-xla's own paths: run in .venv-xla (make test-xla)

PIECES = """
    import os
    os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    import torch
    import torch_xla.debug.metrics as met
    from torch.utils.data import TensorDataset
    from torch_xla.distributed.spmd import XLAShardedTensor
    from xbench.config import DataConfig, ParallelConfig
    from xbench.data.feed import host_batches, make_loader
    from xbench.parallel.xla_spmd import XlaSpmd
    from xbench.rank import RankContext
    from xbench.runtimes import xla as rx

    rx.enable_spmd()
    dev = rx.init_device()
    strategy = XlaSpmd(ParallelConfig(name="xla_spmd"), RankContext(devices_per_rank=2))
    strategy.wrap(torch.nn.Linear(2, 2).to(dev), dev)
    ds = TensorDataset(torch.arange(60.).reshape(20, 3), torch.arange(20))  # 5 batches of 4 per epoch
    data = DataConfig(name="t", source="mnist", batch_size=4)
    fed = rx.DeviceFeed(make_loader(ds, data, 0, 1, seed=3), dev, None, strategy.feed_sharding())
    plain = host_batches(make_loader(ds, data, 0, 1, seed=3))
    plain0 = host_batches(make_loader(ds, data, 0, 1, seed=3))()
    transfers = lambda: (met.metric_data("TransferToDeviceTime") or (0,))[0]
    print("feed:", fed.feed, fed.prefetch)
    for i in range(12):  # across 3 epochs: the plain feed's batches, in its order
        x, y = fed()
        hx, hy = plain()
        assert torch.equal(x.cpu(), hx) and torch.equal(y.cpu(), hy), i
    x, y = fed()
    print("specs:", rx.sharding_spec(x), rx.sharding_spec(y))
    print("shards:", [tuple(s.data.shape) for s in XLAShardedTensor(x).local_shards],
          [tuple(s.data.shape) for s in XLAShardedTensor(y).local_shards])
    before = transfers()
    px, py = strategy.place_batch(x, y)
    print("placed:", px is x and py is y, transfers() - before, strategy.input_sharding)
    rep = torch.zeros(4, 3).to(dev), torch.zeros(4, dtype=torch.long).to(dev)  # the synthetic pool's batches
    print("replicated:", repr(rx.sharding_spec(rep[0])))
    sx, sy = strategy.place_batch(*rep)
    print("synthetic:", rx.sharding_spec(sx), rx.sharding_spec(sy))
    prepared = rx.DeviceFeed(make_loader(ds, data, 0, 1, seed=3), dev, lambda x: x * 2,
                             strategy.feed_sharding())  # prepare's output: an IR node, unannotated
    cx, cy = prepared()
    before, spec = transfers(), repr(rx.sharding_spec(cx))
    cx, cy = strategy.place_batch(cx, cy)
    print("prepared:", spec, rx.sharding_spec(cx), transfers() - before, torch.equal(cx.cpu(), plain0[0] * 2))
    whole = rx.DeviceFeed(make_loader(ds, data, 0, 1, seed=3), dev)  # no input_sharding: xla_mp, one device
    print("whole:", whole.feed, repr(rx.sharding_spec(whole()[0])))
"""


def _run(store, *args) -> tuple[int, str]:
    return _ended(_start(store, *args), 900)  # wider than one run's alone: runs started together share the cores


DIGITS = ("test_spmd_on_real_digits_feeds_shards_and_trains_like_one_device",)


def submit_runs(jobs: Jobs, root) -> None:
    """The module's CLI runs (tests/jobs.py): the digits test checks both."""
    jobs.submit("spmd", _run, root / "spmd", "parallel=xla_spmd", "parallel.world_size=2", "data.batch_size=16",
                tests=DIGITS)
    jobs.submit("one", _run, root / "one", "runtime=xla", "data.batch_size=32", tests=DIGITS)


@pytest.fixture(scope="module", autouse=True)  # started before the module's first test
def runs(request, tmp_path_factory):
    """(jobs, root): started with test_xla_mp's and test_xla_parallel's, in one pool (tests/xla_runs.py)."""
    return shared_runs(request, tmp_path_factory)


@pytest.mark.slow  # a fresh SPMD process (SPMD switches its whole process): ~13 s, the largest of test-fast
@pytest.mark.xla
def test_spmd_feed_sends_each_device_its_shard_and_place_batch_leaves_it_be(spmd_feed_lines):  # noqa: F811
    """One fresh SPMD process over 2 PJRT CPU devices, transfers only (no graph compiles; PIECES, run with
    test_xla_multihost_feed.py's script in that one process: tests/xla_runs.py): batches come
    through MpDeviceLoader with the batch sharding, each device holding half the batch; place_batch
    neither re-annotates nor transfers them again (a batch that `prepare` changed on the device is annotated
    in the graph, no transfer either); a batch already on the device unsharded (the
    synthetic pool) is still annotated by place_batch. Before: no feed_sharding, no DeviceFeed."""
    out = spmd_feed_lines
    assert out["feed"] == "spmd_sharded True"
    assert out["specs"] == "{devices=[2,1]0,1} {devices=[2]0,1}"  # inputs and targets: dim 0 over 2 devices
    assert out["shards"] == "[(2, 3), (2, 3)] [(2,), (2,)]"  # each device holds its 2 of the 4 samples
    assert out["placed"] == "True 0 {devices=[2,1]0,1}"  # same tensors, no transfer, the spec recorded
    assert out["replicated"] == "''"
    assert out["synthetic"] == "{devices=[2,1]0,1} {devices=[2]0,1}"
    assert out["prepared"] == "'' {devices=[2,1]0,1} 0 True"  # annotated in the graph, not transferred again
    assert out["whole"] == "mp_device_loader '{replicated}'"  # the whole batch on every device, as the old path sent it


def _start(store, *args):
    cmd = [sys.executable, "-m", "xbench", f"store.root={store}", *FAST, "model=mlp", "model.options.hidden=32",
           "data=digits", "optim.lr=0.05", "bench.threads=1", *args]
    return subprocess.Popen(cmd, cwd=REPO, env=_xla_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
@pytest.mark.xla
def test_spmd_on_real_digits_feeds_shards_and_trains_like_one_device(runs):
    """scikit-learn's digits (real files' path: DataLoader, per-rank sampler) under SPMD over 2 PJRT CPU
    devices at 16 per device, beside one XLA device at 32: the same batches, so the same losses (to
    1e-5: the sharded mean rounds differently in the last bits; measured ~1e-7); no compiles in the
    timed window; the batch arrived split over the mesh. Before: the whole batch went to the device
    replicated and was resharded each step (the record said neither data_feed nor how)."""
    jobs, root = runs
    for key in ("spmd", "one"):
        code, out = jobs[key]
        assert code == 0, out[-3000:]
    [spmd], [one] = records(root / "spmd"), records(root / "one")
    assert spmd["status"] == "ok" and one["status"] == "ok", (spmd["reason"], one["reason"])
    m, m1 = spmd["measurements"], one["measurements"]
    assert (m["data_feed"], m["data_prefetch"]) == ("spmd_sharded", True)
    assert (m1["data_feed"], m1["data_prefetch"]) == ("mp_device_loader", True)
    assert m["xla_spmd_input_sharding"] == "{devices=[2,1]0,1}"  # (32, 64) features split along the batch
    assert m["global_batch_size"] == 32 == m1["global_batch_size"] and m["devices"] == 2
    assert m["compiles_timed"] == 0 == m1["compiles_timed"]
    a, b = spmd["series"]["loss"], one["series"]["loss"]
    n = min(len(a), len(b))
    assert n >= 6
    assert a[:n] == pytest.approx(b[:n], rel=1e-5)
