"""The meters (xbench/bench/meters/): NVML handles by CUDA identity, whose PIDs NVML reports, energy per
window, and one protocol that ends every thread on every path.

No GPU and no NVIDIA driver here, so NVML is faked (`FakeNVML`), built from pynvml's documented API
(nvidia-ml-py; NVML's reference manual): `nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex` in NVML's
enumeration order, which is PCI bus order and ignores CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER;
`nvmlDeviceGetHandleByUUID` ("GPU-<uuid>"), `nvmlDeviceGetHandleByPciBusId` ("dddddddd:bb:dd.f"),
`nvmlDeviceGetUUID`, `nvmlDeviceGetPciInfo` (.domain, .bus, .device, .busId),
`nvmlDeviceGetComputeRunningProcesses` (objects with .pid, .usedGpuMemory; the PIDs are the host's PID
namespace's, as NVML reports them from inside a container), `nvmlDeviceGetUtilizationRates` (.gpu %),
`nvmlDeviceGetMemoryInfo` (bytes), `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded),
`nvmlDeviceGetPowerUsage` (mW); NVMLError for an unknown device; init/shutdown reference counted. Its
energy counter advances with a clock the test moves, so the joules of a window are known. Where a test
needs "torch.cuda is initialised and holds a context" it fakes torch.cuda's documented calls
(`is_initialized`, `get_device_properties(i).uuid` / `.pci_*`, `torch._C._cuda_hasPrimaryContext`).
"""

from __future__ import annotations

import os
import sys
import threading
import types
from types import SimpleNamespace

import pytest
import torch

from tests.test_cuda_paths import _FakeCudaMemory
from xbench.bench import meters
from xbench.bench.meters import contention, nvml
from xbench.bench.meters.contention import ContentionMeter
from xbench.bench.meters.energy import EnergyMeter
from xbench.bench.meters.memory import MemoryMeter
from xbench.bench.meters.utilisation import UtilisationMeter

GIB = 2**30

# Four GPUs on the host. NVML enumerates them in PCI bus order; each has its own figures, so a reading
# from the wrong GPU shows. This process's CUDA context is host PID 4_000_001 (above any pid_max here).
GPUS = [  # (uuid, (domain, bus, device), utilisation %, power W)
    ("GPU-aaaaaaaa-0000-0000-0000-000000000001", (0, 0x07, 0), 11.0, 100.0),
    ("GPU-bbbbbbbb-0000-0000-0000-000000000002", (0, 0x0F, 0), 22.0, 200.0),
    ("GPU-cccccccc-0000-0000-0000-000000000003", (0, 0x47, 0), 33.0, 300.0),
    ("GPU-dddddddd-0000-0000-0000-000000000004", (0, 0x4E, 0), 44.0, 400.0),
]
HOST_PID_OF_THIS_PROCESS = 4_000_001
HOST_PID_OF_ANOTHER_JOB = 4_000_777


class NVMLError(Exception):
    pass


class FakeNVML(types.ModuleType):
    """pynvml as documented (see the module doc), over `GPUS`; `procs[nvml_index]` = [(pid, bytes)]."""

    NVMLError = NVMLError

    def __init__(self, gpus=GPUS):
        super().__init__("pynvml")
        self.gpus = list(gpus)
        self.procs: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(gpus))}
        self.clock_s = 0.0
        self.inits = 0
        self.reads: list[int] = []  # NVML indices whose utilisation or energy was read

    def advance(self, seconds: float) -> None:
        self.clock_s += seconds

    # ---- the documented API ----
    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        if self.inits <= 0:
            raise NVMLError("NVML_ERROR_UNINITIALIZED")
        self.inits -= 1

    def _check(self):
        if self.inits <= 0:
            raise NVMLError("NVML_ERROR_UNINITIALIZED")

    def nvmlDeviceGetCount(self):
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check()
        if not 0 <= i < len(self.gpus):
            raise NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return SimpleNamespace(nvml_index=i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._check()
        for i, g in enumerate(self.gpus):
            if g[0] == uuid:
                return SimpleNamespace(nvml_index=i)
        raise NVMLError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self._check()
        dom, bus, rest = bus_id.split(":")
        key = (int(dom, 16), int(bus, 16), int(rest.split(".")[0], 16))
        for i, g in enumerate(self.gpus):
            if g[1] == key:
                return SimpleNamespace(nvml_index=i)
        raise NVMLError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetUUID(self, h):
        return self.gpus[h.nvml_index][0]

    def nvmlDeviceGetPciInfo(self, h):
        d, b, dev = self.gpus[h.nvml_index][1]
        return SimpleNamespace(domain=d, bus=b, device=dev, busId=f"{d:08x}:{b:02x}:{dev:02x}.0")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.procs[h.nvml_index]]

    def nvmlDeviceGetUtilizationRates(self, h):
        self.reads.append(h.nvml_index)
        return SimpleNamespace(gpu=self.gpus[h.nvml_index][2], memory=5.0)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h.nvml_index + 1) * 2**30, total=80 * 2**30, free=0)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._check()
        self.reads.append(h.nvml_index)
        return int(self.gpus[h.nvml_index][3] * self.clock_s * 1000)  # mJ

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self.gpus[h.nvml_index][3] * 1000)  # mW


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(var, raising=False)
    yield fake
    assert fake.inits == 0  # every meter shut down what it initialised


