"""Precision policies: config name + device type -> autocast context, gradient scaler, parameter dtype.

| name      | what it does                                                    | where        |
|-----------|-----------------------------------------------------------------|--------------|
| fp32      | everything fp32; TF32 matmuls explicitly off on CUDA            | anywhere     |
| tf32      | fp32 parameters, TF32 tensor-core matmuls/convolutions          | CUDA only    |
| amp_fp16  | autocast to fp16 + a dynamic gradient scaler                    | CUDA only    |
| amp_bf16  | autocast to bf16, fp32 master parameters                        | CUDA/CPU/XLA |
| bf16      | parameters and activations in bf16 (the XLA/TPU recipes)        | anywhere     |

Which pairs are allowed is decided in xbench.compat, before any device work.
"""

from __future__ import annotations

import contextlib
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

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


def resolve(name: str, device_type: str) -> Precision:
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}")
    if device_type == "cuda":
        # Set explicitly both ways: torch's default differs between versions, and fp32 must mean fp32.
        tf32 = name == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    autocast_dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(name)
    param_dtype = torch.bfloat16 if name == "bf16" else torch.float32
    scaler = torch.amp.GradScaler("cuda") if name == "amp_fp16" else None
    compute = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16", "bf16": "bf16"}[name]
    return Precision(name, device_type, autocast_dtype, param_dtype, scaler, compute)
