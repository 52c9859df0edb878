"""Multi-host SPMD feeding: each host reads and decodes only its share of every global batch.

A pod slice cannot run here, so one fresh SPMD process over 2 PJRT CPU devices plays each of 2 hosts in turn,
with torch-xla's process facts faked. The fake follows torch-xla's documented behaviour: on a multi-host slice
every host runs the same SPMD program, `torch_xla.runtime.process_index()` is this host's index and
`process_count()` the number of hosts (torch_xla/runtime.py); and a `ShardingSpec(..., minibatch=True)` tells
MpDeviceLoader that the tensors a host feeds are its own rows of the global batch (torch-xla checks the per-host
batch divides over the host's addressable devices and assembles the global batch from every host's), where
`minibatch=False` means every host feeds the whole global batch. What the fake cannot show (the global batch
assembled from 2 hosts' rows) torch-xla does; the transfer on this one real host is checked for real."""

from __future__ import annotations

import pytest

from tests.xla_runs import spmd_feed_lines  # noqa: F401  (the fixture)

pytestmark = pytest.mark.xla  # torch-xla's own paths: run in .venv-xla (make test-xla)

HOSTS = """
    import os
    os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    import torch
    import torch_xla.runtime as xr
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
    strategy.wrap(torch.nn.Linear(3, 2).to(dev), dev)
    ds = TensorDataset(torch.arange(120.).reshape(40, 3), torch.arange(40))  # sample i: features 3i.., label i
    data = DataConfig(name="t", source="mnist", batch_size=4)
    GLOBAL = 8  # samples per step of the one SPMD rank (what bench/worker.py asks the strategy for)
    for host in (0, 1):
        xr.process_index, xr.process_count = (lambda h=host: h), (lambda: 2)  # the fake: host `host` of 2
        reader, readers, batch = strategy.feed_share(GLOBAL)
        loader = make_loader(ds, data, reader, readers, seed=3, batch_size=batch)
        nxt = host_batches(loader)
        epoch = [nxt()[1].tolist() for _ in range(len(loader))]
        spec = strategy.feed_sharding()
        print(f"host{host}: {reader} {readers} {batch} {type(loader.sampler).__name__} {epoch}")
        print(f"spec{host}: {spec.minibatch} {spec.by_rank[1].minibatch} {spec.partition_spec}")
    try:
        strategy.feed_share(6 + 1)
    except ValueError as e:
        print("uneven:", e)
    xr.process_index, xr.process_count = (lambda: 0), (lambda: 1)  # this host as it is: one of one
    print("one:", strategy.feed_share(GLOBAL), type(make_loader(ds, data, *strategy.feed_share(GLOBAL)[:2], seed=3,
                                                               batch_size=GLOBAL).sampler).__name__)
    # The real transfer of a host's rows with minibatch=True (one host: its rows are the global batch).
    fed = rx.DeviceFeed(make_loader(ds, data, 0, 1, seed=3, batch_size=4), dev, None, strategy.feed_sharding())
    x, y = fed()
    print("fed:", tuple(x.shape), rx.sharding_spec(x), rx.sharding_spec(y),
          [tuple(s.data.shape) for s in XLAShardedTensor(x).local_shards])
"""


@pytest.fixture
def hosts(spmd_feed_lines):  # noqa: F811  (the fixture)
    """HOSTS' printed lines: one fresh SPMD process runs it after test_xla_feed.py's PIECES (tests/xla_runs.py)."""
    return spmd_feed_lines


@pytest.mark.slow  # a fresh SPMD process, transfers only (no graph compiles)
def test_each_host_reads_only_its_share_of_every_global_batch(hosts):
    """Host i of 2 reads with a DistributedSampler over the hosts (rank i of 2), 4 of each step's 8 samples:
    the two hosts' shares are disjoint and together are the whole data set once per epoch (40 samples, 5
    steps of 8). Before: every host read the whole global batch of 8 (a RandomSampler over everything)."""
    shares = []
    for host in (0, 1):
        reader, readers, batch, sampler, epoch = hosts[f"host{host}"].split(" ", 4)
        assert (int(reader), int(readers), int(batch), sampler) == (host, 2, 4, "DistributedSampler")
        epoch = eval(epoch)  # noqa: S307 - the list this test's own script printed
        assert len(epoch) == 5 and all(len(b) == 4 for b in epoch)  # 5 steps, 4 samples per host per step
        shares.append({i for b in epoch for i in b})
    assert len(shares[0]) == len(shares[1]) == 20 and not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(range(40))
    assert hosts["one"] == "(0, 1, 8) RandomSampler"  # one host: the whole global batch, as before


@pytest.mark.slow
def test_a_host_feeds_its_rows_with_a_minibatch_sharding_spec(hosts):
    """The feed's ShardingSpec says the host's tensors are its rows of the global batch (minibatch=True), for
    inputs and targets alike, split along dim 0 over the mesh; on this real host it transfers: 4 rows, each
    device holding 2. Before: minibatch=False (every host the whole global batch). A global batch that does
    not split over the hosts is refused in one line."""
    for host in (0, 1):
        assert hosts[f"spec{host}"] == "True True ('data',)"
    assert hosts["fed"] == "(4, 3) {devices=[2,1]0,1} {devices=[2]0,1} [(2, 3), (2, 3)]"
    assert hosts["uneven"] == ("the global batch of 7 samples does not split over 2 hosts: use a data.batch_size "
                               "that gives every host the same share")
