"""DDP against FSDP2 at the same global batch, side by side: step time, tokens/s and memory per device.

    python scripts/bench_fsdp.py [--xla] [--steps N] [--batch B] [--model llama_tiny|llama_small] [--keep DIR]

Runs the real CLI (`python -m xbench -m parallel=ddp,fsdp`) on 2 gloo ranks of this machine with the
Llama 3 decoder, B sequences per device (global batch 2 x B), amp_bf16 on both sides, then prints each
strategy's step time, tokens/s (global and per device) and memory per device by what holds it:
parameters, gradients and optimizer state read from the tensors (local shards under FSDP2), activations
from autograd's saved tensors in the first forward (xbench/training/memory.py). `--xla` adds XLA SPMD
on 2 XLA:CPU devices: replicated parameters (xla_spmd) against sharded ones (xla_fsdp), runtime=xla.
The ratio column is FSDP over DDP (xla_fsdp over xla_spmd).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = [("step time (median), s", "m", "step_time_s_median"), ("tokens/s", "d", "tokens_per_s"),
        ("tokens/s per device", "d", "tokens_per_s_per_device"), ("global batch, tokens", "d", "global_batch_tokens"),
        ("params per device, MiB", "m", "memory_params_gib"), ("grads per device, MiB", "m", "memory_grads_gib"),
        ("optimizer per device, MiB", "m", "memory_optimizer_gib"),
        ("params+grads+optimizer, MiB", "m", "memory_states_gib"),
        ("activations per device, MiB", "m", "memory_activations_gib"), ("peak host RSS, GiB", "m", "peak_host_rss_gib")]


def run(store: Path, args, extra: list[str]) -> list[dict]:
    cmd = [sys.executable, "-m", "xbench", "-m", f"store.root={store}", f"model={args.model}", "data=synthetic_tokens",
           f"data.batch_size={args.batch}", "optim.name=adamw", "optim.lr=0.001", "platform=cpu",
           "parallel.world_size=2", f"bench.steps={args.steps}", "bench.repeats=3", "bench.min_window_s=0",
           "bench.threads=1", "bench.isolation=shared", "logger=none", "logger.progress=false", *extra]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"xbench failed ({' '.join(cmd)}):\n{p.stderr[-3000:]}")
    return [json.loads(f.read_text()) for f in sorted(store.glob("*/record.json"))]


def value(rec: dict, where: str, key: str):
    v = (rec["measurements"] if where == "m" else rec.get("derived") or {}).get(key)
    if v is not None and key.startswith("memory_"):
        v *= 1024  # GiB -> MiB: the tiny decoder's states are a fraction of a MiB
    return v


def table(recs: dict[str, dict], a: str, b: str) -> str:
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    lines = [f"{'':30s} {a:>12s} {b:>12s} {b + '/' + a:>14s}"]
    for label, where, key in ROWS:
        va, vb = value(recs[a], where, key), value(recs[b], where, key)
        ratio = fmt(vb / va) if va and vb is not None else "-"
        lines.append(f"{label:30s} {fmt(va):>12s} {fmt(vb):>12s} {ratio:>14s}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xla", action="store_true", help="also xla_spmd vs xla_fsdp on 2 XLA:CPU devices")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4, help="sequences per device")
    ap.add_argument("--model", default="llama_tiny", choices=["llama_tiny", "llama_small"])
    ap.add_argument("--keep", type=Path, help="keep the records here (default: a temporary folder)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xbench-bench-fsdp-") as tmp:
        root = args.keep or Path(tmp)
        recs = {r["config"]["parallel"]["name"]: r
                for r in run(root / "torch", args, ["precision=amp_bf16", "parallel=ddp,fsdp"])}
        print(f"DDP vs FSDP2, {args.model}, 2 gloo ranks x {args.batch} sequences, amp_bf16 (same global batch):")
        print(table(recs, "ddp", "fsdp"))
        if args.xla:
            recs = {r["config"]["parallel"]["name"]: r
                    for r in run(root / "xla", args, ["precision=fp32", "runtime=xla", "parallel=xla_spmd,xla_fsdp"])}
            print(f"\nXLA SPMD, replicated vs sharded parameters, 2 XLA:CPU devices x {args.batch} sequences, fp32:")
            print(table(recs, "xla_spmd", "xla_fsdp"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
