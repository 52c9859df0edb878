"""The shared train step driven through HF Accelerate: `Accelerator.prepare` + `accelerator.backward`.

Under parallel=accelerate the ranks' process group already exists (torchrun launcher); the Accelerator
joins it and `prepare` wraps the model in DDP (xbench/parallel/accelerate.py). The precision policy is
xbench's own (autocast/scaler from xbench.precision, Accelerate's `mixed_precision="no"`), so the
only difference from runtime=eager is Accelerate's wrapping: its overhead is what gets measured.

`import accelerate` imports torch_xla whenever it is installed and then picks the XLA device:
`extras.keep_torch_xla_out` sets USE_TORCH_XLA=0 before the import, since this runtime is the CPU/CUDA path.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from xbench.extras import keep_torch_xla_out
from xbench.runtimes.base import Runtime
from xbench.training.step import make_train_step


class AccelerateRuntime(Runtime):
    name = "accelerate"

    def __init__(self, cfg, device_type: str, local_rank: int = 0):
        super().__init__(cfg, device_type, local_rank)
        keep_torch_xla_out(even_if_loaded=True)
        import accelerate
        from accelerate import Accelerator

        self.version = accelerate.__version__
        threads = torch.get_num_threads()
        self.accelerator = Accelerator(cpu=self.device.type == "cpu", mixed_precision="no")
        # Multi-process on a CPU, Accelerate resets torch's threads when OMP_NUM_THREADS is unset:
        # keep xbench's.
        torch.set_num_threads(threads)
        if self.accelerator.device.type != self.device.type:
            raise RuntimeError(
                f"Accelerate chose device {self.accelerator.device}, xbench expects {self.device}"
            )
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.accelerator.num_processes != world:  # a silent world of one would train unsynced copies
            raise RuntimeError(f"Accelerate sees {self.accelerator.num_processes} process(es), the process "
                               f"group has {world}")

    def prepare(self, model, optimizer, task: str, precision, options=None):
        model, optimizer = self.accelerator.prepare(model, optimizer)
        return make_train_step(model, optimizer, task, precision, backward=self.accelerator.backward,
                               options=options)

    def overhead(self) -> dict:
        return {"accelerate_version": self.version, "accelerate_device": str(self.accelerator.device),
                "accelerate_distributed_type": str(self.accelerator.distributed_type),
                "accelerate_num_processes": self.accelerator.num_processes,
                "threads_intra_at_end": torch.get_num_threads()}
