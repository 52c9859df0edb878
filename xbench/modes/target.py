"""`bench.mode=train_to_target`: epochs over real data to a quality target, evaluation at a cadence,
the curve, checkpoints and resume (`resume=<run id>`). The throughput loop (loop.py) is not involved;
the rank work (`TargetWork`) runs through the same launch path as every mode.

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

import torch
from torch.utils.data import DataLoader, TensorDataset

from xbench import launch, models
from xbench.bench import loop
from xbench.bench.memory import peak_host_rss_gib
from xbench.bench.mlperf_log import LOG_FILE, MLPerfLog
from xbench.bench.worker import build_workload, check_finite, input_format, make_step, set_threads
from xbench.config import XBenchConfig
from xbench.data import loaders
from xbench.launch.isolation import point_started_at
from xbench.metrics.derived import derive
from xbench.metrics.gates import record_gates
from xbench.modes.base import Mode, Run, console_progress
from xbench.platforms.detect import HostFacts
from xbench.rank import RankContext, RankResult, StopFlag, StopRequested
from xbench.records.store import CHECKPOINT_FILE

HIGHER_IS_BETTER = {"top1": True, "accuracy": True, "top5": True, "perplexity": False}
GOAL_METRICS = {"top1": "classify", "accuracy": "classify", "top5": "classify", "perplexity": "lm/mlm"}
CURVE_KEYS = ("eval", "attempt", "epoch", "step", "samples_seen", "train_time_s", "wall_s", "train_loss")


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
    splits = loaders.build(cfg.data, task)
    return _as_tensors(splits.train, splits.collate), _as_tensors(splits.eval, splits.collate)


MAX_IN_MEMORY_SAMPLES = 2_000_000


def _as_tensors(ds, collate):
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


class TargetTraining:
    """One rank's training to the target: built once, then `run()` until the target, a limit or a stop.

    `p` (Progress) is everything a checkpoint needs to continue; the clocks are described above.
    """

    def __init__(self, cfg, facts, ctx: RankContext, run_dir: Path, on_step=None, stop=None):
        self.created = point_started_at()  # this run's start (a sweep point's own: launch/isolation.py)
        self.cfg, self.goal, self.ctx = cfg, cfg.goal, ctx
        self.run_dir, self.on_step, self.stop = Path(run_dir), on_step, stop or StopFlag()
        self.threads = set_threads(ctx.threads, cfg.bench.interop_threads)
        torch.manual_seed(cfg.bench.seed)
        self.w = build_workload(cfg, facts, ctx)
        ckpt = self._load()
        self.step = make_step(self.w, cfg, ctx.rank)
        self._data()
        self.mlog = MLPerfLog(self.run_dir / LOG_FILE)
        if ckpt:
            self.mlog.resumed(self.p.resumes, self.epoch_f(), self.p.samples)
        else:
            self.mlog.run_start(cfg, len(self.x_tr), len(self.x_ev), self.bs)
        self.losses: list = []
        self.warnings: list[str] = []

    def _load(self) -> dict | None:
        """Model, optimizer, scaler and RNG from the checkpoint when resuming; the progress so far."""
        cfg, w = self.cfg, self.w
        ckpt = load_checkpoint(self.run_dir) if cfg.resume else None
        if cfg.resume and ckpt is None:
            raise FileNotFoundError(f"resume={cfg.resume!r}: no {CHECKPOINT_FILE} in {self.run_dir} "
                                    f"(set goal.checkpoint_every_evals, or stop the run with SIGTERM, to leave one)")
        if ckpt:
            w.model.load_state_dict(ckpt["model"])
            w.optimizer.load_state_dict(ckpt["optimizer"])
            if w.precision.scaler is not None and ckpt.get("scaler"):
                w.precision.scaler.load_state_dict(ckpt["scaler"])
            torch.set_rng_state(ckpt["rng"])
            self.p = Progress(**ckpt["progress"])
            self.p.resumes += 1
        else:
            self.p = Progress(curve={k: [] for k in (*CURVE_KEYS, self.goal.metric)})
        self.attempt = self.p.resumes
        self.wall_before = self.p.wall_s  # earlier attempts, up to the checkpoint this one starts from
        return ckpt

    def _data(self) -> None:
        """Both splits as device tensors in the model's input format."""
        w = self.w
        train, held_out = datasets(self.cfg, w.entry.task)
        x_tr, self.y_tr = (t.to(w.runtime.device) for t in train.tensors)
        x_ev, self.y_ev = (t.to(w.runtime.device) for t in held_out.tensors)
        self.x_tr, self.x_ev = (input_format(x, w.precision, self.cfg.model.channels_last) for x in (x_tr, x_ev))
        self.bs = self.cfg.data.batch_size
        self.steps_per_epoch = len(self.x_tr) // self.bs  # the last partial batch is dropped: one shape
        if self.steps_per_epoch < 1:
            raise ValueError(f"data.batch_size={self.bs} is larger than the training set ({len(self.x_tr)} samples)")
        self.eval_bs = self.goal.eval_batch_size or self.bs

    def epoch_f(self) -> float:
        return self.p.epoch + self.p.batch / self.steps_per_epoch

    def wall_now(self) -> float:
        return self.wall_before + time.time() - self.created

    def save(self) -> None:
        w, p = self.w, self.p
        p.wall_s = self.wall_now()
        _atomic_save({"model": w.model.state_dict(), "optimizer": w.optimizer.state_dict(),
                      "scaler": w.precision.scaler.state_dict() if w.precision.scaler is not None else None,
                      "rng": torch.get_rng_state(), "progress": asdict(p)}, self.run_dir / CHECKPOINT_FILE)

    def close_segment(self, seg_start: float) -> float:
        """Synchronise, add the segment to training time, fold the losses into the mean train loss."""
        self.w.runtime.sync()
        self.p.train_time_s += loop.perf_counter() - seg_start
        vals = self.w.runtime.read_losses(self.losses)
        self.losses.clear()
        check_finite(vals, self.p.step - len(vals), "train")
        return sum(vals) / len(vals) if vals else float("nan")

    def evaluate(self, train_loss: float) -> bool:
        """Score the eval split (outside the training clock), extend the curve; True once the target is met."""
        p, goal, w = self.p, self.goal, self.w
        epoch_f = self.epoch_f()
        t0 = loop.perf_counter()
        self.mlog.eval_start(epoch_f)
        value = evaluate(w.model, w.entry.task, w.precision, self.x_ev, self.y_ev, self.eval_bs, goal.metric)
        w.runtime.sync()
        p.eval_time_s += loop.perf_counter() - t0
        self.mlog.eval_stop(epoch_f, goal.metric, value, p.samples)
        point = {"eval": p.evals, "attempt": self.attempt, "epoch": epoch_f, "step": p.step, "samples_seen": p.samples,
                 "train_time_s": p.train_time_s, "wall_s": self.wall_now(), "train_loss": train_loss,
                 goal.metric: value}
        for k, v in point.items():
            p.curve[k].append(v)
        p.evals += 1
        if p.reached_at is None and goal.target is not None and better(goal.metric, value, goal.target):
            p.reached_at = point
        if goal.checkpoint_every_evals and p.evals % goal.checkpoint_every_evals == 0:
            self.save()
        return p.reached_at is not None

    def _stop_now(self, seg: float):
        """Preemption notice: checkpoint now, so the resume loses nothing."""
        p = self.p
        self.close_segment(seg)
        self.save()
        self.mlog.close()
        raise StopRequested({"phase": "train_to_target", "epochs_done": self.epoch_f(),
                             "train_time_s": p.train_time_s, "samples_seen": p.samples,
                             "checkpoint": CHECKPOINT_FILE, "resumes": p.resumes})

    def _epoch(self, seg: float) -> tuple[str | None, float]:
        """Train the rest of the current epoch; (why it stopped or None, the open segment's start)."""
        p, goal, bs = self.p, self.goal, self.bs
        gen = torch.Generator().manual_seed(self.cfg.bench.seed * 100_003 + p.epoch)
        perm = torch.randperm(len(self.x_tr), generator=gen).to(self.w.runtime.device)
        while p.batch < self.steps_per_epoch:
            idx = perm[p.batch * bs:(p.batch + 1) * bs]
            self.losses.append(self.step(self.x_tr[idx], self.y_tr[idx]))
            p.batch += 1
            p.step += 1
            p.samples += bs
            if self.on_step:
                self.on_step("train", p.step)
            if self.stop.requested:
                self._stop_now(seg)
            if goal.eval_every_steps and p.step % goal.eval_every_steps == 0:
                if self.evaluate(self.close_segment(seg)):
                    return "reached", seg
                seg = loop.perf_counter()
            if goal.max_time_s and p.train_time_s + loop.perf_counter() - seg >= goal.max_time_s:
                return "max_time", seg
        return None, seg

    def run(self) -> RankResult:
        startup_s = time.time() - self.created
        p, goal = self.p, self.goal
        status = None
        self.w.runtime.sync()
        seg = loop.perf_counter()
        while status is None:
            if p.epoch >= goal.max_epochs:
                status = "max_epochs"
                break
            if p.batch == 0:
                self.mlog.epoch_start(p.epoch)
            status, seg = self._epoch(seg)
            if status is not None:
                break
            p.epoch, p.batch = p.epoch + 1, 0
            self.mlog.epoch_stop(p.epoch - 1)
            if not goal.eval_every_steps:
                if self.evaluate(self.close_segment(seg)):
                    status = "reached"
                    break
                seg = loop.perf_counter()
        if self.losses:
            self.close_segment(seg)
        self.mlog.run_stop(status == "reached")
        self.mlog.close()
        p.wall_s = self.wall_now()
        return self._result(status, startup_s)

    def _result(self, status: str, startup_s: float) -> RankResult:
        p, goal, w = self.p, self.goal, self.w
        if status != "reached":
            best = (max if HIGHER_IS_BETTER[goal.metric] else min)(p.curve[goal.metric], default=None)
            self.warnings.append(f"target {goal.metric} {'>=' if HIGHER_IS_BETTER[goal.metric] else '<='} "
                                 f"{goal.target} not reached ({status}: {self.epoch_f():.3g} epochs, "
                                 f"{p.train_time_s:.3g} s training); best {goal.metric} {best}")
        if p.resumes:
            self.warnings.append(f"resumed {p.resumes} time(s) from a checkpoint; time after an attempt's last "
                                 "checkpoint is not counted")
        r = p.reached_at
        m = {
            "device": str(w.runtime.device),
            "devices": 1,
            "world_size": 1,
            "batch_size_per_device": self.bs,
            "global_batch_size": self.bs,
            "samples_per_step": self.bs,
            "params_count": w.params_count,
            "flops_per_sample_forward": w.flops["forward"],
            "flops_per_sample_train": w.flops["train"],
            "compute_dtype": w.precision.compute_dtype,
            **self.threads,
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
            "epochs_done": self.epoch_f(),
            "samples_seen": p.samples,
            "train_time_s": p.train_time_s,
            "eval_time_s": p.eval_time_s,
            "evals": p.evals,
            "startup_s": startup_s,
            "wall_s_total": p.wall_s,
            "resumes": p.resumes,
            "train_samples": len(self.x_tr),
            "eval_samples": len(self.x_ev),
            "steps_per_epoch": self.steps_per_epoch,
            # Training throughput over the whole training time: epoch-level work (shuffles) included.
            "throughput_samples_per_s": p.samples / p.train_time_s if p.train_time_s > 0 else None,
            "peak_host_rss_gib": peak_host_rss_gib(),
        }
        artifacts = {"mlperf_log": LOG_FILE}
        if (self.run_dir / CHECKPOINT_FILE).is_file():
            artifacts["checkpoint"] = CHECKPOINT_FILE
        return RankResult(self.ctx.rank, m, dict(p.curve), self.warnings, artifacts)


