"""The GPU paths, right before a GPU is lent (issue 24): what runs here runs for real (CPU autocast in
replica threads, torch.compile with the eager backend, the CPU peak, torch 2.9's TF32 settings); what
cannot (CUDA graphs, the CUDA memory API, CUDA profiler events) is faked from the library's documented
behaviour, and each fake says so in its test's docstring."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from xbench import precision

# ---------- TF32: torch 2.9's fp32_precision API ----------


def _fresh(code: str) -> str:
    """Run `code` in a fresh interpreter (TF32 state is process-wide) with UserWarnings as errors."""
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


@pytest.mark.slow  # a fresh interpreter (the warning is said once per process): ~4 s
def test_tf32_is_set_through_fp32_precision_and_every_view_agrees_without_a_deprecation_warning():
    """Real torch 2.9 (its settings are readable on a CPU build). The legacy `allow_tf32` setters warn
    that they are deprecated (an error here: -W error); the new API alone leaves the legacy getters,
    which torch 2.9's inductor still reads, raising 'mix of the legacy and new APIs' (pytorch#166387)."""
    out = _fresh("""
        import torch
        from xbench.precision import resolve
        for name in ("tf32", "fp32", "amp_bf16"):
            p = resolve(name, "cuda")
            b = torch.backends
            print(name, p.tf32_api, b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision,
                  b.cudnn.rnn.fp32_precision, b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
        print("cpu", resolve("fp32", "cpu").tf32_api)
    """)
    rows = dict(line.split(" ", 1) for line in out.splitlines())
    assert precision.has_fp32_precision_api()  # torch 2.9 in the venv
    assert rows["tf32"] == "fp32_precision+allow_tf32 tf32 tf32 tf32 True True"
    assert rows["fp32"] == "fp32_precision+allow_tf32 ieee ieee ieee False False"
    assert rows["amp_bf16"] == "fp32_precision ieee ieee ieee False False"  # already agreeing: new API only
    assert rows["cpu"] == "None"


class _Recorder:
    """Records the attributes set on it (a stand-in for torch.backends' settings objects)."""

    def __init__(self, log: list, name: str, **children):
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "fp32_precision", "none")
        for k, v in children.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, key, value):
        self._log.append((f"{self._name}.{key}", value))
        object.__setattr__(self, key, value)


def test_tf32_where_the_legacy_view_follows_the_new_api_legacy_flags_are_not_touched(monkeypatch):
    """A torch whose fp32_precision setters keep the legacy view in line (what pytorch#189955 moves
    towards): only the new API is written."""
    log: list = []
    monkeypatch.setattr(torch.backends.cuda, "matmul", _Recorder(log, "matmul"))
    monkeypatch.setattr(torch.backends, "cudnn", _Recorder(log, "cudnn", conv=_Recorder(log, "conv"),
                                                           rnn=_Recorder(log, "rnn")))
    monkeypatch.setattr(precision, "_legacy_view_agrees", lambda enabled: True)
    assert precision.set_tf32(True) == "fp32_precision"
    assert log == [("matmul.fp32_precision", "tf32"), ("conv.fp32_precision", "tf32"),
                   ("rnn.fp32_precision", "tf32")]


# ---------- DataParallel: autocast's dtype in the replica threads ----------


def _in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # surfaced in the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_autocast_dtype_is_thread_local_and_cuda_threads_start_at_fp16():
    """Real torch: a thread started inside an outer autocast does not inherit it, and a new thread's
    CUDA autocast dtype is fp16 whatever the starting thread set (readable without a GPU)."""
    lin, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _in_thread(lambda: torch.is_autocast_enabled("cpu")) is False
        assert _in_thread(lambda: lin(x).dtype) == torch.float32
    before = torch.get_autocast_dtype("cuda")
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        assert _in_thread(lambda: torch.get_autocast_dtype("cuda")) == torch.float16
    finally:
        torch.set_autocast_dtype("cuda", before)


