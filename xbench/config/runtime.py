"""runtime: how the step executes (conf/runtime/*.yaml; the names are xbench.runtimes' registry)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from xbench.config.knobs import knob

# torch.compile's modes (null: its default) and what runtime=compile compiles (xbench/runtimes/compiled.py)
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_TARGETS = ("model", "step")


@dataclass
class RuntimeConfig:
    name: str = MISSING  # eager | compile | xla | xla_compile | accelerate | torchax
    cudnn_benchmark: bool = True  # CUDA: let cuDNN pick the fastest convolution algorithms (fixed shapes)
    # torch.compile (runtime=compile) and the XLA compile path (runtime=xla_compile)
    backend: str = "inductor"  # compile: a torch.compile backend; xla_compile: torch_xla | openxla
    mode: str | None = knob(None, choices=COMPILE_MODES)
    fullgraph: bool = False  # compile: no graph breaks allowed; xla_compile: one graph per step
    dynamic: bool | None = None
    target: str = knob("model", choices=COMPILE_TARGETS)  # compile: the model, or the whole train step
