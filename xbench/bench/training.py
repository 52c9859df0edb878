"""Train-to-target's rank side: one rank's epochs over real data to the target(s), its evaluations, the curve
and the checkpoints (the record side, which launches this work and finishes the record, is modes/target.py;
its module docstring describes the clocks, stops and targets this code keeps).

`TargetWork` is the picklable handle a launcher runs on every rank; `TargetTraining` is one rank's training.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from xbench.bench import loop
from xbench.bench.epochs import EvalShard, TrainFeed, metric_value, score
from xbench.bench.figures import build_figures, closing_figures, samples_per_step
from xbench.bench.meters import contention
from xbench.bench.meters.contention import ContentionMeter
from xbench.bench.meters.memory import MemoryMeter
from xbench.bench.mlperf_log import LOG_FILE, for_rank
from xbench.bench.worker import (
    build_workload,
    check_finite,
    device_gpus,
    input_format,
    make_step,
    setup_rank,
)
from xbench.data import loaders
from xbench.metrics import goals
from xbench.metrics import targets as tg
from xbench.plan import Plan
from xbench.rank import Diverged, RankContext, RankResult, StopFlag, StopRequested, point_started_at
from xbench.records import safe_io
from xbench.records.run_files import CHECKPOINT_FILE, CURVE_FILE, CurveWriter
from xbench.training import schedule as schedules

CURVE_KEYS = (
    "eval",
    "attempt",
    "epoch",
    "step",
    "samples_seen",
    "train_time_s",
    "wall_s",
    "train_loss",
    "lr",
)
CONTROL_EVERY_STEPS = 8  # several processes: how often they agree on a stop (one tiny all-reduce)


@dataclass
class TrainingState:
    """Everything needed to continue a run: it goes into the checkpoint as a plain dict (under "progress").
    Not the console's bar (sinks/console.Progress, which the rank's preamble draws from `on_step`)."""

    epoch: int = 0  # current epoch (0-based)
    batch: int = 0  # next batch within the epoch
    step: int = 0
    samples: int = 0
    train_time_s: float = 0.0
    eval_time_s: float = 0.0
    wall_s: float = 0.0  # wall time of the whole run up to the checkpoint (all attempts)
    evals: int = 0
    resumes: int = 0
    reached: dict = field(default_factory=dict)  # target label -> the curve point where it was first met
    # Losses of an open segment cut by a stop: the resume folds them into that segment's mean train loss.
    pending_loss_sum: float = 0.0
    pending_loss_steps: int = 0
    curve: dict = field(default_factory=dict)
    first_loss: float | None = None  # loop.py rule 9's reference (the run's first loss): a resume keeps it


def better(metric: str, value: float, target: float) -> bool:
    return goals.GOALS[metric].reached(value, target)


def _cpu(obj):
    """Tensors of a (nested) state dict on the host: a checkpoint loads on any device."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def _atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file of an unpredictable name beside `path`, then moved into place (never
    written through a planted link; a torn save leaves a temporary file the next start removes)."""
    with safe_io.atomic_writer(path) as f:
        torch.save(obj, f)


class CheckpointError(RuntimeError):
    """A checkpoint that is refused (it would run code) or cannot be read (torn, truncated, not one)."""


def load_checkpoint(run_dir: Path) -> dict | None:
    """The run folder's checkpoint, loaded as data only: `weights_only=True` unpickles tensors and plain
    containers (dict, list, tuple, str, numbers, None), everything xbench stores (model, optimizer, scaler,
    RNG states as tensors, progress as plain values); a file holding anything else (a planted pickle that
    would run code) is refused with the reason and the path, and nothing of it runs."""
    import pickle

    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "Unsupported" in ln), lines[0] if lines else type(e).__name__)
        why = why.split(". Please")[0]  # torch goes on to say how to allow it: not advice for a planted file
        raise CheckpointError(
            f"refused to load {path}: it holds objects other than tensors and plain data, which "
            f"xbench never writes ({why}); nothing in it was run (planted or foreign file?)"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        text = str(e)
        if isinstance(e, OSError) or not any(k in text for k in ("central directory", "inline_container",
                                                                   "PytorchStreamReader", "magic number",
                                                                   "Ran out of input", "zip archive")):
            raise
        raise CheckpointError(
            f"{path} is not a complete checkpoint (torn write, truncated copy, or not a torch "
            f"checkpoint): {text.splitlines()[0] if text else type(e).__name__}"
        ) from None


def progress_problems(progress: dict, max_epochs: int, steps_per_epoch: int, global_batch: int) -> list[str]:
    """What a checkpoint's progress cannot be for this run (empty: none): a count that is not a whole number
    >= 0, a time or loss sum that is not finite (times >= 0), an epoch beyond goal.max_epochs, a batch beyond
    an epoch's, or steps and samples other than the epochs and batches done imply (one step per batch,
    global_batch samples each). A planted `epoch: 1e12` made a resume report an ok run of a trillion
    epochs."""
    out = []
    counts = ("epoch", "batch", "step", "samples", "evals", "resumes", "pending_loss_steps")
    for k in counts:
        v = progress.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            out.append(f"{k}={v!r} is not a whole number >= 0")
    for k in ("train_time_s", "eval_time_s", "wall_s", "pending_loss_sum"):
        v = progress.get(k, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                (k.endswith("_s") and v < 0):
            out.append(f"{k}={v!r} is not a finite number" + (" >= 0" if k.endswith("_s") else ""))
    if out:
        return out
    epoch, batch = progress.get("epoch", 0), progress.get("batch", 0)
    if epoch > max_epochs or (epoch == max_epochs and batch):
        out.append(f"epoch {epoch} (batch {batch}) is beyond this run's goal.max_epochs={max_epochs}")
    if batch > steps_per_epoch:
        out.append(f"batch {batch} is beyond an epoch's {steps_per_epoch} steps")
    step = epoch * steps_per_epoch + batch
    if not out and progress.get("step", 0) != step:
        out.append(f"step {progress.get('step')} is not the {step} that epoch {epoch}, batch {batch} imply")
    if not out and progress.get("samples", 0) != step * global_batch:
        out.append(f"samples {progress.get('samples')} is not the {step * global_batch} that {step} steps of "
                   f"{global_batch} imply")
    return out


class TargetTraining:
    """One rank's training to the target(s): built once, then `run()` until the last target, a limit or a
    stop.

    `p` (TrainingState) is everything a checkpoint needs to continue; the clocks are described above.
    """

    def __init__(self, plan: Plan, ctx: RankContext, run_dir: Path, started_at: float | None = None,
                 on_step=None, stop=None):
        # this run's start (a sweep point's own: launch/isolation.py)
        self.created = started_at or point_started_at()
        self.plan, self.goal, self.ctx = plan, plan.goal, ctx
        self.targets = tg.effective_targets(plan.goal)
        self.run_dir, self.on_step, self.stop = Path(run_dir), on_step, stop or StopFlag()
        # Other processes' use while this rank builds (bench/meters/contention.py), as the throughput rank
        # probes: beside the build, its own CPU subtracted.
        gpus = device_gpus(plan.device_type, ctx.local_rank, ctx.devices_per_rank)
        probed = contention.probe_beside(plan.bench.contention_probe_s, gpus)
        # as the throughput rank does
        self.threads, self.cpu_capability, setup_warnings = setup_rank(plan.bench, ctx)
        self.w = build_workload(plan, ctx)
        self.module = self.w.strategy.unwrap(self.w.model)  # what a checkpoint holds and evaluation runs
        self._data()
        self.before = probed.result()
        ckpt = self._load()
        self.step = make_step(self.w, plan, ctx.rank)
        self.sched = schedules.Schedule(
            plan.optim, self.global_batch, self.steps_per_epoch, self.goal.max_epochs
        )
        self.hyper = schedules.hyperparameters(plan.optim, self.global_batch, self.steps_per_epoch,
                                               self.goal.max_epochs)
        self.mlog = for_rank(self.run_dir / LOG_FILE, ctx.rank)
        if ckpt:
            self.mlog.resumed(self.p.resumes, self.epoch_f(), self.p.samples,
                              open_epoch=self.p.epoch if self.p.batch else None)  # stopped inside that epoch
        else:
            self.mlog.run_start(plan, self.train_samples, self.eval_samples, self.global_batch, self.hyper,
                                # MLPerf init_start: the run's start, start-up included
                                started_at=self.created)
        # Rank 0 writes the curve as it grows (the launching process tails it into W&B); a resume starts
        # the file again from the checkpoint's curve.
        self.curve_out = CurveWriter(self.run_dir / CURVE_FILE, self._points()) if ctx.rank == 0 else None
        self.control_every = 1 if ctx.world_size == 1 else CONTROL_EVERY_STEPS
        self.lr = self.sched.lr(self.p.step)
        self.losses: list = []
        self.warnings: list[str] = setup_warnings
        self.watch = loop.LossWatch(plan.bench.diverge_loss_factor, first=self.p.first_loss)
        self.agree = self.w.strategy.agree(self.w.runtime.device)

    def _data(self) -> None:
        """This rank's training feed and eval shard, and the batch sizes that follow from the strategy."""
        data, ctx, w = self.plan.data, self.ctx, self.w
        splits = loaders.build(data, w.entry.task)
        devices = w.strategy.devices_per_rank
        self.bs = data.batch_size  # per device
        self.accumulate = self.plan.optim.accumulate_steps
        self.rank_batch = samples_per_step(self.bs, devices, self.accumulate)
        self.global_batch = self.rank_batch * ctx.world_size  # samples of one optimizer step, all ranks
        self.feed = TrainFeed(
            splits.train,
            ctx.rank,
            ctx.world_size,
            self.rank_batch,
            self.plan.bench.seed,
            data,
            splits.collate,
            w.runtime.device,
        )
        self.steps_per_epoch = self.feed.steps_per_epoch
        self.eval_bs = self.goal.eval_batch_size or self.bs
        self.shard = EvalShard(splits.eval, ctx.rank, ctx.world_size, self.eval_bs * devices, data,
                               splits.collate, w.runtime.device)
        self.train_samples, self.eval_samples = len(splits.train), len(splits.eval)

    def to_device(self, x, y):
        """A host batch on this rank's device(s), in the model's input format, as the strategy takes it."""
        w, dev = self.w, self.w.runtime.device
        nb = dev.type == "cuda"  # asynchronous from pinned batches (TrainFeed.pin); a plain copy otherwise
        x = input_format(x.to(dev, non_blocking=nb), w.precision, self.plan.model.channels_last)
        return w.strategy.place_batch(x, y.to(dev, non_blocking=nb))

    def _load(self) -> dict | None:
        """Model, optimizer, scaler and this rank's RNG from the checkpoint when resuming; the progress so
        far. Every rank reads the one file rank 0 wrote."""
        resume, w = self.plan.resume, self.w
        ckpt = load_checkpoint(self.run_dir) if resume else None
        if resume and ckpt is None:
            raise FileNotFoundError(
                f"resume={resume!r}: no {CHECKPOINT_FILE} in {self.run_dir} "
                f"(set goal.checkpoint_every_evals, or stop the run with SIGTERM, to leave one)"
            )
        if ckpt:
            if ckpt.get("world_size", 1) != self.ctx.world_size:
                raise ValueError(
                    f"the checkpoint was written by {ckpt.get('world_size', 1)} rank(s); this attempt "
                    f"has {self.ctx.world_size} (resume with the stored config)"
                )
            mine = ckpt["ranks"][self.ctx.rank]  # this rank's own RNG and open-segment losses
            progress = {**ckpt["progress"], "pending_loss_sum": mine["pending_loss_sum"],
                        "pending_loss_steps": mine["pending_loss_steps"]}
            bad = progress_problems(progress, self.goal.max_epochs, self.steps_per_epoch, self.global_batch)
            if bad:  # before any of it is used: the record would report it as measured
                raise CheckpointError(
                    f"refused the checkpoint in {self.run_dir}: its progress is not this run's "
                    f"({'; '.join(bad)}); planted or damaged? nothing was trained"
                )
            w.strategy.load_state_dicts(self.module, w.optimizer, ckpt["model"], ckpt["optimizer"])
            if w.precision.scaler is not None and ckpt.get("scaler"):
                w.precision.scaler.load_state_dict(ckpt["scaler"])
            torch.set_rng_state(mine["rng"])
            self.p = TrainingState(**progress)
            self.p.resumes += 1
        else:
            self.p = TrainingState(curve={k: [] for k in (*CURVE_KEYS, self.goal.metric)})
        self.attempt = self.p.resumes
        self.wall_before = self.p.wall_s  # earlier attempts, up to the checkpoint this one starts from
        return ckpt

    def _points(self) -> list[dict]:
        c = self.p.curve
        return [{k: c[k][i] for k in c} for i in range(len(c["eval"]))]

    def epoch_f(self) -> float:
        return self.p.epoch + self.p.batch / self.steps_per_epoch

    def wall_now(self) -> float:
        return self.wall_before + time.time() - self.created

    def save(self) -> None:
        """Every rank hands over what is its own (RNG state, the losses of a segment a stop cut); rank 0 alone
        writes the checkpoint (atomically). Model and optimizer are the same on every rank."""
        w, p = self.w, self.p
        ranks = w.strategy.gather({"rng": torch.get_rng_state(), "pending_loss_sum": p.pending_loss_sum,
                                   "pending_loss_steps": p.pending_loss_steps})
        # FSDP: gathers shards
        model_state, optimizer_state = w.strategy.state_dicts(self.module, w.optimizer)
        if self.ctx.rank != 0:
            return
        p.wall_s = self.wall_now()
        _atomic_save({"model": _cpu(model_state), "optimizer": _cpu(optimizer_state),
                      "scaler": w.precision.scaler.state_dict() if w.precision.scaler is not None else None,
                      "ranks": ranks, "world_size": self.ctx.world_size, "progress": asdict(p)},
                     self.run_dir / CHECKPOINT_FILE)

    def close_segment(self, seg_start: float, keep: bool = False) -> float:
        """Synchronise, add the segment to training time, fold the losses into the mean train loss (`keep`:
        hold them for the segment's rest, as a stop before an evaluation does)."""
        p = self.p
        self.w.strategy.sync(self.w.runtime.sync)()
        p.train_time_s += loop.perf_counter() - seg_start
        vals = self.w.runtime.read_losses(self.losses)
        self.losses.clear()
        check_finite(vals, p.step - len(vals), "train")
        self._check_blowup(vals)
        total, n = sum(vals) + p.pending_loss_sum, len(vals) + p.pending_loss_steps
        p.pending_loss_sum, p.pending_loss_steps = (total, n) if keep else (0.0, 0)
        return total / n if n else float("nan")

    def _check_blowup(self, vals: list[float]) -> None:
        """loop.py rule 9, the throughput loop's: a loss above bench.diverge_loss_factor x the run's first one
        is a divergence (AdamW at lr 1e6: 4.2e20 after 2.3, then an accuracy at chance), on every rank at
        once."""
        p = self.p
        self.watch.seen = p.step - len(vals)  # steps counted over the whole run, as check_finite counts them
        hit = self.watch.blown(vals)
        p.first_loss = self.watch.first
        if not self.agree(hit is None):
            step, loss = hit or (p.step - len(vals), max(vals, default=float("nan")))
            raise Diverged(step, loss, "train")

    def evaluate(self, train_loss: float) -> bool:
        """Score the eval set (outside the training clock), extend the curve; True once the last target is
        met."""
        p, goal, w = self.p, self.goal, self.w
        epoch_f = self.epoch_f()
        t0 = loop.perf_counter()
        self.mlog.eval_start(epoch_f)
        sums = score(self.module, self.shard, goal.metric, w.precision, self.to_device, w.runtime.cut)
        # One sum over the ranks: the eval counts, and the ranks' mean train losses (equal batches: the mean
        # over the global batch, as one device at that batch would report it).
        *sums, loss_sum = w.strategy.all_sum([*sums, train_loss], w.runtime.device)
        value, train_loss = metric_value(goal.metric, *sums), loss_sum / self.ctx.world_size
        w.runtime.sync()
        p.eval_time_s += loop.perf_counter() - t0
        self.mlog.eval_stop(epoch_f, goal.metric, value, p.samples)
        point = {
            "eval": p.evals,
            "attempt": self.attempt,
            "epoch": epoch_f,
            "step": p.step,
            "samples_seen": p.samples,
            "train_time_s": p.train_time_s,
            "wall_s": self.wall_now(),
            "train_loss": train_loss,
            "lr": self.lr,
            goal.metric: value,
        }
        for k, v in point.items():
            p.curve[k].append(v)
        p.evals += 1
        for t in self.targets:
            if tg.label(t) not in p.reached and better(goal.metric, value, t):
                p.reached[tg.label(t)] = point
        if self.curve_out is not None:
            self.curve_out.write(point)
        # loop.py rule 9: a finite blow-up
        chance = loop.chance_level(goal.metric, self.plan.data.num_classes)
        if chance is not None and epoch_f >= 1 and value < chance / 2:
            raise loop.BelowChance(p.step, value, chance, goal.metric)
        if goal.checkpoint_every_evals and p.evals % goal.checkpoint_every_evals == 0:
            self.save()
        return bool(self.targets) and tg.label(self.targets[-1]) in p.reached

    def _control(self, seg: float) -> str | None:
        """At a control point: 'stop' (a signal on any rank) or 'max_time' (any rank's clock), else None."""
        goal = self.goal
        time_up = bool(goal.max_time_s) and self.p.train_time_s + loop.perf_counter() - seg >= goal.max_time_s
        flags = [float(self.stop.requested), float(time_up)]
        if self.ctx.world_size > 1:  # every rank must take the same decision at the same step
            flags = self.w.strategy.all_sum(flags, self.w.runtime.device)
        return "stop" if flags[0] else "max_time" if flags[1] else None

    def _stop_now(self, seg: float):
        """Preemption notice: checkpoint now, so the resume loses nothing."""
        p = self.p
        self.close_segment(seg, keep=True)
        self.save()
        self._close_logs()
        raise StopRequested({"phase": "train_to_target", "epochs_done": self.epoch_f(),
                             "train_time_s": p.train_time_s, "samples_seen": p.samples, "steps_done": p.step,
                             "checkpoint": CHECKPOINT_FILE, "resumes": p.resumes,
                             "ranks_agreed": self.ctx.world_size > 1})

    def _epoch(self, seg: float) -> tuple[str | None, float]:
        """Train the rest of the current epoch; (why it stopped or None, the open segment's start)."""
        p, goal = self.p, self.goal
        opt = self.w.optimizer
        for x, y in self.feed.batches(p.epoch, p.batch):
            self.lr = self.sched.apply(opt, p.step)  # a host float: XLA takes it as data, no recompilation
            self.losses.append(self.step(*self.to_device(x, y)))
            p.batch += 1
            p.step += 1
            p.samples += self.global_batch
            if self.on_step:  # the console bar shows the epoch, its step and the latest evaluation
                self.on_step("train", p.step, epoch=p.epoch, epochs=goal.max_epochs, batch=p.batch,
                             batches=self.steps_per_epoch, metric=goal.metric,
                             value=p.curve[goal.metric][-1] if p.curve[goal.metric] else None)
            if p.step % self.control_every == 0:
                why = self._control(seg)
                if why == "stop":
                    self._stop_now(seg)
                if why == "max_time":
                    return why, seg
            if goal.eval_every_steps and p.step % goal.eval_every_steps == 0:
                if self.evaluate(self.close_segment(seg)):
                    return "reached", seg
                seg = loop.perf_counter()
        return None, seg

    def _close_logs(self) -> None:
        self.mlog.close()
        if self.mlog.problem:  # a full store: the log stopped with one line on the console
            self.warnings.append(f"{LOG_FILE} is incomplete: a write failed ({self.mlog.problem})")
        if self.curve_out is not None:
            self.curve_out.close()
            if self.curve_out.problem:  # the live feed is best-effort: the record holds the whole curve
                self.warnings.append(f"the live curve feed stopped ({self.curve_out.problem}); the record's "
                                     "series hold every evaluation")

    def run(self) -> RankResult:
        startup_s = time.time() - self.created
        p, goal = self.p, self.goal
        status = None
        self.w.strategy.sync(self.w.runtime.sync)()
        # Peaks from the first training step (bench/meters/memory.py), over every GPU the rank drives. No
        # warm-up is left out: every step counts towards the time to target, so its memory does too; the
        # build, the data and a checkpoint's load do not.
        gpus = device_gpus(self.w.runtime.device.type, self.w.runtime.device.index or 0,
                           self.w.strategy.devices_per_rank)
        memory = MemoryMeter(gpus, "training")
        # Other processes' use over the same span: a time to target measured beside a load is `contended`.
        others = ContentionMeter(self.threads.get("threads_intra") or 1, self.w.runtime.device.type, gpus,
                                 self.before, ranks_on_host=self.ctx.local_world_size)
        with others, memory:
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
                last = p.epoch >= goal.max_epochs
                if not goal.eval_every_steps and (p.epoch % goal.eval_every_epochs == 0 or last):
                    if self.evaluate(self.close_segment(seg)):
                        status = "reached"
                        break
                    seg = loop.perf_counter()
            if self.losses:
                self.close_segment(seg)
        if not self.targets and status == "max_epochs":
            status = "fixed_epochs"  # no target: the run did what it set out to do
        self.mlog.run_stop(status in ("reached", "fixed_epochs"))
        self._close_logs()
        p.wall_s = self.wall_now()
        return self._result(status, startup_s, {**others.figures, **memory.figures})

    def _result(self, status: str, startup_s: float, memory: dict) -> RankResult:
        p, w, metric = self.p, self.w, self.goal.metric
        reached = {t: p.reached.get(tg.label(t)) for t in self.targets}
        missing = [t for t, point in reached.items() if point is None]
        if missing and self.ctx.rank == 0:  # said once (each rank's clock differs a little)
            up = goals.GOALS[metric].higher_is_better
            best = goals.GOALS[metric].best(p.curve[metric])
            self.warnings.append(f"target {metric} {'>=' if up else '<='} "
                                 f"{', '.join(f'{t:g}' for t in missing)} not reached "
                                 f"({status}: {self.epoch_f():.3g} epochs, {p.train_time_s:.3g} s training); "
                                 f"best {metric} {best}")
        if p.resumes and self.ctx.rank == 0:
            self.warnings.append(
                f"resumed {p.resumes} time(s) from a checkpoint; time after an attempt's last "
                "checkpoint is not counted"
            )
        last = reached[self.targets[-1]] if self.targets else None
        m = {
            **build_figures(self.ctx.rank, w, self.bs, self.accumulate, self.threads, self.cpu_capability),
            "devices": self.ctx.devices,
            "world_size": self.ctx.world_size,
            "eval_batch_size_per_device": self.eval_bs,
            "accumulate_steps": self.accumulate,
            "global_batch_size": self.global_batch,
            **self.hyper,
            "optimizer": self.plan.optim.name,
            "goal_metric": metric,
            "goal_target": self.targets[-1] if self.targets else None,
            "goal_targets": list(self.targets),
            "targets_reached": len(self.targets) - len(missing),
            "target_reached": (not missing) if self.targets else None,
            "target_status": status,
            "train_time_to_target_s": last["train_time_s"] if last else None,
            "wall_time_to_target_s": last["wall_s"] if last else None,
            "epochs_to_target": last["epoch"] if last else None,
            "samples_to_target": last["samples_seen"] if last else None,
            "steps_to_target": last["step"] if last else None,
            "metric_at_target": last[metric] if last else None,
            **(tg.figures(reached, metric) if len(self.targets) > 1 else {}),
            "metric_final": p.curve[metric][-1] if p.curve[metric] else None,
            "epochs_done": self.epoch_f(),
            "steps_done": p.step,
            "samples_seen": p.samples,
            "train_time_s": p.train_time_s,
            "eval_time_s": p.eval_time_s,
            "evals": p.evals,
            "startup_s": startup_s,
            "wall_s_total": p.wall_s,
            "resumes": p.resumes,
            "train_samples": self.train_samples,
            "eval_samples": self.eval_samples,
            "steps_per_epoch": self.steps_per_epoch,
            # Training throughput over the whole training time: epoch-level work (shuffles) included.
            "throughput_samples_per_s": p.samples / p.train_time_s if p.train_time_s > 0 else None,
            # peak_host_rss_gib, peak_memory_since, peak_device_* (CUDA); contended, other_cpu_cores_*
            **memory,
            **closing_figures(w),
        }
        artifacts = {"mlperf_log": LOG_FILE, "curve": CURVE_FILE}
        if (self.run_dir / CHECKPOINT_FILE).is_file():
            artifacts["checkpoint"] = CHECKPOINT_FILE
        return RankResult(self.ctx.rank, m, dict(p.curve), self.warnings, artifacts)


@dataclass
class TargetWork:
    """One rank's training to the target (picklable: it crosses into launched processes)."""

    plan: Plan  # resolved once on the record side (xbench/plan.py)
    run_dir: str
    started_at: float | None = None  # the launching process's start (wall time counts from there)

    # No stop handed in (a rank the torchrun command started): launch/preamble.run_rank installs the process's
    # flag, so a signal stops it after an agreed step (and checkpoints), and its reason reaches the record.
    signals_stop_it = True

    def bar(self) -> tuple[int, int] | None:
        """The totals of the bar a launched rank 0 draws (launch/preamble.py):
        modes/base.console_progress's."""
        b = self.plan.bench
        return (b.warmup_max_steps, b.steps * b.repeats) if self.plan.progress else None

    def __call__(self, ctx: RankContext, on_step=None, stop=None) -> RankResult:
        return TargetTraining(self.plan, ctx, Path(self.run_dir), self.started_at, on_step, stop).run()


