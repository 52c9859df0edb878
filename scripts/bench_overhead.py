"""xbench's measurement loop against a minimal hand-written training loop: is the harness free?

    python scripts/bench_overhead.py [--runtime eager|xla|both] [--quick] [--rounds R] [--steps N]

Same model (MLP 784-H-H-10), same batch, same optimizer, same threads, in ONE process, interleaved
A B / B A (alternating order cancels slow drift of a shared machine). xbench's side is the real
worker (`run_rank`: warm-up rules, timed window synced at its edges, per-step stamps, the runtime's
own step); the hand side is the textbook loop (XLA: `torch_xla.sync()` per step, one
`xm.wait_device_ops()` at the end). Prints the throughput ratio xbench/hand (median and range over
rounds; goal >= 0.98) and each side's XLA compilations, counted in a fresh child process each, since
compiled graphs are cached in-process and the second loop to run would otherwise show none.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

IMAGE, CLASSES, POOL = 28, 10, 4


def overrides(runtime: str, a) -> list[str]:
    return [f"runtime={runtime}", "model=mlp", f"model.options.hidden={a.hidden}", "data=synthetic_mnist",
            f"data.batch_size={a.batch}", f"bench.steps={a.steps}", "bench.repeats=1", f"bench.threads={a.threads}",
            "bench.warmup_min_steps=3", "bench.warmup_stable_steps=2", "bench.warmup_max_steps=10",
            "bench.warmup_cv_tol=10", "logger=none", "optim.lr=0.01", "optim.momentum=0.9"]


def xbench_run(runtime: str, a) -> dict:
    """One run of xbench's own worker; throughput from its timed window."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from xbench.__main__ import config_dir
    from xbench.bench.worker import RankContext, run_rank
    from xbench.config import register_configs
    from xbench.platforms.detect import host_facts

    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = OmegaConf.to_object(compose(config_name="config", overrides=overrides(runtime, a)))
    m = run_rank(cfg, host_facts(), RankContext()).measurements
    return {"samples_per_s": m["samples_per_window"] / m["window_s"][0], "compiles_warmup": m["compiles_warmup"],
            "compiles_timed": m["compiles_timed"], "params": m["params_count"]}


def hand_run(runtime: str, a) -> dict:
    """The minimal loop a user would write."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if runtime == "xla":
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met

        dev, sync, wait = torch_xla.device(), torch_xla.sync, xm.wait_device_ops
        count = lambda: (met.metric_data("CompileTime") or (0,))[0]  # noqa: E731
    else:
        dev, sync, wait, count = torch.device("cpu"), (lambda: None), (lambda: None), (lambda: None)
    h = a.hidden
    model = nn.Sequential(nn.Flatten(), nn.Linear(IMAGE * IMAGE, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                          nn.Linear(h, CLASSES)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    pool = [(torch.randn(a.batch, 1, IMAGE, IMAGE, generator=g).to(dev),
             torch.randint(0, CLASSES, (a.batch,), generator=g).to(dev)) for _ in range(POOL)]
    c0 = count()

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        return loss.detach()

    for i in range(3):
        step(*pool[i % POOL])
    wait()
    c1 = count()
    losses = []
    t0 = time.perf_counter()
    for i in range(a.steps):
        losses.append(step(*pool[i % POOL]))
    wait()
    dt = time.perf_counter() - t0
    c2 = count()
    return {"samples_per_s": a.batch * a.steps / dt, "params": sum(p.numel() for p in model.parameters()),
            "compiles_warmup": None if c0 is None else c1 - c0, "compiles_timed": None if c0 is None else c2 - c1}


def compiles_in_child(side: str, runtime: str, a) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--runtime", runtime, "--steps", str(a.steps),
           "--batch", str(a.batch), "--hidden", str(a.hidden), "--threads", str(a.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(runtime: str, a) -> dict:
    ratios, xs, hs = [], [], []
    for r in range(a.rounds):
        order = ("x", "h") if r % 2 == 0 else ("h", "x")
        got = {s: (xbench_run if s == "x" else hand_run)(runtime, a) for s in order}
        if got["x"]["params"] != got["h"]["params"]:
            raise SystemExit(f"models differ: xbench {got['x']['params']} params, hand {got['h']['params']}")
        xs.append(got["x"]["samples_per_s"])
        hs.append(got["h"]["samples_per_s"])
        ratios.append(xs[-1] / hs[-1])
    out = {"runtime": runtime, "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
           "ratio_max": max(ratios), "xbench_samples_per_s": statistics.median(xs),
           "hand_samples_per_s": statistics.median(hs), "rounds": a.rounds}
    if runtime == "xla":
        for side in ("xbench", "hand"):
            c = compiles_in_child(side, runtime, a)
            out[f"{side}_compiles_warmup"], out[f"{side}_compiles_timed"] = c["compiles_warmup"], c["compiles_timed"]
    else:
        out.update(xbench_compiles_warmup=None, xbench_compiles_timed=None, hand_compiles_warmup=None,
                   hand_compiles_timed=None)
    return out


def harness_cost_us(steps: int = 100_000) -> float:
    """The loop's own cost per step: a timed window over a step that does no work (median of 3)."""
    from xbench.bench import loop

    t = torch.zeros(1)
    pool, cursor = [(t, t)] * 4, [0]

    def next_batch():
        i = cursor[0]
        cursor[0] = i + 1
        return pool[i % 4]

    hooks = loop.Hooks(step=lambda x, y: t, next_batch=next_batch, sync=lambda: None,
                       read_losses=lambda losses: [0.0] * len(losses))
    return statistics.median(loop.timed_window(hooks, steps).wall_s / steps * 1e6 for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", choices=("eager", "xla", "both"), default="both")
    ap.add_argument("--quick", action="store_true", help="short run (tests): 2 rounds of 10 steps")
    # Windows of ~1 s or more: shorter ones (100 steps of 2 ms) measured the machine's noise, not the loop.
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides")
    ap.add_argument("--child", choices=("xbench", "hand"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps = 2, 10
    if a.child:  # fresh process: count this side's compilations alone
        print(json.dumps((xbench_run if a.child == "xbench" else hand_run)(a.runtime, a)))
        return
    names = ("eager", "xla") if a.runtime == "both" else (a.runtime,)
    if "xla" in names:
        from xbench.runtimes import preload_xla

        preload_xla("xla")  # the XLA device must exist before the first (eager) backward in this process
    print(f"xbench loop vs hand loop: mlp hidden={a.hidden}, batch {a.batch}, {a.steps} timed steps, "
          f"{a.rounds} rounds, {a.threads} thread(s)")
    print(f"harness cost: {harness_cost_us(10_000 if a.quick else 100_000):.2f} us per step "
          "(a timed window over a step that does nothing)", flush=True)
    for name in names:
        r = compare(name, a)
        print(f"{name:6s} ratio xbench/hand {r['ratio_median']:.3f} (min {r['ratio_min']:.3f}, max {r['ratio_max']:.3f})"
              f"  xbench {r['xbench_samples_per_s']:.0f} vs hand {r['hand_samples_per_s']:.0f} samples/s"
              f"  compiles warm-up/timed: xbench {r['xbench_compiles_warmup']}/{r['xbench_compiles_timed']}"
              f", hand {r['hand_compiles_warmup']}/{r['hand_compiles_timed']}", flush=True)
        print("RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
