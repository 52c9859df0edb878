"""DistributedDataParallel's options from the config (parallel.bucket_cap_mb, gradient_as_bucket_view,
static_graph, broadcast_buffers, find_unused_parameters): range-checked, refused where DDP does not run,
passed to DDP and read back from it into each rank's record; and a DDP run's host need counted over every
rank on the host (2 ranks x 1 thread need 2 cores). The real run (2 gloo processes on this CPU) is
tests/test_parallel.py::test_ddp_run_passes_and_records_its_options_and_needs_two_cores: the scaling
sweep's 2-rank run passes these options, one 2-rank run for both claims."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xbench.bench.meters import contention
from xbench.bench.meters.contention import ContentionMeter
from xbench.config import XBenchConfig
from xbench.platforms.detect import HostFacts


def _cfg(strategy: str, **parallel) -> XBenchConfig:
    cfg = XBenchConfig()
    cfg.model.name, cfg.data.name, cfg.platform.name, cfg.runtime.name = "mlp", "x", "local", "eager"
    cfg.precision.name, cfg.logger.name, cfg.data.modality = "fp32", "none", "features"
    cfg.parallel.name, cfg.parallel.world_size = strategy, 2
    for k, v in parallel.items():
        setattr(cfg.parallel, k, v)
    return cfg


def _reasons(cfg) -> list[str]:
    from xbench import compat

    return compat.check(cfg, HostFacts(logical_cores=2, torch_version="2.9.0"))


@pytest.mark.parametrize("cap", [0, -1.0, float("nan"), float("inf")])
def test_bucket_cap_must_be_positive_mib(cap):
    [reason] = _reasons(_cfg("ddp", bucket_cap_mb=cap))
    assert reason.startswith(f"parallel.bucket_cap_mb={cap!r} is out of range; allowed: (0, 1e6]"), reason


def test_ddp_options_are_refused_under_another_strategy():
    reasons = _reasons(_cfg("single", static_graph=True, bucket_cap_mb=50.0))
    assert "parallel.static_graph=True is a DistributedDataParallel option: it applies to parallel=ddp, not " \
           "parallel=single" in reasons
    assert any(r.startswith("parallel.bucket_cap_mb=50.0 is a DistributedDataParallel option") for r in reasons)
    assert _reasons(_cfg("ddp", static_graph=True, gradient_as_bucket_view=True, broadcast_buffers=False,
                         find_unused_parameters=True, bucket_cap_mb=0.5)) == []
    assert _reasons(_cfg("single")) == []  # torch's defaults are no option asked


def test_host_need_counts_every_rank_on_the_host():
    assert contention.cores_needed(1, 2) == 2 and contention.cores_needed(3, 2) == 6
    assert contention.cores_needed(4, 2, computes_on_host=False) == 2  # GPU ranks: an issuing thread each
    from xbench.bench.windows import _oversubscribed

    p = SimpleNamespace(threads={"threads_intra": 1})
    before = {"free_cores": 1, "physical_cores": 2, "other_cores": 1.0}
    assert _oversubscribed(p, "cpu", before) == []  # one rank's thread fits in the free core
    [w] = _oversubscribed(p, "cpu", before, ranks_on_host=2)  # two ranks do not
    assert w.startswith("oversubscribed: 2 ranks x 1 thread(s) = 2 threads, but only 1 of 2 physical cores")
    fig = ContentionMeter(threads=1, device_type="cpu", ranks_on_host=2).start().stop()
    assert fig["cpu_cores_needed"] == 2