def test_replica_thread_computes_in_the_callers_autocast_dtype():
    """Real CPU autocast: xbench's wrapper, built where the step's autocast is active, makes a Linear
    called in another thread compute bf16 (fp32 without it, as above)."""
    lin, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        call = precision.InCallersAutocast(lin, "cpu")
    assert _in_thread(lambda: call(x).dtype) == torch.bfloat16
    plain = precision.InCallersAutocast(lin, "cpu")  # built outside autocast: nothing entered
    assert _in_thread(lambda: plain(x).dtype) == torch.float32


def _cpu_parallel_apply(modules, inputs, kwargs_tup, devices=None):
    """torch 2.9's nn.parallel.parallel_apply on the CPU: the same threads and the same autocast
    re-entry (`autocast(<device>, enabled=<the caller's>)`, no dtype), without the CUDA device and stream
    contexts a CPU host cannot enter."""
    enabled, results = torch.is_autocast_enabled("cpu"), {}

    def worker(i, module, inp, kwargs):
        with torch.amp.autocast("cpu", enabled=enabled):
            results[i] = module(*inp, **kwargs)

    threads = [threading.Thread(target=worker, args=(i, m, inp, kw))
               for i, (m, inp, kw) in enumerate(zip(modules, inputs, kwargs_tup))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(modules))]


@pytest.mark.parametrize("wrapper", ["xbench", "torch"])
def test_dataparallel_replicas_keep_the_steps_dtype(monkeypatch, wrapper):
    """The strategy's nn.DataParallel through torch's replica threads (parallel_apply transcribed for the
    CPU above). The step asks fp16 on the CPU, whose autocast default is bf16: torch's own
    DataParallel computes the replicas in the default (the CUDA case: bf16 asked, fp16 computed);
    xbench's computes fp16 and says so in the rank's figures."""
    from xbench.parallel.dataparallel import AutocastDataParallel, DataParallel

    # the module, not the function of the same name that torch.nn.parallel exports
    monkeypatch.setattr(sys.modules["torch.nn.parallel.data_parallel"], "parallel_apply", _cpu_parallel_apply)
    replicas = [torch.nn.Linear(8, 8) for _ in range(2)]
    inputs = [(torch.randn(4, 8),) for _ in range(2)]
    if wrapper == "xbench":
        dp = AutocastDataParallel(torch.nn.Linear(8, 8))
        dp.autocast_device = "cpu"
    else:
        dp = torch.nn.DataParallel(torch.nn.Linear(8, 8))
    with torch.autocast("cpu", dtype=torch.float16):
        outs = dp.parallel_apply(replicas, inputs, [{}, {}])
    dtypes = {o.dtype for o in outs}
    if wrapper == "xbench":
        assert dtypes == {torch.float16}
        assert DataParallel.rank_figures(None, dp) == {"replica_autocast_dtype": "float16"}
    else:
        assert dtypes == {torch.bfloat16}


# ---------- CUDA graphs: kept losses across replays ----------


def _runtime_on_cuda(**runtime):
    """A runtime built on the CPU, then pointed at a CUDA device (a torch.device needs no GPU)."""
    from xbench import runtimes
    from xbench.config import RuntimeConfig

    rt = runtimes.create(RuntimeConfig(**runtime), "cpu")
    rt.device = torch.device("cuda", 0)
    return rt


def _graph_step():
    """A fake of CUDA graphs' documented output reuse (torch.compiler_cudagraph_trees: a graph's outputs
    live in its static memory pool and the next replay writes them again): every call writes its loss
    into the same buffer and returns that buffer."""
    out, calls = torch.zeros(()), [0]

    def step(inputs, targets):
        calls[0] += 1
        out.fill_(float(calls[0]))
        return out

    return step


@pytest.mark.parametrize("runtime, policy", [
    (dict(name="compile", mode="reduce-overhead", target="step"), "clone"),
    (dict(name="compile", mode="max-autotune", target="step"), "clone"),
    (dict(name="compile", backend="cudagraphs", target="step"), "clone"),
    (dict(name="compile", mode="reduce-overhead", target="model"), "mark"),
    (dict(name="compile", mode="max-autotune-no-cudagraphs", target="step"), None),
    (dict(name="compile", mode="default", target="step"), None),
    (dict(name="eager"), None),
])
def test_cuda_graph_configs_choose_their_kept_loss_policy(runtime, policy):
    assert _runtime_on_cuda(**runtime).cuda_graphs() == policy


