"""A plain training loop, written the way a user would, in its own process: the reference that
scripts/bench_process.py compares the xbench CLI's recorded throughput with. It imports nothing of
xbench on purpose (scripts/bench_overhead.py reuses its `textbook_step` for its in-process hand side).

    python scripts/hand_train.py --runtime eager|xla --hidden 256 --batch 64 --threads 1 \
        --warmup 10 --steps 800 --windows 5

The MLP is xbench's `mlp` on `synthetic_mnist` (Flatten, Linear 784->hidden, ReLU, Linear, ReLU,
Linear ->10; parameter count printed for the caller to check), SGD lr 0.01 momentum 0.9, a pool of
4 random batches on the device. The numbers are xbench's own for the same `--seed` (bench.seed): the
model initialised after `torch.manual_seed(seed)`, the batches drawn from a generator seeded with it,
inputs then targets, as xbench's synthetic pool draws them. The same numbers matter, not only the same
shapes: trained on 4 batches the loss falls towards zero, and how soon gradients reach subnormal
floats (each operation on them costs many times a normal one's) depends on the exact values; two
different trajectories differ by up to ~5% in speed with no harness involved. Prints one JSON line:
the median throughput over the windows, each window's, the CPU time per step, the parameter count and
the first step's loss (the caller checks it equals xbench's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


def textbook_step(model, opt, mark=lambda: None, autocast_device: str | None = None):
    """The step a user writes: forward (under bf16 autocast only when asked), loss, backward, SGD step."""

    def step(x, y):
        if autocast_device:
            with torch.autocast(autocast_device, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:  # the fp32 loop a user writes has no autocast context at all
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark()
        return loss.detach()

    return step


def process_started_at() -> float:
    """Wall time this process started, by xbench's own rule (xbench/rank.py process_started_at: /proc's start
    ticks against CLOCK_BOOTTIME; psutil's create_time reads up to 1 s early), so both sides count alike."""
    with open("/proc/self/stat", "rb") as f:
        ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))


def first_step(batch: int, threads: int) -> None:
    """`--first-step`: what a user's script does before its first step and nothing else: import torch and
    torchvision, build ResNet-18 for 32-px images, train one SGD step on a random batch; prints one JSON line
    with the seconds from this process's start to that step's end (xbench's startup_to_first_step_s), and the
    same split into phases (`startup_phases_s`: interpreter and torch's import, torchvision's, build, first step)."""
    marks = [("torch_import", process_started_at()), ("torchvision_import", time.time())]
    import torchvision

    marks.append(("build", time.time()))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    marks.append(("first_step", time.time()))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    end = time.time()
    phases = {name: t_next - t for (name, t), (_, t_next) in zip(marks, [*marks[1:], ("", end)])}
    print(json.dumps({"startup_to_first_step_s": end - marks[0][1], "startup_phases_s": phases,
                      "loss": float(loss.detach())}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", choices=("eager", "xla"), default="eager")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=800, help="steps per timed window")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="xbench's bench.seed: the same weights and batches")
    ap.add_argument("--first-step", action="store_true", help="ResNet-18: start-up to the first step only")
    a = ap.parse_args()
    if a.first_step:
        return first_step(a.batch, a.threads)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.runtime == "xla":
        os.environ.setdefault("PJRT_DEVICE", "CPU")  # read when torch_xla is imported
        import torch_xla
        import torch_xla.core.xla_model as xm

        dev, mark, wait = torch_xla.device(), torch_xla.sync, xm.wait_device_ops
    else:
        dev, mark, wait = torch.device("cpu"), (lambda: None), (lambda: None)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden), nn.ReLU(),
                          nn.Linear(a.hidden, 10)).to(dev)
    # fused on the CPU as xbench builds it (xbench/training/optim.py): the same kernels, the same numbers
    fused = {"fused": True} if dev.type != "xla" else {}
    step = textbook_step(model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **fused), mark)
    gen = torch.Generator().manual_seed(a.seed)
    pool = [(torch.randn(a.batch, 1, 28, 28, generator=gen), torch.randint(0, 10, (a.batch,), generator=gen))
            for _ in range(4)]
    pool = [(x.to(dev), y.to(dev)) for x, y in pool]
    first_loss = None
    for i in range(a.warmup):
        loss = step(*pool[i % 4])
        wait()
        first_loss = float(loss.cpu()) if first_loss is None else first_loss
    rates = []
    cpu0 = time.process_time()  # every thread of this process: the work the windows cost, whatever the share
    for _ in range(a.windows):
        wait()
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(*pool[i % 4])
        wait()
        rates.append(a.batch * a.steps / (time.perf_counter() - t0))
    print(json.dumps({"throughput_samples_per_s": statistics.median(rates), "windows": rates,
                      "cpu_s_per_step": (time.process_time() - cpu0) / (a.steps * a.windows),
                      "params": sum(p.numel() for p in model.parameters()), "loss_first": first_loss}))


if __name__ == "__main__":
    main()
