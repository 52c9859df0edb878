"""precision: the numeric policy (conf/precision/*.yaml; the names are xbench.precision's table)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | tf32 | amp_fp16 | amp_bf16 | bf16
