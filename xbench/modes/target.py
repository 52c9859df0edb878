"""`bench.mode=train_to_target`: epochs over real data to one or several quality targets (or a fixed number of
epochs), evaluation at a cadence, the curve, checkpoints and resume (`resume=<run id>`), on every strategy.
The record side: the rank work (`TargetWork`, bench/training.py, the rank wing) runs through the same launch
path as every mode: one device, DDP/Accelerate ranks (torchrun launcher), one SPMD process, torch_xla.launch
replicas.

Every rank trains its share of each global batch (bench/epochs.py: a DistributedSampler reshuffled per epoch
with the seed, so one global step trains what one device at that global batch trains), scores its shard of
the eval set, and the strategy sums the counts: every rank computes the same metric and so the same decision
("target reached", "stop"). The learning rate follows the recipe's schedule (training/schedule.py), set before
each step.

Clocks
------
- training time: the device is synchronised at both edges of every training segment (the steps between two
  evaluations; under DDP a barrier too, so every rank's segment is the common one); only those segments count.
  Evaluation, checkpoints and start-up do not. Each rank keeps its own; the record's is rank 0's.
- wall time: from the start of the process that launched the run (imports, data, model build included) to
  now, plus the wall time of earlier attempts up to their last checkpoint when the run was resumed. Work done
  after the last checkpoint of a killed attempt is redone and its time is not known (SIGKILL leaves no
  trace); a SIGTERM writes a checkpoint at once, so a graceful preemption loses nothing.
- start-up: process start to the first training step of this attempt.
- contention: other processes' CPU and GPU use from the first training step to the last (the throughput mode's
  meter, bench/meters/contention.py; a probe before the build): `contended` on any rank makes the run's, with
  a warning, and the findings leave the run out (analysis/findings.py).

Stops: a signal (SIGTERM, the preemption notice) or `goal.max_time_s` is acted on at a control point every
step on one process and every `CONTROL_EVERY_STEPS` steps when there are several (one small all-reduce; every
rank then stops at the same step, writes nothing but rank 0's checkpoint, and hands back its figures).

Targets: `goal.targets` (or `goal.target`): the epochs, steps, samples, training and wall time, and (derived)
cost to each; the run stops at the last. No target: `goal.max_epochs` epochs and the final metric. Not
reached: the run still ends `ok` (it measured what it set out to); `target_reached` is false, `target_status`
says why (max_epochs | max_time), the figures of the targets not reached are null and a warning says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from xbench import launch, models
from xbench.bench.training import TargetWork
from xbench.launch.isolation import point_started_at
from xbench.metrics import goals
from xbench.metrics import targets as tg
from xbench.metrics.aggregate import peaks_over_ranks
from xbench.metrics.derived import derive
from xbench.metrics.gates import record_gates
from xbench.modes.base import Mode, Run
from xbench.plan import Plan
from xbench.rank import Diverged
from xbench.records.store import find_run
from xbench.sinks.curve import CURVE_FILE, CurveTail
from xbench.training import schedule as schedules


def goal_rules(cfg) -> list[str]:
    """The goal: a metric the model's task has (metrics/goals.py's table), targets in its range and in the
    order they are reached, sane cadences."""
    g, out = cfg.goal, []
    if g.metric not in goals.GOALS:
        return [f"goal.metric={g.metric!r} is unknown; allowed: {', '.join(goals.GOALS)}"]
    metric = goals.GOALS[g.metric]
    try:
        task = models.get(cfg.model.name).task
    except KeyError:
        task = None
    if task and task not in metric.tasks:
        out.append(
            f"goal.metric={g.metric} needs a {'/'.join(metric.tasks)} model; {cfg.model.name!r} is {task}"
        )
    if g.targets and g.target is not None and g.target != g.targets[-1]:
        out.append(
            f"goal.target={g.target} and goal.targets={list(g.targets)} disagree: give goal.targets alone "
            "(goal.target=null), the run stops at its last"
        )
    ts = tg.effective_targets(g)
    out += [why for t in ts if (why := metric.target_problem(t))]
    up = metric.higher_is_better
    if any((b <= a) if up else (b >= a) for a, b in zip(ts, ts[1:])):
        out.append(f"goal.targets={ts} must {'increase' if up else 'decrease'} (the order a {g.metric} curve "
                   "reaches them; the run stops at the last)")
    return out


class TrainToTarget(Mode):
    name = "train_to_target"

    @classmethod
    def rules(cls, cfg, facts) -> list[str]:
        """Real data; a goal that can be met; a schedule that fits the run; what the strategies need."""
        out = goal_rules(cfg)
        if cfg.data.source == "synthetic":
            out.append(
                "bench.mode=train_to_target needs a real data set (e.g. data=digits); synthetic data has "
                "no accuracy to reach"
            )
        out += schedules.rules(cfg.optim, cfg.goal.max_epochs)
        sched = cfg.optim.schedule
        if cfg.runtime.name == "compile" and cfg.runtime.target == "step" and (sched.name != "constant"
                                                                               or sched.warmup_epochs):
            out.append(
                "runtime.target=step compiles the optimizer step, whose learning rate then changes every "
                f"step (optim.schedule.name={sched.name}): torch.compile would recompile it each time; use "
                "runtime.target=model (the default) or runtime=xla"
            )
        return out

    def work(self, plan: Plan, run_dir=None, started_at: float | None = None) -> TargetWork:
        return TargetWork(plan, str(run_dir), started_at)

    def join(self, plan: Plan, cfg) -> None:
        """A rank > 0 under the torchrun command, or a node > 0: it writes nothing, but a resume reads the
        checkpoint from the run's folder (on a multi-node run, store.root must be storage every node sees)."""
        run_dir = find_run(cfg.resume, cfg.store.root).parent if cfg.resume else None
        launch.run(self.work(plan, run_dir))

    def execute(self, run: Run) -> None:
        started = point_started_at()  # the runner's mark for this point (launch/isolation.py)
        work = self.work(run.plan, run.run_dir, started)
        curve = Path(run.run_dir) / CURVE_FILE
        curve.unlink(missing_ok=True)  # rank 0 writes it afresh (a resume: from the checkpoint's curve)
        tail = None
        if run.wandb is not None and run.wandb.start(run.record, run.run_dir):
            tail = CurveTail(curve, run.wandb.log_point)
            tail.start()
        try:
            result = launch.run(work, run.progress, run.stop)
        except Diverged as e:
            run.record.measurements["diverged_loss"] = e.loss  # the figure that says so (4.2e20 after 2.3)
            keep_curve(run.record, curve, run.plan.goal.metric)
            raise
        finally:
            if tail is not None:
                tail.stop()
        run.progress.close()
        rec, r0 = run.record, result.ranks[0]
        ranks = [r.measurements for r in result.ranks]
        rec.measurements = {**r0.measurements, **peaks_over_ranks(ranks)}
        # other processes beside any rank: the run's (aggregate's rule)
        if any("contended" in r for r in ranks):
            rec.measurements["contended"] = any(bool(r.get("contended")) for r in ranks)
        rec.series = r0.series
        rec.ranks = ranks if len(ranks) > 1 else []
        rec.artifacts.update(r0.artifacts)
        rec.warnings += result.warnings
        if rec.measurements.get("contended"):
            rec.warnings.append("contended: " + (rec.measurements.get("contended_reason")
                                                 or "on another rank (see ranks)")
                                + "; the time to target measured that load too (the findings leave it out)")
        metric = r0.measurements["goal_metric"]
        if any(r.series.get(metric) != r0.series.get(metric) for r in result.ranks[1:]):
            rec.warnings.append(
                "ranks computed different evaluation curves (the summed counts should make them "
                "equal): a rank trained or scored other data"
            )
        rec.derived = derive(rec.measurements, run.resolved, baseline=run.baseline)
        rec.warnings += record_gates(rec.measurements, rec.derived)
        rec.finish("ok")



def keep_curve(rec, path: Path, metric: str) -> None:
    """A diverged run keeps the evaluations it made before the blow-up (rank 0's curve file): the record's
    series, the evaluations, epochs and last metric, as an ended run has them."""
    points = []
    try:
        for line in path.read_text().splitlines():
            try:
                points.append(json.loads(line))
            except ValueError:  # a line the blow-up cut short
                break
    except OSError:
        return
    if not points:
        return
    rec.series = {k: [pt.get(k) for pt in points] for k in points[0]}
    last = points[-1]
    rec.measurements.update(goal_metric=metric, evals=len(points), epochs_done=last.get("epoch"),
                            steps_done=last.get("step"), metric_final=last.get(metric),
                            train_loss_last_eval=last.get("train_loss"))
    rec.artifacts["curve"] = CURVE_FILE