def test_a_kept_loss_under_cuda_graphs_is_cloned_before_the_next_replay(monkeypatch):
    """The fake graph step of _graph_step. Kept as it returns (the policy without CUDA graphs, and every
    CUDA policy before the fix), three steps read the last value three times; the whole step compiled
    with CUDA graphs keeps each step's own value and marks a new iteration before each step."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    eager = _runtime_on_cuda(name="eager")
    step = eager.keep_loss(_graph_step())
    kept = [step(None, None) for _ in range(3)]
    assert eager.read_losses(kept) == [3.0, 3.0, 3.0]  # what aliasing does to kept losses
    compiled = _runtime_on_cuda(name="compile", mode="reduce-overhead", target="step")
    step = compiled.keep_loss(_graph_step())
    kept = [step(None, None) for _ in range(3)]
    assert compiled.read_losses(kept) == [1.0, 2.0, 3.0] and len(marks) == 3


# ---------- torch.compile: what it gave up on ----------


class _Breaks(torch.nn.Module):
    """A model with a graph break in its forward."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        x = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(x)


class _Recompiles(_Breaks):
    """A model whose forward reads a Python int that changes every call: dynamo guards on its value,
    so every call recompiles, until the recompile limit."""

    calls = 0

    def forward(self, x):
        self.calls += 1
        return self.b(self.a(x) * self.calls)


