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