@dataclass
class TargetWork:
    """One rank's training to the target (picklable: it crosses into launched processes)."""

    cfg: XBenchConfig
    facts: HostFacts
    run_dir: str

    def progress(self):
        return console_progress(self.cfg) if self.cfg.logger.progress else None

    def __call__(self, ctx: RankContext, on_step=None, stop=None) -> RankResult:
        return TargetTraining(self.cfg, self.facts, ctx, Path(self.run_dir), on_step, stop).run()


class TrainToTarget(Mode):
    name = "train_to_target"

    @classmethod
    def rules(cls, cfg, facts) -> list[str]:
        """Real data, a target, a metric the model's task has, and (for now) one device."""
        g, out = cfg.goal, []
        if g.metric not in GOAL_METRICS:
            out.append(f"goal.metric={g.metric!r} is unknown; allowed: {', '.join(GOAL_METRICS)}")
        else:
            try:
                task = models.get(cfg.model.name).task
            except KeyError:
                task = None
            if task and task not in GOAL_METRICS[g.metric].split("/"):
                out.append(f"goal.metric={g.metric} needs a {GOAL_METRICS[g.metric]} model; {cfg.model.name!r} is {task}")
        if g.target is None:
            out.append("bench.mode=train_to_target needs goal.target (e.g. goal.target=0.95 for 95% top-1)")
        elif g.metric in ("top1", "accuracy", "top5") and not 0 < g.target <= 1:
            out.append(f"goal.target={g.target} for {g.metric} must be a fraction in (0, 1] (0.95, not 95)")
        if cfg.data.source == "synthetic":
            out.append("bench.mode=train_to_target needs a real data set (e.g. data=digits); synthetic data has "
                       "no accuracy to reach")
        if cfg.parallel.name != "single":
            out.append(f"bench.mode=train_to_target runs on one device for now (parallel=single), not {cfg.parallel.name!r}")
        for label, v, low in (("goal.max_epochs", g.max_epochs, 1), ("goal.eval_every_steps", g.eval_every_steps, 0),
                              ("goal.checkpoint_every_evals", g.checkpoint_every_evals, 0)):
            if v < low:
                out.append(f"{label} must be >= {low}, got {v}")
        if g.max_time_s is not None and g.max_time_s <= 0:
            out.append(f"goal.max_time_s must be > 0 or null, got {g.max_time_s}")
        return out

    def work(self, cfg, facts, run_dir=None) -> TargetWork:
        return TargetWork(cfg, facts, str(run_dir))

    def execute(self, run: Run) -> None:
        work = self.work(run.cfg, run.facts, run.run_dir)
        result = launch.run(run.cfg, work, run.facts, run.progress, run.stop)
        run.progress.close()
        rec, r0 = run.record, result.ranks[0]
        rec.measurements = r0.measurements
        rec.series = r0.series
        rec.artifacts.update(r0.artifacts)
        rec.warnings += result.warnings
        rec.derived = derive(rec.measurements, run.resolved, baseline=run.baseline)
        rec.warnings += record_gates(rec.measurements, rec.derived)
        rec.finish("ok")
