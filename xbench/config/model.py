"""model: which network (conf/model/*.yaml, or `model=<family>/<name>` from the open zoo)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class ModelConfig:
    name: str = MISSING  # registry key in xbench.models (e.g. cnn_small, resnet50)
    # Builder keyword arguments (width, depth, lstm_impl, ...); checked against the builder's signature.
    options: dict[str, Any] = field(default_factory=dict)
    channels_last: bool = False  # CNNs only: NHWC memory format


# model.options: free-form builder keywords, so their ranges go by name: a size (`width`, `depth`, `num_heads`
# ...), named by its last word (hidden_size, num_layers), is a whole number >= 1; any other number is finite
# and >= 0 (hidden_dropout_prob is a probability).
_SIZE_OPTION = re.compile(
    r"(^|_)(width|depth|dim|dims|heads|layers|channels|hidden|size|features|blocks|experts)$"
)


def option_problems(options: dict) -> list[str]:
    out = []
    for k, v in (options or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        size = bool(_SIZE_OPTION.search(str(k)))
        if not math.isfinite(v) or v < 0 or (size and not (isinstance(v, int) and v >= 1)):
            need = "a whole number >= 1" if size else "a finite number >= 0"
            out.append(f"model.options.{k}={v!r} is out of range; allowed: {need}")
    return out
