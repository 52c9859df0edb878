"""Run the GPU check's configurations through the real CLI, one process each, and print a table.

Called by scripts/device_check.sh (which sets up the carried wheels). Each row is a separate
`python -m xbench` process (clean GPU memory, its own compile caches) writing its record into
OUT/results/<row>/; the table is built from those records, so it shows exactly what was stored.

Targets (issue [7/8], one H200; NVIDIA's reference ResNet-50 AMP is ~3,080 img/s):
amp_bf16 eager >= 2,900 img/s, + channels_last >= 3,300, + torch.compile >= 3,800; CV <= 1%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GPU_COMMON = ["model=resnet50", "data=synthetic_imagenet", "data.batch_size=256", "platform=h200",
              "bench.steps=40", "bench.repeats=3", "bench.warmup_max_steps=60", "logger=wandb",
              "logger.progress=false"]
DRY_COMMON = ["model=cnn_small", "data=synthetic_cifar10", "data.batch_size=16", "platform=cpu",
              "bench.steps=4", "bench.min_window_s=0", "bench.repeats=2", "bench.warmup_min_steps=2", "bench.warmup_max_steps=4",
              "bench.warmup_stable_steps=2", "bench.warmup_cv_tol=10", "logger=wandb", "logger.progress=false"]
CL = "model.channels_last=true"

# name, overrides, throughput target (samples/s) on the GPU, needs CUDA, slow on CPU (compile)
ROWS = [
    ("fp32 eager", ["precision=fp32"], None, False, False),
    ("tf32 eager", ["precision=tf32"], None, True, False),
    ("amp_bf16 eager", ["precision=amp_bf16"], 2900.0, False, False),
    ("amp_bf16 channels_last", ["precision=amp_bf16", CL], 3300.0, False, False),
    ("amp_bf16 cl compile", ["precision=amp_bf16", CL, "runtime=compile"], 3800.0, False, True),
    ("single (ddp baseline)", ["precision=amp_bf16", CL, "parallel=single"], None, False, False),
    ("ddp world_size=1", ["precision=amp_bf16", CL, "parallel=ddp", "parallel.world_size=1"], None, False, False),
]
BERT_GPU = ["model=bert_base", "data=synthetic_wikipedia", "data.batch_size=64", "precision=amp_bf16"]
BERT_DRY = ["model=bert_tiny", "data=synthetic_wikipedia", "data.batch_size=4", "data.seq_len=32",
            "precision=amp_bf16"]
CV_MAX = 0.01
# The harness against a hand-written loop on the GPU (scripts/bench_overhead.py; goal >= 0.99): a
# ResNet-50 step (device-bound, the studies' case) and a small MLP (dispatch-bound: the harness's
# per-step Python cost is the largest share there). Dry run: the eager CPU case, quick.
OVERHEAD_GPU = [("resnet50 amp_bf16", ["--runtime", "cuda", "--model", "resnet50", "--precision", "amp_bf16",
                                       "--batch", "256", "--steps", "20", "--pairs", "6"]),
                ("mlp fp32", ["--runtime", "cuda", "--model", "mlp", "--steps", "500", "--pairs", "10"])]
OVERHEAD_DRY = [("mlp fp32 (cpu)", ["--runtime", "eager", "--quick"])]


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _text(out) -> str:
    """A subprocess stream as text: TimeoutExpired carries bytes even under text=True."""
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def run_logged(cmd: list[str], timeout_s: float, log_file: Path) -> str:
    """Run one command with a time limit; its output (all of it, also on a timeout) goes to log_file."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        log = p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        log = f"timed out after {timeout_s:.0f} s\n{_text(e.stdout)}{_text(e.stderr)}"
    log_file.write_text(log)
    return log


def run_row(name: str, overrides: list[str], store: Path, timeout_s: float) -> dict:
    row_store = store / slug(name)
    t0 = time.time()
    log = run_logged([sys.executable, "-m", "xbench", f"store.root={row_store}", *overrides], timeout_s,
                     store / f"{slug(name)}.log")
    recs = sorted(row_store.glob("*/record.json"))
    rec = json.loads(recs[-1].read_text()) if recs else {"status": "no record", "reason": log[-300:]}
    rec["_wall_s"] = time.time() - t0
    return rec


def run_overhead(name: str, args: list[str], out: Path, timeout_s: float) -> dict:
    """One bench_overhead.py comparison in its own process; its RESULT line, or why there is none."""
    log = run_logged([sys.executable, "scripts/bench_overhead.py", *args], timeout_s,
                     out / f"overhead_{slug(name)}.log")
    results = [line[len("RESULT "):] for line in log.splitlines() if line.startswith("RESULT ")]
    return json.loads(results[-1]) if results else {"error": log.strip().splitlines()[-1][:160] if log.strip() else "no output"}


