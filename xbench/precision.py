"""Precision policies: config name + device type -> autocast context, gradient scaler, parameter dtype.

| name      | what it does                                             | where                               |
|-----------|----------------------------------------------------------|-------------------------------------|
| fp32      | everything fp32; TF32 matmuls explicitly off on CUDA     | anywhere                            |
| tf32      | fp32 parameters, TF32 tensor-core matmuls/convolutions   | CUDA only                           |
| amp_fp16  | autocast to fp16 + a dynamic gradient scaler             | CUDA (+ XLA:CUDA, torch-xla <= 2.8) |
| amp_bf16  | autocast to bf16, fp32 master parameters                 | CUDA/CPU/XLA                        |
| bf16      | parameters and activations in bf16 (the XLA/TPU recipes) | anywhere                            |

Which pairs are allowed is decided in xbench.compat, before any device work.

What the hardware executed is read back inside the rank and recorded (`Precision.executed`): the autocast
dtype the step's context enters, the parameter dtype, TF32 on CUDA (cuBLAS matmul, cuDNN conv and RNN, from
torch's own state) and, on XLA, torch_xla's matmul precision. An fp32 matmul on a TPU at torch_xla's
`default` is ONE bf16 pass, so fp32 on XLA sets `highest` (XLA_MAT_MUL_PRECISION; runtimes/xla.py sets it).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

PRECISIONS = ("fp32", "tf32", "amp_fp16", "amp_bf16", "bf16")
# torch_xla's matmul/conv precision for fp32 operands, per policy. `default` on a TPU casts fp32 operands to
# bf16 (one pass); `highest` is ~fp32 (six bf16 passes). Mixed and bf16 policies already multiply in bf16.
XLA_MAT_MUL_PRECISION = {"fp32": "highest", "tf32": "high", "amp_fp16": "default", "amp_bf16": "default",
                         "bf16": "default"}


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
    # XLA: reads torch_xla's matmul precision back (set by runtimes/xla.py); None off XLA.
    read_xla_mat_mul: object | None = None

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        if self.autocast_fn is not None:
            return self.autocast_fn()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def executed(self) -> dict:
        """The precision in force, read back from torch (and torch_xla) in the rank, for the record: what the
        config asked is `config.precision`, this is what the hardware ran."""
        out = {"compute_dtype": self.compute_dtype, "autocast_dtype": _autocast_dtype_in(self.autocast()),
               "param_dtype": _dtype_name(self.param_dtype)}
        if self.tf32_api:
            out["tf32_api"] = self.tf32_api  # CUDA: how TF32 was set
        if self.device_type == "cuda":
            out.update(tf32_in_force())
        if self.read_xla_mat_mul is not None:
            out["xla_mat_mul_precision"] = self.read_xla_mat_mul()
        return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


AUTOCAST_DEVICES = ("cpu", "cuda", "xla")


def _autocast_dtype_in(context) -> str | None:
    """The dtype autocast runs at inside `context` (None: autocast off), on whichever device type it enables
    (a runtime's own context may enable another one than the run's, torch_xla.amp's on XLA:CUDA)."""
    with context:
        for dev in AUTOCAST_DEVICES:
            if torch.is_autocast_enabled(dev):
                return _dtype_name(torch.get_autocast_dtype(dev))
    return None


def tf32_in_force() -> dict[str, bool | None]:
    """Whether cuBLAS fp32 matmuls and cuDNN fp32 convolutions and RNNs run as TF32, from torch's state
    (readable on CPU builds too). A per-backend `fp32_precision` of "none" defers to
    torch.backends.fp32_precision, and "none" there to the legacy flags (None: torch refused to say, "mix of
    the legacy and new APIs")."""
    b = torch.backends
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the legacy getters' deprecation notice
        if not has_fp32_precision_api():
            return {
                "cuda_matmul_tf32": bool(b.cuda.matmul.allow_tf32),
                "cudnn_conv_tf32": bool(b.cudnn.allow_tf32),
                "cudnn_rnn_tf32": bool(b.cudnn.allow_tf32),
            }
        return {"cuda_matmul_tf32": _tf32_on(b.cuda.matmul, lambda: b.cuda.matmul.allow_tf32),
                "cudnn_conv_tf32": _tf32_on(b.cudnn.conv, lambda: b.cudnn.allow_tf32),
                "cudnn_rnn_tf32": _tf32_on(b.cudnn.rnn, lambda: b.cudnn.allow_tf32)}


def _tf32_on(backend, legacy) -> bool | None:
    value = backend.fp32_precision
    if value == "none":
        value = getattr(torch.backends, "fp32_precision", "none")
    if value != "none":
        return value == "tf32"
    try:
        return bool(legacy())
    except RuntimeError:
        return None


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
