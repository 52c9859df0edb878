"""The figures every rank reports, whichever loop it ran (bench/windows.py, bench/training.py), one meaning
per name. The loops add their own (windows and step times; epochs, evaluations and targets).

- `batch_size_per_device`: samples one device takes in one micro-batch (`data.batch_size`, or the
  self-check's / a trial's batch);
- `samples_per_step`: samples ONE RANK trains in one optimizer step: its batch per device over every
  device it drives and every micro-batch of the step (`samples_per_step()` below). The run's global batch
  is `global_batch_size` (the sum over the ranks: metrics/aggregate.py; train_to_target reports it too).
"""

from __future__ import annotations

from xbench.training.optim import optimizer_figures


def samples_per_step(batch_size: int, devices_per_rank: int, accumulate: int = 1) -> int:
    """Samples one optimizer step of one rank trains (DataParallel, SPMD: one batch for all the rank's
    devices; gradient accumulation: the step's micro-batches too)."""
    return batch_size * devices_per_rank * accumulate


def build_figures(
    rank: int, work, batch_size: int, accumulate: int, threads: dict, cpu_capability: str
) -> dict:
    """What the rank built and runs: device, batch, model size and FLOPs, the dtype, the threads and ATen's
    CPU kernels in force (bench/worker.setup_rank)."""
    precision, devices = work.precision, work.strategy.devices_per_rank
    return {
        "rank": rank,
        "device": str(work.runtime.device),
        "devices_per_rank": devices,
        "batch_size_per_device": batch_size,
        "samples_per_step": samples_per_step(batch_size, devices, accumulate),
        "params_count": work.params_count,
        "flops_per_sample_forward": work.flops["forward"],
        "flops_per_sample_train": work.flops["train"],  # model FLOPs: recomputation not counted
        **({"flops_per_sample_train_hardware": work.flops["train_hardware"]} if "train_hardware" in work.flops
           else {}),  # with the recomputed forward (activation checkpointing): HFU's numerator
        # compute_dtype, and what ran: autocast/parameter dtypes, TF32, XLA's matmul precision
        **precision.executed(),
        **threads,
        "cpu_capability_in_force": cpu_capability,
    }


def closing_figures(work) -> dict:
    """Read once the loop is over: the runtime's overhead and memory, the strategy's and optimizer's figures.
    They come after a meter's figures in a rank's dict (runtime.memory() has the last word)."""
    return {**work.runtime.overhead(), **work.strategy.rank_figures(work.model),
            **optimizer_figures(work.optimizer, work.precision.scaler), **work.runtime.memory()}