def _fake_cuda(monkeypatch, ordinals_to_nvml: list[int], held: set[int] | None = None):
    """torch.cuda initialised in this process, its ordinals being the given GPUS (its own numbering)."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def props(i):
        uuid, (d, b, dev), *_ = GPUS[ordinals_to_nvml[i]]
        return SimpleNamespace(uuid=uuid.removeprefix("GPU-"), pci_domain_id=d, pci_bus_id=b, pci_device_id=dev)

    monkeypatch.setattr(torch.cuda, "get_device_properties", props)
    monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext",
                        lambda i: i in (held if held is not None else set(range(len(ordinals_to_nvml)))),
                        raising=False)


def _mapped(fake, ordinals):
    with nvml.session() as m:
        return {i: h.nvml_index for i, h in nvml.handles(m, ordinals).items()}


# ---------- which GPU a CUDA ordinal is ----------


def test_cuda_ordinals_map_to_their_nvml_device_under_a_remapped_visible_devices(fake_nvml, monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,3 (a SLURM allocation): CUDA device 0 is NVML's 2. By index that read GPU 0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert _mapped(fake_nvml, [0, 1]) == {0: 2, 1: 3}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")  # CUDA's order is the list's
    assert _mapped(fake_nvml, [0, 1]) == {0: 3, 1: 1}
    # By UUID (or a unique prefix of one), whatever CUDA_DEVICE_ORDER says.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-dddddddd-0000-0000-0000-000000000004,GPU-bbbb")
    assert _mapped(fake_nvml, [0, 1]) == {0: 3, 1: 1}


def test_nvml_bus_order_is_read_from_the_pci_ids_not_from_nvml_indices(monkeypatch):
    """CUDA_DEVICE_ORDER=PCI_BUS_ID means bus order; the mapping sorts by NVML's PCI info."""
    fake = FakeNVML([GPUS[2], GPUS[0], GPUS[1]])  # an NVML that enumerates out of bus order
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _mapped(fake, [0]) == {0: 1}  # bus 0x07 is NVML's index 1 here


