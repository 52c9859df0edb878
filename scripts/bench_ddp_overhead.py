"""DDP world size 1 vs `single` on the same workload (overhead of the DDP wrapper + barrier at window
edges), and 2 gloo processes (one thread per rank throughout: on a shared 2-core machine two OpenMP
threads per process are dominated by spin-waiting under contention), measured side by side on this
machine. Prints ratios; asserts nothing.

    PYTHONPATH=$PWD python scripts/bench_ddp_overhead.py [store_root]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

COMMON = ["model=cnn_small", "data=synthetic_cifar10", "data.batch_size=32", "platform=cpu", "logger=none",
          "logger.progress=false", "bench.steps=30", "bench.repeats=3", "bench.warmup_max_steps=15"]
POINTS = {
    "single (1 thread)": ["parallel=single", "bench.threads=1"],
    "ddp world 1 (1 thread)": ["parallel=ddp", "parallel.world_size=1", "bench.threads=1"],
    "ddp world 2 (1 thread/rank)": ["parallel=ddp", "parallel.world_size=2", "bench.threads=1"],
}


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="xbench-ddp-"))
    tp = {}
    for label, extra in POINTS.items():
        store = root / label.split(" (")[0].replace(" ", "_")
        subprocess.run([sys.executable, "-m", "xbench", f"store.root={store}", *COMMON, *extra], check=True,
                       capture_output=True)
        [rec] = [json.loads(p.read_text()) for p in store.glob("*/record.json")]
        m = rec["measurements"]
        tp[label] = m["throughput_samples_per_s"]
        print(f"{label:<30} {tp[label]:8.1f} samples/s  (cv {m.get('throughput_cv') or 0:.3f}, "
              f"step median {m['step_time_s_median'] * 1e3:.1f} ms)")
    s, d1, d2 = tp.values()
    print(f"ddp world 1 / single: {d1 / s:.3f}   ddp world 2 / single: {d2 / s:.3f}   "
          f"scaling efficiency (ddp 2 vs ddp 1): {d2 / (2 * d1):.3f}")


if __name__ == "__main__":
    main()
