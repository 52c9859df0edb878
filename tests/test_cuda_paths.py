"""The GPU paths, right before a GPU is lent (issue 24): what runs here runs for real (CPU autocast in
replica threads, torch.compile with the eager backend, the CPU peak, torch 2.9's TF32 settings); what
cannot (CUDA graphs, the CUDA memory API, CUDA profiler events) is faked from the library's documented
behaviour, and each fake says so in its test's docstring."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