def _compiled_steps(model, warmup: int, timed: int):
    from xbench import runtimes
    from xbench.config import RuntimeConfig

    torch.manual_seed(0)
    rt = runtimes.create(RuntimeConfig(name="compile", backend="eager", target="model"), "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = rt.keep_loss(rt.prepare(model, opt, "classify", precision.resolve("fp32", "cpu")))
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    for _ in range(warmup):
        step(x, y)
    rt.mark_timed()
    for _ in range(timed):
        step(x, y)
    return rt.overhead(), rt.warnings()


def test_compile_records_a_graph_break_of_the_warmup_and_none_in_the_windows():
    """Real torch.compile (backend eager: dynamo's own bookkeeping, no inductor compile)."""
    torch._dynamo.reset()
    fig, warnings = _compiled_steps(_Breaks(), warmup=2, timed=3)
    assert fig["dynamo_graph_breaks"] >= 1 and fig["dynamo_graph_breaks_timed"] == 0
    assert fig["dynamo_recompiles_timed"] == 0 and fig["dynamo_cache_limit_hits"] == 0
    assert fig["cudagraph_skips"] == 0 and warnings == []


def test_compile_records_recompiles_in_the_windows_and_the_limit_hit():
    """Real torch.compile (backend eager): past the recompile limit the frame runs eagerly, the graph
    count stops growing (warm-up would look steady), and the record says so."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=3):
        fig, warnings = _compiled_steps(_Recompiles(), warmup=2, timed=4)
    # compile attempts after a frame's first: calls 2-4 (the 4th hits the limit); calls 3 and 4 are timed
    assert fig["dynamo_recompiles"] == 3 and fig["dynamo_recompiles_timed"] == 2
    assert fig["dynamo_cache_limit_hits"] == 1 and fig["dynamo_cache_limit_hits_timed"] == 1
    assert fig["graphs_compiled"] == 3  # calls 1-3; 4-6 ran eagerly
    assert any("recompile limit 1 time(s)" in w for w in warnings)
    assert any(w.startswith("torch.compile was not steady during the timed windows") and "recompiles" in w
               for w in warnings)


# ---------- peak memory: the timed windows', on every GPU the rank drives ----------


def _measure(monkeypatch, *overrides, first_step=None):
    """One rank's throughput measurement on this CPU (a tiny MLP, short windows); `first_step` runs
    inside the first warm-up step."""
    from omegaconf import OmegaConf

    from xbench.api import compose
    from xbench.bench import worker
    from xbench.bench.windows import WindowPlan, measure_rank
    from xbench.plan import resolve
    from xbench.platforms.detect import host_facts
    from xbench.rank import RankContext

    cfg = OmegaConf.to_object(compose(["model=mlp", "data=synthetic_mnist", "data.batch_size=16", "platform=cpu",
                                       "bench.contention_probe_s=0", "bench.breakdown_steps=0", *overrides]))
    real, calls = worker.make_step, [0]

    def make_step(w, c, rank=0):
        step = real(w, c, rank)

        def first_step_too(x, y):
            calls[0] += 1
            if calls[0] == 1 and first_step:
                first_step()
            return step(x, y)
        return first_step_too

    monkeypatch.setattr(worker, "make_step", make_step)
    plan = WindowPlan(warmup_min_steps=2, warmup_max_steps=4, warmup_stable_steps=2, warmup_cv_tol=10.0, steps=5,
                      repeats=2)
    return measure_rank(resolve(cfg, host_facts()), RankContext(threads=1), plan, batch_size=16)


def test_a_warmup_only_host_allocation_is_not_in_the_peak(monkeypatch):
    """Real: 512 MiB touched and freed inside the first warm-up step (as cuDNN's autotuning workspaces
    are on a GPU) raise the process's peak RSS; the record's peak counts from the first timed window."""
    import psutil

    seen = {}

    def spike():
        big = torch.ones(2**27)  # 512 MiB, every page written
        seen["rss_gib"] = psutil.Process().memory_info().rss / 2**30
        del big

    r = _measure(monkeypatch, first_step=spike)
    m = r.measurements
    assert m["peak_memory_since"] == "timed windows"
    now = psutil.Process().memory_info().rss / 2**30
    assert seen["rss_gib"] - now > 0.4  # the spike was real and was given back
    assert m["peak_host_rss_gib"] < seen["rss_gib"] - 0.4


def test_compiled_rank_records_what_dynamo_gave_up_on(monkeypatch):
    """Real torch.compile (backend eager) through the throughput rank: the figures reach the rank's."""
    torch._dynamo.reset()
    r = _measure(monkeypatch, "runtime=compile", "runtime.backend=eager")
    m = r.measurements
    for name in ("dynamo_graph_breaks", "dynamo_recompiles", "dynamo_cache_limit_hits", "dynamo_eager_frames",
                 "cudagraph_skips"):
        assert m[name] == 0 and m[f"{name}_timed"] == 0, name
    assert not any("torch.compile" in w for w in r.warnings)


class _FakeCudaMemory:
    """The CUDA caching allocator's peak statistics as torch.cuda documents them, per device:
    max_memory_allocated(device) / max_memory_reserved(device) are the peaks since the program began or
    since reset_peak_memory_stats(device), which sets the peak to what is allocated now."""

    def __init__(self, n: int):
        self.now = [0] * n
        self.peak = [0] * n

    def alloc(self, device: int, nbytes: int) -> None:
        self.now[device] += nbytes
        self.peak[device] = max(self.peak[device], self.now[device])

    def free(self, device: int, nbytes: int) -> None:
        self.now[device] -= nbytes

    def install(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: self.peak.__setitem__(d, self.now[d]))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: self.peak[d])
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: self.peak[d])