def row_figures(rec: dict) -> dict:
    m, d = rec.get("measurements") or {}, rec.get("derived") or {}
    return {
        "status": rec.get("status"),
        "tp": m.get("throughput_samples_per_s"),
        "cv": m.get("throughput_cv"),
        "step_ms": (m.get("step_time_s_median") or 0) * 1e3 or None,
        "mfu": d.get("mfu"),
        "mem_gib": m.get("peak_device_allocated_gib"),
        "compile_s": m.get("compile_time_s"),
        "reason": rec.get("reason"),
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (the default without a GPU)")
    ap.add_argument("--with-compile", action="store_true", help="in a dry run, also run the torch.compile row")
    ap.add_argument("--row-timeout-s", type=float, default=None)
    ap.add_argument("--only", default="", help="comma-separated row names to run (default: all)")
    args = ap.parse_args()

    import torch

    gpu = torch.cuda.is_available() and not args.dry_run
    common = GPU_COMMON if gpu else DRY_COMMON
    timeout_s = args.row_timeout_s or (240.0 if gpu else 180.0)
    store = Path(args.out) / "results"
    store.mkdir(parents=True, exist_ok=True)
    print(f"device_check: {'GPU ' + torch.cuda.get_device_name(0) if gpu else 'dry run on the CPU'}, "
          f"torch {torch.__version__}, records under {store}", flush=True)

    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - {r[0] for r in ROWS} - {"bert amp_bf16", "overhead"}
    if unknown:
        ap.error(f"unknown row(s) {sorted(unknown)}; rows: {[r[0] for r in ROWS] + ['bert amp_bf16', 'overhead']}")
    table = []
    for name, overrides, target, needs_cuda, slow_on_cpu in ROWS:
        if only and name not in only:
            continue
        if not gpu and (needs_cuda or (slow_on_cpu and not args.with_compile)):
            table.append((name, {"status": "skipped", "reason": "CUDA only" if needs_cuda else "slow on CPU"}, None))
            continue
        print(f"device_check: running {name} ...", flush=True)
        rec = run_row(name, [*common, *overrides], store, timeout_s)
        table.append((name, row_figures(rec), target if gpu else None))
    bert = BERT_GPU if gpu else BERT_DRY
    bert_common = [o for o in common if not o.startswith(("model=", "data=", "data.batch_size"))]
    if not only or "bert amp_bf16" in only:
        print("device_check: running bert amp_bf16 ...", flush=True)
        table.append(("bert amp_bf16", row_figures(run_row("bert amp_bf16", [*bert_common, *bert], store, timeout_s)),
                      None))

    overhead = []
    if not only or "overhead" in only:
        for name, args_ in (OVERHEAD_GPU if gpu else OVERHEAD_DRY):
            print(f"device_check: overhead, {name} ...", flush=True)
            overhead.append((name, run_overhead(name, args_, Path(args.out), timeout_s)))

    by = {n: f for n, f, _ in table}
    single, ddp = by.get("single (ddp baseline)", {}), by.get("ddp world_size=1", {})
    lines = [f"{'configuration':<26} {'status':<9} {'samples/s':>10} {'target':>7} {'ok':>4} {'CV':>7} "
             f"{'step ms':>8} {'MFU':>6} {'mem GiB':>8} {'compile s':>9}"]
    failures = 0
    for name, f, target in table:
        ok = "-"
        if target is not None and f.get("tp") is not None:
            ok = "yes" if f["tp"] >= target else "NO"
        if target is not None and ok != "yes":
            failures += 1
        if gpu and f.get("cv") is not None and f["cv"] > CV_MAX:
            ok = ok + "/cv" if ok != "-" else "cv!"
        lines.append(f"{name:<26} {str(f.get('status')):<9} {fmt(f.get('tp'), '.1f'):>10} "
                     f"{fmt(target, '.0f'):>7} {ok:>4} {fmt(f.get('cv'), '.3%'):>7} {fmt(f.get('step_ms'), '.2f'):>8} "
                     f"{fmt(f.get('mfu'), '.1%'):>6} {fmt(f.get('mem_gib'), '.1f'):>8} {fmt(f.get('compile_s'), '.1f'):>9}")
    if single.get("tp") and ddp.get("tp"):
        lines.append(f"DDP(world 1) / single throughput: {ddp['tp'] / single['tp']:.4f}")
    for name, r in overhead:
        if "error" in r:
            lines.append(f"overhead xbench/hand, {name}: no result ({r['error']})")
            failures += 1
            continue
        lines.append(f"overhead xbench/hand, {name}: {r['ratio_median']:.4f} ({r['ratio_ci95_text']}, "
                     f"{r['pairs']} pairs) goal >= {r['goal']}: {'met' if r['goal_met'] else 'NOT met'}")
        failures += int(gpu and not r["goal_met"])
    for name, f, _ in table:
        if f.get("status") not in ("ok", "skipped") and f.get("reason"):
            lines.append(f"  {name}: {str(f['reason'])[:160]}")
    text = "\n".join(lines)
    (Path(args.out) / "device_check.txt").write_text(text + "\n")
    print("\n" + text, flush=True)
    return 1 if (gpu and failures) else 0


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    raise SystemExit(main())