def test_the_mapping_refuses_to_guess_cuda_fastest_first_order(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(nvml.Unmapped, match="CUDA_DEVICE_ORDER=FASTEST_FIRST.*PCI_BUS_ID"):
        _mapped(fake_nvml, [0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ffff")
    with pytest.raises(nvml.Unmapped, match="matches 0 of NVML's 4 GPUs"):
        _mapped(fake_nvml, [0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    with pytest.raises(nvml.Unmapped, match="CUDA device 1, but CUDA_VISIBLE_DEVICES='2' leaves 1"):
        _mapped(fake_nvml, [1])


def test_one_gpu_needs_no_order(monkeypatch):
    fake = FakeNVML(GPUS[:1])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert _mapped(fake, [0]) == {0: 0}


def test_visible_devices_parsed_as_cuda_parses_them():
    assert nvml.visible_devices(None) is None
    assert nvml.visible_devices("2,3") == [2, 3]
    assert nvml.visible_devices("1gpu,0") == [1, 0]  # strtoul: the leading digits
    assert nvml.visible_devices("0,-1,2") == [0]  # the list ends at the first non-index
    assert nvml.visible_devices("0,0") == []  # a repeat hides every GPU
    assert nvml.visible_devices("GPU-ab,MIG-cd,3") == ["GPU-ab", "MIG-cd"]


def test_initialised_cuda_names_its_devices_by_uuid_whatever_the_environment(fake_nvml, monkeypatch):
    """Inside the windows torch.cuda is initialised: CUDA's own uuid decides (the environment would mislead:
    FASTEST_FIRST with indices is refused above)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    _fake_cuda(monkeypatch, [2, 1])  # CUDA put the faster (bus 0x47) first
    assert _mapped(fake_nvml, [0, 1]) == {0: 2, 1: 1}
    # A CUDA uuid NVML does not know (a MIG instance seen by an older driver): the PCI bus id names it.
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(uuid="feedface", pci_domain_id=0, pci_bus_id=0x4E, pci_device_id=0))
    assert _mapped(fake_nvml, [0]) == {0: 3}


def _metered(meter, windows: int = 1):
    with meter:
        for _ in range(windows):
            with meter.window():
                pass
    return meter.figures


def test_utilisation_meters_the_rank_gpus_not_nvml_index_zero(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    fig = _metered(UtilisationMeter("cuda", 0.01, [0, 1]))
    assert fig["gpu_util_percent_mean"] == {"0": 33.0, "1": 44.0}  # NVML's 2 and 3, not 0 and 1
    assert set(fake_nvml.reads) == {2, 3}
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    fig = _metered(UtilisationMeter("cuda", 0.01, [0]))
    assert fig["gpu_util"] == "unavailable" and "FASTEST_FIRST" in fig["gpu_util_unavailable_reason"]


# ---------- whose PIDs NVML reports ----------


def test_a_containerised_run_own_context_is_not_another_process(fake_nvml, monkeypatch):
    """In a container NVML lists this process under its host PID. Before: that PID was not ours, so the
    run read `contended` on an idle GPU. Now: the namespace is seen as foreign and our own context is
    subtracted; another job on the GPU still counts."""
    monkeypatch.delenv(contention.ROOT_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    _fake_cuda(monkeypatch, [2])  # this process holds a context on its GPU 0 (NVML's 2)
    fake_nvml.procs[2] = [(HOST_PID_OF_THIS_PROCESS, 2**30)]
    snap = contention.snapshot([0])
    assert contention.pid_namespace(snap, snap.own) == "foreign"
    assert contention.gpu_other_counts(snap, snap.own) == ({}, "foreign")
    fig = ContentionMeter(threads=1, device_type="cuda", gpus=[0]).start().stop()
    assert "GPU" not in (fig["contended_reason"] or "") and fig["gpu_pid_namespace"] == "foreign"
    assert "gpu_other_processes_during" not in fig

    fake_nvml.procs[2].append((HOST_PID_OF_ANOTHER_JOB, 2**31))
    fake_nvml.procs[0] = [(HOST_PID_OF_ANOTHER_JOB + 1, 2**31)]  # another GPU's job is not this run's business
    fig = ContentionMeter(threads=1, device_type="cuda", gpus=[0]).start().stop()
    assert fig["contended"] and fig["gpu_other_processes_during"] == {"0": 1}
    assert "another PID namespace" in fig["contended_reason"] and "gpu_other_pids_during" not in fig


def test_nvml_pids_of_this_namespace_are_matched_exactly(fake_nvml, monkeypatch):
    """Same namespace (bare metal): our own PID is listed, others by their PIDs, as before."""
    monkeypatch.delenv(contention.ROOT_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    _fake_cuda(monkeypatch, [1])
    fake_nvml.procs[1] = [(os.getpid(), 2**30), (HOST_PID_OF_ANOTHER_JOB, 2**30)]
    snap = contention.snapshot([0])
    assert contention.pid_namespace(snap, snap.own) == "shared"
    fig = ContentionMeter(threads=1, device_type="cuda", gpus=[0]).start().stop()
    assert fig["gpu_other_pids_during"] == {"0": [HOST_PID_OF_ANOTHER_JOB]}
    assert fig["gpu_other_processes_during"] == {"0": 1} and fig["gpu_pid_namespace"] == "shared"


def test_the_probe_before_any_context_counts_every_process_on_the_gpu(fake_nvml, monkeypatch):
    """Before the rank builds there is no context of ours: a listed PID that does not exist here is a host
    PID (foreign), and every listed process is another's."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-cccccccc")
    fake_nvml.procs[2] = [(HOST_PID_OF_ANOTHER_JOB, 2**30)]
    p = contention.probe(0.01, gpus=[0], reuse_s=0)
    assert p["gpu_other_processes"] == {"0": 1} and p["gpu_pid_namespace"] == "foreign"
    assert p["gpu_util_percent"] == {"0": 33.0}  # NVML's 2: the GPU CUDA_VISIBLE_DEVICES names
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    p = contention.probe(0.01, gpus=[0], reuse_s=0)
    assert "leaves 0 of NVML's 4 GPUs" in p["gpu_processes_unavailable_reason"]


# ---------- energy per window ----------


def test_energy_sums_the_windows_only_and_of_the_rank_gpus(fake_nvml, monkeypatch):
    """Two 1 s windows with 5 s between them (the stall check, W&B's line), on CUDA device 0 = NVML's 2
    (300 W): 600 J. Before: one reading from the first window's start to the last one's end (300 W x 7 s
    = 2100 J), and from NVML's GPU 0 (100 W x 7 s = 700 J)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    meter = EnergyMeter("cuda", [0])
    with meter:
        for _ in range(2):
            with meter.window():
                fake_nvml.advance(1.0)
            fake_nvml.advance(5.0)
    fig = meter.figures
    assert fig["energy_source"] == "nvml" and fig["energy_j"] == pytest.approx(600.0)
    assert fig["energy_j_per_window"] == [pytest.approx(300.0)] * 2 and set(fake_nvml.reads) == {2}


def test_energy_forgets_a_remeasured_window_and_says_why_when_unmapped(fake_nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    meter = EnergyMeter("cuda", [0, 1])  # DataParallel: both of the rank's GPUs (100 + 200 W)
    with meter:
        for seconds, keep in ((2.0, False), (1.0, True)):
            with meter.window():
                fake_nvml.advance(seconds)
            if not keep:
                meter.discard()  # a stalled window, measured again
    assert meter.figures["energy_j"] == pytest.approx(300.0) and len(meter.figures["energy_j_per_window"]) == 1
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    fig = _metered(EnergyMeter("cuda", [0]))
    assert "NVML total energy not readable: Unmapped" in fig["energy_unavailable"]


# ---------- one protocol: every thread ends on every path ----------


def _gpu_rank(fail, on_first_step=None):
    """A rank whose device is CUDA as far as the meters know (the fake NVML above; the step runs on the
    CPU: no CUDA here), whose step ends the window the way `fail` says at its 3rd call."""
    from xbench.bench import loop
    from xbench.rank import StopFlag

    seen = []
    stop = StopFlag()

    def step(a, b):
        seen.append(any(t.name == "xbench-util" for t in threading.enumerate()))  # the sampler beside the steps
        if on_first_step is not None:
            on_first_step()
        if len(seen) == 3:
            if fail == "oom":
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if fail == "stop":
                stop.requested, stop.reason = True, "SIGTERM"  # what the signal handler sets
            if fail == "exception":
                raise ValueError("a bug in the step")
        return torch.tensor(float("nan") if fail == "diverged" and len(seen) == 3 else 1.0)

    x = torch.zeros(2, 2)
    hooks = loop.Hooks(step=step, next_batch=lambda: (x, None), sync=lambda: None,
                       read_losses=lambda ls: [float(v) for v in ls], stop=stop)
    work = SimpleNamespace(runtime=SimpleNamespace(device=torch.device("cuda", 0)))
    p = SimpleNamespace(work=work, hooks=hooks, threads={"threads_intra": 1}, samples_per_step=2,
                        devices_per_rank=1, batch_size=2, ranks_on_host=1)
    return p, seen


@pytest.mark.parametrize("fail", ["none", "diverged", "oom", "stop", "exception"])
def test_no_meter_thread_outlives_its_windows_however_they_end(fake_nvml, monkeypatch, fail):
    """The real `_timed_windows` with the real meters on one stack (NVML faked, see the module doc). Each
    way out of a window: normal, Diverged (a NaN loss), an OOM-like RuntimeError, a stop, another error.
    Before: only a stop stopped the sampler; a divergence or an OOM left its thread running."""
    from xbench.bench.windows import WindowPlan, _timed_windows
    from xbench.config import XBenchConfig
    from xbench.rank import Diverged, StopRequested

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-cccc")
    cfg = XBenchConfig()
    cfg.bench.util_interval_s = 0.001
    cuda = _FakeCudaMemory(1)  # torch.cuda's allocator peaks, faked as documented (tests/test_cuda_paths.py)
    cuda.install(monkeypatch)
    cuda.alloc(0, 6 * GIB)  # warm-up: an autotuning workspace, freed before the windows
    cuda.free(0, 6 * GIB)
    p, seen = _gpu_rank(fail, lambda: cuda.alloc(0, GIB // 4) if len(seen) == 1 else None)
    before = set(threading.enumerate())
    plan = WindowPlan(1, 2, 1, 10.0, steps=5, repeats=2)
    raised = {"none": None, "diverged": Diverged, "oom": RuntimeError, "stop": StopRequested,
              "exception": ValueError}[fail]
    if raised is None:
        windows, fig = _timed_windows(cfg, p, plan, SimpleNamespace(steps=0), [], steps=5, dev="cuda")
        assert len(windows) == 2 and fig["gpu_util_percent_mean"] == {"0": 33.0}
        assert fig["util_samples"] >= 2 and "energy_j" in fig and "contended" in fig
        # the memory meter on the same stack: the windows' peak (0.25 GiB), not warm-up's 6 GiB
        assert fig["peak_device_allocated_gib"] == 0.25 and fig["peak_host_rss_gib"] > 0
        assert fig["peak_memory_since"] in ("timed windows", "process start")
    else:
        with pytest.raises(raised):
            _timed_windows(cfg, p, plan, SimpleNamespace(steps=0, time_s=0.0, first_step_s=0.0), [], steps=5,
                           dev="cuda")
    assert seen and all(seen)  # the sampler ran beside every step...
    assert set(threading.enumerate()) == before  # ...and no thread is left once the windows are over
    assert fake_nvml.inits == 0  # every NVML session was shut down (the fixture checks it too)


def test_a_meter_that_fails_while_the_window_fails_does_not_hide_the_window_error():
    """An OOM inside a window stays the error the run reports, even when a meter cannot close then."""
    from xbench.bench import meters

    class Broken(meters.Meter):
        def window_end(self):
            raise OSError("counter gone")

        def close(self):
            raise OSError("counter gone")

    m = Broken()
    with pytest.raises(RuntimeError, match="out of memory"), m, meters.window([m]):
        raise RuntimeError("CUDA out of memory")
    with pytest.raises(OSError, match="counter gone"), m:  # on a clean exit a meter's failure is its own
        pass


def test_the_memory_meter_counts_from_the_first_window_edge_over_every_gpu(monkeypatch):
    """The allocator peaks as torch.cuda documents them (the fake in tests/test_cuda_paths.py): what warm-up
    allocated and freed before the meter opened is not the peak; the windows' largest GPU is, with each
    GPU's beside it; the figures are read on an error's way out too. Before: memory was no meter and
    _timed_windows returned no memory figure (the reset and the read were by hand in measure_rank)."""
    cuda = _FakeCudaMemory(3)
    cuda.install(monkeypatch)
    for d in range(3):
        cuda.alloc(d, GIB)  # weights and optimizer state
    meter = MemoryMeter([0, 1, 2])  # built with the rank, before warm-up
    cuda.alloc(0, 6 * GIB)  # warm-up only
    cuda.free(0, 6 * GIB)
    with pytest.raises(RuntimeError, match="out of memory"), meter, meters.window([meter]):
        cuda.alloc(2, 2 * GIB)
        raise RuntimeError("CUDA out of memory")
    fig = meter.figures
    assert fig["peak_device_allocated_gib"] == 3.0 and fig["peak_device_allocated_gib_per_gpu"] == [1.0, 1.0, 3.0]
    assert fig["peak_memory_since"] in ("timed windows", "process start") and fig["peak_host_rss_gib"] > 0
    assert MemoryMeter([], since="training").figures == {}  # nothing before it opens


def test_train_to_target_peaks_count_from_training_not_the_build(monkeypatch, tmp_path):
    """Real train-to-target on digits (one rank, CPU): 512 MiB touched and freed while the rank builds its
    workload raise the process's peak RSS, but the record's peak counts from the first training step (the
    memory meter around the epochs). Before: ru_maxrss since the process started, build included, and no
    device peak and no `peak_memory_since` at all."""
    import psutil
    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench import training as target
    from xbench.bench.worker import device_gpus
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["+experiment=digits_to_target", "goal.target=1.0", "goal.max_epochs=1",
                                       "goal.checkpoint_every_evals=0", "logger=none", "logger.progress=false"]))
    real, seen = target.build_workload, {}

    def build_with_a_spike(*a):
        seen["before_gib"] = psutil.Process().memory_info().rss / GIB
        big = torch.ones(2**27)  # 512 MiB, every page written
        seen["rss_gib"] = psutil.Process().memory_info().rss / GIB
        del big
        return real(*a)

    monkeypatch.setattr(target, "build_workload", build_with_a_spike)
    m = target.TargetTraining(resolve(cfg, host_facts()), RankContext(threads=1), tmp_path).run().measurements
    assert m["peak_memory_since"] == "training" and m["steps_done"] > 0
    assert seen["rss_gib"] - seen["before_gib"] > 0.4  # the spike was real
    assert m["peak_host_rss_gib"] < seen["rss_gib"] - 0.1  # ru_maxrss since the process started: >= the spike
    # the GPUs a train-to-target rank meters: its own, or every one under DataParallel; none off CUDA
    assert device_gpus("cuda", 3, 1) == [3] and device_gpus("cuda", 0, 2) == [0, 1]
    assert device_gpus("cpu", 0, 1) == []


@pytest.mark.slow  # the profiler's first start in a process (~10 s on a busy machine); later starts take ms
def test_the_breakdown_meter_stops_its_profiler_on_every_path_out_of_its_window():
    """The breakdown is a meter (bench/meters/breakdown.BreakdownMeter on bench/meters/profiler.py): torch.profiler
    runs over its own window of untimed steps and is stopped however the window ends (an error, a
    divergence, a stop raised inside a step); the window's own error is the one raised, and no figures
    are taken from a partial window. A profiler already active leaves the steps to run unprofiled and
    says so. Before: the profiled steps ran inside one `with profile()`, a RuntimeError from a step was
    swallowed as 'could not start'."""
    from xbench.bench import loop
    from xbench.bench.meters import breakdown
    from xbench.rank import Diverged, StopRequested

    _is_profiler_enabled = torch._C._autograd._profiler_enabled  # what torch.autograd.profiler reads
    x = torch.zeros(2, 2)
    for error in (ValueError("a bug in the step"), RuntimeError("CUDA out of memory"), Diverged(2, float("nan"), "t"),
                  StopRequested({})):
        profiled = []

        def step(a, b, error=error, profiled=profiled):
            profiled.append(_is_profiler_enabled())
            if len(profiled) == 2:
                raise error
            return a.sum()

        hooks = loop.Hooks(step=step, next_batch=lambda: (x, None), sync=lambda: None)
        with pytest.raises(type(error)) as got:
            breakdown.split(hooks, "cpu", {}, 3, 100, 0.01)
        assert got.value is error and profiled == [True, True]  # profiled until the step that failed...
        assert not _is_profiler_enabled()  # ...and stopped on its way out
    done = []
    with torch.profiler.profile():  # someone else's profiler (bench.profile's, say)
        fig = breakdown.split(loop.Hooks(step=lambda a, b: done.append(_is_profiler_enabled()),
                                         next_batch=lambda: (x, None), sync=lambda: None), "cpu", {}, 3, 100, 0.01)
    assert done == [True] * 3 and list(fig) == ["breakdown_unavailable"]
    assert "torch.profiler could not start" in fig["breakdown_unavailable"]
    assert not _is_profiler_enabled()
