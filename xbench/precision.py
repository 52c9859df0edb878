"""Precision policies: config name + device type -> autocast context, gradient scaler, parameter dtype.

| name      | what it does                                                    | where        |
|-----------|-----------------------------------------------------------------|--------------|
| fp32      | everything fp32; TF32 matmuls explicitly off on CUDA            | anywhere     |
| tf32      | fp32 parameters, TF32 tensor-core matmuls/convolutions          | CUDA only    |
| amp_fp16  | autocast to fp16 + a dynamic gradient scaler                    | CUDA (+ XLA:CUDA, torch-xla <= 2.8) |
| amp_bf16  | autocast to bf16, fp32 master parameters                        | CUDA/CPU/XLA |
| bf16      | parameters and activations in bf16 (the XLA/TPU recipes)        | anywhere     |

Which pairs are allowed is decided in xbench.compat, before any device work.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

PRECISIONS = ("fp32", "tf32", "amp_fp16", "amp_bf16", "bf16")


@dataclass
class Precision:
    name: str
    device_type: str  # cpu | cuda | xla
    autocast_dtype: torch.dtype | None
    param_dtype: torch.dtype
    scaler: object | None  # torch.amp.GradScaler for amp_fp16
    compute_dtype: str  # the dtype whose peak FLOP/s applies (fp32, tf32, bf16, fp16)
    tf32_api: str | None = None  # how TF32 was set on CUDA (set_tf32); None off CUDA
    # A runtime's own autocast context (XLA:CUDA fp16: torch_xla.amp.autocast; runtimes/xla.py), else torch's.
    autocast_fn: object | None = None

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        if self.autocast_fn is not None:
            return self.autocast_fn()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


def has_fp32_precision_api() -> bool:
    """Whether this torch has the per-backend `fp32_precision` settings (readable on CPU builds too)."""
    try:
        torch.backends.cuda.matmul.fp32_precision  # noqa: B018 (reading it is the probe)
        torch.backends.cudnn.conv.fp32_precision  # noqa: B018
    except AttributeError:
        return False
    return True


def set_tf32(enabled: bool) -> str:
    """TF32 on or off for cuBLAS matmuls and cuDNN convolutions and RNNs; -> which API set it (recorded).

    Set explicitly both ways: torch's defaults differ between versions (2.9: matmuls IEEE, cuDNN
    convolutions TF32), and fp32 must mean fp32. Where torch has the per-backend `fp32_precision`
    ("tf32" | "ieee"; 2.9 deprecates `allow_tf32`) it sets the value: "fp32_precision". Torch 2.9's
    new-style setters do not update the legacy state, and its own inductor still reads the legacy
    getters, which then raise "mix of the legacy and new APIs" and fail the compile (pytorch#166387).
    So when the legacy view disagrees after the write, the legacy flags are set to the same value (their
    deprecation warning silenced) and the new API written again: "fp32_precision+allow_tf32", every
    view agreeing. Without the new API: the legacy flags, "allow_tf32".
    """
    if not has_fp32_precision_api():
        _set_legacy_tf32(enabled)
        return "allow_tf32"
    _set_fp32_precision("tf32" if enabled else "ieee")
    if _legacy_view_agrees(enabled):
        return "fp32_precision"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the deprecation notice of the legacy setters
        _set_legacy_tf32(enabled)
    _set_fp32_precision("tf32" if enabled else "ieee")
    return "fp32_precision+allow_tf32"


def _set_fp32_precision(value: str) -> None:
    torch.backends.cuda.matmul.fp32_precision = value
    torch.backends.cudnn.conv.fp32_precision = value
    torch.backends.cudnn.rnn.fp32_precision = value


def _set_legacy_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def _legacy_view_agrees(enabled: bool) -> bool:
    """Whether the legacy getters (what torch's own inductor reads) say `enabled` without raising."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            return (torch.backends.cuda.matmul.allow_tf32 == enabled
                    and torch.backends.cudnn.allow_tf32 == enabled)
        except RuntimeError:  # "mix of the legacy and new APIs"
            return False


def resolve(name: str, device_type: str) -> Precision:
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}")
    tf32_api = set_tf32(name == "tf32") if device_type == "cuda" else None
    autocast_dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(name)
    param_dtype = torch.bfloat16 if name == "bf16" else torch.float32
    scaler = torch.amp.GradScaler("cuda") if name == "amp_fp16" else None
    compute = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16", "bf16": "bf16"}[name]
    return Precision(name, device_type, autocast_dtype, param_dtype, scaler, compute, tf32_api)


class InCallersAutocast:
    """`fn` called under the autocast state (enabled, dtype) of the thread that built this wrapper.

    Autocast state is thread-local. nn.DataParallel runs each replica in a thread of its own and
    re-enters `torch.amp.autocast("cuda", enabled=<the caller's>)` there without the dtype, so the
    replica takes the thread's default, fp16 on CUDA: an amp_bf16 run computed fp16, with no scaler.
    Built in the caller's thread (the step's `Precision.autocast()` is active) and called in the
    replica's, it enters the caller's dtype inside torch's own context, so the inner one wins.
    """

    def __init__(self, fn, device_type: str):
        self.fn, self.device_type = fn, device_type
        self.enabled = torch.is_autocast_enabled(device_type)
        self.dtype = torch.get_autocast_dtype(device_type)

    def __call__(self, *args, **kwargs):
        if not self.enabled:
            return self.fn(*args, **kwargs)
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.fn(*args, **kwargs)
