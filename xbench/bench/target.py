"""Train to a quality target (`bench.mode=train_to_target`): epochs over real data, evaluation at a
cadence, the curve, checkpoints and resume. The throughput loop (loop.py) is not involved.

Clocks
------
- training time: the device is synchronised at both edges of every training segment (the steps
  between two evaluations); only those segments count. Evaluation, checkpoints and start-up do not.
- wall time: from the process start (imports, data, model build included) to now, plus the wall time
  of earlier attempts up to their last checkpoint when the run was resumed. Work done after the last
  checkpoint of a killed attempt is redone and its time is not known (SIGKILL leaves no trace); a
  SIGTERM writes a checkpoint at once, so a graceful preemption loses nothing.
- start-up: process start to the first training step of this attempt.

Not reached: the run still ends `ok` (it measured what it set out to); `target_reached` is false,
`target_status` says why (max_epochs | max_time), the *_to_target fields are null and a warning says so.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import torch

from xbench.bench import loop
from xbench.bench.memory import peak_host_rss_gib
from xbench.bench.mlperf_log import LOG_FILE, MLPerfLog
from xbench.bench.worker import (
    RankResult,
    build_workload,
    check_finite,
    input_format,
    make_step,
    set_threads,
)
from xbench.launch import LaunchResult

CHECKPOINT_FILE = "checkpoint.pt"
HIGHER_IS_BETTER = {"top1": True, "accuracy": True, "top5": True, "perplexity": False}
CURVE_KEYS = ("eval", "attempt", "epoch", "step", "samples_seen", "train_time_s", "wall_s", "train_loss")


@dataclass
class TargetResult(LaunchResult):
    artifacts: dict = field(default_factory=dict)


@dataclass
class Progress:
    """Everything needed to continue a run: it goes into the checkpoint as a plain dict."""

    epoch: int = 0  # current epoch (0-based)
    batch: int = 0  # next batch within the epoch
    step: int = 0
    samples: int = 0
    train_time_s: float = 0.0
    eval_time_s: float = 0.0
    wall_s: float = 0.0  # wall time of the whole run up to the checkpoint (all attempts)
    evals: int = 0
    resumes: int = 0
    reached_at: dict | None = None  # the curve point where the target was first met
    curve: dict = field(default_factory=dict)


def datasets(cfg, task: str = "classify"):
    """(train, eval) TensorDatasets of a real data source from the loader registry.

    Train-to-target keeps both splits as device tensors (evaluation then costs no host I/O), so the
    source must fit in memory: digits, MNIST, CIFAR-10, the text sets; ImageNet does not.
    """
    from xbench.data import loaders

    splits = loaders.build(cfg.data, task)
    return _as_tensors(splits.train, splits.collate), _as_tensors(splits.eval, splits.collate)


MAX_IN_MEMORY_SAMPLES = 2_000_000


def _as_tensors(ds, collate):
    from torch.utils.data import DataLoader, TensorDataset

    if isinstance(ds, TensorDataset):
        return ds
    if len(ds) > MAX_IN_MEMORY_SAMPLES:
        raise ValueError(f"train_to_target holds the data set in memory; {len(ds)} samples is more than "
                         f"{MAX_IN_MEMORY_SAMPLES} (use a smaller set, or bench.mode=throughput for this one)")
    x, y = next(iter(DataLoader(ds, batch_size=len(ds), collate_fn=collate)))
    return TensorDataset(x, y)


def better(metric: str, value: float, target: float) -> bool:
    return value >= target if HIGHER_IS_BETTER[metric] else value <= target


@torch.no_grad()
def evaluate(model, task: str, precision, x, y, batch_size: int, metric: str) -> float:
    """The goal metric over the whole eval set: top-1/top-5 accuracy as a fraction, or perplexity."""
    model.eval()
    hits, loss_sum, count = 0, 0.0, 0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]
        with precision.autocast():
            logits = model(xb)
        logits = logits.float()
        if metric == "perplexity":
            flat, tgt = logits.flatten(0, -2), yb.flatten()
            keep = tgt != -100
            loss_sum += torch.nn.functional.cross_entropy(flat[keep], tgt[keep], reduction="sum").item()
            count += int(keep.sum())
        else:
            k = 5 if metric == "top5" else 1
            top = logits.topk(min(k, logits.shape[-1]), dim=-1).indices
            hits += int((top == yb.unsqueeze(-1)).any(-1).sum())
            count += len(yb)
    model.train()
    return math.exp(loss_sum / count) if metric == "perplexity" else hits / count


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_checkpoint(run_dir: Path) -> dict | None:
    path = Path(run_dir) / CHECKPOINT_FILE
    return torch.load(path, map_location="cpu", weights_only=False) if path.is_file() else None


def run_to_target(cfg, facts, run_dir: Path, on_step=None, stop: loop.StopFlag | None = None) -> TargetResult:
    created = psutil.Process().create_time()
    stop = stop or loop.StopFlag()
    goal, b = cfg.goal, cfg.bench
    run_dir = Path(run_dir)
    threads = set_threads(b)
    torch.manual_seed(b.seed)

    w = build_workload(cfg, facts)
    runtime, precision, entry, model, optimizer, flops = w.runtime, w.precision, w.entry, w.model, w.optimizer, w.flops

    ckpt = load_checkpoint(run_dir) if cfg.resume else None
    if cfg.resume and ckpt is None:
        raise FileNotFoundError(f"resume={cfg.resume!r}: no {CHECKPOINT_FILE} in {run_dir} "
                                f"(set goal.checkpoint_every_evals, or stop the run with SIGTERM, to leave one)")
    if ckpt:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if precision.scaler is not None and ckpt.get("scaler"):
            precision.scaler.load_state_dict(ckpt["scaler"])
        torch.set_rng_state(ckpt["rng"])
        p = Progress(**ckpt["progress"])
        p.resumes += 1
    else:
        p = Progress(curve={k: [] for k in (*CURVE_KEYS, goal.metric)})
    attempt = p.resumes
    wall_before = p.wall_s  # earlier attempts, up to the checkpoint this one starts from

    step = make_step(w, cfg)

    train, held_out = datasets(cfg, entry.task)
    x_tr, y_tr = (t.to(runtime.device) for t in train.tensors)
    x_ev, y_ev = (t.to(runtime.device) for t in held_out.tensors)
    x_tr, x_ev = (input_format(x, precision, cfg.model.channels_last) for x in (x_tr, x_ev))
    bs = cfg.data.batch_size
    steps_per_epoch = len(x_tr) // bs  # the last partial batch is dropped: one shape, no recompiles
    if steps_per_epoch < 1:
        raise ValueError(f"data.batch_size={bs} is larger than the training set ({len(x_tr)} samples)")
    eval_bs = goal.eval_batch_size or bs

    mlog = MLPerfLog(run_dir / LOG_FILE)
    if ckpt:
        mlog.resumed(p.resumes, p.epoch + p.batch / steps_per_epoch, p.samples)
    else:
        mlog.run_start(cfg, len(x_tr), len(x_ev), bs)
    warnings: list[str] = []
    losses: list = []

    def wall_now() -> float:
        return wall_before + time.time() - created

    def save() -> None:
        p.wall_s = wall_now()
        _atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scaler": precision.scaler.state_dict() if precision.scaler is not None else None,
                      "rng": torch.get_rng_state(), "progress": asdict(p)}, run_dir / CHECKPOINT_FILE)

    def close_segment(seg_start: float) -> float:
        """Synchronise, add the segment to training time, fold the losses into the mean train loss."""
        runtime.sync()
        p.train_time_s += loop.perf_counter() - seg_start
        vals = runtime.read_losses(losses)
        losses.clear()
        check_finite(vals, p.step - len(vals), "train")
        return sum(vals) / len(vals) if vals else float("nan")

    def do_eval(train_loss: float) -> bool:
        epoch_f = p.epoch + p.batch / steps_per_epoch
        t0 = loop.perf_counter()
        mlog.eval_start(epoch_f)
        value = evaluate(model, entry.task, precision, x_ev, y_ev, eval_bs, goal.metric)
        runtime.sync()
        p.eval_time_s += loop.perf_counter() - t0
        mlog.eval_stop(epoch_f, goal.metric, value, p.samples)
        point = {"eval": p.evals, "attempt": attempt, "epoch": epoch_f, "step": p.step, "samples_seen": p.samples,
                 "train_time_s": p.train_time_s, "wall_s": wall_now(), "train_loss": train_loss, goal.metric: value}
        for k, v in point.items():
            p.curve[k].append(v)
        p.evals += 1
        if p.reached_at is None and goal.target is not None and better(goal.metric, value, goal.target):
            p.reached_at = point
        if goal.checkpoint_every_evals and p.evals % goal.checkpoint_every_evals == 0:
            save()
        return p.reached_at is not None

    startup_s = time.time() - created
    status = None
    runtime.sync()
    seg = loop.perf_counter()
    while status is None:
        if p.epoch >= goal.max_epochs:
            status = "max_epochs"
            break
        if p.batch == 0:
            mlog.epoch_start(p.epoch)
        perm = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(b.seed * 100_003 + p.epoch))
        perm = perm.to(runtime.device)
        while p.batch < steps_per_epoch:
            idx = perm[p.batch * bs:(p.batch + 1) * bs]
            losses.append(step(x_tr[idx], y_tr[idx]))
            p.batch += 1
            p.step += 1
            p.samples += bs
            if on_step:
                on_step("train", p.step)
            if stop.requested:  # preemption notice: checkpoint now, so the resume loses nothing
                close_segment(seg)
                save()
                mlog.close()
                raise loop.StopRequested({"phase": "train_to_target", "epochs_done": p.epoch + p.batch / steps_per_epoch,
                                          "train_time_s": p.train_time_s, "samples_seen": p.samples,
                                          "checkpoint": CHECKPOINT_FILE, "resumes": p.resumes})
            if goal.eval_every_steps and p.step % goal.eval_every_steps == 0:
                reached = do_eval(close_segment(seg))
                if reached:
                    status = "reached"
                    break
                seg = loop.perf_counter()
            if goal.max_time_s and p.train_time_s + loop.perf_counter() - seg >= goal.max_time_s:
                status = "max_time"
                break
        if status is not None:
            break
        p.epoch, p.batch = p.epoch + 1, 0
        mlog.epoch_stop(p.epoch - 1)
        if not goal.eval_every_steps:
            if do_eval(close_segment(seg)):
                status = "reached"
                break
            seg = loop.perf_counter()
    if losses:
        close_segment(seg)
    mlog.run_stop(status == "reached")
    mlog.close()
    wall_total = wall_now()
    p.wall_s = wall_total

    r = p.reached_at
    if status != "reached":
        best = (max if HIGHER_IS_BETTER[goal.metric] else min)(p.curve[goal.metric], default=None)
        warnings.append(f"target {goal.metric} {'>=' if HIGHER_IS_BETTER[goal.metric] else '<='} {goal.target} "
                        f"not reached ({status}: {p.epoch + p.batch / steps_per_epoch:.3g} epochs, "
                        f"{p.train_time_s:.3g} s training); best {goal.metric} {best}")
    if p.resumes:
        warnings.append(f"resumed {p.resumes} time(s) from a checkpoint; time after an attempt's last "
                        "checkpoint is not counted")
    m = {
        "device": str(runtime.device),
        "devices": 1,
        "world_size": 1,
        "batch_size_per_device": bs,
        "global_batch_size": bs,
        "samples_per_step": bs,
        "params_count": w.params_count,
        "flops_per_sample_forward": flops["forward"],
        "flops_per_sample_train": flops["train"],
        "compute_dtype": precision.compute_dtype,
        **threads,
        "goal_metric": goal.metric,
        "goal_target": goal.target,
        "target_reached": status == "reached",
        "target_status": status,
        "train_time_to_target_s": r["train_time_s"] if r else None,
        "wall_time_to_target_s": r["wall_s"] if r else None,
        "epochs_to_target": r["epoch"] if r else None,
        "samples_to_target": r["samples_seen"] if r else None,
        "steps_to_target": r["step"] if r else None,
        "metric_at_target": r[goal.metric] if r else None,
        "metric_final": p.curve[goal.metric][-1] if p.curve[goal.metric] else None,
        "epochs_done": p.epoch + p.batch / steps_per_epoch,
        "samples_seen": p.samples,
        "train_time_s": p.train_time_s,
        "eval_time_s": p.eval_time_s,
        "evals": p.evals,
        "startup_s": startup_s,
        "wall_s_total": wall_total,
        "resumes": p.resumes,
        "train_samples": len(x_tr),
        "eval_samples": len(x_ev),
        "steps_per_epoch": steps_per_epoch,
        # Training throughput over the whole training time: epoch-level work (shuffles) included.
        "throughput_samples_per_s": p.samples / p.train_time_s if p.train_time_s > 0 else None,
        "peak_host_rss_gib": peak_host_rss_gib(),
    }
    artifacts = {"mlperf_log": LOG_FILE}
    if (run_dir / CHECKPOINT_FILE).is_file():
        artifacts["checkpoint"] = CHECKPOINT_FILE
    rank = RankResult(0, m, dict(p.curve), warnings)
    return TargetResult(ranks=[rank], warnings=list(warnings), artifacts=artifacts)
