"""runtime: how the step executes (conf/runtime/*.yaml; the names are xbench.runtimes' registry)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class RuntimeConfig:
    name: str = MISSING  # eager | compile | xla | xla_compile | accelerate | torchax
    cudnn_benchmark: bool = True  # CUDA: let cuDNN pick the fastest convolution algorithms (fixed shapes)
    # torch.compile (runtime=compile) and the XLA compile path (runtime=xla_compile)
    backend: str = "inductor"  # compile: a torch.compile backend; xla_compile: torch_xla | openxla
    mode: str | None = None  # default | reduce-overhead | max-autotune
    fullgraph: bool = False  # compile: no graph breaks allowed; xla_compile: one graph per step
    dynamic: bool | None = None
    target: str = "model"  # compile: what is compiled, the model or the whole train step
