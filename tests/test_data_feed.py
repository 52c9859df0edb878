"""Real data into the loop on CUDA: pinned host batches, non-blocking copies, one batch ahead on a side
stream (xbench/data/feed.py); on the CPU the feed is what it was.

No GPU here. The loaders are real and are inspected as built for a CUDA device (a DataLoader takes
pin_memory=True without a GPU; it pins only when iterated). The side-stream ordering is checked against
a fake of torch.cuda's stream API built from its documentation: `torch.cuda.Stream(device)`; the
`torch.cuda.stream(s)` context makes `s` the current stream, so work issued inside it is queued on `s`;
`torch.cuda.current_stream(device)` is the stream work is queued on now; `a.wait_stream(b)` makes work
queued on `a` afterwards wait for all work queued on `b` so far (an event recorded on b now); and
`Tensor.record_stream(s)` tells the caching allocator the tensor is used on `s`, so its memory is not
reused before the work queued there has finished.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from xbench.bench.epochs import EvalShard, TrainFeed
from xbench.config import DataConfig
from xbench.data.feed import OneAhead, device_feed, host_batches, make_loader

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def _data(**kw):
    return DataConfig(name="t", source="mnist", batch_size=5, **kw)


def _set(n=20):
    return TensorDataset(torch.arange(n).float().unsqueeze(1), torch.arange(n))


def test_the_loader_for_a_cuda_device_pins_its_batches():
    """Before: pin_memory came from data.pin_memory alone (False by default), so CUDA was fed pageable memory."""
    assert make_loader(_set(), _data(), 0, 1, seed=0, device=CUDA).pin_memory is True
    assert make_loader(_set(), _data(), 0, 1, seed=0, device=CPU).pin_memory is False  # the CPU: as before
    assert make_loader(_set(), _data(), 0, 1, seed=0).pin_memory is False
    assert make_loader(_set(), _data(pin_memory=False), 0, 1, seed=0, device=CUDA).pin_memory is False  # asked off
    assert make_loader(_set(), _data(pin_memory=True), 0, 1, seed=0, device=CPU).pin_memory is True  # asked on
    # train-to-target's loaders too (a data set not held as tensors goes through a DataLoader)
    assert TrainFeed(_set(), 0, 1, 5, 0, _data(), device=CUDA).pin and not TrainFeed(_set(), 0, 1, 5, 0, _data()).pin
    assert EvalShard(_set(), 0, 1, 5, _data(), device=CUDA).pin


def test_one_ahead_gives_the_plain_feed_batches_in_order_across_epochs():
    """Real loaders over two ranks (DistributedSampler, reshuffled per epoch), 3 epochs of 2 batches: the
    one-ahead iterator hands over exactly the batches, and the order, the plain feed gives; the CPU feed is
    the plain one (no prefetch), with the inputs prepared once."""
    for rank in (0, 1):
        plain = device_feed(make_loader(_set(), _data(), rank, 2, seed=7), CPU, prepare=lambda x: x * 2)
        assert plain.prefetch is False
        ahead = OneAhead(host_batches(make_loader(_set(), _data(), rank, 2, seed=7)), lambda x, y: (x * 2, y))
        for _ in range(6):
            (xa, ya), (xb, yb) = plain(), ahead()
            assert torch.equal(xa, xb) and torch.equal(ya, yb) and torch.equal(xa[:, 0], 2 * ya.float())


class _FakeStreams:
    """torch.cuda's streams as documented (module doc): which stream each copy was queued on, what each
    wait covered, which tensors were recorded on which stream."""

    def __init__(self, monkeypatch):
        self.default = SimpleNamespace(name="default", device=CUDA, queued=0, waits=[])
        self.current = self.default
        self.recorded = []  # (tensor, stream)
        fake = self

        class Stream(SimpleNamespace):
            def __init__(self, device=None):
                super().__init__(name="side", device=device, queued=0, waits=[])

            def wait_stream(self, other):
                self.waits.append(other.queued)

        def wait_stream(self, other):
            self.waits.append(other.queued)

        self.default.wait_stream = wait_stream.__get__(self.default)

        @contextlib.contextmanager
        def stream(s):
            before, fake.current = fake.current, s
            try:
                yield
            finally:
                fake.current = before

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: fake.current)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: fake.recorded.append((t, s)), raising=False)


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator")
def test_on_cuda_each_copy_runs_on_the_side_stream_and_the_step_waits_for_it(monkeypatch):
    """The fake streams above. Each batch is copied on the side stream one call early; before it is handed
    over, the step's (default) stream waits for everything queued on the side stream up to that batch's
    copy, and both of its tensors are recorded on the step's stream. Before: no prefetch, no stream."""
    fake = _FakeStreams(monkeypatch)
    side = torch.cuda.Stream(CUDA)
    host = iter([(torch.full((2, 1), float(i)), torch.full((2,), i)) for i in range(4)])
    where = []

    def move(x, y):  # the copy: queued on whatever stream is current
        fake.current.queued += 1
        where.append(fake.current.name)
        return x + 0, y + 0

    feed = OneAhead(lambda: next(host), move, side)
    assert where == []  # nothing moves while the rank is being built
    for i in range(3):
        x, y = feed()
        assert int(y[0]) == i and float(x[0, 0]) == i  # the batches in order
        assert fake.default.waits[-1] >= i + 1  # the wait covers batch i's copy (the (i+1)-th queued)
        assert [s for t, s in fake.recorded[-2:]] == [fake.default, fake.default]
        assert fake.recorded[-2][0] is x and fake.recorded[-1][0] is y
        assert fake.current is fake.default  # the step itself is queued on its own stream
        assert len(where) == i + 2  # batch i+1 is on its way while step i runs
    assert where == ["side"] * 4 and side.waits == [] and fake.default.queued == 0
    feed_cuda = device_feed(make_loader(_set(), _data(), 0, 1, seed=0, device=CUDA), CUDA)
    assert feed_cuda.prefetch is True and isinstance(feed_cuda, OneAhead) and feed_cuda.stream.device == CUDA


def test_the_rank_says_whether_its_data_was_pinned_and_prefetched():
    """A real rank on digits (CPU): the figures say the feed is the plain one. Before: neither figure."""
    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench.worker import prepare_rank
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["model=mlp", "data=digits", "platform=cpu", "logger=none"]))
    p = prepare_rank(resolve(cfg, host_facts()), RankContext(threads=1))
    assert p.data_info["data_pinned"] is False and p.data_info["data_prefetch"] is False
    x, y = p.hooks.next_batch()
    assert x.shape == (32, 64) and y.shape == (32,)