def test_device_peaks_count_from_the_reset_and_over_every_gpu(monkeypatch):
    """The fake allocator above over 3 GPUs (DataParallel's gather device 0 holds the most during warm-up;
    GPU 2 the most in the windows)."""
    from xbench.bench.meters import memory

    gib = 2**30
    cuda = _FakeCudaMemory(3)
    cuda.install(monkeypatch)
    for d in range(3):
        cuda.alloc(d, 1 * gib)  # weights and optimizer state, held throughout
    cuda.alloc(0, 6 * gib)  # warm-up only: an autotuning workspace on GPU 0
    cuda.free(0, 6 * gib)
    assert memory.reset_peaks([0, 1, 2]) in ("timed windows", "process start")
    cuda.alloc(2, 2 * gib)  # the windows' activations
    cuda.alloc(1, gib // 2)
    fig = memory.device_peaks([0, 1, 2])
    assert fig["peak_device_allocated_gib"] == 3.0 and fig["peak_device_reserved_gib"] == 3.0
    assert fig["peak_device_allocated_gib_per_gpu"] == [1.0, 1.5, 3.0]
    assert memory.device_peaks([]) == {}


# ---------- host vs device time on CUDA ----------


def _cuda_step_events():
    """One CUDA step as torch.profiler hands it back (`prof.events()`), built from
    torch.autograd.profiler_util.FunctionEvent's documented fields, as torch's profiler builds them
    from kineto: CPU ops with their children, `cudaLaunchKernel` runtime calls under the ops that
    launch, each kernel both as a CUDA event of its own and appended to its launching op
    (`append_kernel`: the op's self_device_time_total), and a record_function range on both timelines
    (CPU user annotation; gpu_user_annotation spanning the kernels). Times in us:

        CPU  ## forward ## [0, 60]                 (user annotation)
               aten::linear [0, 50] > aten::addmm [5, 45] > cudaLaunchKernel [10, 20]   -> gemm
               aten::add [50, 58] > cudaLaunchKernel [52, 56]                             -> add
             aten::item [60, 300] > aten::_local_scalar_dense [61, 299]
               > cudaMemcpyAsync [62, 64], cudaStreamSynchronize [64, 298]
        GPU  gemm [30, 130] stream 7; add [100, 160] stream 8 (overlaps gemm by 30);
             memcpy DtoH [161, 162]; ## forward ## [30, 160] (gpu_user_annotation)

    Right answers: device busy = [30, 160] + [161, 162] = 131 us; host = 300 us of CPU time less
    the 238 us blocked in _local_scalar_dense = 62 us; sync wait = 238 us."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    ids = iter(range(1, 100))

    def ev(name, start, end, device=DeviceType.CPU, annotation=False, parent=None, resource=0):
        e = FunctionEvent(next(ids), name, thread=1, start_us=start, end_us=end, use_device="cuda",
                          device_type=device, device_resource_id=resource, is_user_annotation=annotation)
        if parent is not None:
            parent.append_cpu_child(e)
            e.set_cpu_parent(parent)
        return e

    fwd = ev("## forward ##", 0, 60, annotation=True)
    linear = ev("aten::linear", 0, 50, parent=fwd)
    addmm = ev("aten::addmm", 5, 45, parent=linear)
    launch1 = ev("cudaLaunchKernel", 10, 20, parent=addmm)
    add = ev("aten::add", 50, 58, parent=fwd)
    launch2 = ev("cudaLaunchKernel", 52, 56, parent=add)
    item = ev("aten::item", 60, 300)
    dense = ev("aten::_local_scalar_dense", 61, 299, parent=item)
    copy = ev("cudaMemcpyAsync", 62, 64, parent=dense)
    wait = ev("cudaStreamSynchronize", 64, 298, parent=dense)
    gemm = ev("ampere_sgemm_128x64_tn", 30, 130, DeviceType.CUDA, resource=7)
    kadd = ev("vectorized_elementwise_kernel", 100, 160, DeviceType.CUDA, resource=8)
    memcpy = ev("Memcpy DtoH (Device -> Pinned)", 161, 162, DeviceType.CUDA, resource=7)
    gpu_fwd = ev("## forward ##", 30, 160, DeviceType.CUDA, annotation=True, resource=7)
    addmm.append_kernel(gemm.name, 0, 100)
    add.append_kernel(kadd.name, 0, 60)
    dense.append_kernel(memcpy.name, 0, 1)
    return [fwd, linear, addmm, launch1, gemm, gpu_fwd, add, launch2, kadd, item, dense, copy, wait, memcpy]


def test_cuda_split_counts_each_kernel_once_and_sync_waits_apart():
    from xbench.bench.meters import breakdown

    events = _cuda_step_events()
    old_device_us = sum(e.self_device_time_total for e in events)  # what the split summed before
    assert old_device_us == 100 + 60 + 1 + 100 + 60 + 1 + 130  # ops + kernels + annotation: 452, not 131
    fig = breakdown.cuda_split(events, steps=1)
    assert fig["device_s_per_step"] == pytest.approx(131e-6)
    assert fig["host_s_per_step"] == pytest.approx(62e-6)
    assert fig["sync_wait_s_per_step"] == pytest.approx(238e-6)
    two = breakdown.cuda_split(events, steps=2)
    assert two["device_s_per_step"] == pytest.approx(65.5e-6)
