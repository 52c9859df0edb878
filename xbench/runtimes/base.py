"""What every runtime provides to the worker and the loop."""

from __future__ import annotations

import torch

from xbench.runtimes.dynamo import BLOCKS_BACKEND, DynamoMeter, compiled_blocks
from xbench.training.step import make_train_step


class Runtime:
    name = "base"
    drives_xla = False  # only XLA runtimes can drive an XLA device
    # dynamo's compile figures, when anything in the step compiles through it
    dynamo: DynamoMeter | None = None

    @classmethod
    def rules(cls, cfg, facts, dev: str) -> list[str]:
        """Why `cfg` (the whole config) cannot run here with this runtime; `dev` is the device type.
        Packages the runtime needs are checked from its registry line before this is called."""
        if cfg.platform.device == "xla" and not cls.drives_xla:
            return [f"platform {cfg.platform.name!r} is an XLA device, which only runtime=xla or "
                    f"runtime=xla_compile can drive (asked: runtime={cfg.runtime.name})"]
        return []

    def __init__(self, cfg, device_type: str, local_rank: int = 0):
        self.cfg = cfg
        self.device = self._device(device_type, local_rank)
        if self.device.type == "cuda":
            # Shapes are fixed in a benchmark, so the autotuned algorithms are chosen once, in warm-up.
            torch.backends.cudnn.benchmark = bool(getattr(cfg, "cudnn_benchmark", True))

    @staticmethod
    def _device(device_type: str, local_rank: int) -> torch.device:
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
            return torch.device("cuda", local_rank)
        return torch.device(device_type)

    def prepare(self, model, optimizer, task: str, precision, options=None):
        """-> step(inputs, targets) returning the detached loss. Default: the shared eager step.
        `options`: training.step.StepOptions (label smoothing, gradient accumulation)."""
        self.meter_compiled_blocks(model)
        return make_train_step(model, optimizer, task, precision, options=options)

    def meter_compiled_blocks(self, model) -> None:
        """Blocks a strategy compiled in place (parallel=fsdp's compile_blocks, backend BLOCKS_BACKEND)
        compile inside this runtime's step: dynamo's meter counts them, from here."""
        if self.dynamo is None and compiled_blocks(model):
            self.dynamo = DynamoMeter(BLOCKS_BACKEND, None, "blocks")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def cut(self) -> None:
        """End the work traced so far without waiting for it (lazy XLA graphs); nothing for eager devices."""

    def compile_count(self) -> int | None:
        """Graph compilations so far; None for runtimes that do not compile."""
        return None if self.dynamo is None else self.dynamo.compile_count()

    def cuda_graphs(self) -> str | None:
        """Whether the step replays CUDA graphs and what that asks of a kept loss: None (no graphs),
        "mark" (a new iteration is marked before each step; the loss is a tensor of its own) or "clone"
        (also: the loss is a graph output, in a buffer the next replay overwrites)."""
        return None

    def keep_loss(self, step):
        """`step` as the loops call it: what it returns is what they keep of each step's loss.

        On the CPU the host is the device and every op has finished when the step returns, so the loss
        is read as a float at once (no synchronisation). Holding a window's thousand 4-byte loss
        tensors instead scatters long-lived small blocks through the heap the step's large buffers are
        carved from, and the allocator's splitting and merging around them cost 4-9% of a 1.5-ms MLP
        step (measured in its own process: scripts/bench_process.py, docs/measurement.md). On a GPU or
        an XLA device a read would synchronise, so the loss stays a device tensor until the window closes.

        Under CUDA graphs a graph's outputs live in its static memory, which the next replay writes
        again: a kept loss that is a graph output (torch.compile of the whole step) would read the last
        step's value for every step, so it is cloned on the device (one small kernel, no sync) before
        the next replay; each step also marks a new iteration (torch.compiler.cudagraph_mark_step_begin).
        """
        if self.device.type == "cpu":
            def step_reading_loss(inputs, targets):
                return step(inputs, targets).item()

            return step_reading_loss
        graphs = self.cuda_graphs()
        if graphs is None:
            return step
        mark, clone = torch.compiler.cudagraph_mark_step_begin, graphs == "clone"

        def step_across_replays(inputs, targets):
            mark()
            loss = step(inputs, targets)
            return loss.clone() if clone else loss

        return step_across_replays

    def read_losses(self, losses: list) -> list[float]:
        """Kept losses -> floats, after a window (one transfer where the device allows)."""
        if not losses:
            return []
        if isinstance(losses[0], float):  # read at each step (keep_loss)
            return list(losses)
        return torch.stack([x.float() for x in losses]).cpu().tolist()

    def overhead(self) -> dict:
        """Runtime-specific overhead figures for the record (compile time, tracing time, ...)."""
        return {} if self.dynamo is None else self.dynamo.figures()

    def mark_timed(self) -> None:
        """The timed windows begin: figures that split warm-up from the windows (`*_timed`) count from
        here."""
        if self.dynamo is not None:
            self.dynamo.mark_timed()

    def warnings(self) -> list[str]:
        """What the runtime's figures say made the measurement less than steady (after the windows)."""
        return [] if self.dynamo is None else self.dynamo.warnings()

    def adapt_precision(self, precision):
        """The precision policy as this runtime runs it (XLA:CUDA fp16 takes torch-xla's autocast and
        scaler)."""
        return precision

    def memory(self) -> dict:
        """Device memory figures the runtime alone can read (XLA's). CUDA's peaks are read over every GPU
        the rank drives (bench/meters/memory.py device_peaks); on the CPU the device's memory is the host's
        (peak_host_rss_gib, every run)."""
        return {}
