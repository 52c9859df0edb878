"""Data-parallel strategies side by side on this machine, interleaved over rounds (contention on a shared
machine then hits every point alike): DDP vs Accelerate over 1 and 2 gloo processes, and torch-xla SPMD
over 1 and 2 PJRT CPU devices against one XLA device at the same global batch. One torch thread per
rank. Prints median throughputs and ratios; asserts nothing.

    PYTHONPATH=$PWD python scripts/bench_parallel_strategies.py [rounds] [store_root]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMON = ["model=mlp", "data=synthetic_mnist", "platform=cpu", "logger=none", "logger.progress=false",
          "bench.threads=1", "bench.steps=40", "bench.repeats=3", "bench.warmup_max_steps=20"]
B = 32  # per device
POINTS = {
    "ddp x1": ["parallel=ddp", "parallel.world_size=1", f"data.batch_size={B}"],
    "ddp x2": ["parallel=ddp", "parallel.world_size=2", f"data.batch_size={B}"],
    "accelerate x1": ["parallel=accelerate", "parallel.world_size=1", f"data.batch_size={B}"],
    "accelerate x2": ["parallel=accelerate", "parallel.world_size=2", f"data.batch_size={B}"],
    "xla 1 device, batch 2B": ["runtime=xla", f"data.batch_size={2 * B}"],
    "xla_spmd x1": ["parallel=xla_spmd", "parallel.world_size=1", f"data.batch_size={B}"],
    "xla_spmd x2": ["parallel=xla_spmd", "parallel.world_size=2", f"data.batch_size={B}"],
}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    root = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="xbench-par-"))
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    tp: dict[str, list[float]] = {k: [] for k in POINTS}
    for i in range(rounds):
        for label, extra in POINTS.items():
            store = root / f"{label.replace(' ', '_').replace(',', '')}_{i}"
            subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *COMMON, *extra], env=env,
                           check=True, capture_output=True)
            [rec] = [json.loads(p.read_text()) for p in store.glob("*/record.json")]
            tp[label].append(rec["measurements"]["throughput_samples_per_s"])
    med = {k: statistics.median(v) for k, v in tp.items()}
    for k, v in med.items():
        print(f"{k:26s} {v:10.0f} samples/s   (rounds: {', '.join(f'{x:.0f}' for x in tp[k])})")
    print(f"accelerate / ddp, 1 process     {med['accelerate x1'] / med['ddp x1']:.2f}")
    print(f"accelerate / ddp, 2 processes   {med['accelerate x2'] / med['ddp x2']:.2f}")
    print(f"ddp 2 / ddp 1                   {med['ddp x2'] / med['ddp x1']:.2f}")
    print(f"xla_spmd 2 / xla_spmd 1         {med['xla_spmd x2'] / med['xla_spmd x1']:.2f}")
    print(f"xla_spmd 2 / xla 1 device, same global batch {med['xla_spmd x2'] / med['xla 1 device, batch 2B']:.2f}")
    print(f"records under {root}")


if __name__ == "__main__":
    main()
